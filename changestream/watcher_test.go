package changestream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/resumetoken"
)

// fakeFeed is an in-memory collection with a scripted change stream.
type fakeFeed struct {
	mu      sync.Mutex
	docs    map[string]bson.Raw
	stream  *fakeStream
	opens   []bson.Raw // resumeAfter of each Open (nil = current position)
	openErr []error    // errors returned by the next Opens, in order
	refuse  func(token bson.Raw) error
	reads   int
	calls   []string // "open" and "snapshot", in order
	wake    chan struct{}
	// onSnapshot, when set, runs at the start of each Snapshot (without f.mu).
	onSnapshot func()
	// failErr, when set, is yielded by Snapshot after failAfter documents.
	failAfter int
	failErr   error
}

func newFakeFeed() *fakeFeed {
	return &fakeFeed{docs: map[string]bson.Raw{}, wake: make(chan struct{}, 1)}
}

func doc(id, expr string) bson.Raw {
	b, _ := bson.Marshal(bson.D{{Key: "_id", Value: id}, {Key: "cron_expr", Value: expr}})
	return b
}

func tok(n int) bson.Raw {
	b, _ := bson.Marshal(bson.D{{Key: "_data", Value: fmt.Sprintf("%08d", n)}})
	return b
}

type item struct {
	ev  bson.Raw
	tok bson.Raw
	err error
}

type fakeStream struct {
	mu     sync.Mutex
	items  []item
	cur    bson.Raw
	tok    bson.Raw
	err    error
	closed bool
	wake   chan struct{}
}

func (s *fakeStream) TryNext(ctx context.Context) bool {
	s.mu.Lock()
	if len(s.items) > 0 {
		it := s.items[0]
		s.items = s.items[1:]
		s.mu.Unlock()
		if it.err != nil {
			s.mu.Lock()
			s.err = it.err
			s.mu.Unlock()
			return false
		}
		s.mu.Lock()
		s.cur, s.tok = it.ev, it.tok
		s.mu.Unlock()
		return true
	}
	s.mu.Unlock()
	select {
	case <-ctx.Done():
		s.mu.Lock()
		s.err = ctx.Err()
		s.mu.Unlock()
	case <-s.wake:
	case <-time.After(5 * time.Millisecond):
	}
	return false
}
func (s *fakeStream) Current() bson.Raw     { s.mu.Lock(); defer s.mu.Unlock(); return s.cur }
func (s *fakeStream) ResumeToken() bson.Raw { s.mu.Lock(); defer s.mu.Unlock(); return s.tok }
func (s *fakeStream) Err() error            { s.mu.Lock(); defer s.mu.Unlock(); return s.err }
func (s *fakeStream) ID() int64             { return 1 }
func (s *fakeStream) Close(context.Context) error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	return nil
}

func (f *fakeFeed) Open(_ context.Context, resumeAfter bson.Raw) (Stream, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.opens = append(f.opens, resumeAfter)
	f.calls = append(f.calls, "open")
	if len(f.openErr) > 0 {
		err := f.openErr[0]
		f.openErr = f.openErr[1:]
		if err != nil {
			return nil, err
		}
	}
	if resumeAfter != nil && f.refuse != nil {
		if err := f.refuse(resumeAfter); err != nil {
			return nil, err
		}
	}
	f.stream = &fakeStream{wake: f.wake, tok: tok(0)}
	return f.stream, nil
}

func (f *fakeFeed) Snapshot(context.Context) iter.Seq2[bson.Raw, error] {
	return func(yield func(bson.Raw, error) bool) {
		if f.onSnapshot != nil {
			f.onSnapshot()
		}
		f.mu.Lock()
		f.reads++
		f.calls = append(f.calls, "snapshot")
		docs := make([]bson.Raw, 0, len(f.docs))
		for _, id := range slices.Sorted(maps.Keys(f.docs)) {
			docs = append(docs, f.docs[id])
		}
		failAfter, failErr := f.failAfter, f.failErr
		f.mu.Unlock()
		for i, d := range docs {
			if failErr != nil && i == failAfter {
				yield(nil, failErr)
				return
			}
			if !yield(d, nil) {
				return
			}
		}
		if failErr != nil && failAfter >= len(docs) {
			yield(nil, failErr)
		}
	}
}

