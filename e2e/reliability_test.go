package e2e

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/internal/blackout"
	"github.com/cronswap/cronswap/internal/calendar"
	"github.com/cronswap/cronswap/internal/faultproxy"
	"github.com/cronswap/cronswap/internal/testmongo"
	"github.com/cronswap/cronswap/internal/triggers"
	"github.com/cronswap/cronswap/schedule"
)

// Every 2 s for 20 s all connections are cut, while a writer makes 200
// random edits; every other cut also severs the driver's own resume
// attempt, so the watcher has to reconnect by itself (with backoff). At the
// end /api/schedules equals the collection exactly.
func TestCutsEveryTwoSecondsWhileWriting(t *testing.T) {
	uri, db := setup(t)
	p := newProxy(t, uri)
	d := startDaemon(t, writeConfig(t, daemonConfig{URI: p.URI(uri), Database: db.Name(), Jobs: tickJobs}))
	d.waitReady()

	w := newWriter(db.Collection("schedules"), 1, 20, quietExprs)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second) // ample on a loaded machine
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); w.run(ctx, 200, 100*time.Millisecond) }()

	cuts := 0
	tick := time.NewTicker(2 * time.Second)
	for cuts < 10 {
		<-tick.C
		if cuts%2 == 1 {
			// The driver's own resume after this cut, and its retry, fail
			// too: the watcher has to reconnect by itself.
			p.CutNext(schedulesStream)
			p.CutNext(schedulesStream)
		}
		p.CutAll()
		cuts++
	}
	tick.Stop()
	wg.Wait()
	if w.total() != 200 {
		t.Fatalf("writer made %d edits (%s), want 200", w.total(), w.summary())
	}
	waitStateExact(t, d, db, 30*time.Second)
	d.waitReady()
	t.Logf("edits: %s; cuts: %d; proxy: %+v", w.summary(), cuts, p.Stats())

	if n := countLogs(d, isReconnectLog); n == 0 {
		t.Fatal("no reconnect was logged with its attempt and backoff delay")
	} else {
		t.Logf("reconnects logged: %d", n)
	}
	checkBackoffGrows(t, d)
	select {
	case <-d.done:
		t.Fatalf("daemon exited: %v", d.exit)
	default:
	}
	// Still streaming: one more edit arrives.
	mongosh(t, uri, db.Name(), `db.schedules.updateOne({ _id: "job00" }, { $set: { cron_expr: "45 4 * * *", enabled: true, job: "tick" } }, { upsert: true })`)
	waitFor(t, 10*time.Second, "edit after the cuts", func() bool { return d.schedules()["job00"].CronExpr == "45 4 * * *" })
	waitStateExact(t, d, db, 10*time.Second)
}

// After a cut, the resume attempt is answered with ChangeStreamHistoryLost
// (286): the daemon reloads everything, ends exact, and keeps streaming.
func TestHistoryLostOnResumeAfterCut(t *testing.T) {
	uri, db := setup(t)
	insert(t, db, sched("daily_report", "0 9 * * *"), sched("heartbeat", "@hourly"))
	p := newProxy(t, uri)
	d := startDaemon(t, writeConfig(t, daemonConfig{URI: p.URI(uri), Database: db.Name()}))
	d.waitReady()
	waitToken(t, db)

	p.FailNext(schedulesStream, historyLostReply)
	p.CutAll()
	// An edit lands while the daemon is resuming.
	editWhileDown(t, db, 1)
	l := d.waitLog("full reload after the refused resume", func(l logLine) bool {
		return l.str("msg") == "full reload" && (l.str("reason") == "lost_position" || l.str("reason") == "token_refused")
	})
	t.Logf("reload reason: %s", l.str("reason"))
	if got := p.Stats().Injected["aggregate"]; got != 1 {
		t.Fatalf("injected 286 replies = %d, want 1 (stats %+v)", got, p.Stats())
	}
	if _, ok := d.findLog(func(l logLine) bool { return strings.Contains(l.str("error"), "ChangeStreamHistoryLost") }); !ok {
		t.Fatal("no log names the server's ChangeStreamHistoryLost error")
	}
	d.waitReady()
	waitStateExact(t, d, db, 10*time.Second)

	// Streaming continues.
	mongosh(t, uri, db.Name(), seedOneLiner)
	waitFor(t, 10*time.Second, "edit after the reload", func() bool { return d.schedules()["daily_report"].CronExpr == "0 8 * * *" })
	waitStateExact(t, d, db, 10*time.Second)
}

