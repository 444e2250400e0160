package changestream

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/resumetoken"
)

// seqStore records every saved token in order.
type seqStore struct {
	*resumetoken.MemStore
	mu    sync.Mutex
	saved []string
}

func newSeqStore() *seqStore { return &seqStore{MemStore: resumetoken.NewMemStore()} }

func (s *seqStore) Save(ctx context.Context, id string, token bson.Raw) error {
	s.mu.Lock()
	s.saved = append(s.saved, token.Lookup("_data").StringValue())
	s.mu.Unlock()
	return s.MemStore.Save(ctx, id, token)
}

// slowTokens is a seqStore whose saves take a while.
type slowTokens struct {
	*seqStore
	took time.Duration
}

func (s slowTokens) Save(ctx context.Context, id string, token bson.Raw) error {
	time.Sleep(s.took)
	return s.seqStore.Save(ctx, id, token)
}

func (s *seqStore) sequence() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.saved)
}

func (s *seqStore) last() string {
	q := s.sequence()
	if len(q) == 0 {
		return ""
	}
	return q[len(q)-1]
}

// memState is an in-memory StateStore.
type memState struct {
	mu      sync.Mutex
	st      *savedState
	saves   int
	loadErr error
}

// savedState is what memState holds: the documents copied as saved.
type savedState struct {
	Token bson.Raw
	Docs  []bson.Raw
}

func (m *memState) set(token bson.Raw, docs ...bson.Raw) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.st = &savedState{Token: token, Docs: docs}
}

func (m *memState) Load(context.Context) (State, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.loadErr != nil {
		return State{}, m.loadErr
	}
	if m.st == nil {
		return State{}, errNoState
	}
	docs := m.st.Docs
	return State{Token: m.st.Token, Docs: func(yield func(bson.Raw, error) bool) {
		for _, d := range docs {
			if !yield(d, nil) {
				return
			}
		}
	}}, nil
}

var errNoState = errors.New("no state")

func (m *memState) Save(_ context.Context, st State) error {
	saved := &savedState{Token: st.Token}
	for d, err := range st.Docs {
		if err != nil {
			return err
		}
		saved.Docs = append(saved.Docs, append(bson.Raw(nil), d...))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.st = saved
	m.saves++
	return nil
}

func (m *memState) get() (savedState, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.st == nil {
		return savedState{}, m.saves
	}
	return *m.st, m.saves
}

// startWith runs a watcher with options adjusted by edit.
func startWith(t *testing.T, feed Feed, tokens resumetoken.Store, sink *memSink, edit func(*Options)) (*Watcher, func()) {
	t.Helper()
	o := Options{ID: "w1", Feed: feed, Tokens: tokens, Sink: sink,
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond, IdleSaveInterval: time.Hour}
	if edit != nil {
		edit(&o)
	}
	w := New(o)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}
	}
	t.Cleanup(stop)
	return w, stop
}

func data(n int) string { return tok(n).Lookup("_data").StringValue() }

func pushUpdates(feed *fakeFeed, from, to int) {
	var items []item
	for n := from; n <= to; n++ {
		items = append(items, event("update", "a", "0 9 * * *", n))
	}
	feed.push(items...)
}

func TestSavesAreCoalesced(t *testing.T) {
	feed := newFakeFeed()
	tokens := newSeqStore()
	sink := newMemSink()
	w, _ := startWith(t, feed, tokens, sink, func(o *Options) { o.SaveDelay = 20 * time.Millisecond })
	waitFor(t, "ready", func() bool { return w.Status().Ready })
	pushUpdates(feed, 1, 500)
	waitFor(t, "last token saved", func() bool { return tokens.last() == data(500) })
	seq := tokens.sequence()
	// One save after the startup reload, then far fewer than one per event.
	if len(seq) > 100 {
		t.Fatalf("%d saves for 500 events: not coalesced", len(seq))
	}
	// Saved positions only move forward.
	if !slices.IsSorted(seq) {
		t.Fatalf("saved tokens out of order: %v", seq)
	}
}