// failReads makes every later Snapshot fail with err after n documents
// (err nil: no failure).
func (f *fakeFeed) failReads(n int, err error) {
	f.mu.Lock()
	f.failAfter, f.failErr = n, err
	f.mu.Unlock()
}

func (f *fakeFeed) Lookup(_ context.Context, id bson.RawValue) (bson.Raw, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.docs[id.StringValue()], nil
}

// push appends items to the currently open stream.
func (f *fakeFeed) push(items ...item) {
	f.mu.Lock()
	s := f.stream
	f.mu.Unlock()
	s.mu.Lock()
	s.items = append(s.items, items...)
	s.mu.Unlock()
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

func (f *fakeFeed) snapshotReads() int { f.mu.Lock(); defer f.mu.Unlock(); return f.reads }
func (f *fakeFeed) openCalls() []bson.Raw {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.opens)
}

func event(op, id, expr string, n int) item {
	d := bson.D{{Key: "_id", Value: tok(n)}, {Key: "operationType", Value: op},
		{Key: "documentKey", Value: bson.D{{Key: "_id", Value: id}}}}
	if expr != "" {
		d = append(d, bson.E{Key: "fullDocument", Value: doc(id, expr)})
	}
	b, _ := bson.Marshal(d)
	return item{ev: b, tok: tok(n)}
}

// memSink records what is armed; optionally it checks the token store at
// each call to prove tokens are saved only after apply.
type memSink struct {
	mu      sync.Mutex
	armed   map[string]string
	applied []string
}

func newMemSink() *memSink { return &memSink{armed: map[string]string{}} }

func (s *memSink) Upsert(d bson.Raw) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := d.Lookup("_id").StringValue()
	s.armed[id] = d.Lookup("cron_expr").StringValue()
	s.applied = append(s.applied, "upsert:"+id)
}

func (s *memSink) Delete(id bson.RawValue) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.armed, id.StringValue())
	s.applied = append(s.applied, "delete:"+id.StringValue())
}

func (s *memSink) ReplaceAll(docs iter.Seq2[bson.Raw, error]) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[string]bool{}
	var changed []string
	for d, err := range docs {
		if err != nil {
			return changed, err
		}
		id := d.Lookup("_id").StringValue()
		expr := d.Lookup("cron_expr").StringValue()
		seen[id] = true
		if old, ok := s.armed[id]; !ok || old != expr {
			changed = append(changed, id)
		}
		s.armed[id] = expr
	}
	for id := range s.armed {
		if !seen[id] {
			changed = append(changed, id)
			delete(s.armed, id)
		}
	}
	sort.Strings(changed)
	return changed, nil
}

// docs lists what the sink holds as documents (Options.StateDocs).
func (s *memSink) docs() iter.Seq[bson.Raw] {
	return func(yield func(bson.Raw) bool) {
		for id, expr := range s.snapshot() {
			if !yield(doc(id, expr)) {
				return
			}
		}
	}
}

func (s *memSink) snapshot() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]string{}
	for k, v := range s.armed {
		out[k] = v
	}
	return out
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

type harness struct {
	feed   *fakeFeed
	sink   *memSink
	tokens *resumetoken.MemStore
	w      *Watcher
	cancel context.CancelFunc
	done   chan error
}

func start(t *testing.T, feed *fakeFeed, tokens *resumetoken.MemStore, mode Mode) *harness {
	t.Helper()
	h := &harness{feed: feed, sink: newMemSink(), tokens: tokens, done: make(chan error, 1)}
	h.w = New(Options{
		ID: "w1", Feed: feed, Tokens: tokens, Sink: h.sink, Mode: mode,
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond,
		PollInterval: 10 * time.Millisecond, IdleSaveInterval: time.Hour,
	})
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.done <- h.w.Run(ctx) }()
	t.Cleanup(h.stop)
	return h
}

func (h *harness) stop() {
	if h.cancel != nil {
		h.cancel()
		<-h.done
		h.cancel = nil
	}
}

func (h *harness) ready(t *testing.T) {
	waitFor(t, "ready", func() bool { return h.w.Status().Ready })
}

