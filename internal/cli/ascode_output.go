package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/admin"
	"github.com/cronswap/cronswap/internal/history"
	"github.com/cronswap/cronswap/schedule"
	"github.com/cronswap/cronswap/scheduler"
)

// planOutput prints a plan as it is computed: a block per change for
// people, or one JSON object ({"changes": […], "summary": {…}}) streamed.
type planOutput struct {
	w    *bufio.Writer
	json bool
	s    *session
	now  time.Time
	n    int
}

// newPlanOutput prints the next runs after from.
func newPlanOutput(c *ucli.Context, s *session, from time.Time) *planOutput {
	return &planOutput{w: bufio.NewWriter(c.App.Writer), json: isJSON(c), s: s, now: from}
}

// changeJSON is one change of `plan -o json`.
type changeJSON struct {
	Op     admin.Op     `json:"op"`
	ID     string       `json:"id"`
	Line   int          `json:"line,omitempty"`
	Fields []changeView `json:"fields"`
	// NextRuns is set when the change creates a job or changes its timing.
	NextRuns *nextRunsView `json:"next_runs,omitempty"`
}

// nextRunsView is a job's next runs before and after a change, in its zone.
type nextRunsView struct {
	Zone   string     `json:"zone"`
	Before []fireTime `json:"before"`
	After  []fireTime `json:"after"`
	// BeforeNote and AfterNote say why a side has no runs (disabled, refused).
	BeforeNote string `json:"before_note,omitempty"`
	AfterNote  string `json:"after_note,omitempty"`
}

func (o *planOutput) change(c admin.Change) {
	var next *nextRunsView
	if c.Op == admin.OpCreate || (c.Op == admin.OpUpdate && c.TimingChanged()) {
		next = &nextRunsView{Before: []fireTime{}}
		if c.Before != nil {
			_, next.Before, next.BeforeNote = o.s.upcoming(c.Before, o.now)
		}
		next.Zone, next.After, next.AfterNote = o.s.upcoming(c.After, o.now)
	}
	if o.json {
		sep := ",\n"
		if o.n == 0 {
			sep = "{\"changes\": [\n"
		}
		js, _ := json.Marshal(changeJSON{Op: c.Op, ID: c.ID, Line: c.Line, Fields: fieldViews(c.Fields), NextRuns: next})
		o.w.WriteString(sep)
		o.w.Write(js)
		o.n++
		return
	}
	o.n++
	fmt.Fprintln(o.w, changeHeading(c))
	for _, f := range c.Fields {
		fmt.Fprintf(o.w, "    %s\n", fieldText(c.Op, f))
	}
	if next != nil {
		fmt.Fprintf(o.w, "    next runs in %s:\n", next.Zone)
		if c.Op != admin.OpCreate {
			fmt.Fprintf(o.w, "      before: %s\n", firesText(next.Before, next.BeforeNote))
		}
		fmt.Fprintf(o.w, "      after:  %s\n", firesText(next.After, next.AfterNote))
	}
}

// changeHeading is the first line of a change: its mark, op, job and line.
func changeHeading(c admin.Change) string {
	mark := map[admin.Op]string{admin.OpCreate: "+", admin.OpUpdate: "~", admin.OpDelete: "-", admin.OpAdopt: "="}[c.Op]
	s := fmt.Sprintf("%s %s %s", mark, c.Op, c.ID)
	switch {
	case c.Op == admin.OpDelete:
		s += " (managed, not in the file)"
	case c.Op == admin.OpAdopt:
		s += fmt.Sprintf(" (line %d; unchanged, becomes managed)", c.Line)
	case c.Line > 0:
		s += fmt.Sprintf(" (line %d)", c.Line)
	}
	return s
}

