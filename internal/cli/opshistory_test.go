package cli_test

import (
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/record"
)

// Every operation of the command line names who ran it, with one name:
// schedules set, pause and resume write it as updated_by, run-now and
// backfill as requested_by, a resume after failures as resumed_by. The
// operations that leave the schedules document alone (run now, backfill,
// resume after failures) are in the job's history (`schedules history`)
// and its timeline (`explain`), with that name and their time.
func TestHistoryListsTheOperatorsOperations(t *testing.T) {
	e := newEnv(t)
	start := time.Now().UTC().Add(-time.Second)
	e.ok("schedules", "set", "rep", "--cron", "0 * * * *")
	name, _ := e.rawSchedule("rep")["updated_by"].(string)
	if name == "" {
		t.Fatalf("schedules set wrote no updated_by: %v", e.rawSchedule("rep"))
	}
	e.ok("schedules", "pause", "rep")
	if d := e.rawSchedule("rep"); d["enabled"] != false || d["updated_by"] != name {
		t.Errorf("after pause: %v, want enabled false by %s", d, name)
	}
	insertDocs(t, e.db.Collection(record.PausesCollection), bson.D{{Key: "_id", Value: "rep"},
		{Key: "state", Value: record.PauseStatePaused}, {Key: "paused_at", Value: start}, {Key: "note", Value: "3 failures"}})
	e.ok("schedules", "resume", "rep")
	var runNow struct {
		TriggerID string `json:"trigger_id"`
		RunID     string `json:"run_id"`
	}
	e.okJSON(&runNow, "run-now", "rep")
	e.ok("backfill", "rep", "--from", "-3h", "--to", "-1h")
	end := time.Now().UTC().Add(time.Second)

	var items []map[string]any
	e.okJSON(&items, "schedules", "history", "rep")
	ops := map[string]map[string]any{}
	for _, it := range items {
		ops[it["op"].(string)] = it
		at, err := time.Parse(time.RFC3339, it["at"].(string))
		if err != nil || at.Before(start) || at.After(end) || it["job_id"] != "rep" {
			t.Errorf("history item %v: at %v (%v), want between %s and %s", it, at, err, start, end)
		}
	}
	if len(items) != 3 || ops["resume_after_failures"]["by"] != name || ops["backfill"]["by"] != name || ops["run_now"]["by"] != name {
		t.Fatalf("history: %v; want run_now, backfill and resume_after_failures by %s", items, name)
	}
	if o := ops["run_now"]; o["trigger_id"] != runNow.TriggerID || o["run_id"] != runNow.RunID || o["status"] != "pending" {
		t.Errorf("run_now item %v, want trigger %s, run %s, pending", o, runNow.TriggerID, runNow.RunID)
	}
	if s, _ := ops["backfill"]["slots"].(map[string]any); s == nil || s["count"] != float64(2) || s["statuses"].(map[string]any)["pending"] != float64(2) {
		t.Errorf("backfill item %v, want its 2 slots pending", ops["backfill"])
	}
	header, rows := tableRows(t, e.ok("schedules", "history", "rep").stdout)
	if strings.Join(header, "|") != "TIME|OP|CHANGE|BY|MESSAGE" || len(rows) != 3 || rows[0][1] != "backfill" || rows[0][3] != name ||
		!strings.HasPrefix(rows[0][2], "2 slots ") || rows[1][1] != "run_now" || !strings.Contains(rows[1][2], "trigger "+runNow.TriggerID) {
		t.Errorf("history table %q %q", header, rows)
	}

	var tl struct {
		Entries []map[string]any `json:"entries"`
	}
	e.okJSON(&tl, "explain", "rep", "--from", "-1h")
	var got []string
	for _, en := range tl.Entries {
		if en["kind"] == "operation" {
			got = append(got, en["op"].(string)+" by "+en["by"].(string))
		}
	}
	want := "resume_after_failures by " + name + "|run_now by " + name + "|backfill by " + name
	if strings.Join(got, "|") != want {
		t.Errorf("explain's operations %q, want %q", strings.Join(got, "|"), want)
	}
	if text := e.ok("explain", "rep", "--from", "-1h").stdout; !strings.Contains(text, "run_now by "+name+", trigger "+runNow.TriggerID+", run "+runNow.RunID+" pending") {
		t.Errorf("explain text lacks the run now:\n%s", text)
	}
}

// An edit's message (update_message, written by apply --message) is shown
// as its reason beside its author: the MESSAGE column and update_message of
// `schedules history`, and the edit's line of `explain`.
func TestHistoryShowsTheEditsMessage(t *testing.T) {
	e := newEnv(t)
	at := time.Now().UTC().Add(-time.Hour).Truncate(time.Millisecond)
	e.insert(bson.D{{Key: "_id", Value: "rep"}, {Key: "cron_expr", Value: "0 8 * * *"}, {Key: "updated_by", Value: "ci"},
		{Key: "update_message", Value: "reports an hour earlier"}})
	insertDocs(t, e.db.Collection("schedule_history"), bson.D{
		{Key: "_id", Value: "8263f0a1b2000000012b022c0100296e5a1004"}, {Key: "job_id", Value: "rep"}, {Key: "at", Value: at},
		{Key: "op", Value: "update"}, {Key: "changes", Value: bson.A{
			bson.D{{Key: "field", Value: "cron_expr"}, {Key: "before", Value: "0 9 * * *"}, {Key: "after", Value: "0 8 * * *"}}}},
		{Key: "updated_by", Value: "ci"}, {Key: "update_message", Value: "reports an hour earlier"}, {Key: "instance", Value: "a"},
		{Key: "expire_at", Value: at.Add(720 * time.Hour)},
	})
	_, rows := tableRows(t, e.ok("schedules", "history", "rep").stdout)
	if len(rows) != 1 || strings.Join(rows[0][1:], "|") != `update|cron_expr: "0 9 * * *" → "0 8 * * *"|ci|reports an hour earlier` {
		t.Errorf("history rows %q", rows)
	}
	var items []map[string]any
	e.okJSON(&items, "schedules", "history", "rep")
	if len(items) != 1 || items[0]["update_message"] != "reports an hour earlier" || items[0]["updated_by"] != "ci" {
		t.Errorf("history JSON %v", items)
	}
	if text := e.ok("explain", "rep", "--from", "-2h").stdout; !strings.Contains(text,
		`update cron_expr "0 9 * * *" → "0 8 * * *", by ci, message "reports an hour earlier"`) {
		t.Errorf("explain lacks the edit's message:\n%s", text)
	}
	var tl struct {
		Entries []map[string]any `json:"entries"`
	}
	e.okJSON(&tl, "explain", "rep", "--from", "-2h")
	found := false
	for _, en := range tl.Entries {
		found = found || en["kind"] == "edit" && en["update_message"] == "reports an hour earlier"
	}
	if !found {
		t.Errorf("explain JSON has no edit with its message: %v", tl.Entries)
	}
}
