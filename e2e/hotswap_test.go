package e2e

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/schedule"
)

// The one-liner the README gives for retiming a job, verbatim: the operator's
// way to edit a schedule must keep working exactly as written.
const seedOneLiner = `db.schedules.updateOne({ _id: "daily_report" }, { $set: { cron_expr: "0 8 * * *", updated_at: new Date() } })`

func TestLiveEditWithMongosh(t *testing.T) {
	uri, db := setup(t)
	insert(t, db, sched("daily_report", "0 9 * * *"), sched("heartbeat", "*/10 * * * * *"), sched("other", "@hourly"))
	d := startDaemon(t, writeConfig(t, daemonConfig{URI: uri, Database: db.Name()}))
	d.waitReady()
	before := d.schedules()
	if got := before["daily_report"]; got.CronExpr != "0 9 * * *" || !got.Armed {
		t.Fatalf("daily_report before edit: %+v", got)
	}

	mongosh(t, uri, db.Name(), seedOneLiner)
	edited := time.Now()
	waitFor(t, 2*time.Second, "daily_report re-armed with 0 8 * * *", func() bool {
		return d.schedules()["daily_report"].CronExpr == "0 8 * * *"
	})
	t.Logf("edit visible in /api/schedules %s after mongosh returned", time.Since(edited).Round(time.Millisecond))
	after := d.schedules()
	want, err := schedule.ParseExpr("0 8 * * *", time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	wantNext := want.Next(time.Now()).UTC().Format(time.RFC3339)
	if got := after["daily_report"].NextRun; got == nil || *got != wantNext {
		t.Fatalf("daily_report next_run = %v, want %s", got, wantNext)
	}
	if a, b := before["other"].NextRun, after["other"].NextRun; a == nil || b == nil || *a != *b {
		t.Fatalf("other job's next run changed: %v -> %v", a, b)
	}

	// Insert arms a new job.
	mongosh(t, uri, db.Name(), `db.schedules.insertOne({ _id: "warm_cache", cron_expr: "*/15 * * * *", updated_at: new Date() })`)
	waitFor(t, 5*time.Second, "warm_cache armed", func() bool {
		s, ok := d.schedules()["warm_cache"]
		return ok && s.Armed && s.CronExpr == "*/15 * * * *" && s.NextRun != nil
	})
	// enabled:false disarms without deleting; true re-arms.
	mongosh(t, uri, db.Name(), `db.schedules.updateOne({ _id: "warm_cache" }, { $set: { enabled: false, updated_at: new Date() } })`)
	waitFor(t, 5*time.Second, "warm_cache disarmed", func() bool {
		s := d.schedules()["warm_cache"]
		return !s.Armed && !s.Enabled && s.NextRun == nil
	})
	mongosh(t, uri, db.Name(), `db.schedules.updateOne({ _id: "warm_cache" }, { $set: { enabled: true, updated_at: new Date() } })`)
	waitFor(t, 5*time.Second, "warm_cache re-armed", func() bool { return d.schedules()["warm_cache"].Armed })
	// Delete disarms and forgets.
	mongosh(t, uri, db.Name(), `db.schedules.deleteOne({ _id: "warm_cache" })`)
	waitFor(t, 5*time.Second, "warm_cache removed", func() bool { _, ok := d.schedules()["warm_cache"]; return !ok })
	if code := d.get("/api/schedules/warm_cache", nil); code != 404 {
		t.Fatalf("/api/schedules/warm_cache after delete = %d, want 404", code)
	}
	var one apiSchedule
	if code := d.get("/api/schedules/daily_report", &one); code != 200 || one.CronExpr != "0 8 * * *" {
		t.Fatalf("/api/schedules/daily_report = %d %+v", code, one)
	}
	var st map[string]any
	d.get("/api/status", &st)
	if st["instance_id"] != "e2e-1" || st["watch_mode"] != "changestream" || st["schedules_armed"] != float64(3) {
		t.Fatalf("/api/status = %v", st)
	}
}

func TestRestartAppliesEditsMadeWhileDown(t *testing.T) {
	uri, db := setup(t)
	insert(t, db, sched("daily_report", "0 9 * * *"), sched("heartbeat", "@hourly"))
	cfg := writeConfig(t, daemonConfig{URI: uri, Database: db.Name()})
	d := startDaemon(t, cfg)
	d.waitReady()
	// An event so a token is saved, then wait for the token document.
	mongosh(t, uri, db.Name(), seedOneLiner)
	waitFor(t, 5*time.Second, "edit applied", func() bool { return d.schedules()["daily_report"].CronExpr == "0 8 * * *" })
	waitToken(t, db)
	d.signal(syscall.SIGKILL)

	editWhileDown(t, db, 1)
	d2 := startDaemon(t, cfg)
	d2.waitReady()
	checkEditsWhileDown(t, d2, db, 1)
	l := d2.waitLog("resume log", func(l logLine) bool { return l.str("msg") == "resuming change stream from stored token" })
	if l.str("token_age") == "" || l.str("token_age") == "unknown" {
		t.Fatalf("resume log lacks the token's age: %v", l)
	}

	// Same again with the stored token corrupted.
	waitToken(t, db)
	d2.signal(syscall.SIGKILL)
	corrupt := bson.D{{Key: "_data", Value: "8200000000DEADBEEF0000000000000000"}}
	setToken(t, db, corrupt)
	editWhileDown(t, db, 2)
	d3 := startDaemon(t, cfg)
	d3.waitReady()
	checkEditsWhileDown(t, d3, db, 2)
	l = d3.waitLog("refused token log", func(l logLine) bool {
		return strings.Contains(l.str("msg"), "refused the stored resume token")
	})
	if !strings.Contains(l.str("token"), "DEADBEEF") {
		t.Fatalf("refused-token log does not name the token: %v", l)
	}
}

// editWhileDown makes an update, an insert and a delete directly.
func editWhileDown(t *testing.T, db *mongo.Database, round int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := db.Collection("schedules")
	exprs := map[int]string{1: "0 7 * * *", 2: "0 6 * * *"}
	if _, err := c.UpdateOne(ctx, bson.D{{Key: "_id", Value: "daily_report"}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "cron_expr", Value: exprs[round]}, {Key: "updated_at", Value: time.Now()}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.InsertOne(ctx, bson.D{{Key: "_id", Value: fmt.Sprintf("new%d", round)},
		{Key: "cron_expr", Value: "@daily"}, {Key: "job", Value: "heartbeat"}}); err != nil {
		t.Fatal(err)
	}
	del := "heartbeat"
	if round > 1 {
		del = fmt.Sprintf("new%d", round-1)
	}
	if r, err := c.DeleteOne(ctx, bson.D{{Key: "_id", Value: del}}); err != nil || r.DeletedCount != 1 {
		t.Fatalf("delete %s: %v %v", del, r, err)
	}
}

func checkEditsWhileDown(t *testing.T, d *daemon, db *mongo.Database, round int) {
	t.Helper()
	want := collectionExprs(t, db)
	if len(want) != 2 {
		t.Fatalf("collection after round %d: %v", round, want)
	}
	waitFor(t, 10*time.Second, "armed state equals the collection", func() bool { return equalMaps(d.armedExprs(), want) })
}

func waitToken(t *testing.T, db *mongo.Database) {
	t.Helper()
	waitFor(t, 10*time.Second, "resume token stored", func() bool {
		n, err := db.Collection("resume_tokens").CountDocuments(context.Background(), bson.D{{Key: "_id", Value: "e2e-1"}})
		return err == nil && n == 1
	})
}

func setToken(t *testing.T, db *mongo.Database, token any) {
	t.Helper()
	_, err := db.Collection("resume_tokens").UpdateOne(context.Background(), bson.D{{Key: "_id", Value: "e2e-1"}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "token", Value: token}}}})
	if err != nil {
		t.Fatal(err)
	}
}
