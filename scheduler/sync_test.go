package scheduler

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cronswap/cronswap/schedule"
)

// TestSyncPausesOnlyEmptyShards: a Sync into a running engine fills the
// shards that were empty while they are paused and starts them again, so
// every job fires afterwards; a job that was already armed keeps its robfig
// entry and keeps firing.
func TestSyncPausesOnlyEmptyShards(t *testing.T) {
	t.Parallel() // waits on real time
	var (
		mu    sync.Mutex
		fired = map[string]int{}
	)
	e := newEngine(t, Options{Shards: 8, Fire: func(d schedule.Due) {
		id := d.Schedule.ID
		mu.Lock()
		defer mu.Unlock()
		fired[id]++
	}})
	expect(t, e.Reload(sch("old", "* * * * * *")), Added)
	before := mustEntry(t, e, "old")

	items := []Item{{Schedule: sch("old", "* * * * * *")}}
	for i := range 40 {
		items = append(items, Item{Schedule: sch(fmt.Sprintf("new-%02d", i), "* * * * * *")})
	}
	if st := syncItems(e, items); st.Added != 40 || st.Unchanged != 1 {
		t.Fatalf("Sync = %+v", st)
	}
	if got := mustEntry(t, e, "old"); got.id != before.id {
		t.Fatalf("armed job re-armed by Sync: %+v -> %+v", before, got)
	}
	for _, it := range items {
		mustEntry(t, e, it.Schedule.ID) // started shards computed a next run
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		n, old := len(fired), fired["old"]
		mu.Unlock()
		if n == len(items) && old >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20s %d of %d jobs fired (old %d times)", n, len(items), old)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSyncWhileStopped: a Sync into a stopped engine does not start any
// shard; Start does.
func TestSyncWhileStopped(t *testing.T) {
	t.Parallel() // waits on real time
	fires := make(chan string, 100)
	e := New(Options{Logger: quiet(), Shards: 4, Fire: func(d schedule.Due) {
		select {
		case fires <- d.Schedule.ID:
		default:
		}
	}})
	e.Start()
	<-e.Stop().Done()
	if st := syncItems(e, []Item{{Schedule: sch("a", "* * * * * *")}, {Schedule: sch("b", "* * * * * *")}}); st.Added != 2 {
		t.Fatalf("Sync = %+v", st)
	}
	for _, id := range []string{"a", "b"} {
		// robfig computes an entry's next run when its engine starts.
		if _, next, ok := e.entry(id); !ok || !next.IsZero() {
			t.Fatalf("job %s: entry %v next %s; want an entry of a stopped engine", id, ok, next)
		}
	}
	e.Start()
	t.Cleanup(func() { <-e.Stop().Done() })
	mustEntry(t, e, "a")
	mustEntry(t, e, "b")
	select {
	case <-fires:
	case <-time.After(20 * time.Second):
		t.Fatal("no fire within 20s of Start")
	}
}

// Reserve sizes an empty engine for a first Sync, which is applied as
// always (more jobs than reserved for, too); an engine that holds jobs
// keeps them and their entries.
func TestReserveBeforeTheFirstSync(t *testing.T) {
	e := newEngine(t, Options{Shards: 4})
	e.Reserve(2)
	var items []Item
	for i := range 5 {
		items = append(items, Item{Schedule: sch(fmt.Sprintf("job-%d", i), "0 9 * * *")})
	}
	if st := syncItems(e, items); st.Added != 5 || e.Known() != 5 || e.Len() != 5 {
		t.Fatalf("Sync after Reserve(2) = %+v, known %d, armed %d; want 5 added", st, e.Known(), e.Len())
	}
	before := mustEntry(t, e, "job-0")
	e.Reserve(1000)
	e.Reserve(-1)
	if e.Known() != 5 || e.Len() != 5 {
		t.Fatalf("Reserve on an engine of 5 jobs left %d known, %d armed", e.Known(), e.Len())
	}
	if got := mustEntry(t, e, "job-0"); got.id != before.id {
		t.Errorf("job-0 re-armed by a Reserve: %+v -> %+v", before, got)
	}
	if st := syncItems(e, items); st.Unchanged != 5 || st.Removed != 0 {
		t.Errorf("a second Sync of the same jobs = %+v; want all 5 unchanged", st)
	}
}

// A first Sync after Reserve changes every job it lists, and lists them in
// the room Reserve made, once: not regrown as it goes (at a million jobs
// the regrowth was four times the list's 16 MB in garbage during the
// start's full read). As in the daemon, the room is made once the read
// has begun (the collection counted before its first document), after
// Sync was called; it is the first Sync's only.
func TestFirstSyncAfterReserveListsItsChangesInOneList(t *testing.T) {
	const n = 3000
	e := newEngine(t, Options{Shards: 4})
	st, err := e.Sync(func(yield func(Item, error) bool) {
		e.Reserve(n)
		for i := range n {
			if !yield(Item{Schedule: sch(fmt.Sprintf("job-%d", i), "0 9 * * *")}, nil) {
				return
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if st.Added != n || len(st.Changed) != n || cap(st.Changed) != n {
		t.Fatalf("first Sync after Reserve(%d): %d added, Changed of length %d and capacity %d; want all %d in a list made for them",
			n, st.Added, len(st.Changed), cap(st.Changed), n)
	}
	if e.reserved != 0 {
		t.Errorf("the room reserved is still %d after the Sync that filled it", e.reserved)
	}
}

// syncItems runs e.Sync over items, which cannot fail.
func syncItems(e *Engine, items []Item) SyncStats {
	st, err := e.Sync(func(yield func(Item, error) bool) {
		for _, it := range items {
			if !yield(it, nil) {
				return
			}
		}
	})
	if err != nil {
		panic(err)
	}
	return st
}

// A read that fails part-way through a Sync keeps what was applied and
// removes nothing: the jobs it did not reach are not gone from the
// collection, only unread. The next complete Sync removes what it lacks.
func TestSyncStoppedByAReadErrorRemovesNothing(t *testing.T) {
	e := New(Options{})
	syncItems(e, []Item{{Schedule: sch("a", "0 9 * * *")}, {Schedule: sch("b", "0 9 * * *")}, {Schedule: sch("c", "0 9 * * *")}})
	boom := errors.New("read failed")
	st, err := e.Sync(func(yield func(Item, error) bool) {
		if !yield(Item{Schedule: sch("a", "0 8 * * *")}, nil) {
			return
		}
		yield(Item{}, boom)
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Sync returned %v, want the read's error", err)
	}
	if st.Replaced != 1 || st.Removed != 0 || !slices.Equal(st.Changed, []string{"a"}) {
		t.Fatalf("stats %+v, want a replaced and nothing removed", st)
	}
	for id, expr := range map[string]string{"a": "0 8 * * *", "b": "0 9 * * *", "c": "0 9 * * *"} {
		if s, ok := e.Get(id); !ok || !s.Armed || s.CronExpr != expr {
			t.Fatalf("job %s: %+v (known %v), want armed at %q", id, s, ok, expr)
		}
	}
	st = syncItems(e, []Item{{Schedule: sch("a", "0 8 * * *")}, {Schedule: sch("c", "0 9 * * *")}})
	if st.Removed != 1 || !slices.Equal(st.Changed, []string{"b"}) {
		t.Fatalf("complete Sync: %+v, want b removed", st)
	}
	if _, ok := e.Get("b"); ok {
		t.Fatal("b still known after a complete Sync without it")
	}
}

// Changed names each job the Sync changed once: those the snapshot
// listed in its order (a warm start's state file is in no id order, and
// sorting a million ids at its end held the start back), then those it
// removed, sorted; a job the snapshot lists twice (a collection scan may
// return a document that moved) is named once.
func TestSyncChangedOncePerJobInTheSnapshotsOrder(t *testing.T) {
	e := New(Options{})
	for _, id := range []string{"x", "w", "v"} {
		expect(t, e.Reload(sch(id, "0 9 * * *")), Added)
	}
	st := syncItems(e, []Item{
		{Schedule: sch("c", "0 9 * * *")},
		{Schedule: sch("a", "0 9 * * *")},
		{Schedule: sch("b", "0 9 * * *")},
		{Schedule: sch("a", "0 10 * * *")}, // listed again, changed again
		{Schedule: sch("c", "0 9 * * *")},  // listed again, unchanged
		{Schedule: sch("a", "0 10 * * *")}, // and again, unchanged
	})
	if want := []string{"c", "a", "b", "v", "w", "x"}; !slices.Equal(st.Changed, want) {
		t.Fatalf("Changed = %v, want %v", st.Changed, want)
	}
	if st.Removed != 3 {
		t.Fatalf("stats %+v, want v, w and x removed", st)
	}
	if s, ok := e.Get("a"); !ok || s.CronExpr != "0 10 * * *" {
		t.Fatalf("a = %+v (known %v), want its last listing armed", s, ok)
	}
	// A snapshot that lists no job twice keeps its order as it is.
	st = syncItems(e, []Item{{Schedule: sch("b", "0 8 * * *")}, {Schedule: sch("a", "0 8 * * *")}, {Schedule: sch("c", "0 9 * * *")}})
	if want := []string{"b", "a"}; !slices.Equal(st.Changed, want) {
		t.Fatalf("Changed = %v, want %v", st.Changed, want)
	}
}

// TestSyncHashesEachJob: jobs of one Sync that share an expression share
// its parsed schedule, except an expression with H, whose values are
// hashed from each job's id: every job gets its own slots, the same as
// Check gives it alone.
func TestSyncHashesEachJob(t *testing.T) {
	e := newEngine(t, Options{Shards: 4})
	var items []Item
	for i := range 50 {
		items = append(items, Item{Schedule: sch(fmt.Sprintf("job-%02d", i), "H H * * *")})
	}
	if st := syncItems(e, items); st.Added != len(items) {
		t.Fatalf("Sync = %+v", st)
	}
	minutes := map[int]bool{}
	now := time.Now()
	for _, it := range items {
		sched, err := Check(it.Schedule, time.UTC, nil)
		if err != nil {
			t.Fatal(err)
		}
		st := mustGet(t, e, it.Schedule.ID)
		if want := sched.Next(now); !st.NextRun.Equal(want) {
			t.Fatalf("%s: armed for %s, Check gives %s", it.Schedule.ID, st.NextRun, want)
		}
		minutes[st.NextRun.Minute()] = true
	}
	if len(minutes) < 20 {
		t.Fatalf("50 jobs on \"H H * * *\" spread over %d minutes of the hour", len(minutes))
	}
}

// A job listed Same is kept as the engine has it, counted unchanged and not
// removed, its armed entry untouched; a Same job the engine does not know
// is not added (it was never decoded); a job the snapshot does not list is
// removed as always.
func TestSyncKeepsJobsListedSame(t *testing.T) {
	e := newEngine(t, Options{})
	syncItems(e, []Item{{Schedule: sch("a", "0 9 * * *")}, {Schedule: sch("b", "0 9 * * *")}, {Schedule: sch("gone", "0 9 * * *")}})
	before := mustEntry(t, e, "a")
	if !e.Knows("a") || e.Knows("nobody") {
		t.Fatal("Knows: want a known, nobody not")
	}
	st := syncItems(e, []Item{
		{Schedule: schedule.Schedule{ID: "a"}, Same: true},
		{Schedule: sch("b", "0 10 * * *")},
		{Schedule: schedule.Schedule{ID: "nobody"}, Same: true},
	})
	if st.Unchanged != 1 || st.Replaced != 1 || st.Removed != 1 || st.Added != 0 || !slices.Equal(st.Changed, []string{"b", "gone"}) {
		t.Fatalf("stats %+v, want a unchanged, b replaced, gone removed, nothing added", st)
	}
	if got := mustEntry(t, e, "a"); got.id != before.id {
		t.Fatalf("a job listed Same was re-armed: %+v -> %+v", before, got)
	}
	if s, ok := e.Get("a"); !ok || !s.Armed || s.CronExpr != "0 9 * * *" {
		t.Fatalf("a = %+v (known %v), want armed as it was", s, ok)
	}
	if e.Knows("nobody") || e.Knows("gone") {
		t.Fatal("an unknown job listed Same was added, or an unlisted one kept")
	}
	// Listed Same, a job stays listed: the next Sync that lists it keeps it.
	st = syncItems(e, []Item{{Schedule: schedule.Schedule{ID: "a"}, Same: true}, {Schedule: sch("b", "0 10 * * *")}})
	if st.Removed != 0 || st.Unchanged != 2 || !e.Knows("a") {
		t.Fatalf("stats %+v, want nothing removed", st)
	}
}

// Once the start's load is done, a change a full read finds — a poll, a
// resync, an edit its read met before the edit's event — is logged per job
// at info level as an event's Reload is ("schedule applied", the job, its
// outcome): an operator who edits a job on a deployment that polls (a
// standalone server) sees the line for it. The start's load logs its
// million jobs at debug level, and a read that finds nothing logs nothing
// at info, not even the totals. A load that fails part-way is still the
// start's: its retry logs at debug level too.
func TestSyncLogsEachChangeOnceLoaded(t *testing.T) {
	var buf syncBuffer
	e := newEngine(t, Options{Shards: 4, Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
	type line struct {
		Msg, JobID, Outcome string
		Added               int
	}
	lines := func() []line {
		t.Helper()
		var out []line
		for l := range strings.Lines(buf.String()) {
			var rec struct {
				Msg     string `json:"msg"`
				JobID   string `json:"job_id"`
				Outcome string `json:"outcome"`
				Added   int    `json:"added"`
			}
			if err := json.Unmarshal([]byte(l), &rec); err != nil {
				t.Fatal(err)
			}
			out = append(out, line{rec.Msg, rec.JobID, rec.Outcome, rec.Added})
		}
		buf.mu.Lock()
		buf.b.Reset()
		buf.mu.Unlock()
		return out
	}
	broken := errors.New("read cut")
	if _, err := e.Sync(func(yield func(Item, error) bool) {
		_ = yield(Item{Schedule: sch("a", "0 9 * * *")}, nil) && yield(Item{}, broken)
	}); !errors.Is(err, broken) {
		t.Fatalf("Sync = %v, want the read's error", err)
	}
	syncItems(e, []Item{{Schedule: sch("a", "0 9 * * *")}, {Schedule: sch("b", "0 9 * * *")}})
	if got, want := lines(), []line{{Msg: "scheduler: full sync applied", Added: 1}}; !slices.Equal(got, want) {
		t.Errorf("the start's load and its retry logged %+v at info, want only the retry's totals %+v", got, want)
	}
	syncItems(e, []Item{{Schedule: sch("a", "0 8 * * *")}, {Schedule: sch("b", "0 9 * * *")}})
	if got, want := lines(), []line{{Msg: "scheduler: schedule applied", JobID: "a", Outcome: "replaced"}, {Msg: "scheduler: full sync applied"}}; !slices.Equal(got, want) {
		t.Errorf("a read that found job a changed logged %+v at info, want %+v", got, want)
	}
	syncItems(e, []Item{{Schedule: sch("a", "0 8 * * *")}, {Schedule: sch("b", "0 9 * * *")}})
	if got := lines(); len(got) != 0 {
		t.Errorf("a read that found nothing changed logged %+v at info, want nothing", got)
	}
}