func TestSaveMaxEventsSavesWithoutWaitingForTheDelay(t *testing.T) {
	feed := newFakeFeed()
	tokens := newSeqStore()
	w, _ := startWith(t, feed, tokens, newMemSink(), func(o *Options) {
		o.SaveDelay = time.Hour
		o.SaveMaxEvents = 10
	})
	waitFor(t, "ready", func() bool { return w.Status().Ready })
	pushUpdates(feed, 1, 25)
	waitFor(t, "a save triggered by the event count", func() bool { return tokens.last() >= data(10) })
}

func TestShutdownFlushesThePendingToken(t *testing.T) {
	feed := newFakeFeed()
	tokens := newSeqStore()
	sink := newMemSink()
	w, stop := startWith(t, feed, tokens, sink, func(o *Options) { o.SaveDelay = time.Hour })
	waitFor(t, "ready", func() bool { return w.Status().Ready })
	feed.push(event("insert", "a", "@hourly", 1), event("insert", "b", "@daily", 2), event("delete", "a", "", 3))
	waitFor(t, "applied", func() bool { _, ok := sink.snapshot()["a"]; return !ok && sink.snapshot()["b"] != "" })
	if tokens.last() != data(0) {
		t.Fatalf("saved %v before the delay; want only the startup position", tokens.sequence())
	}
	stop()
	if got := tokens.last(); got != data(3) {
		t.Fatalf("after shutdown the stored token is %s, want %s", got, data(3))
	}
}

func TestNegativeSaveDelaySavesEveryEvent(t *testing.T) {
	feed := newFakeFeed()
	tokens := newSeqStore()
	// Each save takes 100 ms, so that one made in the background after
	// the start's reload could not be done by the time ready is seen.
	slow := slowTokens{seqStore: tokens, took: 100 * time.Millisecond}
	w, _ := startWith(t, feed, slow, newMemSink(), func(o *Options) { o.SaveDelay = -1 })
	waitFor(t, "ready", func() bool { return w.Status().Ready })
	if got := tokens.sequence(); !slices.Equal(got, []string{data(0)}) {
		t.Fatalf("at ready the stored tokens are %v: the start's position is saved before it, synchronously", got)
	}
	pushUpdates(feed, 1, 5)
	waitFor(t, "all saved", func() bool { return tokens.last() == data(5) })
	want := []string{data(0), data(1), data(2), data(3), data(4), data(5)}
	if got := tokens.sequence(); !slices.Equal(got, want) {
		t.Fatalf("saved %v, want %v", got, want)
	}
}

func TestEventHookReportsTimes(t *testing.T) {
	feed := newFakeFeed()
	var mu sync.Mutex
	var got []EventInfo
	w, _ := startWith(t, feed, resumetoken.NewMemStore(), newMemSink(), func(o *Options) {
		o.Hooks.Event = func(ev EventInfo) { mu.Lock(); got = append(got, ev); mu.Unlock() }
	})
	waitFor(t, "ready", func() bool { return w.Status().Ready })
	written := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	d, _ := bson.Marshal(bson.D{{Key: "_id", Value: "a"}, {Key: "cron_expr", Value: "@hourly"}, {Key: "updated_at", Value: written}})
	ev, _ := bson.Marshal(bson.D{{Key: "_id", Value: tok(1)}, {Key: "operationType", Value: "insert"},
		{Key: "documentKey", Value: bson.D{{Key: "_id", Value: "a"}}}, {Key: "fullDocument", Value: bson.Raw(d)}})
	feed.push(item{ev: ev, tok: tok(1)})
	waitFor(t, "hook", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 1 })
	e := got[0]
	if e.Op != "insert" || !e.WallTime.IsZero() || !e.UpdatedAt.Equal(written) {
		t.Fatalf("event info = %+v", e)
	}
	if e.Received.IsZero() || e.Applied.Before(e.Received) {
		t.Fatalf("received %v, applied %v", e.Received, e.Applied)
	}
}

// stampSink records, as the last thing each Upsert and Delete does, the
// instant it is about to return.
type stampSink struct {
	*memSink
	mu        *sync.Mutex
	returning *time.Time
}

func (s stampSink) stamp() { s.mu.Lock(); *s.returning = time.Now(); s.mu.Unlock() }

