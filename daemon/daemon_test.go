package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/faultproxy"
	"github.com/cronswap/cronswap/internal/history"
	"github.com/cronswap/cronswap/internal/metrics"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/internal/testmongo"
	"github.com/cronswap/cronswap/jobs"
	"github.com/cronswap/cronswap/schedule"
	"github.com/cronswap/cronswap/scheduler"
)

// logBuffer collects the daemon's JSON log records.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) records() []map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(b.buf.String(), "\n") {
		var r map[string]any
		if json.Unmarshal([]byte(line), &r) == nil {
			out = append(out, r)
		}
	}
	return out
}

func (b *logBuffer) find(match func(map[string]any) bool) (map[string]any, bool) {
	for _, r := range b.records() {
		if match(r) {
			return r, true
		}
	}
	return nil, false
}

// running is a service started in-process by startDaemon, its HTTP
// surface served on a loopback test server.
type running struct {
	service *Service
	engine  *scheduler.Engine
	logs    *logBuffer
	addr    string
	// stop ends Run and returns its error (at most once; later calls
	// return nil). The test's cleanup calls it too.
	stop func() error
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// startDaemon runs a service on db with opts (its logger replaced by one
// the test reads) and the action tick (exec true), until the test ends;
// each tweak changes the service before it runs.
func startDaemon(t *testing.T, db *mongo.Database, opts Options, tweaks ...func(*Service)) *running {
	t.Helper()
	r := &running{logs: &logBuffer{}}
	opts.Logger = slog.New(slog.NewJSONHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s, err := New(db, opts)
	if err != nil {
		t.Fatalf("daemon: %v", err)
	}
	for _, tweak := range tweaks {
		tweak(s) // before Run: the internals tests scale down
	}
	if err := s.Handle("tick", jobs.HandlerFunc(func(context.Context, jobs.Run) error { return nil }), jobs.Policy{}); err != nil {
		t.Fatal(err)
	}
	r.service, r.engine = s, s.engine
	srv := httptest.NewServer(s.HTTPHandler())
	r.addr = srv.Listener.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var stopOnce sync.Once
	r.stop = func() (err error) {
		stopOnce.Do(func() {
			cancel()
			err = <-done
		})
		return err
	}
	t.Cleanup(func() {
		if err := r.stop(); err != nil {
			t.Errorf("daemon: %v", err)
		}
		srv.Close()
		if t.Failed() {
			t.Logf("daemon log:\n%s", r.logs.buf.String())
		}
	})
	waitFor(t, 30*time.Second, "daemon started", func() bool {
		_, ok := r.logs.find(func(l map[string]any) bool { return l["msg"] == "cronswap started" })
		return ok
	})
	return r
}

func (r *running) get(t *testing.T, path string) (int, []byte) {
	t.Helper()
	resp, err := http.Get("http://" + r.addr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}

// metric reads one counter or gauge from /metrics.
func (r *running) metric(t *testing.T, name string) float64 {
	t.Helper()
	code, body := r.get(t, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics answered %d", code)
	}
	samples, err := metrics.Flatten(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	v, ok := samples[name]
	if !ok {
		t.Fatalf("/metrics has no %s", name)
	}
	return v
}

func testOptions() Options {
	return Options{
		InstanceID:    "daemon-test",
		BackoffMin:    50 * time.Millisecond,
		BackoffMax:    time.Second,
		ShutdownGrace: 5 * time.Second,
	}
}

func insertSchedules(t *testing.T, db *mongo.Database, ids ...string) {
	t.Helper()
	for _, id := range ids {
		_, err := db.Collection(schedule.CollectionName).InsertOne(context.Background(),
			bson.D{{Key: "_id", Value: id}, {Key: "cron_expr", Value: "@hourly"}, {Key: "job", Value: "tick"}})
		if err != nil {
			t.Fatal(err)
		}
	}
}

func armed(e *scheduler.Engine, id string) bool {
	st, ok := e.Get(id)
	return ok && st.Armed
}

// A job dropped from the engine behind the watcher's back (as if its change
// event had been missed) is restored by the next periodic resync, which logs
// the job id and counts one drift.
func TestResyncRestoresMissedEventAndCountsDrift(t *testing.T) {
	db := testmongo.NewDatabase(t, testmongo.Client(t))
	insertSchedules(t, db, "a", "b", "c")
	opts := testOptions()
	opts.ResyncInterval = 300 * time.Millisecond
	d := startDaemon(t, db, opts)
	waitFor(t, 30*time.Second, "ready and all armed", func() bool {
		code, _ := d.get(t, "/readyz")
		return code == http.StatusOK && armed(d.engine, "a") && armed(d.engine, "b") && armed(d.engine, "c")
	})
	// Resyncs of an exact engine find nothing.
	waitFor(t, 30*time.Second, "a resync", func() bool {
		_, ok := d.logs.find(func(l map[string]any) bool { return l["msg"] == "full reload" && l["reason"] == "resync" })
		return ok
	})
	if got := d.metric(t, "cronswap_resync_drift_total"); got != 0 {
		t.Fatalf("drift before tampering = %v, want 0", got)
	}
	// ... and decode none of the documents: the engine has them as they are.
	waitFor(t, 30*time.Second, "a resync that decoded nothing", func() bool {
		_, ok := d.logs.find(func(l map[string]any) bool {
			return l["msg"] == "schedules replaced" && l["documents"] == 3.0 && l["decoded"] == 0.0
		})
		return ok
	})

	if !d.engine.Remove("b") {
		t.Fatal("engine did not have b")
	}
	waitFor(t, 30*time.Second, "b restored by a resync", func() bool { return armed(d.engine, "b") })
	waitFor(t, 10*time.Second, "drift metric 1", func() bool { return d.metric(t, "cronswap_resync_drift_total") == 1 })
	l, ok := d.logs.find(func(l map[string]any) bool { return strings.HasPrefix(l["msg"].(string), "resync found drift") })
	if !ok {
		t.Fatal("no log record of the drift")
	}
	if l["level"] != "WARN" || !slices.Equal(anyStrings(l["job_ids"]), []string{"b"}) {
		t.Fatalf("drift log record %v: want a warning naming job b", l)
	}
	// The resync decoded b, the job the engine did not have, and only it.
	if _, ok := d.logs.find(func(l map[string]any) bool {
		return l["msg"] == "schedules replaced" && l["changed"] == 1.0 && l["decoded"] == 1.0
	}); !ok {
		t.Fatal("no full reload logged that it decoded b alone")
	}
	_, body := d.get(t, "/api/schedules/b")
	var one struct {
		Armed bool `json:"armed"`
	}
	if err := json.Unmarshal(body, &one); err != nil || !one.Armed {
		t.Fatalf("/api/schedules/b = %s (%v)", body, err)
	}
	// Later resyncs find nothing more.
	n := len(d.logs.records())
	waitFor(t, 30*time.Second, "another resync", func() bool {
		for _, l := range d.logs.records()[n:] {
			if l["msg"] == "full reload" && l["reason"] == "resync" {
				return true
			}
		}
		return false
	})
	if got := d.metric(t, "cronswap_resync_drift_total"); got != 1 {
		t.Fatalf("drift after restoring = %v, want still 1", got)
	}
}

func anyStrings(v any) []string {
	list, _ := v.([]any)
	out := make([]string, 0, len(list))
	for _, x := range list {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}

// The daemon serves a job's timeline from its database on its listener:
// a run inserted into job_runs shows up at /api/schedules/{id}/timeline,
// an unknown job is 404 and a bad range 400.
func TestTimelineServed(t *testing.T) {
	client := testmongo.Client(t)
	db := testmongo.NewDatabase(t, client)
	insertSchedules(t, db, "hourly")
	slot := time.Now().UTC().Add(-time.Hour).Truncate(time.Hour)
	if _, err := db.Collection(record.RunsCollection).InsertOne(context.Background(), bson.D{
		{Key: "_id", Value: "r1"}, {Key: "job_id", Value: "hourly"}, {Key: "scheduled_at", Value: slot},
		{Key: "status", Value: record.StatusSucceeded}, {Key: "instance", Value: "elsewhere"}, {Key: "fence", Value: int64(3)},
	}); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, db, testOptions())
	code, body := d.get(t, "/api/schedules/hourly/timeline?from=-3h")
	if code != http.StatusOK {
		t.Fatalf("timeline = %d %s", code, body)
	}
	var tl struct {
		JobID   string `json:"job_id"`
		Entries []struct {
			Kind  string    `json:"kind"`
			At    time.Time `json:"at"`
			Fence int64     `json:"fence"`
		} `json:"entries"`
	}
	if err := json.Unmarshal(body, &tl); err != nil {
		t.Fatalf("%v\n%s", err, body)
	}
	found := false
	for _, e := range tl.Entries {
		if e.Kind == "run" && e.At.Equal(slot) && e.Fence == 3 {
			found = true
		}
	}
	if tl.JobID != "hourly" || !found {
		t.Errorf("timeline lacks the run at %s: %s", slot, body)
	}
	if code, body := d.get(t, "/api/schedules/nobody/timeline"); code != http.StatusNotFound {
		t.Errorf("timeline of an unknown job = %d %s", code, body)
	}
	if code, body := d.get(t, "/api/schedules/hourly/timeline?to=later"); code != http.StatusBadRequest {
		t.Errorf("timeline with a bad to = %d %s", code, body)
	}
}

// "stopped" is the daemon's last log line, after the edit history's last
// writes: here a first sighting the database keeps refusing, which
// shutdown waits for (historyFlushTimeout) and then gives up on, saying
// so. An operator and a supervisor read "stopped" as the end.
func TestStoppedIsLoggedAfterTheHistorysLastWrites(t *testing.T) {
	proxy, client := testmongo.ProxiedClient(t)
	db := testmongo.NewDatabase(t, client)
	insertSchedules(t, db, "a")
	proxy.FailAlways(faultproxy.All(faultproxy.CommandName("insert", "update", "delete"), faultproxy.Collection(history.CollectionName)),
		faultproxy.ErrorReply{Code: 1, CodeName: "InternalError", Errmsg: "history write refused by the test"})
	d := startDaemon(t, db, testOptions())
	waitFor(t, 30*time.Second, "a first sighting's write refused", func() bool {
		_, ok := d.logs.find(func(l map[string]any) bool { return l["msg"] == "writing first sightings failed; retrying" })
		return ok
	})
	if err := d.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	recs := d.logs.records()
	gaveUp := slices.IndexFunc(recs, func(l map[string]any) bool { return l["msg"] == "first sightings not written before shutdown" })
	if gaveUp < 0 {
		t.Fatal("no log line saying the first sightings were not written")
	}
	if last := recs[len(recs)-1]; last["msg"] != "stopped" {
		t.Fatalf("last log line %v, want stopped (the history's gave-up line is at %d of %d)", last, gaveUp, len(recs))
	}
}

// Resyncs every 50 ms while jobs are edited in quick succession in every
// way an operator edits them (a field set or removed, the document
// replaced, deleted and inserted again): once the edits stop, the engine
// holds exactly the collection, and keeps it through the resyncs after,
// which list as they are the documents the edit history's copy holds
// unchanged (a job so listed stays, its schedule the one the events
// gave it).
func TestResyncsAmidRapidEditsLeaveTheEngineEqualToTheCollection(t *testing.T) {
	db := testmongo.NewDatabase(t, testmongo.Client(t))
	coll := db.Collection(schedule.CollectionName)
	ctx := context.Background()
	const jobCount = 12
	id := func(i int) string { return fmt.Sprintf("j%02d", i) }
	doc := func(i, minute int) bson.D {
		return bson.D{{Key: "_id", Value: id(i)}, {Key: "cron_expr", Value: fmt.Sprintf("%d * * * *", minute)},
			{Key: "job", Value: "tick"}, {Key: "args", Value: bson.D{{Key: "m", Value: minute}}}}
	}
	for i := range jobCount {
		if _, err := coll.InsertOne(ctx, doc(i, i)); err != nil {
			t.Fatal(err)
		}
	}
	opts := testOptions()
	opts.ResyncInterval = 50 * time.Millisecond
	d := startDaemon(t, db, opts)
	waitFor(t, 30*time.Second, "ready", func() bool {
		code, _ := d.get(t, "/readyz")
		return code == http.StatusOK
	})
	resyncs := func() int {
		n := 0
		for _, l := range d.logs.records() {
			if l["msg"] == "full reload" && l["reason"] == "resync" {
				n++
			}
		}
		return n
	}
	rnd := rand.New(rand.NewPCG(7, 11))
	for n := range 400 {
		i, minute := rnd.IntN(jobCount), rnd.IntN(60)
		filter := bson.D{{Key: "_id", Value: id(i)}}
		var err error
		switch rnd.IntN(5) {
		case 0, 1:
			_, err = coll.UpdateOne(ctx, filter, bson.D{{Key: "$set", Value: bson.D{{Key: "cron_expr", Value: fmt.Sprintf("%d * * * *", minute)}}}})
		case 2:
			_, err = coll.UpdateOne(ctx, filter, bson.D{{Key: "$set", Value: bson.D{{Key: "args.m", Value: minute}}}, {Key: "$unset", Value: bson.D{{Key: "timezone", Value: ""}}}})
		case 3:
			_, err = coll.ReplaceOne(ctx, filter, doc(i, minute), options.Replace().SetUpsert(true))
		case 4:
			if _, err = coll.DeleteOne(ctx, filter); err == nil && n%2 == 0 {
				_, err = coll.InsertOne(ctx, doc(i, minute))
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		if n%40 == 0 {
			// A resync between these edits and the next ones.
			k := resyncs()
			waitFor(t, 30*time.Second, "a resync", func() bool { return resyncs() > k })
		}
	}
	// The collection as the edits left it, as the engine should hold it.
	want := map[string]string{}
	cur, err := coll.Find(ctx, bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	for cur.Next(ctx) {
		s, err := schedule.DecodeFields(cur.Current)
		if err != nil {
			t.Fatal(err)
		}
		want[s.ID] = s.CronExpr + " " + s.Args
	}
	if err := cur.Close(ctx); err != nil {
		t.Fatal(err)
	}
	engineHolds := func() map[string]string {
		got := map[string]string{}
		for i := range jobCount {
			if st, ok := d.engine.Get(id(i)); ok {
				got[id(i)] = st.CronExpr + " " + st.Args
			}
		}
		return got
	}
	waitFor(t, 30*time.Second, "the engine equal to the collection", func() bool { return maps.Equal(engineHolds(), want) })
	after := resyncs()
	waitFor(t, 30*time.Second, "three more resyncs", func() bool { return resyncs() >= after+3 })
	if got := engineHolds(); !maps.Equal(got, want) {
		t.Fatalf("after the resyncs the engine holds %v, want %v", got, want)
	}
}

// A resync whose read the server fails (a flaky network, a failing
// member) changes nothing and loses no job; the full read after it decodes
// every document again, since the edit history's copy may then hold
// documents the engine never got, and the resyncs after that decode none.
func TestAResyncThatFailsMakesTheNextDecodeEverything(t *testing.T) {
	proxy, client := testmongo.ProxiedClient(t)
	db := testmongo.NewDatabase(t, client)
	insertSchedules(t, db, "a", "b", "c")
	opts := testOptions()
	opts.ResyncInterval = 200 * time.Millisecond
	d := startDaemon(t, db, opts)
	allArmed := func() bool { return armed(d.engine, "a") && armed(d.engine, "b") && armed(d.engine, "c") }
	replaced := func(decoded float64) func(l map[string]any) bool {
		return func(l map[string]any) bool {
			return l["msg"] == "schedules replaced" && l["documents"] == 3.0 && l["decoded"] == decoded
		}
	}
	waitFor(t, 30*time.Second, "a resync that decoded nothing", func() bool {
		_, ok := d.logs.find(replaced(0))
		return ok && allArmed()
	})
	proxy.FailNext(faultproxy.All(faultproxy.CommandName("find"), faultproxy.Collection(schedule.CollectionName)),
		faultproxy.ErrorReply{Code: 1, CodeName: "InternalError", Errmsg: "read failed by the test"})
	waitFor(t, 30*time.Second, "the failed resync logged", func() bool {
		_, ok := d.logs.find(func(l map[string]any) bool { return l["msg"] == "resync failed" })
		return ok
	})
	failedAt := len(d.logs.records())
	after := func(match func(map[string]any) bool) int {
		recs := d.logs.records()
		for i := failedAt; i < len(recs); i++ {
			if match(recs[i]) {
				return i
			}
		}
		return -1
	}
	waitFor(t, 30*time.Second, "a resync after the failure that decoded everything, then one that decoded nothing", func() bool {
		all := after(replaced(3))
		return all >= 0 && after(replaced(0)) > all
	})
	if !allArmed() {
		t.Fatal("a job lost after the failed resync")
	}
}
