package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/history"
	"github.com/cronswap/cronswap/internal/record"
)

// opsItem is one item of `schedules history -o json`: an edit or an
// operation.
type opsItem struct {
	At      string `json:"at"`
	Op      string `json:"op"`
	Changes []struct {
		Field string `json:"field"`
	} `json:"changes"`
	UpdatedBy     string `json:"updated_by"`
	UpdateMessage string `json:"update_message"`
	By            string `json:"by"`
	TriggerID     string `json:"trigger_id"`
	RunID         string `json:"run_id"`
	Status        string `json:"status"`
	Slots         *struct {
		Count int `json:"count"`
	} `json:"slots"`
}

func (it opsItem) String() string {
	var fields []string
	for _, c := range it.Changes {
		fields = append(fields, c.Field)
	}
	s := it.Op + " [" + strings.Join(fields, ",") + "]"
	for _, p := range [][2]string{{"updated_by", it.UpdatedBy}, {"message", it.UpdateMessage}, {"by", it.By}} {
		if p[1] != "" {
			s += " " + p[0] + " " + p[1]
		}
	}
	return s
}

// Every operator action on a job — from the command line, with mongosh —
// is in the job's history with who did it and when, through one daemon
// and the real binary: `apply --message` (the message is the edit's, not
// a changed field; an edit of nothing but the message records nothing and
// re-arms nothing), `schedules pause` and `resume` (edits by the user
// running the CLI), `run-now` and a mongosh run-now request, `backfill`,
// and a resume after failures. `schedules history`, `explain` and the
// daemon's timeline endpoint list the same operations.
func TestOperatorActionsInTheHistory(t *testing.T) {
	uri, db := setup(t)
	cfg := writeConfig(t, daemonConfig{URI: uri, Database: db.Name(), InstanceID: "ops-1"})
	d := startDaemon(t, cfg)
	d.waitReady()
	d.waitLog("history recording", func(l logLine) bool { return l.str("msg") == msgHistoryCaughtUp })
	start := time.Now().UTC().Add(-time.Second)

	// apply creates the job, by ci, with its message.
	file := filepath.Join(t.TempDir(), "schedules.yaml")
	if err := os.WriteFile(file, []byte("_id: rep\ncron_expr: \"0 0 * * * *\"\njob: daily_report\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cliOK(t, cfg, "apply", "-f", file, "--by", "ci", "--message", "add the hourly report")
	waitArmed(t, []*daemon{d}, []string{"rep"})
	applied := func() int { return d.countJobLogs("scheduler: schedule applied", "rep") }
	armings := applied()

	// A mongosh edit of the message alone: not a change, nothing re-armed.
	unchanged := d.countJobLogs("scheduler: schedule unchanged", "rep")
	mongosh(t, uri, db.Name(), `db.schedules.updateOne({ _id: "rep" }, { $set: { update_message: "add the hourly report (typo)", updated_by: "dave", updated_at: new Date() } })`)
	waitFor(t, 30*time.Second, "the message-only edit applied", func() bool {
		return d.countJobLogs("scheduler: schedule unchanged", "rep") > unchanged
	})

	// A pause after failures, which `schedules resume` clears.
	if _, err := db.Collection(record.PausesCollection).InsertOne(testCtx(t), bson.D{{Key: "_id", Value: "rep"},
		{Key: "state", Value: record.PauseStatePaused}, {Key: "paused_at", Value: time.Now()}, {Key: "note", Value: "by hand"}}); err != nil {
		t.Fatal(err)
	}
	cliOK(t, cfg, "schedules", "pause", "rep")
	var doc struct {
		UpdatedBy string `bson:"updated_by"`
	}
	if err := db.Collection("schedules").FindOne(testCtx(t), bson.D{{Key: "_id", Value: "rep"}}).Decode(&doc); err != nil || doc.UpdatedBy == "" {
		t.Fatalf("schedules pause wrote no updated_by: %+v %v", doc, err)
	}
	name := doc.UpdatedBy
	cliOK(t, cfg, "schedules", "resume", "rep")
	var runNow struct {
		TriggerID string `json:"trigger_id"`
		RunID     string `json:"run_id"`
	}
	if err := json.Unmarshal([]byte(cliOK(t, cfg, "run-now", "rep", "--wait", "60s", "-o", "json")), &runNow); err != nil {
		t.Fatal(err)
	}
	mongosh(t, uri, db.Name(), `db.triggers.insertOne({ job_id: "rep" })`)
	cliOK(t, cfg, "backfill", "rep", "--from", "-3h", "--to", "-1h", "--before-first-seen")
	waitFor(t, 30*time.Second, "the pause and resume edits recorded", func() bool {
		n, _ := db.Collection(history.CollectionName).CountDocuments(testCtx(t),
			bson.D{{Key: "job_id", Value: "rep"}, {Key: "op", Value: history.OpUpdate}})
		return n >= 2
	})
	end := time.Now().UTC().Add(time.Second)
	if n := applied(); n != armings+2 {
		t.Errorf("%d schedule applied lines for rep after the apply, want 2 (pause and resume; the message edit re-arms nothing)", n-armings)
	}

	var items []opsItem
	if err := json.Unmarshal([]byte(cliOK(t, cfg, "schedules", "history", "rep", "-o", "json")), &items); err != nil {
		t.Fatal(err)
	}
	var got []string
	for i := len(items) - 1; i >= 0; i-- { // oldest first
		it := items[i]
		at, err := time.Parse(time.RFC3339, it.At)
		if err != nil || at.Before(start) || at.After(end) {
			t.Errorf("%s at %s, want between %s and %s", it, it.At, start, end)
		}
		got = append(got, it.String())
	}
	want := []string{
		"insert [cron_expr,job,managed_by] updated_by ci message add the hourly report",
		"update [enabled] updated_by " + name,
		"update [enabled] updated_by " + name,
		"resume_after_failures [] by " + name,
		"run_now [] by " + name,
		"run_now []",
		"backfill [] by " + name,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("schedules history, oldest first:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if it := items[2]; it.TriggerID != runNow.TriggerID || it.RunID != runNow.RunID || it.Status != record.StatusSucceeded {
		t.Errorf("run now in the history %+v, want trigger %s, run %s, succeeded", it, runNow.TriggerID, runNow.RunID)
	}
	if it := items[0]; it.Slots == nil || it.Slots.Count < 2 {
		t.Errorf("backfill in the history %+v, want its slots", it)
	}
	table := cliOK(t, cfg, "schedules", "history", "rep")
	if !strings.Contains(table, "add the hourly report") || strings.Contains(table, "update_message") {
		t.Errorf("history table shows the message as a change, or not at all:\n%s", table)
	}

	// explain and the daemon's timeline: the same operations, by the same names.
	operations := func(entries []map[string]any) string {
		var out []string
		for _, e := range entries {
			switch e["kind"] {
			case "operation":
				by, _ := e["by"].(string)
				out = append(out, fmt.Sprintf("%v by %s", e["op"], by))
			case "edit":
				by, _ := e["updated_by"].(string)
				msg, _ := e["update_message"].(string)
				out = append(out, fmt.Sprintf("edit %v by %s %s", e["op"], by, msg))
			}
		}
		return strings.Join(out, "|")
	}
	var tl struct {
		Entries []map[string]any `json:"entries"`
	}
	if err := json.Unmarshal([]byte(cliOK(t, cfg, "explain", "rep", "--from", "-10m", "-o", "json")), &tl); err != nil {
		t.Fatal(err)
	}
	fromExplain := operations(tl.Entries)
	wantOps := "edit insert by ci add the hourly report|edit update by " + name + " |edit update by " + name + " |resume_after_failures by " + name +
		"|run_now by " + name + "|run_now by |backfill by " + name
	if fromExplain != wantOps {
		t.Errorf("explain:\n%s\nwant:\n%s", fromExplain, wantOps)
	}
	var served struct {
		Entries []map[string]any `json:"entries"`
	}
	if code := d.get("/api/schedules/rep/timeline?from=-10m", &served); code != 200 || operations(served.Entries) != fromExplain {
		t.Errorf("timeline endpoint %d:\n%s\nwant what explain shows:\n%s", code, operations(served.Entries), fromExplain)
	}
}

// countJobLogs counts d's log lines with message msg about job id.
func (d *daemon) countJobLogs(msg, id string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, l := range d.lines {
		if l.str("msg") == msg && l.str("job_id") == id {
			n++
		}
	}
	return n
}