func (s stampSink) Upsert(d bson.Raw) {
	s.memSink.Upsert(d)
	time.Sleep(5 * time.Millisecond) // the sink's own work after applying (the daemon logs)
	s.stamp()
}

func (s stampSink) Delete(id bson.RawValue) {
	s.memSink.Delete(id)
	time.Sleep(5 * time.Millisecond)
	s.stamp()
}

// EventInfo.Applied is when the sink call returned: after all of the sink's
// work, not when the watcher received the event.
func TestEventHookAppliedIsWhenTheSinkReturned(t *testing.T) {
	feed := newFakeFeed()
	var mu sync.Mutex
	var got []EventInfo
	var returning time.Time
	w, _ := startWith(t, feed, resumetoken.NewMemStore(), newMemSink(), func(o *Options) {
		o.Sink = stampSink{memSink: o.Sink.(*memSink), mu: &mu, returning: &returning}
		o.Hooks.Event = func(ev EventInfo) { mu.Lock(); got = append(got, ev); mu.Unlock() }
	})
	waitFor(t, "ready", func() bool { return w.Status().Ready })
	feed.push(event("update", "a", "0 8 * * *", 1), event("delete", "a", "", 2))
	waitFor(t, "hook", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 2 })
	mu.Lock()
	defer mu.Unlock()
	for _, ev := range got {
		if ev.Applied.Sub(ev.Received) < 5*time.Millisecond {
			t.Fatalf("%s: applied %v only %v after received: before the sink returned", ev.Op, ev.Applied, ev.Applied.Sub(ev.Received))
		}
	}
	if last := got[1].Applied; last.Before(returning) {
		t.Fatalf("applied %v, before the sink returned at %v", last, returning)
	}
}

// ---- warm restart ----

func TestWarmStartArmsFromStateWithoutReading(t *testing.T) {
	feed := newFakeFeed()
	feed.docs["a"] = doc("a", "0 9 * * *")
	feed.docs["b"] = doc("b", "@daily")
	tokens := newSeqStore()
	state := &memState{}
	sink := newMemSink()
	// First run: full reload, an edit, shutdown saves state and token.
	w, stop := startWith(t, feed, tokens, sink, func(o *Options) { o.State, o.StateDocs = state, sink.docs })
	waitFor(t, "ready", func() bool { return w.Status().Ready })
	feed.mu.Lock()
	feed.docs["a"] = doc("a", "0 8 * * *")
	feed.mu.Unlock()
	feed.push(event("update", "a", "0 8 * * *", 1))
	waitFor(t, "edit applied", func() bool { return sink.snapshot()["a"] == "0 8 * * *" })
	stop()
	st, _ := state.get()
	if string(st.Token) != string(tok(1)) || tokens.last() != data(1) {
		t.Fatalf("after shutdown state token %v, stored %s; want both at 1", st.Token, tokens.last())
	}
	if len(st.Docs) != 2 {
		t.Fatalf("state has %d documents, want 2", len(st.Docs))
	}

	// Second run: armed from the state, no read, resumes after token 1.
	reads := feed.snapshotReads()
	sink2 := newMemSink()
	w2, stop2 := startWith(t, feed, tokens, sink2, func(o *Options) { o.State, o.StateDocs = state, sink2.docs })
	waitFor(t, "ready", func() bool { return w2.Status().Ready })
	if got := sink2.snapshot(); got["a"] != "0 8 * * *" || got["b"] != "@daily" || len(got) != 2 {
		t.Fatalf("armed from state: %v", got)
	}
	if feed.snapshotReads() != reads {
		t.Fatal("a warm start read the collection")
	}
	if opens := feed.openCalls(); string(opens[len(opens)-1]) != string(tok(1)) {
		t.Fatalf("opened with %v, want after token 1", opens[len(opens)-1])
	}
	// An edit made while down arrives through the resumed stream.
	feed.push(event("delete", "b", "", 2))
	waitFor(t, "edit from downtime applied", func() bool { _, ok := sink2.snapshot()["b"]; return !ok })
	stop2()
	st, _ = state.get()
	if string(st.Token) != string(tok(2)) || len(st.Docs) != 1 {
		t.Fatalf("after the second run: state at %v with %d docs", st.Token, len(st.Docs))
	}
}

