package cli

import (
	"os"
	"regexp"
	"strings"
	"testing"

	ucli "github.com/urfave/cli/v2"
)

// docSection returns the part of file from the line "## "+heading… up to
// the next "## " heading.
func docSection(t *testing.T, file, heading string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "\n## "+heading)
	if !ok {
		t.Fatalf("%s has no section %q", file, "## "+heading)
	}
	section, _, _ := strings.Cut(rest, "\n## ")
	return section
}

// synopses splits the fenced code blocks of text into command entries: a
// line starting "cronswap " and the indented lines after it.
func synopses(text string) []string {
	var entries []string
	inCode := false
	for _, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, "```"):
			inCode = !inCode
		case !inCode:
		case strings.HasPrefix(line, "cronswap "):
			entries = append(entries, line)
		case len(entries) > 0 && (strings.HasPrefix(line, " ") || strings.HasPrefix(line, "\t")):
			entries[len(entries)-1] += "\n" + line
		}
	}
	return entries
}

// mentions reports whether text has name as a word of its own (a flag
// "--id" is not found in "--id-prefix").
func mentions(text, name string) bool {
	return regexp.MustCompile(`(^|[^\w-])` + regexp.QuoteMeta(name) + `($|[^\w-])`).MatchString(text)
}

// flagName is how a flag name is written: -n, --name.
func flagName(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// Every command, subcommand and listed flag of the command line is in the
// docs: each command and its own flags in a synopsis of the CLI section
// of docs/design.md or of docs/operations.md, every alias and the flags
// common to many commands (--config, --output, --timeout…) anywhere in
// those sections. Hidden flags (accepted and ignored) are not listed, so
// not checked.
func TestEveryCommandAndFlagIsDocumented(t *testing.T) {
	text := docSection(t, "../../docs/design.md", "CLI ") + docSection(t, "../../docs/operations.md", "Command line ") +
		docSection(t, "../../docs/operations.md", "Schedules in git")
	entries := synopses(text)
	if len(entries) < 20 {
		t.Fatalf("only %d synopses found: has the docs' layout changed?", len(entries))
	}
	common := map[string]bool{}
	for _, f := range append(dbFlags(), sourceFlags()...) {
		common[f.Names()[0]] = true
	}
	for _, f := range logFlags() {
		common[f.Names()[0]] = true
	}
	var check func(top string, path []string, cmds []*ucli.Command)
	check = func(top string, path []string, cmds []*ucli.Command) {
		for _, c := range cmds {
			p := append(path, c.Name)
			t0 := top
			if t0 == "" {
				t0 = c.Name
			}
			// The entries of the top command; a subcommand is a word of one.
			var mine []string
			for _, e := range entries {
				if mentions(strings.SplitN(e, "\n", 2)[0], "cronswap "+t0) && (len(p) == 1 || mentions(e, c.Name)) {
					mine = append(mine, e)
				}
			}
			if len(mine) == 0 {
				t.Errorf("cronswap %s: no synopsis in the docs", strings.Join(p, " "))
				continue
			}
			for _, f := range c.Flags {
				if v, ok := f.(ucli.VisibleFlag); ok && !v.IsVisible() {
					continue
				}
				names := f.Names()
				where := strings.Join(mine, "\n")
				if common[names[0]] {
					where = text
				}
				if !mentions(where, flagName(names[0])) {
					t.Errorf("cronswap %s: flag %s is not documented", strings.Join(p, " "), flagName(names[0]))
				}
				for _, alias := range names[1:] {
					if !mentions(text, flagName(alias)) {
						t.Errorf("cronswap %s: %s, short for %s, is not documented", strings.Join(p, " "), flagName(alias), flagName(names[0]))
					}
				}
			}
			check(t0, p, c.Subcommands)
		}
	}
	check("", nil, newApp(nil, nil, nil).Commands)
}
