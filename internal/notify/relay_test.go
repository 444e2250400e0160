package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/testmongo"
)

func TestMain(m *testing.M) { testmongo.Main(m, nil) }

// sink is a loopback webhook that records every request by notification
// id; failing, while set, makes it answer 503.
type sink struct {
	srv     *httptest.Server
	mu      sync.Mutex
	byID    map[string]int
	bodies  map[string]Payload
	headers map[string]http.Header
	failing atomic.Bool
	refused atomic.Int64
}

func newSink(t *testing.T) *sink {
	s := &sink{byID: map[string]int{}, bodies: map[string]Payload{}, headers: map[string]http.Header{}}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.failing.Load() {
			s.refused.Add(1)
			http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
			return
		}
		body, _ := io.ReadAll(r.Body)
		var p Payload
		if err := json.Unmarshal(body, &p); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		id := r.Header.Get(HeaderID)
		s.mu.Lock()
		s.byID[id]++
		s.bodies[id] = p
		s.headers[id] = r.Header.Clone()
		s.mu.Unlock()
	}))
	t.Cleanup(s.srv.Close)
	return s
}

// delivered returns a copy of the delivery counts by id.
func (s *sink) delivered() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.byID))
	for k, v := range s.byID {
		out[k] = v
	}
	return out
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fixture is a database with an outbox collection "runs" and the
// notifications collection.
type fixture struct {
	db    *mongo.Database
	runs  *mongo.Collection
	notes *mongo.Collection
}

func newFixture(t *testing.T) fixture {
	db := testmongo.NewDatabase(t, testmongo.Client(t))
	f := fixture{db: db, runs: db.Collection("runs"), notes: Collection(db)}
	if err := EnsureIndexes(context.Background(), f.notes, f.runs); err != nil {
		t.Fatal(err)
	}
	return f
}

// failRun inserts a failed run record carrying its notice, as the fire
// path's end does in one write.
func (f fixture) failRun(t *testing.T, i int, at time.Time) string {
	t.Helper()
	id := fmt.Sprintf("job%d@2026-01-01T00:00:%02dZ", i%3, i)
	doc := bson.D{{Key: "_id", Value: id}, {Key: "job_id", Value: fmt.Sprintf("job%d", i%3)},
		{Key: "scheduled_at", Value: time.Date(2026, 1, 1, 0, 0, i, 0, time.UTC)},
		{Key: "status", Value: "failed"}, {Key: "error", Value: "exit status 3"}, {Key: "instance", Value: "a"},
		Outbox(KindFailed, at)}
	if _, err := f.runs.InsertOne(context.Background(), doc); err != nil {
		t.Fatal(err)
	}
	return id
}

// outbox is a collection of the tests as a relay's Source (the daemon's
// are the run-record store's: runstore.Store.NoticeSources).
type outbox struct{ coll *mongo.Collection }

func (o outbox) Name() string { return o.coll.Name() }

func (o outbox) Notices(ctx context.Context, limit int64) ([]bson.Raw, error) {
	cur, err := o.coll.Find(ctx, PendingNotices(), options.Find().SetLimit(limit))
	if err != nil {
		return nil, fmt.Errorf("read notices in %s: %w", o.coll.Name(), err)
	}
	var raws []bson.Raw
	return raws, cur.All(ctx, &raws)
}

func (o outbox) ClearNotices(ctx context.Context, clears []Clear) error {
	var models []mongo.WriteModel
	for _, c := range clears {
		filter, update := c.Update()
		models = append(models, mongo.NewUpdateOneModel().SetFilter(filter).SetUpdate(update))
	}
	_, err := o.coll.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
	return err
}

