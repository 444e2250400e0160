package cli_test

import (
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/blackout"
	"github.com/cronswap/cronswap/internal/cli"
	"github.com/cronswap/cronswap/internal/record"
)

type blackoutJSON struct {
	ID         string   `json:"id"`
	Kind       string   `json:"kind"`
	From       *string  `json:"from"`
	To         *string  `json:"to"`
	CronExpr   string   `json:"cron_expr"`
	Duration   string   `json:"duration"`
	Timezone   string   `json:"timezone"`
	Categories []string `json:"categories"`
	Reason     string   `json:"reason"`
	Active     bool     `json:"active"`
	NextOpen   *string  `json:"next_open"`
	Error      string   `json:"error"`
}

// blackouts add writes what the daemon reads, list shows it (and a
// refused document with its error), delete removes it; bad input is exit 1.
func TestBlackoutsAddListDelete(t *testing.T) {
	e := newEnv(t)
	e.ok("blackouts", "add", "freeze", "--from", "-1h", "--to", "+2h", "--category", "billing", "--category", "ledger",
		"--reason", "year-end freeze")
	e.ok("blackouts", "add", "nightly", "--cron", "0 2 * * *", "--duration", "90m", "--tz", "Europe/Berlin", "--reason", "backups")
	// A document written by hand that the daemon refuses.
	if _, err := e.db.Collection(blackout.CollectionName).InsertOne(ctx(t), bson.D{{Key: "_id", Value: "typo"},
		{Key: "from", Value: time.Now()}, {Key: "to", Value: time.Now().Add(time.Hour)}, {Key: "categoies", Value: bson.A{"x"}},
		{Key: "reason", Value: "r"}}); err != nil {
		t.Fatal(err)
	}
	var got []blackoutJSON
	e.okJSON(&got, "blackouts", "list")
	if len(got) != 3 {
		t.Fatalf("list: %+v", got)
	}
	freeze, nightly, typo := got[0], got[1], got[2]
	if freeze.ID != "freeze" || freeze.Kind != "one-off" || !freeze.Active || freeze.Reason != "year-end freeze" ||
		strings.Join(freeze.Categories, ",") != "billing,ledger" || freeze.From == nil || freeze.To == nil {
		t.Errorf("freeze: %+v", freeze)
	}
	if nightly.ID != "nightly" || nightly.Kind != "recurring" || nightly.CronExpr != "0 2 * * *" || nightly.Duration != "1h30m0s" ||
		nightly.Timezone != "Europe/Berlin" || nightly.NextOpen == nil || len(nightly.Categories) != 0 {
		t.Errorf("nightly: %+v", nightly)
	}
	if typo.ID != "typo" || !strings.Contains(typo.Error, "categoies") {
		t.Errorf("typo: %+v, want its error", typo)
	}
	text := e.ok("blackouts", "list").stdout
	if !strings.Contains(text, "(all jobs)") || !strings.Contains(text, "refused:") || !strings.Contains(text, "active") {
		t.Errorf("list table:\n%s", text)
	}
	var raw bson.M
	if err := e.db.Collection(blackout.CollectionName).FindOne(ctx(t), bson.D{{Key: "_id", Value: "freeze"}}).Decode(&raw); err != nil {
		t.Fatal(err)
	}
	if _, ok := raw["updated_at"]; !ok {
		t.Errorf("added document %v has no updated_at", raw)
	}

	for _, bad := range [][]string{
		{"blackouts", "add", "freeze", "--from", "now", "--to", "+1h", "--reason", "again"}, // exists
		{"blackouts", "add", "x", "--from", "now", "--to", "+1h"},                           // no reason
		{"blackouts", "add", "x", "--from", "+1h", "--to", "now", "--reason", "r"},          // to before from
		{"blackouts", "add", "x", "--from", "now", "--reason", "r"},                         // no to
		{"blackouts", "add", "x", "--cron", "61 * * * *", "--duration", "1h", "--reason", "r"},
		{"blackouts", "add", "x", "--cron", "@daily", "--duration", "soon", "--reason", "r"},
		{"blackouts", "add", "x", "--from", "now", "--to", "+1h", "--cron", "@daily", "--reason", "r"},
		{"blackouts", "add", "x", "--reason", "r"},
		{"blackouts", "delete", "nobody"},
	} {
		if r := e.run(bad...); r.code != cli.ExitUserError || r.stderr == "" {
			t.Errorf("%q: %v, want exit 1 with a message", bad, r)
		}
	}
	if n := e.count(blackout.CollectionName); n != 3 {
		t.Errorf("%d documents after refused adds, want 3", n)
	}
	e.ok("blackouts", "delete", "freeze")
	e.okJSON(&got, "blackouts", "list")
	if len(got) != 2 || got[0].ID != "nightly" {
		t.Errorf("after delete: %+v", got)
	}
}