// fieldText is one field of a change: the value of a new or deleted job,
// else before → after.
func fieldText(op admin.Op, f history.Change) string {
	switch op {
	case admin.OpCreate:
		return f.Field + ": " + relaxedJSON(f.After)
	case admin.OpDelete:
		return f.Field + ": " + relaxedJSON(f.Before)
	}
	return changeText(f)
}

func fieldViews(fs []history.Change) []changeView {
	out := make([]changeView, len(fs))
	for i, f := range fs {
		out[i] = changeView{Field: f.Field}
		if !f.Before.IsZero() {
			out[i].Before = json.RawMessage(relaxedJSON(f.Before))
		}
		if !f.After.IsZero() {
			out[i].After = json.RawMessage(relaxedJSON(f.After))
		}
	}
	return out
}

// firesText is a list of fire times on one line, each daylight-saving
// mark after its time.
func firesText(fires []fireTime, note string) string {
	if len(fires) == 0 {
		if note == "" {
			note = "none"
		}
		return note
	}
	parts := make([]string, len(fires))
	for i, f := range fires {
		parts[i] = f.At
		if f.Mark != "" {
			parts[i] += fmt.Sprintf(" (%s: %s)", f.Mark, f.Note)
		}
	}
	return strings.Join(parts, ", ")
}

// upcoming returns the zone and the next runs of a schedules document
// after now, as the daemons would arm it (scheduler.Check with the
// config's zone), or a note saying why there are none.
func (s *session) upcoming(doc bson.Raw, now time.Time) (zone string, fires []fireTime, note string) {
	fires = []fireTime{}
	sc, err := schedule.DecodeFields(doc)
	zone = s.cfg.Location.String() + " (default)"
	if err == nil && sc.Timezone != "" {
		zone = sc.Timezone
	}
	if err != nil {
		return zone, fires, "none (refused: " + err.Error() + ")"
	}
	sched, err := scheduler.Check(sc, s.cfg.Location, nil)
	if err != nil {
		return zone, fires, "none (refused: " + err.Error() + ")"
	}
	if !sc.Enabled {
		return zone, fires, "none (disabled)"
	}
	loc := s.cfg.Location
	if sc.Timezone != "" {
		if l, err := schedule.LoadLocation(sc.Timezone); err == nil {
			loc = l
		}
	}
	for _, f := range schedule.Upcoming(sched, now, nextRunsShown) {
		fires = append(fires, newFireTime(f, loc))
	}
	return zone, fires, ""
}

func (o *planOutput) end(sum planSummary) error {
	if o.json {
		if o.n == 0 {
			o.w.WriteString("{\"changes\": [")
		}
		js, _ := json.Marshal(sum)
		fmt.Fprintf(o.w, "\n], \"summary\": %s}\n", js)
	} else {
		if o.n == 0 {
			fmt.Fprintln(o.w, "no change: the database is as the file says")
		}
		fmt.Fprintf(o.w, "plan: %s\n", sum.text([5]string{"to create", "to update", "to delete", "to adopt", "unchanged"}))
		absentNotes(o.w, sum)
	}
	if err := o.w.Flush(); err != nil {
		return ucli.Exit(fmt.Sprintf("write: %v", err), ExitUserError)
	}
	return nil
}

// absentNotes says what the file does not name and will not be deleted.
func absentNotes(w io.Writer, sum planSummary) {
	of := ""
	if sum.selection != "" {
		of = " selected by " + sum.selection
	}
	if sum.ManagedAbsent > 0 && sum.Delete == 0 && sum.Conflicts == 0 {
		fmt.Fprintf(w, "note: %d managed schedules%s are not in the file; --prune deletes them\n", sum.ManagedAbsent, of)
	}
	if sum.UnmanagedAbsent > 0 {
		fmt.Fprintf(w, "note: %d schedules%s not in the file were created otherwise (not managed); apply never deletes them\n", sum.UnmanagedAbsent, of)
	}
	if sum.selection != "" {
		fmt.Fprintf(w, "note: only the schedules selected by %s were compared; no other is changed\n", sum.selection)
	}
}