func TestStartupWithoutTokenReadsCollectionAfterOpening(t *testing.T) {
	feed := newFakeFeed()
	feed.docs["a"] = doc("a", "0 9 * * *")
	h := start(t, feed, resumetoken.NewMemStore(), ModeAuto)
	h.ready(t)
	if got := h.sink.snapshot(); got["a"] != "0 9 * * *" || len(got) != 1 {
		t.Fatalf("armed = %v", got)
	}
	if opens := feed.openCalls(); len(opens) != 1 || opens[0] != nil {
		t.Fatalf("opens = %v, want one at the current position", opens)
	}
	feed.mu.Lock()
	calls := slices.Clone(feed.calls)
	feed.mu.Unlock()
	if !slices.Equal(calls, []string{"open", "snapshot"}) {
		t.Fatalf("calls = %v, want the stream opened before the collection is read", calls)
	}
	feed.push(event("update", "a", "0 8 * * *", 1), event("insert", "b", "@hourly", 2), event("delete", "a", "", 3))
	waitFor(t, "events applied", func() bool {
		got := h.sink.snapshot()
		_, hasA := got["a"]
		return !hasA && got["b"] == "@hourly"
	})
	waitFor(t, "token saved", func() bool {
		got, err := h.tokens.Load(context.Background(), "w1")
		return err == nil && string(got.Value) == string(tok(3))
	})
}

func TestStartupWithTokenResumesThenReloads(t *testing.T) {
	feed := newFakeFeed()
	feed.docs["a"] = doc("a", "0 9 * * *")
	tokens := resumetoken.NewMemStore()
	_ = tokens.Save(context.Background(), "w1", tok(7))
	h := start(t, feed, tokens, ModeAuto)
	h.ready(t)
	opens := feed.openCalls()
	if len(opens) != 1 || string(opens[0]) != string(tok(7)) {
		t.Fatalf("opens = %v, want one resuming after token 7", opens)
	}
	if feed.snapshotReads() != 1 {
		t.Fatalf("snapshot reads = %d, want 1 (the engine starts empty)", feed.snapshotReads())
	}
}

func TestRefusedTokenIsDroppedAndStreamOpensFresh(t *testing.T) {
	feed := newFakeFeed()
	feed.docs["a"] = doc("a", "0 9 * * *")
	feed.refuse = func(bson.Raw) error {
		return mongo.CommandError{Code: 280, Name: "ChangeStreamFatalError", Message: "resume token was not found"}
	}
	tokens := resumetoken.NewMemStore()
	_ = tokens.Save(context.Background(), "w1", tok(99))
	h := start(t, feed, tokens, ModeAuto)
	h.ready(t)
	opens := feed.openCalls()
	if len(opens) != 2 || opens[0] == nil || opens[1] != nil {
		t.Fatalf("opens = %v, want token then current position", opens)
	}
	if h.sink.snapshot()["a"] != "0 9 * * *" {
		t.Fatal("collection not loaded")
	}
}

func TestLostPositionMidStreamFullyReloadsAndKeepsStreaming(t *testing.T) {
	feed := newFakeFeed()
	feed.docs["a"] = doc("a", "0 9 * * *")
	h := start(t, feed, resumetoken.NewMemStore(), ModeAuto)
	h.ready(t)
	// Changes the watcher never hears of, then the position is lost.
	feed.mu.Lock()
	feed.docs["b"] = doc("b", "@daily")
	delete(feed.docs, "a")
	feed.mu.Unlock()
	feed.push(item{err: mongo.CommandError{Code: 286, Name: "ChangeStreamHistoryLost"}})
	waitFor(t, "reload", func() bool { return feed.snapshotReads() >= 2 })
	h.ready(t)
	got := h.sink.snapshot()
	if len(got) != 1 || got["b"] != "@daily" {
		t.Fatalf("after reload armed = %v", got)
	}
	opens := feed.openCalls()
	if opens[len(opens)-1] != nil {
		t.Fatalf("after a lost position the stream must open fresh, opens = %v", opens)
	}
	feed.push(event("insert", "c", "@hourly", 5))
	waitFor(t, "streaming continues", func() bool { return h.sink.snapshot()["c"] == "@hourly" })
}