// runs get shows the window that skipped a slot.
func TestRunsGetShowsBlackout(t *testing.T) {
	e := newEnv(t)
	slot := time.Date(2026, 12, 25, 9, 0, 0, 0, time.UTC)
	id := record.RunID("bill", slot)
	if _, err := e.db.Collection(record.RunsCollection).InsertOne(ctx(t), record.RunDoc{ID: id, JobID: "bill", ScheduledAt: slot,
		Status: record.StatusSkipped, Reason: "year-end freeze", Error: "blackout freeze: year-end freeze", BlackoutID: "freeze"}); err != nil {
		t.Fatal(err)
	}
	var got struct {
		BlackoutID string `json:"blackout_id"`
		Reason     string `json:"reason"`
	}
	e.okJSON(&got, "runs", "get", id)
	if got.BlackoutID != "freeze" || got.Reason != "year-end freeze" {
		t.Errorf("runs get -o json: %+v", got)
	}
	if out := e.ok("runs", "get", id).stdout; !strings.Contains(out, "BLACKOUT") || !strings.Contains(out, "freeze") {
		t.Errorf("runs get:\n%s", out)
	}
}

// schedules pause --category pauses every schedule of the category (and
// only those), resume --category resumes them; an unknown category is exit 1.
func TestSchedulesPauseResumeByCategory(t *testing.T) {
	e := newEnv(t)
	for _, s := range []struct{ id, cat string }{{"a", "billing"}, {"b", "billing"}, {"c", "reports"}} {
		e.ok("schedules", "set", s.id, "--cron", "@hourly", "--category", s.cat)
	}
	e.ok("schedules", "pause", "b")
	var res struct {
		Matched, Changed int64
		Enabled          bool
	}
	e.okJSON(&res, "schedules", "pause", "--category", "billing")
	if res.Matched != 2 || res.Changed != 1 || res.Enabled {
		t.Errorf("pause --category: %+v, want 2 matched, 1 changed (b already paused)", res)
	}
	for id, want := range map[string]bool{"a": false, "b": false, "c": true} {
		if got := e.rawSchedule(id)["enabled"]; got != nil && got != want || got == nil && !want {
			t.Errorf("%s enabled = %v, want %v", id, got, want)
		}
	}
	out := e.ok("schedules", "resume", "--category", "billing").stdout
	if !strings.Contains(out, "resumed 2 of the 2 schedules of category billing") {
		t.Errorf("resume --category said %q", out)
	}
	for _, id := range []string{"a", "b"} {
		if e.rawSchedule(id)["enabled"] != true {
			t.Errorf("%s not resumed: %v", id, e.rawSchedule(id))
		}
	}
	for _, bad := range [][]string{
		{"schedules", "pause", "--category", "nobody"},
		{"schedules", "pause", "a", "--category", "billing"},
		{"schedules", "resume", "--category", ""},
	} {
		if r := e.run(bad...); r.code != cli.ExitUserError {
			t.Errorf("%q: %v, want exit 1", bad, r)
		}
	}
}
