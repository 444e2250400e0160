package cli_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/cli"
	"github.com/cronswap/cronswap/internal/history"
)

func rawValue(t *testing.T, v any) bson.RawValue {
	t.Helper()
	b, err := bson.Marshal(bson.D{{Key: "v", Value: v}})
	if err != nil {
		t.Fatal(err)
	}
	return bson.Raw(b).Lookup("v")
}

// TestSchedulesHistory checks `schedules history`: newest first, one table
// row per changed field, JSON with absent sides omitted, --limit, and the
// exit codes (an unknown job with no history is a user error; a known job
// without edits is an empty answer).
func TestSchedulesHistory(t *testing.T) {
	e := newEnv(t)
	at := time.Date(2027, 3, 1, 10, 0, 0, 0, time.UTC)
	entries := []any{
		history.Entry{ID: "8201", JobID: "daily_report", At: at, Op: history.OpInsert, Instance: "a",
			Changes: []history.Change{{Field: "cron_expr", After: rawValue(t, "0 9 * * *")}}},
		history.Entry{ID: "8202", JobID: "daily_report", At: at.Add(time.Millisecond), Op: history.OpUpdate, Instance: "b",
			Changes: []history.Change{{Field: "cron_expr", Before: rawValue(t, "0 9 * * *"), After: rawValue(t, "0 8 * * *")},
				{Field: "timezone", After: rawValue(t, "Europe/Berlin")}}},
		history.Entry{ID: "8203", JobID: "daily_report", At: at.Add(time.Second), Op: history.OpUpdate, UpdatedBy: "alice", Instance: "c",
			Changes: []history.Change{{Field: "args.n", Before: rawValue(t, int32(5)), After: rawValue(t, int64(5))}}},
		history.Entry{ID: "8204", JobID: "other", At: at, Op: history.OpDelete, Instance: "a", Changes: []history.Change{}},
	}
	if _, err := e.db.Collection(history.CollectionName).InsertMany(ctx(t), entries); err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.Collection("schedules").InsertOne(ctx(t), bson.D{{Key: "_id", Value: "quiet"}, {Key: "cron_expr", Value: "@daily"}}); err != nil {
		t.Fatal(err)
	}

	r := e.ok("schedules", "history", "daily_report")
	header, rows := tableRows(t, r.stdout)
	if strings.Join(header, "|") != "TIME|OP|CHANGE|BY|MESSAGE" {
		t.Fatalf("header %q", header)
	}
	want := [][]string{
		{"2027-03-01T10:00:01.000Z", "update", "args.n: 5 (32-bit integer) → 5 (64-bit integer)", "alice", "-"},
		{"2027-03-01T10:00:00.001Z", "update", `cron_expr: "0 9 * * *" → "0 8 * * *"`, "-", "-"},
		{"-", "-", `timezone: (absent) → "Europe/Berlin"`, "-", "-"},
		{"2027-03-01T10:00:00.000Z", "insert", `cron_expr: (absent) → "0 9 * * *"`, "-", "-"},
	}
	if len(rows) != len(want) {
		t.Fatalf("table:\n%s", r.stdout)
	}
	for i := range want {
		if strings.Join(rows[i], "|") != strings.Join(want[i], "|") {
			t.Errorf("row %d: %q, want %q\n%s", i, rows[i], want[i], r.stdout)
		}
	}

	var views []map[string]any
	e.okJSON(&views, "schedules", "history", "daily_report", "--limit", "2")
	if len(views) != 2 || views[0]["id"] != "8203" || views[1]["id"] != "8202" || views[0]["updated_by"] != "alice" {
		t.Fatalf("json --limit 2: %v", views)
	}
	changes := views[1]["changes"].([]any)
	tz := changes[1].(map[string]any)
	if _, has := tz["before"]; has || tz["after"] != "Europe/Berlin" || tz["field"] != "timezone" {
		t.Errorf("json change of an absent field: %v", tz)
	}
	if _, has := views[1]["updated_by"]; has {
		t.Errorf("json updated_by present without one: %v", views[1])
	}
	if views[1]["at"] != "2027-03-01T10:00:00.001Z" || views[1]["instance"] != "b" || views[1]["op"] != "update" {
		t.Errorf("json entry: %v", views[1])
	}

	// A deleted job's history is still there.
	e.okJSON(&views, "schedules", "history", "other")
	if len(views) != 1 || views[0]["op"] != "delete" {
		t.Errorf("history of a deleted job: %v", views)
	}
	// A job without edits: empty, exit 0.
	var none []any
	e.okJSON(&none, "schedules", "history", "quiet")
	if len(none) != 0 {
		t.Errorf("history of an unedited job: %v", none)
	}
	if r := e.run("schedules", "history", "nope"); r.code != cli.ExitUserError || !strings.Contains(r.stderr, `no schedule "nope"`) {
		t.Errorf("unknown job: %v", r)
	}
	if r := e.run("schedules", "history", "daily_report", "--limit", "0"); r.code != cli.ExitUserError {
		t.Errorf("--limit 0: %v", r)
	}
	if r := e.run("schedules", "history"); r.code != cli.ExitUserError {
		t.Errorf("no ID: %v", r)
	}
	var raw json.RawMessage
	e.okJSON(&raw, "schedules", "history", "quiet")
	if strings.TrimSpace(string(raw)) != "[]" {
		t.Errorf("empty history JSON = %s, want []", raw)
	}
}

// A long value is cut in the table, which says how long it is and where
// to read it all, so that the other rows keep their width; -o json has it
// whole.
func TestSchedulesHistoryCutsLongValuesInTheTable(t *testing.T) {
	e := newEnv(t)
	at := time.Date(2027, 3, 1, 10, 0, 0, 0, time.UTC)
	blob := strings.Repeat("é", 102400) // 204800 bytes: a rune boundary matters
	if _, err := e.db.Collection(history.CollectionName).InsertMany(ctx(t), []any{
		history.Entry{ID: "1", JobID: "big", At: at, Op: history.OpInsert, Instance: "a",
			Changes: []history.Change{{Field: "cron_expr", After: rawValue(t, "@hourly")}}},
		history.Entry{ID: "2", JobID: "big", At: at.Add(time.Second), Op: history.OpUpdate, Instance: "a",
			Changes: []history.Change{{Field: "args.blob", After: rawValue(t, blob)}}},
	}); err != nil {
		t.Fatal(err)
	}
	r := e.ok("schedules", "history", "big")
	if len(r.stdout) > 2000 {
		t.Fatalf("history printed %d bytes", len(r.stdout))
	}
	_, rows := tableRows(t, r.stdout)
	cut := `args.blob: (absent) → "` + strings.Repeat("é", 99) + `…(204802 bytes; -o json for all)`
	if len(rows) != 2 || rows[0][2] != cut || rows[1][2] != `cron_expr: (absent) → "@hourly"` {
		t.Errorf("history table:\n%s\nwant the change %s", r.stdout, cut)
	}
	var views []map[string]any
	e.okJSON(&views, "schedules", "history", "big")
	if after := views[0]["changes"].([]any)[0].(map[string]any)["after"]; after != blob {
		t.Errorf("history -o json cut the value: %d bytes", len(after.(string)))
	}
}