func TestTransientErrorResumesFromLastTokenWithoutReload(t *testing.T) {
	feed := newFakeFeed()
	h := start(t, feed, resumetoken.NewMemStore(), ModeAuto)
	h.ready(t)
	feed.push(event("insert", "a", "@hourly", 1), item{err: errors.New("connection reset")})
	waitFor(t, "reopen", func() bool { return len(feed.openCalls()) == 2 })
	if got := feed.openCalls()[1]; string(got) != string(tok(1)) {
		t.Fatalf("reopened with %v, want token 1", got)
	}
	h.ready(t)
	if feed.snapshotReads() != 1 {
		t.Fatalf("snapshot reads = %d, a transient error must not reload", feed.snapshotReads())
	}
}

// recordingStore fails the test if a token is saved before the sink has
// applied the event it stands for.
type recordingStore struct {
	*resumetoken.MemStore
	sink *memSink
	t    *testing.T
	want map[string]string // token _data -> op that must be applied first
}

func (r recordingStore) Save(ctx context.Context, id string, token bson.Raw) error {
	data := token.Lookup("_data").StringValue()
	if op, ok := r.want[data]; ok {
		r.sink.mu.Lock()
		applied := slices.Contains(r.sink.applied, op)
		r.sink.mu.Unlock()
		if !applied {
			r.t.Errorf("token %s saved before %s was applied", data, op)
		}
	}
	return r.MemStore.Save(ctx, id, token)
}

func TestTokenSavedOnlyAfterApply(t *testing.T) {
	feed := newFakeFeed()
	h := &harness{feed: feed, sink: newMemSink(), done: make(chan error, 1)}
	store := recordingStore{MemStore: resumetoken.NewMemStore(), sink: h.sink, t: t,
		want: map[string]string{fmt.Sprintf("%08d", 1): "upsert:a", fmt.Sprintf("%08d", 2): "delete:a"}}
	h.w = New(Options{ID: "w1", Feed: feed, Tokens: store, Sink: h.sink,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), IdleSaveInterval: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.done <- h.w.Run(ctx) }()
	t.Cleanup(h.stop)
	h.ready(t)
	feed.push(event("insert", "a", "@hourly", 1), event("delete", "a", "", 2))
	waitFor(t, "both saved", func() bool {
		got, err := store.Load(context.Background(), "w1")
		return err == nil && string(got.Value) == string(tok(2))
	})
}

func TestUpdateWithoutFullDocumentLooksAgain(t *testing.T) {
	feed := newFakeFeed()
	feed.docs["a"] = doc("a", "0 9 * * *")
	h := start(t, feed, resumetoken.NewMemStore(), ModeAuto)
	h.ready(t)
	feed.mu.Lock()
	delete(feed.docs, "a")
	feed.mu.Unlock()
	ev := event("update", "a", "", 1) // fullDocument null: deleted since
	feed.push(ev)
	waitFor(t, "deleted after lookup", func() bool { _, ok := h.sink.snapshot()["a"]; return !ok })
}

func TestInvalidateReloadsAndOpensFresh(t *testing.T) {
	feed := newFakeFeed()
	feed.docs["a"] = doc("a", "0 9 * * *")
	h := start(t, feed, resumetoken.NewMemStore(), ModeAuto)
	h.ready(t)
	feed.mu.Lock()
	feed.docs = map[string]bson.Raw{}
	feed.mu.Unlock()
	feed.push(event("drop", "", "", 1))
	waitFor(t, "reload after drop", func() bool { return len(h.sink.snapshot()) == 0 && feed.snapshotReads() >= 2 })
	opens := feed.openCalls()
	if opens[len(opens)-1] != nil {
		t.Fatalf("after drop the stream must open fresh, opens = %v", opens)
	}
}

