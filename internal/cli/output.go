package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	ucli "github.com/urfave/cli/v2"
)

// Output formats of --output.
const (
	outputText = "text"
	outputJSON = "json"
)

func outputFlag() ucli.Flag {
	return &ucli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: outputText, Usage: "text (aligned table) or json (for scripts)"}
}

// outputFormat returns the --output value, refusing unknown ones.
func outputFormat(c *ucli.Context) (string, error) {
	switch f := c.String("output"); f {
	case outputText, outputJSON:
		return f, nil
	case "":
		return outputText, nil
	default:
		return "", ucli.Exit(fmt.Sprintf("--output %q: want text or json", f), ExitUserError)
	}
}

func isJSON(c *ucli.Context) bool { return c.String("output") == outputJSON }

// writeJSON prints v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return ucli.Exit(fmt.Sprintf("write JSON: %v", err), ExitUserError)
	}
	return nil
}

// table prints rows under a header, columns aligned.
func table(w io.Writer, header []string, rows [][]string) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		clean := make([]string, len(r))
		for i, cell := range r {
			// A tab or newline inside a cell would break the alignment.
			cell = strings.NewReplacer("\t", " ", "\n", " ", "\r", " ").Replace(cell)
			if cell == "" {
				cell = "-"
			}
			clean[i] = cell
		}
		fmt.Fprintln(tw, strings.Join(clean, "\t"))
	}
	_ = tw.Flush()
}

// rfc3339 formats t in loc (UTC when nil), "" for the zero time.
func rfc3339(t time.Time, loc *time.Location) string {
	if t.IsZero() {
		return ""
	}
	if loc == nil {
		loc = time.UTC
	}
	return t.In(loc).Format(time.RFC3339)
}

// jsonTime is a time in JSON: RFC 3339 (seconds) or null.
func jsonTime(t time.Time, loc *time.Location) *string {
	if t.IsZero() {
		return nil
	}
	s := rfc3339(t, loc)
	return &s
}
