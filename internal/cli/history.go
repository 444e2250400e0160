package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	ucli "github.com/urfave/cli/v2"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/history"
)

// historyTimeLayout shows milliseconds: edits made in one go share a second.
const historyTimeLayout = "2006-01-02T15:04:05.000Z07:00"

// historyView is one entry as `schedules history -o json` prints it.
type historyView struct {
	ID      string       `json:"id"`
	JobID   string       `json:"job_id"`
	At      string       `json:"at"`
	Op      string       `json:"op"`
	Changes []changeView `json:"changes"`
	// UpdatedBy is the document's updated_by after the change; omitted
	// when it has none.
	UpdatedBy string `json:"updated_by,omitempty"`
	// Instance is the replica whose write stored the entry.
	Instance string `json:"instance"`
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
		Changes: make([]changeView, len(e.Changes)), UpdatedBy: e.UpdatedBy, Instance: e.Instance}
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

// relaxedJSON renders one value as relaxed extended JSON: "0 8 * * *",
// 800, {"region":"eu"}.
func relaxedJSON(v bson.RawValue) string {
	js, err := bson.MarshalExtJSON(bson.D{{Key: "v", Value: v}}, false, false)
	if err != nil {
		return fmt.Sprintf("%q", v.String())
	}
	return strings.TrimSuffix(strings.TrimPrefix(string(js), `{"v":`), "}")
}

// changeText is "field: before → after", with (absent) for a missing side
// and the BSON types when the values read the same (5 as int32 → int64).
func changeText(c history.Change) string {
	side := func(v bson.RawValue) string {
		if v.IsZero() {
			return "(absent)"
		}
		return relaxedJSON(v)
	}
	b, a := side(c.Before), side(c.After)
	if b == a {
		b += " (" + c.Before.Type.String() + ")"
		a += " (" + c.After.Type.String() + ")"
	}
	return c.Field + ": " + b + " → " + a
}

// historyRows is the table of entries: one row per changed field, the
// entry's time, operation and updated_by on its first row.
func historyRows(entries []history.Entry) [][]string {
	var rows [][]string
	for _, e := range entries {
		at := e.At.UTC().Format(historyTimeLayout)
		if len(e.Changes) == 0 {
			rows = append(rows, []string{at, e.Op, "", e.UpdatedBy})
			continue
		}
		for i, c := range e.Changes {
			if i == 0 {
				rows = append(rows, []string{at, e.Op, changeText(c), e.UpdatedBy})
			} else {
				rows = append(rows, []string{"", "", changeText(c), ""})
			}
		}
	}
	return rows
}

func schedulesHistory() *ucli.Command {
	return &ucli.Command{
		Name:      "history",
		Usage:     "show the edits of a schedule, newest first: time, operation, each field before → after, updated_by",
		ArgsUsage: "ID",
		Flags: dbFlags(
			&ucli.IntFlag{Name: "limit", Value: 20, Usage: "at most this many edits"},
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
				entries, err := s.store.History(ctx, id, int64(c.Int("limit")))
				if err != nil {
					return s.fail(err)
				}
				if len(entries) == 0 {
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
					views := make([]historyView, len(entries))
					for i, e := range entries {
						views[i] = newHistoryView(e)
					}
					return writeJSON(c.App.Writer, views)
				}
				table(c.App.Writer, []string{"TIME", "OP", "CHANGE", "UPDATED BY"}, historyRows(entries))
				return nil
			})
		},
	}
}