func TestWarmStartFallsBackToFullReload(t *testing.T) {
	cases := []struct {
		name   string
		setup  func(feed *fakeFeed, tokens *seqStore, state *memState)
		reason string
	}{
		{"no state file", func(_ *fakeFeed, tokens *seqStore, _ *memState) {
			_ = tokens.Save(context.Background(), "w1", tok(1))
		}, ReasonStartup},
		{"corrupt state file", func(_ *fakeFeed, tokens *seqStore, state *memState) {
			_ = tokens.Save(context.Background(), "w1", tok(1))
			state.loadErr = errors.New("checksum mismatch")
		}, ReasonStartup},
		{"state at another token", func(_ *fakeFeed, tokens *seqStore, state *memState) {
			_ = tokens.Save(context.Background(), "w1", tok(2))
			state.set(tok(1), doc("stale", "@hourly"))
		}, ReasonStartup},
		{"token reset", func(_ *fakeFeed, _ *seqStore, state *memState) {
			state.set(tok(1), doc("stale", "@hourly"))
		}, ReasonStartup},
		{"token refused", func(feed *fakeFeed, tokens *seqStore, state *memState) {
			_ = tokens.Save(context.Background(), "w1", tok(1))
			state.set(tok(1), doc("stale", "@hourly"))
			feed.refuse = func(bson.Raw) error { return mongo.CommandError{Code: 286, Name: "ChangeStreamHistoryLost"} }
		}, ReasonTokenRefused},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			feed := newFakeFeed()
			feed.docs["a"] = doc("a", "0 9 * * *")
			tokens := newSeqStore()
			state := &memState{}
			tc.setup(feed, tokens, state)
			sink := newMemSink()
			var mu sync.Mutex
			var reasons []string
			w, _ := startWith(t, feed, tokens, sink, func(o *Options) {
				o.State, o.StateDocs = state, sink.docs
				o.Hooks.FullReload = func(r string, _ []string) { mu.Lock(); reasons = append(reasons, r); mu.Unlock() }
			})
			waitFor(t, "ready", func() bool { return w.Status().Ready })
			if got := sink.snapshot(); len(got) != 1 || got["a"] != "0 9 * * *" {
				t.Fatalf("armed %v, want the collection", got)
			}
			mu.Lock()
			got := slices.Clone(reasons)
			mu.Unlock()
			if !slices.Equal(got, []string{tc.reason}) {
				t.Fatalf("full reloads %v, want [%s]", got, tc.reason)
			}
			// The reload's position is saved with a fresh state at once.
			waitFor(t, "state saved", func() bool {
				st, _ := state.get()
				return len(st.Docs) == 1 && string(st.Token) == string(tok(0)) && tokens.last() == data(0)
			})
		})
	}
}

// failingStore fails the first n saves.
type failingStore struct {
	*seqStore
	mu       sync.Mutex
	n        int
	attempts int
}

func (f *failingStore) Save(ctx context.Context, id string, token bson.Raw) error {
	f.mu.Lock()
	f.attempts++
	fail := f.attempts <= f.n
	f.mu.Unlock()
	if fail {
		return errors.New("server unreachable")
	}
	return f.seqStore.Save(ctx, id, token)
}

func TestFailedSaveIsRetriedWithoutSpinning(t *testing.T) {
	feed := newFakeFeed()
	tokens := &failingStore{seqStore: newSeqStore(), n: 2}
	w, _ := startWith(t, feed, tokens, newMemSink(), func(o *Options) { o.SaveDelay = time.Millisecond })
	waitFor(t, "ready", func() bool { return w.Status().Ready })
	feed.push(event("insert", "a", "@hourly", 1))
	deadline := time.Now().Add(30 * time.Second)
	for tokens.last() != data(1) {
		if time.Now().After(deadline) {
			t.Fatal("token never saved after the store came back")
		}
		time.Sleep(5 * time.Millisecond)
	}
	tokens.mu.Lock()
	defer tokens.mu.Unlock()
	// Startup save (fails), retry a second later, then the event's token.
	if tokens.attempts > 6 {
		t.Fatalf("%d save attempts: retrying without a pause", tokens.attempts)
	}
}