func (f fixture) relay(instance string, s *sink, mod func(*Options)) *Relay {
	o := Options{
		Notifications: f.notes, Sources: []Source{outbox{f.runs}}, Instance: instance,
		Route: func(string) Route {
			return Route{Webhooks: []Webhook{{Name: "ops", URL: s.srv.URL + "/hook", Headers: map[string]string{"X-Token": "${NOTIFY_TEST_TOKEN}"}}}}
		},
		Settings: Settings{Backoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, Poll: 100 * time.Millisecond, Timeout: 2 * time.Second},
		LookupEnv: func(k string) (string, bool) {
			return map[string]string{"NOTIFY_TEST_TOKEN": "s3cret"}[k], k == "NOTIFY_TEST_TOKEN"
		},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if mod != nil {
		mod(&o)
	}
	return New(o)
}

func start(t *testing.T, r *Relay) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

func (f fixture) byStatus(t *testing.T, status string) []Doc {
	t.Helper()
	docs, err := List(context.Background(), f.notes, ListFilter{Status: status, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return docs
}

// Three relays on one database: every notice delivered exactly once,
// with its id, body and the configured header (expanded from the
// environment), and the outbox emptied.
func TestRelayDeliversOnceAcrossRelays(t *testing.T) {
	f := newFixture(t)
	s := newSink(t)
	const n = 30
	at := time.Now()
	ids := map[string]bool{}
	for i := range n {
		ids[f.failRun(t, i, at)] = true
	}
	for _, inst := range []string{"a", "b", "c"} {
		start(t, f.relay(inst, s, nil))
	}
	waitFor(t, 20*time.Second, "every notification delivered", func() bool { return len(f.byStatus(t, StatusDelivered)) == n })
	got := s.delivered()
	if len(got) != n {
		t.Fatalf("sink saw %d ids, want %d", len(got), n)
	}
	for id, c := range got {
		if c != 1 {
			t.Errorf("notification %s delivered %d times", id, c)
		}
		s.mu.Lock()
		p, h := s.bodies[id], s.headers[id]
		s.mu.Unlock()
		if p.NotificationID != id || p.Kind != KindFailed || !ids[p.RunID] || p.Error != "exit status 3" || p.Sink != "ops" {
			t.Errorf("payload of %s: %+v", id, p)
		}
		if h.Get("X-Token") != "s3cret" {
			t.Errorf("header X-Token of %s = %q, want the environment's value", id, h.Get("X-Token"))
		}
	}
	left, err := f.runs.CountDocuments(context.Background(), bson.D{{Key: OutboxField, Value: bson.D{{Key: "$exists", Value: true}}}})
	if err != nil || left != 0 {
		t.Fatalf("notices left in the outbox: %d (%v)", left, err)
	}
	for _, d := range f.byStatus(t, StatusDelivered) {
		if d.Attempts != 1 || d.ExpireAt.IsZero() || d.DeliveredAt.IsZero() {
			t.Errorf("delivered notification %s: attempts %d, expire_at %v, delivered_at %v", d.ID, d.Attempts, d.ExpireAt, d.DeliveredAt)
		}
	}
}

// A sink that is down: deliveries are retried with backoff, the failures
// recorded (last_error, the hook) until the sink is back; then each
// notification is delivered once.
func TestRelayRetriesAfterSinkFailures(t *testing.T) {
	f := newFixture(t)
	s := newSink(t)
	s.failing.Store(true)
	var failed atomic.Int64
	r := f.relay("a", s, func(o *Options) {
		o.Hooks.Failed = func(sink string, gaveUp bool) {
			if sink == "ops" && !gaveUp {
				failed.Add(1)
			}
		}
	})
	start(t, r)
	f.failRun(t, 1, time.Now())
	f.failRun(t, 2, time.Now())
	r.Wake()
	waitFor(t, 10*time.Second, "several refused deliveries", func() bool { return s.refused.Load() >= 6 })
	pend := f.byStatus(t, StatusPending)
	if len(pend) != 2 {
		t.Fatalf("pending notifications: %d, want 2", len(pend))
	}
	for _, d := range pend {
		if !strings.Contains(d.LastError, "HTTP 503") {
			t.Errorf("last_error of %s = %q, want the sink's answer", d.ID, d.LastError)
		}
	}
	s.failing.Store(false)
	waitFor(t, 10*time.Second, "delivered after the sink came back", func() bool { return len(f.byStatus(t, StatusDelivered)) == 2 })
	for id, c := range s.delivered() {
		if c != 1 {
			t.Errorf("notification %s delivered %d times", id, c)
		}
	}
	if failed.Load() < 6 {
		t.Errorf("Failed hook called %d times, want at least 6", failed.Load())
	}
	for _, d := range f.byStatus(t, StatusDelivered) {
		if d.Attempts < 3 {
			t.Errorf("%s delivered after %d attempts, want several", d.ID, d.Attempts)
		}
	}
}

// The backoff doubles from Backoff up to MaxBackoff.
func TestBackoff(t *testing.T) {
	r := New(Options{Settings: Settings{Backoff: time.Second, MaxBackoff: 10 * time.Second}})
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}
	for i, w := range want {
		if got := r.backoff(i + 1); got != w {
			t.Errorf("backoff(%d) = %s, want %s", i+1, got, w)
		}
	}
}

// A relay that dies after claiming (before recording the delivery), and
// notices written while no relay runs: a relay started later moves the
// notices and, once the dead claim's lease passed, delivers its
// notification too.
func TestRelaySurvivesRestart(t *testing.T) {
	f := newFixture(t)
	s := newSink(t)
	// The lease outlasts any delivery of the test (timeout), so only the
	// dead relay's claim is taken over.
	short := func(o *Options) { o.Lease = time.Second; o.Settings.Timeout = 500 * time.Millisecond }
	dead := f.relay("dead", s, short)
	f.failRun(t, 1, time.Now())
	if err := dead.move(context.Background(), outbox{f.runs}); err != nil {
		t.Fatal(err)
	}
	c, ok, err := dead.claim(context.Background())
	if err != nil || !ok {
		t.Fatalf("claim: %v %v", ok, err)
	}
	// The dead relay's process is gone; a notice is written meanwhile.
	f.failRun(t, 2, time.Now())
	start(t, f.relay("new", s, short))
	waitFor(t, 10*time.Second, "both delivered by the new relay", func() bool { return len(f.byStatus(t, StatusDelivered)) == 2 })
	got := s.delivered()
	if got[c.id] != 1 || len(got) != 2 {
		t.Fatalf("deliveries %v, want the dead relay's claim %s once and one more", got, c.id)
	}
	for _, d := range f.byStatus(t, StatusDelivered) {
		if d.Holder != "new" {
			t.Errorf("%s delivered by %q, want the new relay", d.ID, d.Holder)
		}
	}
}

// Moving a notice twice (two relays, a relay that died between the
// insert and the clearing) writes one notification.
func TestMoveIsIdempotent(t *testing.T) {
	f := newFixture(t)
	s := newSink(t)
	r := f.relay("a", s, nil)
	id := f.failRun(t, 1, time.Now())
	var raw bson.Raw
	if err := f.runs.FindOne(context.Background(), bson.D{{Key: "_id", Value: id}}).Decode(&raw); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := r.moveDocs(context.Background(), outbox{f.runs}, []bson.Raw{raw}); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := f.notes.CountDocuments(context.Background(), bson.D{}); n != 1 {
		t.Fatalf("%d notifications, want 1", n)
	}
}

// A sink that never accepts: after MaxAttempts the notification is failed,
// listed with its error, and the hook says it was given up.
func TestRelayGivesUpVisibly(t *testing.T) {
	f := newFixture(t)
	s := newSink(t)
	s.failing.Store(true)
	var gaveUp atomic.Int64
	start(t, f.relay("a", s, func(o *Options) {
		o.Settings.MaxAttempts = 3
		o.Hooks.Failed = func(_ string, g bool) {
			if g {
				gaveUp.Add(1)
			}
		}
	}))
	f.failRun(t, 1, time.Now())
	waitFor(t, 10*time.Second, "the notification given up", func() bool { return len(f.byStatus(t, StatusFailed)) == 1 })
	d := f.byStatus(t, StatusFailed)[0]
	if d.Attempts != 3 || !strings.Contains(d.LastError, "HTTP 503") || d.JobID != "job1" {
		t.Fatalf("failed notification: %+v", d)
	}
	// The status is written before the Failed hook runs: wait for the hook.
	waitFor(t, 10*time.Second, "the Failed hook told it was given up", func() bool { return gaveUp.Load() >= 1 })
	if s.refused.Load() != 3 || gaveUp.Load() != 1 {
		t.Fatalf("refused %d requests, gave up %d times; want 3 and 1", s.refused.Load(), gaveUp.Load())
	}
}

// Bad documents: a notice of the wrong shape is removed, its error
// written back on the document and nothing sent; a notification inserted
// by hand without its fields ends failed with the reason; a notification
// whose sink is no longer configured too. The relay goes on with the good
// ones.
func TestBadDocuments(t *testing.T) {
	f := newFixture(t)
	s := newSink(t)
	ctx := context.Background()
	if _, err := f.runs.InsertOne(ctx, bson.D{{Key: "_id", Value: "bad1"}, {Key: "job_id", Value: "j"},
		{Key: OutboxField, Value: bson.D{{Key: "kind", Value: 7}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.notes.InsertOne(ctx, bson.D{{Key: "_id", Value: "by-hand"}, {Key: "status", Value: StatusPending},
		{Key: "next_attempt_at", Value: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.notes.InsertOne(ctx, Doc{ID: "gone-sink", JobID: "j", Sink: "retired", Payload: "{}",
		Status: StatusPending, NextAttemptAt: time.Now(), CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	good := f.failRun(t, 1, time.Now())
	start(t, f.relay("a", s, nil))
	waitFor(t, 10*time.Second, "the good one delivered, the bad ones failed", func() bool {
		return len(f.byStatus(t, StatusDelivered)) == 1 && len(f.byStatus(t, StatusFailed)) == 2
	})
	var bad bson.M
	if err := f.runs.FindOne(ctx, bson.D{{Key: "_id", Value: "bad1"}}).Decode(&bad); err != nil {
		t.Fatal(err)
	}
	if _, still := bad[OutboxField]; still || !strings.Contains(fmt.Sprint(bad[NoticeErrorField]), "kind") {
		t.Fatalf("bad notice document after the relay: %v", bad)
	}
	for _, d := range f.byStatus(t, StatusFailed) {
		want := map[string]string{"by-hand": "bad notification", "gone-sink": `sink "retired" is not configured`}[d.ID]
		if want == "" || !strings.Contains(d.LastError, want) {
			t.Errorf("failed %s: last_error %q, want %q", d.ID, d.LastError, want)
		}
	}
	if got := s.delivered(); len(got) != 1 {
		t.Fatalf("sink saw %v, want only the notice of %s", got, good)
	}
}

// A route sends only the kinds it lists, and nothing without webhooks: a
// notice it does not send is cleared from the outbox without a
// notification.
func TestRouteFiltersKinds(t *testing.T) {
	f := newFixture(t)
	s := newSink(t)
	r := f.relay("a", s, func(o *Options) {
		o.Route = func(job string) Route {
			if job == "job2" {
				return Route{}
			}
			return Route{Webhooks: []Webhook{{Name: "ops", URL: s.srv.URL}}, On: []string{KindMissed}}
		}
	})
	f.failRun(t, 1, time.Now())
	f.failRun(t, 2, time.Now())
	ctx := context.Background()
	if _, err := f.runs.InsertOne(ctx, bson.D{{Key: "_id", Value: "missed/job1/x"}, {Key: "job_id", Value: "job1"},
		{Key: "status", Value: "missed"}, {Key: "count", Value: int64(4)}, Outbox(KindMissed, time.Now())}); err != nil {
		t.Fatal(err)
	}
	// A notice older than max_age (written while no relay ran) is cleared
	// and not sent.
	if _, err := f.runs.InsertOne(ctx, bson.D{{Key: "_id", Value: "missed/job1/old"}, {Key: "job_id", Value: "job1"},
		{Key: "status", Value: "missed"}, Outbox(KindMissed, time.Now().Add(-25*time.Hour))}); err != nil {
		t.Fatal(err)
	}
	if err := r.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	docs := f.byStatus(t, StatusDelivered)
	if len(docs) != 1 || docs[0].Kind != KindMissed {
		t.Fatalf("delivered %+v, want the missed notice only", docs)
	}
	var p Payload
	if err := json.Unmarshal([]byte(docs[0].Payload), &p); err != nil || p.Count != 4 {
		t.Fatalf("payload %s: count %d (%v)", docs[0].Payload, p.Count, err)
	}
	if n, _ := f.runs.CountDocuments(ctx, bson.D{{Key: OutboxField, Value: bson.D{{Key: "$exists", Value: true}}}}); n != 0 {
		t.Fatalf("%d notices left in the outbox", n)
	}
}

// Moving is batched: 250 notices cost 3 finds, 3 insertMany and 3
// bulkWrites on the outbox, not two writes each; the next pass with
// nothing to do costs one find and one findOneAndUpdate.
func TestMoveIsBatched(t *testing.T) {
	var mu sync.Mutex
	counts := map[string]int{}
	mon := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		mu.Lock()
		counts[e.CommandName]++
		mu.Unlock()
	}}
	client, err := mongo.Connect(options.Client().ApplyURI(testmongo.Shared(t).URI).SetMonitor(mon))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	db := testmongo.NewDatabase(t, client)
	f := fixture{db: db, runs: db.Collection("runs"), notes: Collection(db)}
	s := newSink(t)
	r := f.relay("a", s, nil)
	var docs []any
	at := time.Now()
	for i := range 250 {
		docs = append(docs, bson.D{{Key: "_id", Value: fmt.Sprintf("r%03d", i)}, {Key: "job_id", Value: "j"}, {Key: "status", Value: "failed"},
			Outbox(KindFailed, at)})
	}
	if _, err := f.runs.InsertMany(context.Background(), docs); err != nil {
		t.Fatal(err)
	}
	take := func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		out := counts
		counts = map[string]int{}
		return out
	}
	take()
	if err := r.move(context.Background(), outbox{f.runs}); err != nil {
		t.Fatal(err)
	}
	if got := take(); got["find"] != 3 || got["insert"] != 3 || got["update"] != 3 || len(got) != 3 {
		t.Fatalf("commands moving 250 notices: %v, want 3 find, 3 insert, 3 update", got)
	}
	if n, _ := f.notes.CountDocuments(context.Background(), bson.D{}); n != 250 {
		t.Fatalf("%d notifications, want 250", n)
	}
	if _, err := f.notes.DeleteMany(context.Background(), bson.D{}); err != nil {
		t.Fatal(err)
	}
	take()
	if err := r.Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := take(); got["find"] != 1 || got["findAndModify"] != 1 || len(got) != 2 {
		t.Fatalf("commands of an idle pass: %v, want 1 find and 1 findAndModify", got)
	}
}

// A pause notice written by PauseNotice on a document keyed by the job id
// in another outbox collection is delivered with kind paused, the job id
// and the note.
func TestPauseNoticeDelivered(t *testing.T) {
	f := newFixture(t)
	s := newSink(t)
	pauses := f.db.Collection("pauses")
	ctx := context.Background()
	at := time.Now()
	if _, err := pauses.UpdateOne(ctx, bson.D{{Key: "_id", Value: "billing"}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "paused", Value: true}, {Key: "run_id", Value: "billing@2026-01-01T00:00:00Z"},
			PauseNotice(at, "paused after 3 consecutive failed slots")}}}, options.UpdateOne().SetUpsert(true)); err != nil {
		t.Fatal(err)
	}
	r := f.relay("a", s, func(o *Options) { o.Sources = append(o.Sources, outbox{pauses}) })
	if err := r.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	docs := f.byStatus(t, StatusDelivered)
	if len(docs) != 1 {
		t.Fatalf("delivered %+v, want the pause notice", docs)
	}
	s.mu.Lock()
	p := s.bodies[docs[0].ID]
	s.mu.Unlock()
	if p.Kind != KindPaused || p.JobID != "billing" || p.Note != "paused after 3 consecutive failed slots" || p.RunID != "billing@2026-01-01T00:00:00Z" ||
		!p.At.Equal(at.UTC().Truncate(time.Millisecond)) {
		t.Fatalf("pause payload %+v", p)
	}
}

// A slow sink holds up at most the relay's deliverers: deliveries overlap,
// never more than deliverers at once, and each is made once.
func TestDeliveriesOverlapBounded(t *testing.T) {
	f := newFixture(t)
	var inflight, most atomic.Int64
	var total atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inflight.Add(1)
		defer inflight.Add(-1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		total.Add(1)
		time.Sleep(200 * time.Millisecond)
	}))
	t.Cleanup(srv.Close)
	s := &sink{srv: srv}
	for i := range 12 {
		f.failRun(t, i, time.Now())
	}
	if err := f.relay("a", s, nil).Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(f.byStatus(t, StatusDelivered)); n != 12 || total.Load() != 12 {
		t.Fatalf("%d delivered, %d requests; want 12 and 12", n, total.Load())
	}
	if m := most.Load(); m < 2 || m > deliverers {
		t.Fatalf("at most %d deliveries at once, want 2..%d", m, deliverers)
	}
}
