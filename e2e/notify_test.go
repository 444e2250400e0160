package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/notify"
	"github.com/cronswap/cronswap/internal/record"
)

// hookSink is a loopback webhook: while down it answers 503; up, it
// records each delivery by notification id.
type hookSink struct {
	srv     *httptest.Server
	down    atomic.Bool
	refused atomic.Int64
	mu      sync.Mutex
	byID    map[string]int
	runOf   map[string]string // notification id -> run_id of its body
	badAuth int
}

func newHookSink(t *testing.T, token string) *hookSink {
	s := &hookSink{byID: map[string]int{}, runOf: map[string]string{}}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.down.Load() {
			s.refused.Add(1)
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		body, _ := io.ReadAll(r.Body)
		var p notify.Payload
		if err := json.Unmarshal(body, &p); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if r.Header.Get("X-Token") != token {
			s.badAuth++
		}
		id := r.Header.Get(notify.HeaderID)
		s.byID[id]++
		s.runOf[id] = p.RunID
	}))
	t.Cleanup(s.srv.Close)
	return s
}

// A failing job on three replicas with a webhook that is down for 30 s,
// every replica restarted once meanwhile (two with SIGTERM, one with
// SIGKILL): every failed, abandoned or missed record is notified exactly
// once per notification id after the sink is back, and the failures were
// visible meanwhile (notifications list, the metric, the log).
func TestNotificationsDeliveredOnceAcrossRestarts(t *testing.T) {
	uri, db := setup(t)
	const token = "e2e-hook-token"
	t.Setenv("CRONSWAP_E2E_HOOK_TOKEN", token)
	sink := newHookSink(t, token)
	sink.down.Store(true)
	extra := fmt.Sprintf(`notify:
  webhooks:
    - name: hook
      url: %q
      headers: {X-Token: "${CRONSWAP_E2E_HOOK_TOKEN}"}
  backoff: 200ms
  max_backoff: 3s
  poll: 2s
`, sink.srv.URL+"/hook")
	jobsYAML := `
  failing:
    exec: ["sh", "-c", "echo boom >&2; exit 3"]
`
	insert(t, db, sched("failing", "@every 2s"))
	ds := startReplicas(t, uri, db.Name(), 3, extra, jobsYAML)
	cfgs := make([]string, len(ds))
	for i, d := range ds {
		cfgs[i] = d.cfgPath
	}
	downAt := time.Now()
	failedRuns := func() int64 {
		n, err := db.Collection(record.RunsCollection).CountDocuments(testCtx(t), bson.D{{Key: "status", Value: record.StatusFailed}})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	waitFor(t, 20*time.Second, "failed runs", func() bool { return failedRuns() >= 2 })

	// Each replica restarted once while the sink is down.
	for i, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL, syscall.SIGTERM} {
		ds[i].signal(sig)
		if sig == syscall.SIGTERM {
			if err := ds[i].wait(40 * time.Second); err != nil {
				t.Fatalf("r%d after SIGTERM: %v", i+1, err)
			}
		}
		ds[i] = startDaemon(t, cfgs[i])
		ds[i].waitReady()
	}

	// The failures are visible while the sink is down.
	var failing []map[string]any
	waitFor(t, 30*time.Second, "failing notifications listed", func() bool {
		out := cliOK(t, cfgs[0], "notifications", "list", "--failing", "-o", "json")
		if err := json.Unmarshal([]byte(out), &failing); err != nil {
			t.Fatal(err)
		}
		return len(failing) > 0 && strings.Contains(fmt.Sprint(failing[0]["last_error"]), "HTTP 503")
	})
	// And through the documented mongosh one-liner.
	out := mongosh(t, uri, db.Name(), `db.notifications.find({$or: [{status: "failed"}, {status: "pending", last_error: {$exists: true}}]}).sort({at: -1}).toArray().length`)
	if n, err := strconv.Atoi(strings.TrimSpace(out)); err != nil || n == 0 {
		t.Fatalf("mongosh failing notifications: %q (%v), want some", out, err)
	}
	if time.Since(downAt) > 30*time.Second {
		t.Logf("the sink was down for %s (restarts took longer than planned)", time.Since(downAt).Round(time.Second))
	}
	for time.Since(downAt) < 30*time.Second {
		time.Sleep(100 * time.Millisecond)
	}
	failedMetric := 0.0
	for _, d := range ds {
		failedMetric += d.scrapeMetrics()["cronswap_notifications_total,result=failed,sink=hook"]
	}
	if failedMetric == 0 || sink.refused.Load() == 0 {
		t.Fatalf("failed deliveries: metric %v, refused by the sink %d; want some", failedMetric, sink.refused.Load())
	}
	logged := false
	for _, d := range ds {
		if _, ok := d.findLog(func(l logLine) bool {
			return l.str("msg") == "notification delivery failed; will retry" && l.str("notification_id") != "" && l.str("sink") == "hook"
		}); ok {
			logged = true
		}
	}
	if !logged {
		t.Error("no replica logged a failed delivery with its notification_id and sink")
	}

	sink.down.Store(false)
	// A few more failures with the sink up: delivered at once.
	upFailed := failedRuns()
	waitFor(t, 20*time.Second, "two more failed runs with the sink up", func() bool { return failedRuns() >= upFailed+2 })
	if _, err := db.Collection("schedules").UpdateOne(testCtx(t), bson.D{{Key: "_id", Value: "failing"}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "enabled", Value: false}, {Key: "updated_at", Value: time.Now()}}}}); err != nil {
		t.Fatal(err)
	}
	notified := bson.D{{Key: "status", Value: bson.D{{Key: "$in", Value: bson.A{record.StatusFailed, record.StatusAbandoned, record.StatusMissed}}}}}
	running := bson.D{{Key: "status", Value: bson.D{{Key: "$in", Value: bson.A{record.StatusRunning, record.StatusClaiming}}}}}
	waitFor(t, 30*time.Second, "no run left running", func() bool { return len(allRuns(t, db, running)) == 0 })
	var records []record.RunDoc
	// The killed replica's claims come back when their lease (a minute)
	// passes.
	waitFor(t, 150*time.Second, "every record's notification delivered", func() bool {
		records = allRuns(t, db, notified)
		seen := map[string]bool{}
		sink.mu.Lock()
		for _, run := range sink.runOf {
			seen[run] = true
		}
		sink.mu.Unlock()
		for _, r := range records {
			if !seen[r.ID] {
				return false
			}
		}
		pending, err := notify.Collection(db).CountDocuments(testCtx(t), bson.D{{Key: "status", Value: bson.D{{Key: "$ne", Value: notify.StatusDelivered}}}})
		return err == nil && pending == 0
	})
	if len(records) < 10 {
		t.Fatalf("only %d notified records; want a failure every 2 s for over 30 s", len(records))
	}
	ids := map[string]bool{}
	for _, r := range records {
		ids[r.ID] = true
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	for id, n := range sink.byID {
		if n != 1 {
			t.Errorf("notification %s delivered %d times", id, n)
		}
		if !ids[sink.runOf[id]] {
			t.Errorf("notification %s is of run %q, not a failed, abandoned or missed record", id, sink.runOf[id])
		}
	}
	if sink.badAuth != 0 {
		t.Errorf("%d deliveries without the configured header", sink.badAuth)
	}
	left, err := db.Collection(record.RunsCollection).CountDocuments(testCtx(t), bson.D{{Key: notify.OutboxField, Value: bson.D{{Key: "$exists", Value: true}}}})
	if err != nil || left != 0 {
		t.Errorf("%d notices left in the outbox (%v)", left, err)
	}
	t.Logf("%d records notified, %d refused deliveries while the sink was down", len(records), sink.refused.Load())
}