func TestAutoModeFallsBackToPolling(t *testing.T) {
	feed := newFakeFeed()
	feed.docs["a"] = doc("a", "0 9 * * *")
	feed.openErr = []error{mongo.CommandError{Code: 40573, Name: "Location40573", Message: "The $changeStream stage is only supported on replica sets"}}
	h := start(t, feed, resumetoken.NewMemStore(), ModeAuto)
	h.ready(t)
	if m := h.w.Status().Mode; m != ModePoll {
		t.Fatalf("mode = %s, want poll", m)
	}
	feed.mu.Lock()
	feed.docs["b"] = doc("b", "@hourly")
	feed.mu.Unlock()
	waitFor(t, "poll picks up edit", func() bool { return h.sink.snapshot()["b"] == "@hourly" })
}

func TestBackoffIsCappedWithJitter(t *testing.T) {
	for n := 1; n < 40; n++ {
		d := Backoff(n, 100*time.Millisecond, 10*time.Second)
		full := min(100*time.Millisecond<<min(n-1, 20), 10*time.Second)
		if d < full/2 || d > full {
			t.Fatalf("attempt %d: %s outside [%s, %s]", n, d, full/2, full)
		}
	}
}

func TestIsLostPosition(t *testing.T) {
	cases := []struct {
		err  error
		want bool
	}{
		{mongo.CommandError{Code: 286}, true},
		{mongo.CommandError{Code: 280}, true},
		{mongo.CommandError{Code: 260}, true},
		{mongo.CommandError{Code: 136}, true},
		{mongo.CommandError{Code: 1, Labels: []string{"NonResumableChangeStreamError"}}, true},
		{fmt.Errorf("wrapped: %w", mongo.CommandError{Code: 286}), true},
		{mongo.CommandError{Code: 11600}, false},
		{errors.New("network"), false},
	}
	for _, c := range cases {
		if got := IsLostPosition(c.err); got != c.want {
			t.Errorf("IsLostPosition(%v) = %v", c.err, got)
		}
	}
}

func TestEventWithoutDocumentIDReloads(t *testing.T) {
	feed := newFakeFeed()
	feed.docs["a"] = doc("a", "0 9 * * *")
	h := start(t, feed, resumetoken.NewMemStore(), ModeAuto)
	h.ready(t)
	feed.mu.Lock()
	feed.docs["a"] = doc("a", "0 8 * * *")
	feed.mu.Unlock()
	// The shape mongo-java-server's own oplog produces: the $set delta in
	// documentKey and in fullDocument, no _id anywhere.
	b, _ := bson.Marshal(bson.D{{Key: "_id", Value: tok(1)}, {Key: "operationType", Value: "update"},
		{Key: "documentKey", Value: bson.D{{Key: "$set", Value: bson.D{{Key: "cron_expr", Value: "0 8 * * *"}}}}},
		{Key: "fullDocument", Value: bson.D{{Key: "cron_expr", Value: "0 8 * * *"}}}})
	feed.push(item{ev: b, tok: tok(1)})
	waitFor(t, "reloaded", func() bool { return h.sink.snapshot()["a"] == "0 8 * * *" })
	if feed.snapshotReads() != 2 {
		t.Fatalf("snapshot reads = %d, want 2", feed.snapshotReads())
	}
	if _, ok := h.sink.snapshot()[""]; ok {
		t.Fatal("a delta was applied as a schedule")
	}
}

// An edit committed after the stream was opened but missed by the read
// still reaches the sink through the stream.
func TestEditDuringStartupReadIsNotLost(t *testing.T) {
	feed := newFakeFeed()
	feed.docs["a"] = doc("a", "0 9 * * *")
	gate := &gatedFeed{fakeFeed: feed, opened: make(chan struct{}), release: make(chan struct{})}
	h := &harness{feed: feed, sink: newMemSink(), tokens: resumetoken.NewMemStore(), done: make(chan error, 1)}
	h.w = New(Options{ID: "w1", Feed: gate, Tokens: h.tokens, Sink: h.sink,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), IdleSaveInterval: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.done <- h.w.Run(ctx) }()
	t.Cleanup(h.stop)
	<-gate.opened
	// The edit commits after the stream's position was fixed and is not in
	// the read's view (it committed after the read's snapshot): only the
	// stream has it, and events queued during the reload must not be dropped.
	feed.push(event("insert", "b", "@hourly", 1))
	close(gate.release)
	h.ready(t)
	waitFor(t, "edit applied", func() bool { return h.sink.snapshot()["b"] == "@hourly" })
}