// The test server is restarted (gracefully, then by a crash) under the
// daemon, with its data and oplog kept in an H2 file: the daemon reconnects,
// resumes and ends exact.
func TestServerRestartUnderDaemon(t *testing.T) {
	srv, err := testmongo.Start(context.Background(), testmongo.Options{
		H2File: filepath.Join(t.TempDir(), "data.mv"), IgnoreEnv: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	client := testmongo.ClientFor(t, srv.URI)
	db := client.Database("restart")
	insert(t, db, sched("daily_report", "0 9 * * *"), sched("heartbeat", "@hourly"))
	d := startDaemon(t, writeConfig(t, daemonConfig{URI: srv.URI, Database: db.Name()}))
	d.waitReady()
	mongosh(t, srv.URI, db.Name(), seedOneLiner)
	waitFor(t, 10*time.Second, "edit before restart", func() bool { return d.schedules()["daily_report"].CronExpr == "0 8 * * *" })

	for round, stop := range []func() error{
		func() error { return srv.Restart(context.Background()) },
		func() error {
			if err := srv.Kill(); err != nil {
				return err
			}
			return srv.StartAgain(context.Background())
		},
	} {
		if err := stop(); err != nil {
			t.Fatalf("round %d: %v", round+1, err)
		}
		// The test's own client may hold connections to the old process: a
		// failed ping clears them.
		waitFor(t, 30*time.Second, "test client reconnected", func() bool {
			return client.Ping(context.Background(), nil) == nil
		})
		editWhileDown(t, db, round+1) // right after the server is back, before the daemon is
		waitStateExact(t, d, db, 30*time.Second)
		d.waitReady()
		mongosh(t, srv.URI, db.Name(), `db.schedules.updateOne({ _id: "daily_report" }, { $set: { cron_expr: "5 5 * * *", updated_at: new Date() } })`)
		waitFor(t, 10*time.Second, "streaming after the restart", func() bool {
			return d.schedules()["daily_report"].CronExpr == "5 5 * * *"
		})
		waitStateExact(t, d, db, 10*time.Second)
	}
	t.Logf("reconnects logged: %d; full reloads after start-up: %d", countLogs(d, isReconnectLog),
		countLogs(d, func(l logLine) bool { return l.str("msg") == "full reload" && l.str("reason") != "startup" }))
}

// The daemon starts before its server exists: it stays up, answers /readyz
// 503, backs off, and is ready within seconds of the server appearing.
func TestStartBeforeServerExists(t *testing.T) {
	port := freePort(t)
	uri := fmt.Sprintf("mongodb://127.0.0.1:%d/", port)
	d := startDaemon(t, writeConfig(t, daemonConfig{URI: uri, Database: "startlate"}))
	// The server appears 5 s later, and not before the daemon has tried and
	// failed at least once (each try waits out the driver's 5 s server
	// selection, longer on a loaded machine).
	started := time.Now()
	for time.Since(started) < 5*time.Second || countLogs(d, isReconnectLog) == 0 {
		if time.Since(started) > 60*time.Second {
			t.Fatal("no reconnect attempt logged in 60 s while the server was absent")
		}
		if code := d.get("/readyz", nil); code != http.StatusServiceUnavailable {
			t.Fatalf("/readyz = %d with no server, want 503", code)
		}
		if code := d.get("/healthz", nil); code != http.StatusOK {
			t.Fatalf("/healthz = %d, want 200", code)
		}
		time.Sleep(100 * time.Millisecond)
	}
	attempts := countLogs(d, isReconnectLog)
	// No busy loop: the attempts are spaced by the backoff (and the driver's
	// server selection timeout), not back to back.
	if limit := int(time.Since(started)/time.Second) + 2; attempts > limit {
		t.Fatalf("%d reconnect attempts in %s: a busy loop", attempts, time.Since(started).Round(time.Second))
	}
	checkBackoffGrows(t, d)

	srv, err := testmongo.Start(context.Background(), testmongo.Options{Port: port, IgnoreEnv: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	up := time.Now()
	db := testmongo.ClientFor(t, srv.URI).Database("startlate")
	insert(t, db, sched("daily_report", "0 9 * * *"), sched("heartbeat", "@hourly"))
	d.waitReady()
	t.Logf("ready %s after the server listened (%d reconnect attempts while it was absent)",
		time.Since(up).Round(time.Millisecond), attempts)
	waitStateExact(t, d, db, 10*time.Second)
	mongosh(t, srv.URI, db.Name(), seedOneLiner)
	waitFor(t, 10*time.Second, "streaming", func() bool { return d.schedules()["daily_report"].CronExpr == "0 8 * * *" })
}

// checkBackoffGrows checks the logged reconnect delays follow the capped
// exponential backoff of the test config (50ms .. 1s, jitter down to half).
func checkBackoffGrows(t *testing.T, d *daemon) {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, l := range d.lines {
		if !isReconnectLog(l) {
			continue
		}
		attempt, _ := l["attempt"].(float64)
		delay, _ := l["delay"].(float64) // nanoseconds in JSON
		ceil := 50 * time.Millisecond
		for i := 1; i < int(attempt) && ceil < time.Second; i++ {
			ceil *= 2
		}
		ceil = min(ceil, time.Second)
		if got := time.Duration(delay); got < ceil/2 || got > ceil {
			t.Errorf("attempt %v waited %s, want %s..%s", attempt, got, ceil/2, ceil)
		}
	}
}

// In auto mode against a server that refuses $changeStream with 40573 (a
// standalone mongod), the daemon warns once and polls; edits arrive within
// poll_interval + 1 s. An explicit `watch.mode: poll` polls from the start.
func TestAutoModeFallsBackToPolling(t *testing.T) {
	uri, db := setup(t)
	insert(t, db, sched("daily_report", "0 9 * * *"), sched("heartbeat", "@hourly"))
	p := newProxy(t, uri)
	p.FailAlways(faultproxy.IsChangeStreamAggregate, faultproxy.ErrorReply{
		Code: 40573, CodeName: "Location40573", Errmsg: "The $changeStream stage is only supported on replica sets"})
	const pollInterval = time.Second
	d := startDaemon(t, writeConfig(t, daemonConfig{URI: p.URI(uri), Database: db.Name(),
		Watch: "  mode: auto\n  poll_interval: 1s\n"}))
	d.waitReady()
	l := d.waitLog("fallback warning", func(l logLine) bool { return strings.Contains(l.str("msg"), "falling back to polling") })
	if l.str("level") != "WARN" || !strings.Contains(l.str("error"), "40573") && !strings.Contains(l.str("error"), "only supported on replica sets") {
		t.Fatalf("fallback log lacks the reason: %v", l)
	}
	var st struct {
		WatchMode string `json:"watch_mode"`
	}
	d.get("/api/status", &st)
	if st.WatchMode != "poll" {
		t.Fatalf("watch_mode = %q, want poll", st.WatchMode)
	}
	checkPollLatency(t, d, db, pollInterval)
	// Each watched collection (schedules, blackouts, calendars, triggers)
	// falls back once, after one refused request.
	watched := []string{schedule.CollectionName, blackout.CollectionName, calendar.CollectionName, triggers.CollectionName}
	for _, coll := range watched {
		if n := countLogs(d, func(l logLine) bool {
			return strings.Contains(l.str("msg"), "falling back to polling") && l.str("collection") == coll
		}); n != 1 {
			t.Fatalf("fallback of the %s watcher logged %d times, want once", coll, n)
		}
	}
	if n := p.Stats().Injected["aggregate"]; n != len(watched) {
		t.Fatalf("the daemon asked for a change stream %d times, want once per watched collection (%d): %+v", n, len(watched), p.Stats())
	}

	// watch.mode: poll, straight to the server.
	d2 := startDaemon(t, writeConfig(t, daemonConfig{URI: uri, Database: db.Name(), InstanceID: "e2e-poll",
		Watch: "  mode: poll\n  poll_interval: 1s\n"}))
	d2.waitReady()
	d2.get("/api/status", &st)
	if st.WatchMode != "poll" {
		t.Fatalf("watch_mode = %q, want poll", st.WatchMode)
	}
	checkPollLatency(t, d2, db, pollInterval)
}

// checkPollLatency makes an update, an insert and a delete and checks each
// shows in /api/schedules within poll_interval + 1 s of being written, and
// has its line in the log at info level, as an event's change has in
// stream mode (what an operator who edits with mongosh watches for).
func checkPollLatency(t *testing.T, d *daemon, db *mongo.Database, interval time.Duration) {
	t.Helper()
	coll := db.Collection("schedules")
	ctx := context.Background()
	expr := fmt.Sprintf("%d 4 * * *", time.Now().Nanosecond()%60)
	polled := "polled_" + d.cfgName()
	logged := func(msg, id, outcome string) func(logLine) bool {
		return func(l logLine) bool {
			return l.str("msg") == msg && l.str("job_id") == id && l.str("outcome") == outcome && l.str("level") == "INFO"
		}
	}
	edits := []struct {
		what   string
		write  func() error
		done   func(map[string]apiSchedule) bool
		logged func(logLine) bool
	}{
		{"update", func() error {
			_, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: "daily_report"}},
				bson.D{{Key: "$set", Value: bson.D{{Key: "cron_expr", Value: expr}}}})
			return err
		}, func(m map[string]apiSchedule) bool { return m["daily_report"].CronExpr == expr },
			func(l logLine) bool {
				return logged("scheduler: schedule applied", "daily_report", "replaced")(l) && l.str("cron_expr") == expr
			}},
		{"insert", func() error {
			_, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: polled}, {Key: "cron_expr", Value: "@daily"}, {Key: "job", Value: "other"}})
			return err
		}, func(m map[string]apiSchedule) bool { return m[polled].Armed },
			logged("scheduler: schedule applied", polled, "added")},
		{"delete", func() error {
			_, err := coll.DeleteOne(ctx, bson.D{{Key: "_id", Value: polled}})
			return err
		}, func(m map[string]apiSchedule) bool { _, ok := m[polled]; return !ok },
			logged("scheduler: schedule removed", polled, "")},
	}
	for _, e := range edits {
		if err := e.write(); err != nil {
			t.Fatalf("%s: %v", e.what, err)
		}
		written := time.Now()
		waitFor(t, 30*time.Second, e.what+" polled", func() bool { return e.done(d.schedules()) })
		took := time.Since(written)
		t.Logf("poll mode: %s visible after %s", e.what, took.Round(time.Millisecond))
		if took > interval+time.Second {
			t.Errorf("%s took %s to arrive, more than poll_interval + 1 s", e.what, took)
		}
		d.waitLog(e.what+" logged at info level", e.logged)
	}
	waitStateExact(t, d, db, 10*time.Second)
}

// cfgName is a short name unique to this daemon's config.
func (d *daemon) cfgName() string { return filepath.Base(filepath.Dir(d.cfgPath)) }
