package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	ucli "github.com/urfave/cli/v2"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/history"
	"github.com/cronswap/cronswap/internal/jobhistory"
)

// historyTimeLayout shows milliseconds: edits made in one go share a second.
const historyTimeLayout = "2006-01-02T15:04:05.000Z07:00"

// historyView is one edit as `schedules history -o json` prints it.
type historyView struct {
	ID      string       `json:"id"`
	JobID   string       `json:"job_id"`
	At      string       `json:"at"`
	Op      string       `json:"op"`
	Changes []changeView `json:"changes"`
	// UpdatedBy is the document's updated_by after the change; omitted
	// when it has none.
	UpdatedBy string `json:"updated_by,omitempty"`
	// UpdateMessage is the document's update_message after the change:
	// why; omitted when it has none.
	UpdateMessage string `json:"update_message,omitempty"`
	// Instance is the replica whose write stored the entry.
	Instance string `json:"instance"`
}

// operationView is one operation as `schedules history -o json` prints
// it: jobhistory.Operation, with the job and the time as an edit has them
// (the view's at hides the operation's: the shallower field wins).
type operationView struct {
	JobID string `json:"job_id"`
	At    string `json:"at"`
	jobhistory.Operation
}

// changeView is one field's change; Before or After is omitted when the
// field did not exist on that side (null is a value).
type changeView struct {
	Field  string          `json:"field"`
	Before json.RawMessage `json:"before,omitempty"`
	After  json.RawMessage `json:"after,omitempty"`
}

func newHistoryView(e history.Entry) historyView {
	v := historyView{ID: e.ID, JobID: e.JobID, At: e.At.UTC().Format(historyTimeLayout), Op: e.Op,
		Changes: make([]changeView, len(e.Changes)), UpdatedBy: e.UpdatedBy, UpdateMessage: e.UpdateMessage, Instance: e.Instance}
	for i, c := range e.Changes {
		v.Changes[i] = changeView{Field: c.Field}
		if !c.Before.IsZero() {
			v.Changes[i].Before = json.RawMessage(relaxedJSON(c.Before))
		}
		if !c.After.IsZero() {
			v.Changes[i].After = json.RawMessage(relaxedJSON(c.After))
		}
	}
	return v
}

// newItemView is one item of the history as -o json prints it.
func newItemView(jobID string, it jobhistory.Item) any {
	if it.Edit != nil {
		return newHistoryView(*it.Edit)
	}
	return operationView{JobID: jobID, At: it.Operation.At.UTC().Format(historyTimeLayout), Operation: *it.Operation}
}

// relaxedJSON renders one value as relaxed extended JSON: "0 8 * * *",
// 800, {"region":"eu"}.
func relaxedJSON(v bson.RawValue) string {
	js, err := bson.MarshalExtJSON(bson.D{{Key: "v", Value: v}}, false, false)
	if err != nil {
		return fmt.Sprintf("%q", v.String())
	}
	return strings.TrimSuffix(strings.TrimPrefix(string(js), `{"v":`), "}")
}

// maxHistoryValue is the most bytes of one value the history's table
// shows; -o json has them all.
const maxHistoryValue = 200

// clipValue cuts a value longer than maxHistoryValue bytes (at a rune
// boundary) and says so, with its whole length: one long value would
// otherwise be printed whole and pad every row of the table to its width.
func clipValue(s string) string {
	if len(s) <= maxHistoryValue {
		return s
	}
	n := maxHistoryValue
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return fmt.Sprintf("%s…(%d bytes; -o json for all)", s[:n], len(s))
}

// changeText is "field: before → after", with (absent) for a missing side
// and the BSON types when the values read the same (5 as int32 → int64);
// each value at most maxHistoryValue bytes (clipValue).
func changeText(c history.Change) string {
	side := func(v bson.RawValue) string {
		if v.IsZero() {
			return "(absent)"
		}
		return relaxedJSON(v)
	}
	b, a := side(c.Before), side(c.After)
	if b == a {
		b = clipValue(b) + " (" + c.Before.Type.String() + ")"
		a = clipValue(a) + " (" + c.After.Type.String() + ")"
	} else {
		b, a = clipValue(b), clipValue(a)
	}
	return c.Field + ": " + b + " → " + a
}

// historyRows is the table of a history: one row per changed field of an
// edit, its time, operation, author and message on its first row; one row
// per operation, its details as the change.
func historyRows(items []jobhistory.Item) [][]string {
	var rows [][]string
	for _, it := range items {
		at := it.At().UTC().Format(historyTimeLayout)
		if o := it.Operation; o != nil {
			rows = append(rows, []string{at, o.Op, clipValue(o.Details()), o.By, ""})
			continue
		}
		e := it.Edit
		if len(e.Changes) == 0 {
			rows = append(rows, []string{at, e.Op, "", e.UpdatedBy, e.UpdateMessage})
			continue
		}
		for i, c := range e.Changes {
			if i == 0 {
				rows = append(rows, []string{at, e.Op, changeText(c), e.UpdatedBy, e.UpdateMessage})
			} else {
				rows = append(rows, []string{"", "", changeText(c), "", ""})
			}
		}
	}
	return rows
}

func schedulesHistory() *ucli.Command {
	return &ucli.Command{
		Name:      "history",
		Usage:     "show a job's history, newest first: the edits of its schedule (each field before → after, updated_by, update_message) and the operations on it (run now, backfill, resume after failures: by whom)",
		ArgsUsage: "ID",
		Flags: dbFlags(
			&ucli.IntFlag{Name: "limit", Value: 20, Usage: "at most this many edits and operations"},
		),
		Action: func(c *ucli.Context) error {
			id, err := oneID(c, "cronswap schedules history daily_report")
			if err != nil {
				return err
			}
			if n := c.Int("limit"); n < 1 {
				return ucli.Exit(fmt.Sprintf("--limit %d: want at least 1", n), ExitUserError)
			}
			return withDB(c, func(ctx context.Context, s *session) error {
				items, err := s.store.History(ctx, id, c.Int("limit"))
				if err != nil {
					return s.fail(err)
				}
				if len(items) == 0 {
					_, err := s.store.Schedule(ctx, id)
					if notFound(err) {
						return ucli.Exit(fmt.Sprintf("no schedule %q and no edits of it in %s (edits are kept for runs.retention)",
							id, history.CollectionName), ExitUserError)
					}
					if err != nil {
						return s.fail(err)
					}
				}
				if isJSON(c) {
					views := make([]any, len(items))
					for i, it := range items {
						views[i] = newItemView(id, it)
					}
					return writeJSON(c.App.Writer, views)
				}
				table(c.App.Writer, []string{"TIME", "OP", "CHANGE", "BY", "MESSAGE"}, historyRows(items))
				return nil
			})
		},
	}
}
