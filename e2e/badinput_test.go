package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

func TestBadDocumentsKeepLastKnownGood(t *testing.T) {
	uri, db := setup(t)
	insert(t, db, sched("daily_report", "0 9 * * *"), sched("heartbeat", "@hourly"))
	d := startDaemon(t, writeConfig(t, daemonConfig{URI: uri, Database: db.Name()}))
	d.waitReady()
	good := d.schedules()["daily_report"]
	if !good.Armed || good.NextRun == nil {
		t.Fatalf("daily_report not armed: %+v", good)
	}
	coll := db.Collection("schedules")
	update := func(u bson.D) {
		t.Helper()
		if _, err := coll.UpdateOne(context.Background(), bson.D{{Key: "_id", Value: "daily_report"}}, u); err != nil {
			t.Fatal(err)
		}
	}
	set := func(k string, v any) bson.D { return bson.D{{Key: "$set", Value: bson.D{{Key: k, Value: v}}}} }
	restore := bson.D{
		{Key: "$set", Value: bson.D{{Key: "cron_expr", Value: "0 9 * * *"}, {Key: "updated_at", Value: time.Now()}}},
		{Key: "$unset", Value: bson.D{{Key: "timezone", Value: ""}, {Key: "enabled", Value: ""}}},
	}
	cases := []struct {
		name   string
		shell  string // mongosh edit, or
		edit   bson.D // a driver edit
		reason string // part of the error
	}{
		{"out of range", `db.schedules.updateOne({ _id: "daily_report" }, { $set: { cron_expr: "61 * * * *", updated_at: new Date() } })`, nil, "cron_expr"},
		{"number", "", set("cron_expr", 42), "must be a string"},
		{"empty", "", set("cron_expr", ""), "empty expression"},
		{"missing", "", bson.D{{Key: "$unset", Value: bson.D{{Key: "cron_expr", Value: ""}}}}, "missing"},
		{"unknown zone", "", set("timezone", "Mars/Base"), "Mars/Base"},
		{"enabled not bool", "", set("enabled", "yes"), "enabled"},
		{"unknown action", "", set("job", "rm_rf"), "unknown action"},
		// @every outside whole seconds from 1s to 24h: refused, never a
		// one-second timer.
		{"@every negative", `db.schedules.updateOne({ _id: "daily_report" }, { $set: { cron_expr: "@every -5s", updated_at: new Date() } })`, nil, "is negative"},
		{"@every zero", "", set("cron_expr", "@every 0s"), "less than 1s"},
		{"@every 1ns", "", set("cron_expr", "@every 1ns"), "shorter than a second"},
		{"@every fractional", "", set("cron_expr", "@every 1.5s"), "not a whole number of seconds"},
		{"@every 500ms", "", set("cron_expr", "@every 500ms"), "shorter than a second"},
	}
	for _, c := range cases {
		if c.shell != "" {
			mongosh(t, uri, db.Name(), c.shell)
		} else {
			update(c.edit)
		}
		waitFor(t, 5*time.Second, c.name+": last_error shown", func() bool {
			return strings.Contains(d.schedules()["daily_report"].LastError, c.reason)
		})
		s := d.schedules()["daily_report"]
		if !s.Armed || s.CronExpr != "0 9 * * *" || s.NextRun == nil || *s.NextRun != *good.NextRun {
			t.Fatalf("%s: last known good not kept: %+v", c.name, s)
		}
		d.waitLog(c.name+": log names job and reason", func(l logLine) bool {
			return l.str("job_id") == "daily_report" && strings.Contains(l.str("msg"), "rejected") &&
				strings.Contains(l.str("error"), c.reason)
		})
		if c.name == "unknown action" {
			update(bson.D{{Key: "$unset", Value: bson.D{{Key: "job", Value: ""}}}})
		}
		update(restore)
		waitFor(t, 5*time.Second, c.name+": fixed document clears the error", func() bool {
			s := d.schedules()["daily_report"]
			return s.LastError == "" && s.Armed && s.CronExpr == "0 9 * * *"
		})
	}

	// A new job whose first document is bad is not armed, with the error visible.
	mongosh(t, uri, db.Name(), `db.schedules.insertOne({ _id: "broken", cron_expr: "0 25 * * *", job: "heartbeat" })`)
	waitFor(t, 5*time.Second, "broken job visible with error", func() bool {
		s, ok := d.schedules()["broken"]
		return ok && !s.Armed && strings.Contains(s.LastError, "cron_expr")
	})
	var one apiSchedule
	if code := d.get("/api/schedules/broken", &one); code != 200 || one.LastError == "" {
		t.Fatalf("/api/schedules/broken = %d %+v", code, one)
	}
	// The daemon is still alive and streaming.
	mongosh(t, uri, db.Name(), seedOneLiner)
	waitFor(t, 5*time.Second, "still streaming", func() bool { return d.schedules()["daily_report"].CronExpr == "0 8 * * *" })
}

func TestGracefulShutdownWaitsForRunningActions(t *testing.T) {
	uri, db := setup(t)
	dir := t.TempDir()
	started := filepath.Join(dir, "started")
	finished := filepath.Join(dir, "finished")
	jobs := `
  slow:
    exec: ["sh", "-c", "touch ` + started + `; sleep 2; echo $CRONSWAP_SCHEDULED_AT > ` + finished + `"]
    timeout: 1m
`
	insert(t, db, sched("slow", "* * * * * *"))
	d := startDaemon(t, writeConfig(t, daemonConfig{URI: uri, Database: db.Name(), Jobs: jobs}))
	d.waitReady()
	waitFor(t, 15*time.Second, "action started", func() bool { _, err := os.Stat(started); return err == nil })
	termAt := time.Now()
	d.signal(syscall.SIGTERM)
	if err := d.wait(30 * time.Second); err != nil {
		t.Fatalf("exit after SIGTERM: %v, want status 0", err)
	}
	out, err := os.ReadFile(finished)
	if err != nil {
		t.Fatalf("running action was not allowed to finish: %v", err)
	}
	if _, err := time.Parse(time.RFC3339, strings.TrimSpace(string(out))); err != nil {
		t.Fatalf("CRONSWAP_SCHEDULED_AT = %q: %v", out, err)
	}
	if _, ok := d.findLog(func(l logLine) bool { return l.str("msg") == "stopped" }); !ok {
		t.Fatal("no 'stopped' log line")
	}
	// The final position was saved.
	raw, err := db.Collection("resume_tokens").FindOne(context.Background(), bson.D{{Key: "_id", Value: "e2e-1"}}).Raw()
	if err != nil || raw.Lookup("token").Type != bson.TypeEmbeddedDocument {
		t.Fatalf("resume token after shutdown: %v %v", raw, err)
	}
	if saved := raw.Lookup("updated_at").Time(); saved.Before(termAt.Add(-time.Second)) {
		t.Fatalf("token last saved at %s, before SIGTERM at %s", saved, termAt)
	}
	// No fire started after SIGTERM: every run that started also finished.
	runsStarted, runsDone := 0, 0
	for _, l := range logLines(d) {
		switch l.str("msg") {
		case "run started":
			runsStarted++
		case "run succeeded", "run failed":
			runsDone++
		}
	}
	if runsStarted != runsDone {
		t.Fatalf("%d runs started, %d ended", runsStarted, runsDone)
	}
}

func logLines(d *daemon) []logLine {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]logLine(nil), d.lines...)
}