// gatedFeed pauses after the first Open until released.
type gatedFeed struct {
	*fakeFeed
	once    sync.Once
	opened  chan struct{}
	release chan struct{}
}

func (g *gatedFeed) Open(ctx context.Context, resumeAfter bson.Raw) (Stream, error) {
	s, err := g.fakeFeed.Open(ctx, resumeAfter)
	g.once.Do(func() { close(g.opened); <-g.release })
	return s, err
}

// resyncWatcher runs a watcher with a fast resync and reports its drift
// and resync reloads on channels.
func resyncWatcher(t *testing.T, feed *fakeFeed, sink Sink) (w *Watcher, drifts chan []string, resyncs chan []string) {
	t.Helper()
	drifts, resyncs = make(chan []string, 1000), make(chan []string, 1000)
	w = New(Options{
		ID: "w1", Feed: feed, Tokens: resumetoken.NewMemStore(), Sink: sink,
		Logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
		ResyncInterval: 20 * time.Millisecond, IdleSaveInterval: time.Hour,
		Hooks: Hooks{
			FullReload: func(reason string, changed []string) {
				if reason == ReasonResync {
					resyncs <- slices.Clone(changed)
				}
			},
			Drift: func(ids []string) { drifts <- slices.Clone(ids) },
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, "ready", func() bool { return w.Status().Ready })
	return w, drifts, resyncs
}

func TestResyncRestoresDriftAndReportsIt(t *testing.T) {
	feed := newFakeFeed()
	feed.docs["a"] = doc("a", "0 9 * * *")
	feed.docs["b"] = doc("b", "@hourly")
	sink := newMemSink()
	_, drifts, resyncs := resyncWatcher(t, feed, sink)
	// Resyncs of an exact sink change nothing.
	if changed := <-resyncs; len(changed) != 0 {
		t.Fatalf("resync of an exact sink changed %v", changed)
	}
	// A missed event: the sink lost "a" behind the stream's back.
	sink.mu.Lock()
	delete(sink.armed, "a")
	sink.mu.Unlock()
	select {
	case ids := <-drifts:
		if !slices.Equal(ids, []string{"a"}) {
			t.Fatalf("drift %v, want [a]", ids)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no drift reported")
	}
	if got := sink.snapshot(); got["a"] != "0 9 * * *" || len(got) != 2 {
		t.Fatalf("after resync: %v", got)
	}
	// Nothing more drifts.
	for range 3 {
		<-resyncs
	}
	select {
	case ids := <-drifts:
		t.Fatalf("more drift: %v", ids)
	default:
	}
}

// An edit committed just before the resync's read shows in the read before
// its event arrives: the resync changes the job, but the event that follows
// explains it, so it is not drift.
func TestResyncDoesNotCountQueuedEventsAsDrift(t *testing.T) {
	feed := newFakeFeed()
	feed.docs["a"] = doc("a", "0 9 * * *")
	sink := newMemSink()
	var (
		mu    sync.Mutex
		n     int
		armed = true
	)
	feed.onSnapshot = func() {
		mu.Lock()
		defer mu.Unlock()
		if !armed || feed.stream == nil {
			return
		}
		// A write commits; its event is queued behind the read.
		n++
		id := fmt.Sprintf("new%d", n)
		feed.mu.Lock()
		feed.docs[id] = doc(id, "@daily")
		feed.mu.Unlock()
		feed.push(event("insert", id, "@daily", 100+n))
	}
	_, drifts, resyncs := resyncWatcher(t, feed, sink)
	changedSeen := 0
	for changedSeen < 3 {
		if changed := <-resyncs; len(changed) > 0 {
			changedSeen++
		}
	}
	mu.Lock()
	armed = false
	mu.Unlock()
	// Let the last suspects settle on an idle stream.
	for range 3 {
		<-resyncs
	}
	select {
	case ids := <-drifts:
		t.Fatalf("queued events counted as drift: %v", ids)
	default:
	}
	waitFor(t, "all inserts applied", func() bool { return len(sink.snapshot()) == 1+changedSeenN(&mu, &n) })
}

func changedSeenN(mu *sync.Mutex, n *int) int { mu.Lock(); defer mu.Unlock(); return *n }