// applyOutput prints what an apply did, a line per change written or
// left alone, or one JSON object ({"results": […], "summary": {…}}).
type applyOutput struct {
	w       *bufio.Writer
	json    bool
	n       int
	pending int // conflicts
	failed  int
}

func newApplyOutput(c *ucli.Context) *applyOutput {
	return &applyOutput{w: bufio.NewWriter(c.App.Writer), json: isJSON(c)}
}

// resultJSON is one change of `apply -o json`.
type resultJSON struct {
	Op     admin.Op `json:"op"`
	ID     string   `json:"id"`
	Line   int      `json:"line,omitempty"`
	Result string   `json:"result"` // applied, conflict, already_deleted, failed
	Error  string   `json:"error,omitempty"`
}

var resultNames = map[admin.Result]string{admin.Applied: "applied", admin.Conflict: "conflict", admin.Gone: "already_deleted", admin.Failed: "failed"}

func (o *applyOutput) result(c admin.Change, r admin.Outcome) {
	switch r.Result {
	case admin.Conflict:
		o.pending++
	case admin.Failed:
		o.failed++
	}
	if o.json {
		sep := ",\n"
		if o.n == 0 {
			sep = "{\"results\": [\n"
		}
		v := resultJSON{Op: c.Op, ID: c.ID, Line: c.Line, Result: resultNames[r.Result]}
		if r.Err != nil {
			v.Error = r.Err.Error()
		}
		js, _ := json.Marshal(v)
		o.w.WriteString(sep)
		o.w.Write(js)
		o.n++
		return
	}
	o.n++
	past := map[admin.Op]string{admin.OpCreate: "created", admin.OpUpdate: "updated", admin.OpDelete: "deleted", admin.OpAdopt: "adopted"}[c.Op]
	where := ""
	if c.Line > 0 {
		where = fmt.Sprintf(" (line %d)", c.Line)
	}
	switch r.Result {
	case admin.Applied:
		fields := make([]string, len(c.Fields))
		for i, f := range c.Fields {
			fields[i] = f.Field
		}
		detail := ""
		if c.Op == admin.OpUpdate {
			detail = ": " + strings.Join(fields, ", ")
		}
		fmt.Fprintf(o.w, "%s %s%s\n", past, c.ID, detail)
	case admin.Gone:
		fmt.Fprintf(o.w, "already deleted %s\n", c.ID)
	case admin.Conflict:
		fmt.Fprintf(o.w, "conflict%s: %v; left alone (plan again, or --force overwrites)\n", where, r.Err)
	case admin.Failed:
		fmt.Fprintf(o.w, "failed%s: %v\n", where, r.Err)
	}
}

func (o *applyOutput) end(sum planSummary) error {
	if o.json {
		if o.n == 0 {
			o.w.WriteString("{\"results\": [")
		}
		js, _ := json.Marshal(sum)
		fmt.Fprintf(o.w, "\n], \"summary\": %s}\n", js)
	} else {
		fmt.Fprintf(o.w, "applied: %s", sum.text([5]string{"created", "updated", "deleted", "adopted", "unchanged"}))
		if sum.Gone > 0 {
			fmt.Fprintf(o.w, ", %d already deleted", sum.Gone)
		}
		fmt.Fprintf(o.w, "; %d conflicts, %d failed\n", sum.Conflicts, sum.Failed)
		absentNotes(o.w, sum)
	}
	if err := o.w.Flush(); err != nil {
		return ucli.Exit(fmt.Sprintf("write: %v", err), ExitUserError)
	}
	switch {
	case o.failed > 0:
		return ucli.Exit(fmt.Sprintf("%d changes refused by the server (listed above)", o.failed), ExitUserError)
	case o.pending > 0:
		return changesPending{msg: fmt.Sprintf("%d conflicts: documents changed since they were planned were left alone", o.pending)}
	}
	return nil
}
