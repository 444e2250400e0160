package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	ucli "github.com/urfave/cli/v2"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/admin"
	"github.com/cronswap/cronswap/internal/schedfile"
	"github.com/cronswap/cronswap/schedule"
)

// A saved plan (`plan --out`) is JSON lines: a planHeader, then one
// planLine per change, each with the stored document it was planned from
// and the document it writes, in canonical extended JSON so that the
// types the condition compares survive.
const (
	planFormat  = "cronswap-plan"
	planVersion = 1
	// maxPlanLine bounds one line of a saved plan: two documents of at most
	// 64 KiB of BSON in canonical extended JSON.
	maxPlanLine = 4 << 20
)

// planHeader is the first line of a saved plan.
type planHeader struct {
	Format    string `json:"format"`
	Version   int    `json:"version"`
	Database  string `json:"database"`
	File      string `json:"file"`
	PlannedAt string `json:"planned_at"`
	Prune     bool   `json:"prune"`
	Adopt     bool   `json:"adopt"`
	// Category and IDPrefix are the selection planned (--category,
	// --id-prefix); its changes are all within it.
	Category string `json:"category,omitempty"`
	IDPrefix string `json:"id_prefix,omitempty"`
}

// planLine is one change of a saved plan.
type planLine struct {
	Op   admin.Op `json:"op"`
	ID   string   `json:"id"`
	Line int      `json:"line,omitempty"`
	// Before is the stored document planned from, null when there was
	// none; After the document written, null for a delete.
	Before json.RawMessage `json:"before"`
	After  json.RawMessage `json:"after"`
}

// planWriter writes a saved plan.
type planWriter struct {
	path string
	f    *os.File
	w    *bufio.Writer
}

func createPlanFile(path string, h planHeader) (*planWriter, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--out: %w", err)
	}
	h.Format, h.Version, h.PlannedAt = planFormat, planVersion, time.Now().UTC().Format(time.RFC3339)
	pw := &planWriter{path: path, f: f, w: bufio.NewWriter(f)}
	js, _ := json.Marshal(h)
	pw.w.Write(append(js, '\n'))
	return pw, nil
}

func (p *planWriter) write(c admin.Change) error {
	doc := func(raw bson.Raw) (json.RawMessage, error) {
		if raw == nil {
			return json.RawMessage("null"), nil
		}
		js, err := bson.MarshalExtJSON(raw, true, false)
		return js, err
	}
	l := planLine{Op: c.Op, ID: c.ID, Line: c.Line}
	var err error
	if l.Before, err = doc(c.Before); err != nil {
		return fmt.Errorf("save the plan of %q: %w", c.ID, err)
	}
	if l.After, err = doc(c.After); err != nil {
		return fmt.Errorf("save the plan of %q: %w", c.ID, err)
	}
	js, err := json.Marshal(l)
	if err != nil {
		return fmt.Errorf("save the plan of %q: %w", c.ID, err)
	}
	_, err = p.w.Write(append(js, '\n'))
	return err
}

func (p *planWriter) close() error {
	err := p.w.Flush()
	if cerr := p.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("--out %s: %w", p.path, err)
	}
	return nil
}

// planReader reads a saved plan's changes.
type planReader struct {
	path   string
	f      *os.File
	sc     *bufio.Scanner
	header planHeader
	line   int
}

func openPlanFile(path string) (*planReader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--plan: %w", err)
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), maxPlanLine)
	p := &planReader{path: path, f: f, sc: sc}
	if !sc.Scan() {
		f.Close()
		return nil, fmt.Errorf("--plan %s: empty, not a plan saved by plan --out", path)
	}
	p.line = 1
	if err := json.Unmarshal(sc.Bytes(), &p.header); err != nil || p.header.Format != planFormat {
		f.Close()
		return nil, fmt.Errorf("--plan %s: not a plan saved by plan --out", path)
	}
	if p.header.Version != planVersion {
		f.Close()
		return nil, fmt.Errorf("--plan %s: version %d, this cronswap reads version %d", path, p.header.Version, planVersion)
	}
	return p, nil
}