func TestSyncedHookRunsOnceAfterTheFirstSync(t *testing.T) {
	feed := newFakeFeed()
	feed.docs["a"] = doc("a", "0 9 * * *")
	sink := newMemSink()
	var calls atomicInt
	w, _ := startWith(t, feed, resumetoken.NewMemStore(), sink, func(o *Options) {
		o.Hooks.Synced = func() {
			if len(sink.snapshot()) != 1 {
				t.Error("Synced called before the sink held the collection")
			}
			calls.add()
		}
	})
	waitFor(t, "ready", func() bool { return w.Status().Ready })
	feed.push(item{err: mongo.CommandError{Code: 286, Name: "ChangeStreamHistoryLost"}})
	waitFor(t, "second reload", func() bool { return feed.snapshotReads() == 2 && w.Status().Ready })
	if n := calls.get(); n != 1 {
		t.Fatalf("Synced called %d times, want 1", n)
	}
}

type atomicInt struct {
	mu sync.Mutex
	n  int
}

func (a *atomicInt) add()     { a.mu.Lock(); a.n++; a.mu.Unlock() }
func (a *atomicInt) get() int { a.mu.Lock(); defer a.mu.Unlock(); return a.n }

func TestStateSavesAreCoalescedAndPairedWithTheToken(t *testing.T) {
	for _, delay := range []time.Duration{
		20 * time.Millisecond,
		-1, // means the state default with a state: saving per event would rewrite the whole state each time
	} {
		t.Run(delay.String(), func(t *testing.T) {
			feed := newFakeFeed()
			tokens := newSeqStore()
			state := &memState{}
			sink := newMemSink()
			w, stop := startWith(t, feed, tokens, sink, func(o *Options) {
				o.State, o.StateDocs = state, sink.docs
				o.SaveDelay = delay
			})
			waitFor(t, "ready", func() bool { return w.Status().Ready })
			pushUpdates(feed, 1, 300)
			waitFor(t, "last position saved", func() bool { return tokens.last() == data(300) })
			stop()
			st, saves := state.get()
			if saves > 60 {
				t.Fatalf("%d state saves for 300 events: not coalesced", saves)
			}
			// Every token save was preceded by a state save at the same token.
			if n := len(tokens.sequence()); n != saves {
				t.Fatalf("%d token saves, %d state saves: want them paired", n, saves)
			}
			if string(st.Token) != string(tok(300)) || len(st.Docs) != 1 {
				t.Fatalf("final state at %v with %d docs", st.Token, len(st.Docs))
			}
		})
	}
}

// slowState is a memState whose saves take a while, as a large state
// file's write does.
type slowState struct {
	memState
	took time.Duration
}

func (s *slowState) Save(ctx context.Context, st State) error {
	time.Sleep(s.took)
	return s.memState.Save(ctx, st)
}

// Saves are spaced by their own cost: with saves that take 30 ms and
// events arriving all the time for a second, the state is written about
// every 300 ms (10 × its cost), not every SaveDelay (20 ms).
func TestSlowSavesAreSpacedByTheirCost(t *testing.T) {
	feed := newFakeFeed()
	tokens := newSeqStore()
	state := &slowState{took: 30 * time.Millisecond}
	sink := newMemSink()
	w, stop := startWith(t, feed, tokens, sink, func(o *Options) {
		o.State, o.StateDocs = state, sink.docs
		o.SaveDelay = 20 * time.Millisecond
	})
	waitFor(t, "ready", func() bool { return w.Status().Ready })
	_, before := state.get()
	start := time.Now()
	n := 1
	for time.Since(start) < time.Second {
		pushUpdates(feed, n, n+9)
		n += 10
		time.Sleep(5 * time.Millisecond)
	}
	took := time.Since(start)
	_, after := state.get()
	stop()
	saves := after - before
	if limit := int(took/(10*state.took)) + 2; saves > limit {
		t.Fatalf("%d state saves of 30 ms in %s of steady events, want at most %d", saves, took.Round(time.Millisecond), limit)
	}
	if saves < 2 {
		t.Fatalf("%d state saves in %s: spacing stopped saving", saves, took.Round(time.Millisecond))
	}
}

// gatedState is a memState whose saves wait until the test opens the gate,
// as a large state file's write keeps its writer busy.
type gatedState struct {
	memState
	entered chan struct{} // closed by the first save
	once    sync.Once
	gate    chan struct{}
}

func (s *gatedState) Save(ctx context.Context, st State) error {
	s.once.Do(func() { close(s.entered) })
	select {
	case <-s.gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.memState.Save(ctx, st)
}

// The position a full reload ends at is saved at once, without the save
// delay, but in the background: the watcher is ready, and applies events,
// while the state file is still being written; the write then stores that
// position, and the events after it are saved as before (here at shutdown).
func TestReadyWithoutWaitingForTheReloadsSave(t *testing.T) {
	feed := newFakeFeed()
	tokens := newSeqStore()
	state := &gatedState{entered: make(chan struct{}), gate: make(chan struct{})}
	sink := newMemSink()
	w, stop := startWith(t, feed, tokens, sink, func(o *Options) {
		o.State, o.StateDocs = state, sink.docs
		o.SaveDelay = time.Hour
	})
	select {
	case <-state.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the reload's position was not being saved after 5 s: it waits for the save delay")
	}
	waitFor(t, "ready while the reload's position is being saved", func() bool { return w.Status().Ready })
	feed.push(event("insert", "a", "@hourly", 1))
	waitFor(t, "an event applied while the save waits", func() bool { return sink.snapshot()["a"] == "@hourly" })
	if seq := tokens.sequence(); len(seq) != 0 {
		t.Fatalf("tokens %v stored before the state file was written", seq)
	}
	close(state.gate)
	waitFor(t, "the reload's position saved", func() bool {
		st, _ := state.get()
		return tokens.last() == data(0) && string(st.Token) == string(tok(0))
	})
	stop()
	if st, _ := state.get(); tokens.last() != data(1) || string(st.Token) != string(tok(1)) {
		t.Fatalf("after shutdown the stored token is %s and the state's %v, want %s", tokens.last(), st.Token, data(1))
	}
}

// A full reload does not wait for a position being saved: with the state
// file's write held open and an event's position pending behind it, a
// resync reads and applies the collection; the pending position is written
// once the write ends.
func TestResyncDoesNotWaitForAPendingSave(t *testing.T) {
	feed := newFakeFeed()
	feed.docs["a"] = doc("a", "0 9 * * *")
	tokens := newSeqStore()
	state := &gatedState{entered: make(chan struct{}), gate: make(chan struct{})}
	sink := newMemSink()
	var log *reloadLog
	w, stop := startWith(t, feed, tokens, sink, func(o *Options) {
		o.State, o.StateDocs = state, sink.docs
		o.SaveDelay = 20 * time.Millisecond
		o.ResyncInterval = -1 // only the call below
		log = newReloadLog(o)
	})
	log.next(t, ReasonStartup)
	select { // the reload's position is being written, and stays so
	case <-state.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the reload's position was not being saved after 5 s")
	}
	waitFor(t, "ready", func() bool { return w.Status().Ready })
	feed.push(event("update", "a", "@hourly", 1)) // its position waits behind the write
	waitFor(t, "the event applied", func() bool { return sink.snapshot()["a"] == "@hourly" })
	sink.mu.Lock()
	delete(sink.armed, "a") // drift for the resync to find
	sink.mu.Unlock()
	w.Resync("operator")
	if r := log.next(t, "operator"); !slices.Equal(r.changed, []string{"a"}) {
		t.Fatalf("resync changed %v, want [a]", r.changed)
	}
	if seq := tokens.sequence(); len(seq) != 0 {
		t.Fatalf("tokens %v stored while the state file's write was held", seq)
	}
	close(state.gate)
	waitFor(t, "the event's position saved after the write", func() bool {
		st, _ := state.get()
		return tokens.last() == data(1) && string(st.Token) == string(tok(1))
	})
	stop()
}