// next returns the next change, io.EOF after the last. The change is
// planned again from the saved documents (its fields), and refused when
// that is not the op the plan says.
func (p *planReader) next() (admin.Change, error) {
	if !p.sc.Scan() {
		if err := p.sc.Err(); err != nil {
			return admin.Change{}, fmt.Errorf("%s line %d: %w", p.path, p.line+1, err)
		}
		return admin.Change{}, io.EOF
	}
	p.line++
	bad := func(format string, a ...any) (admin.Change, error) {
		return admin.Change{}, fmt.Errorf("%s line %d: "+format, append([]any{p.path, p.line}, a...)...)
	}
	var l planLine
	if err := json.Unmarshal(p.sc.Bytes(), &l); err != nil {
		return bad("not a change: %v", err)
	}
	doc := func(js json.RawMessage) (bson.Raw, error) {
		if len(js) == 0 || string(js) == "null" {
			return nil, nil
		}
		var raw bson.Raw
		if err := bson.UnmarshalExtJSON(js, true, &raw); err != nil {
			return nil, err
		}
		if id, _ := raw.Lookup(schedule.FieldID).StringValueOK(); id != l.ID {
			return nil, fmt.Errorf("its _id is not %q", l.ID)
		}
		return raw, nil
	}
	before, err := doc(l.Before)
	if err != nil {
		return bad("before: %v", err)
	}
	after, err := doc(l.After)
	if err != nil {
		return bad("after: %v", err)
	}
	var c admin.Change
	switch {
	case l.Op == admin.OpDelete && before != nil && after == nil:
		c = admin.PlanDelete(l.ID, before)
	case l.Op != admin.OpDelete && after != nil:
		c = admin.PlanChange(l.ID, l.Line, before, after, l.Op == admin.OpAdopt)
	default:
		return bad("a %s of %q with the wrong documents", l.Op, l.ID)
	}
	if c.Op != l.Op {
		return bad("says %s %q, but its documents make it %s", l.Op, l.ID, c.Op)
	}
	return c, nil
}

func (p *planReader) close() { p.f.Close() }

// applyPlanFile is `apply --plan PLAN`: every change of the saved plan is
// checked (the written documents with the daemons' rules, ids once), then
// written in batches, each conditional on the document it was planned from.
func applyPlanFile(c *ucli.Context, meta admin.WriteMeta) error {
	path := c.String("plan")
	for _, f := range []string{"file", "prune", "adopt", "category", "id-prefix"} {
		if c.IsSet(f) {
			return ucli.Exit(fmt.Sprintf("--plan and --%s: a saved plan already says what to write (plan again with --%s)", f, f), ExitUserError)
		}
	}
	if _, err := outputFormat(c); err != nil {
		return err
	}
	return withSession(c, false, func(ctx context.Context, s *session) error {
		check, err := openPlanFile(path)
		if err != nil {
			return ucli.Exit(err.Error(), ExitUserError)
		}
		if check.header.Database != s.cfg.Mongo.Database {
			check.close()
			return ucli.Exit(fmt.Sprintf("--plan %s was planned on database %q, not %q", path, check.header.Database, s.cfg.Mongo.Database), ExitUserError)
		}
		problems := 0
		seen := map[string]int{}
		allowUnknown := c.Bool("allow-unknown-actions")
		for {
			ch, err := check.next()
			if err == io.EOF {
				break
			}
			if err != nil {
				fmt.Fprintln(c.App.ErrWriter, err)
				problems++
				break
			}
			if first, dup := seen[ch.ID]; dup {
				fmt.Fprintf(c.App.ErrWriter, "%s line %d: %s planned twice (first at line %d)\n", path, check.line, ch.ID, first)
				problems++
			}
			seen[ch.ID] = check.line
			if ch.After == nil {
				continue
			}
			e := schedfile.Entry{ID: ch.ID, Line: ch.Line, Doc: ch.After}
			if p, warning := s.checkEntry(e, allowUnknown); p != nil {
				p.Line = 0
				prefix := fmt.Sprintf("%s line %d (%s line %d): ", path, check.line, check.header.File, ch.Line)
				if warning {
					prefix += "warning: "
				} else {
					problems++
				}
				fmt.Fprintln(c.App.ErrWriter, prefix+p.Error())
			}
		}
		check.close()
		if problems > 0 {
			return ucli.Exit(fmt.Sprintf("refused, nothing written: %d problem(s) in %s (listed above)", problems, path), ExitUserError)
		}

		plan, err := openPlanFile(path)
		if err != nil {
			return ucli.Exit(err.Error(), ExitUserError)
		}
		defer plan.close()
		out := newApplyOutput(c)
		sum := planSummary{}
		var batch []admin.Change
		flush := func() error {
			if len(batch) == 0 {
				return nil
			}
			err := s.applyBatch(ctx, batch, meta, &sum, out)
			batch = batch[:0]
			return err
		}
		for {
			ch, err := plan.next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return ucli.Exit(fmt.Sprintf("%v (the plan changed while it was being read)", err), ExitUserError)
			}
			batch = append(batch, ch)
			if len(batch) == planBatch {
				if err := flush(); err != nil {
					return s.fail(err)
				}
			}
		}
		if err := flush(); err != nil {
			return s.fail(err)
		}
		return out.end(sum)
	})
}
