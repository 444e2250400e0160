package firepath

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cronswap/cronswap/internal/actions"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/internal/runstore"
	"github.com/cronswap/cronswap/jobs"
	"github.com/cronswap/cronswap/schedule"
)

// everySecond is the slot sequence of an every-second job.
func everySecond(t time.Time) time.Time { return t.Truncate(time.Second).Add(time.Second) }

// every returns the slot sequence of a job firing every d (from the epoch).
func every(d time.Duration) record.NextFunc {
	return func(t time.Time) time.Time { return t.Truncate(d).Add(d) }
}

// manualClock is a Clock a test moves by hand.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Consecutive dropped slots of one job and reason wait as one range; a
// different reason, a hole, or another job starts a new one.
func TestLedgerJoinsConsecutiveSlots(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	l := newLedger(10)
	one := func(job string, s time.Time, reason string) *pendingMiss {
		return &pendingMiss{MissedRange: record.MissedRange{JobID: job, From: s, To: s, Count: 1, Reason: reason},
			next: everySecond, notBefore: s.Add(2 * time.Second)}
	}
	for i := range 40 {
		if !l.add(one("tick", t0.Add(time.Duration(i)*time.Second), record.MissedStartingDeadline), false) {
			t.Fatal("ledger refused a slot that continues a range")
		}
	}
	l.add(one("tick", t0.Add(40*time.Second), record.MissedShuttingDown), false)     // other reason
	l.add(one("tick", t0.Add(50*time.Second), record.MissedShuttingDown), false)     // a hole before it
	l.add(one("other", t0.Add(41*time.Second), record.MissedShuttingDown), false)    // another job
	l.add(one("tick", t0.Add(10*time.Second), record.MissedStartingDeadline), false) // already waiting
	if l.n != 4 {
		t.Fatalf("%d ranges waiting, want 4", l.n)
	}
	if got := l.take(t0.Add(41 * time.Second)); len(got) != 1 || got[0].Count != 40 ||
		!got[0].From.Equal(t0) || !got[0].To.Equal(t0.Add(39*time.Second)) {
		t.Fatalf("recordable 2 s after the 40th slot: %+v, want the one range of 40", got)
	}
	if got := l.take(t0.Add(time.Hour)); len(got) != 3 {
		t.Fatalf("then %d ranges, want the other 3", len(got))
	}
	small := newLedger(1)
	small.add(one("a", t0, record.MissedShuttingDown), false)
	if small.add(one("b", t0, record.MissedShuttingDown), false) {
		t.Fatal("a full ledger took a new range")
	}
	if !small.add(one("a", t0.Add(time.Second), record.MissedShuttingDown), false) {
		t.Fatal("a full ledger refused a slot continuing a waiting range")
	}
}

// deadlineRunner is a runner without a store on a manual clock, with one
// worker.
func deadlineRunner(t *testing.T, clock Clock, deadline time.Duration, reg *actions.Registry, notRun func(string)) *Runner {
	t.Helper()
	r := NewRunner(RunnerOptions{Registry: reg, InstanceID: "a", Logger: slog.New(slog.DiscardHandler), Clock: clock,
		Workers: 1, StartingDeadline: deadline,
		Hooks: Hooks{NotRun: func(_ string, _ time.Time, reason string) { notRun(reason) }}})
	t.Cleanup(func() { r.Shutdown(10 * time.Second) })
	return r
}

// A fire that waited for a worker past its starting deadline is not run
// when the worker takes it; one taken in time runs.
func TestRunnerStartingDeadlineAtTake(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := &manualClock{now: t0}
	reg := actions.NewRegistry()
	release := make(chan struct{})
	blocking := make(chan struct{}, 1)
	var ran sync.Map
	reg.Register("block", actions.Action{Handler: jobs.HandlerFunc(func(context.Context, jobs.Run) error { blocking <- struct{}{}; <-release; return nil })})
	reg.Register("j", actions.Action{Handler: jobs.HandlerFunc(func(_ context.Context, f jobs.Run) error { ran.Store(f.Slot, true); return nil })})
	reasons := make(chan string, 10)
	r := deadlineRunner(t, clock, 2*time.Second, reg, func(reason string) { reasons <- reason })

	go r.Fire(dueAt("block", t0))
	<-blocking
	late := make(chan struct{})
	go func() {
		defer close(late)
		r.Fire(schedule.Due{Schedule: schedule.Schedule{ID: "j", Enabled: true}, Slot: t0, Delay: time.Second})
	}()
	waitUntil(t, "the fire queued behind the busy worker", func() bool { return r.gate.Waiting() == 1 })
	clock.Add(3*time.Second + time.Millisecond) // past slot + jitter + deadline
	close(release)
	<-late
	if _, ok := ran.Load(t0); ok {
		t.Fatal("a fire past its starting deadline ran")
	}
	select {
	case got := <-reasons:
		if got != NotRunStartingDeadline {
			t.Fatalf("reason %q, want %q", got, NotRunStartingDeadline)
		}
	default:
		t.Fatal("the late fire was not reported not run")
	}
	// Within the deadline it runs: 3 s after its slot, with 1 s jitter.
	r.Fire(schedule.Due{Schedule: schedule.Schedule{ID: "j", Enabled: true}, Slot: t0.Add(time.Second), Delay: time.Second})
	if _, ok := ran.Load(t0.Add(time.Second)); !ok {
		t.Fatal("a fire within its starting deadline did not run")
	}
}

// lateStore answers claims after moving the clock past the fire's
// deadline, as a claim blocked by the database would.
type lateStore struct {
	*runstore.Store
	clock *manualClock
	by    time.Duration
}

func (s *lateStore) ClaimBatch(ctx context.Context, b record.BatchClaim) []record.ClaimOutcome {
	out := s.Store.ClaimBatch(ctx, b)
	s.clock.Add(s.by)
	return out
}

// A claim answered after the starting deadline does not start the action:
// its record becomes a missed record (starting_deadline) and the lock is
// free again.
func TestRunnerStartingDeadlineAfterClaim(t *testing.T) {
	t.Parallel()
	e := newStoreEnv(t)
	slot := time.Now().Truncate(time.Second).UTC()
	clock := &manualClock{now: slot}
	reg := actions.NewRegistry()
	var ran atomic.Int32
	reg.Register("j", actions.Action{Handler: jobs.HandlerFunc(func(context.Context, jobs.Run) error { ran.Add(1); return nil }), Policy: jobs.Policy{StartingDeadline: 5 * time.Second}})
	var missed atomic.Int64
	r := NewRunner(RunnerOptions{Registry: reg, InstanceID: "a", Logger: slog.New(slog.DiscardHandler), Clock: clock,
		Store: &lateStore{Store: e.replica("a", "i").Store, clock: clock, by: 6 * time.Second},
		Hooks: Hooks{Missed: func(_, reason string, n int64) {
			if reason == record.MissedStartingDeadline {
				missed.Add(n)
			}
		}}})
	t.Cleanup(func() { r.Shutdown(10 * time.Second) })
	r.Fire(dueAt("j", slot))
	if ran.Load() != 0 {
		t.Fatal("the action started after its deadline")
	}
	docs := e.runDocs(t, "j")
	if len(docs) != 1 || docs[0].Status != record.StatusMissed || docs[0].Reason != record.MissedStartingDeadline || docs[0].Count != 1 ||
		!docs[0].LastScheduledAt.Equal(slot) || !docs[0].StartedAt.IsZero() {
		t.Fatalf("records %+v, want one missed record (starting_deadline) of the slot", docs)
	}
	if l := e.lock(t, "j"); l.State != record.LockFree || l.LastOutcome != record.StatusMissed {
		t.Fatalf("lock %+v, want free with last outcome missed", l)
	}
	if missed.Load() != 1 {
		t.Fatalf("Missed hook counted %d slots, want 1", missed.Load())
	}
}

// unreachableStore fails every claim as if the database could not be
// reached, until healed.
type unreachableStore struct {
	*runstore.Store
	healed atomic.Bool
}

func (s *unreachableStore) ClaimBatch(ctx context.Context, b record.BatchClaim) []record.ClaimOutcome {
	if !s.healed.Load() {
		out := make([]record.ClaimOutcome, len(b.Fires))
		for i, f := range b.Fires {
			out[i].Err = fmt.Errorf("claim %s: %w: no server", f.JobID, record.ErrUnreachable)
		}
		return out
	}
	return s.Store.ClaimBatch(ctx, b)
}

// Fires dropped because the claim could not reach the database wait in
// memory and are recorded, as one range, once no replica can start them
// any more; a slot that ran in between is left out.
func TestRunnerRecordsDroppedFiresAsOneRange(t *testing.T) {
	t.Parallel()
	e := newStoreEnv(t)
	t0 := time.Now().Truncate(time.Second).UTC()
	clock := &manualClock{now: t0}
	reg := actions.NewRegistry()
	reg.Register("tick", actions.Action{Handler: jobs.HandlerFunc(func(context.Context, jobs.Run) error { return nil })})
	store := &unreachableStore{Store: e.replica("a", "i").Store}
	var missed atomic.Int64
	r := NewRunner(RunnerOptions{Registry: reg, InstanceID: "a", Logger: slog.New(slog.DiscardHandler), Clock: clock,
		Store: store, Slots: func(string) (record.NextFunc, bool) { return everySecond, true },
		Hooks: Hooks{Missed: func(_, _ string, n int64) { missed.Add(n) }}})
	t.Cleanup(func() { r.Shutdown(10 * time.Second) })
	for i := range 30 {
		r.Fire(dueAt("tick", t0.Add(time.Duration(i)*time.Second)))
		clock.Add(time.Second)
	}
	if got := r.missed.n; got != 1 {
		t.Fatalf("%d ranges waiting, want the 30 slots as one", got)
	}
	store.healed.Store(true)
	r.Fire(dueAt("tick", t0.Add(30*time.Second))) // runs
	clock.Add(2*time.Second + time.Millisecond)   // past the last dropped slot's deadline (1 s) and margin
	waitUntil(t, "the range recorded", func() bool { return missed.Load() == 30 })
	docs := e.runDocs(t, "tick")
	if len(docs) != 2 || docs[0].Status != record.StatusMissed || docs[0].Reason != record.MissedUnreachable || docs[0].Count != 30 ||
		!docs[0].ScheduledAt.Equal(t0) || !docs[0].LastScheduledAt.Equal(t0.Add(29*time.Second)) ||
		docs[1].Status != record.StatusSucceeded {
		t.Fatalf("records %+v, want one missed range of 30 (database_unreachable) and the run after it", docs)
	}
}

// The default starting deadline is the time to the job's next slot, at
// most MaxDefaultStartingDeadline; the action's own, then the runner's,
// come first.
func TestStartingDeadlineDefaults(t *testing.T) {
	reg := actions.NewRegistry()
	reg.Register("plain", actions.Action{Handler: jobs.HandlerFunc(func(context.Context, jobs.Run) error { return nil })})
	reg.Register("own", actions.Action{Handler: jobs.HandlerFunc(func(context.Context, jobs.Run) error { return nil }), Policy: jobs.Policy{StartingDeadline: 42 * time.Second}})
	slots := map[string]record.NextFunc{"sec": everySecond, "five": every(5 * time.Second), "daily": every(24 * time.Hour)}
	r := NewRunner(RunnerOptions{Registry: reg, Logger: slog.New(slog.DiscardHandler),
		Slots: func(id string) (record.NextFunc, bool) { n, ok := slots[id]; return n, ok }})
	defer r.Shutdown(time.Second)
	slot := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	due := func(id, action string) schedule.Due {
		return schedule.Due{Schedule: schedule.Schedule{ID: id, Job: action, Enabled: true}, Slot: slot}
	}
	for _, c := range []struct {
		due  schedule.Due
		want time.Duration
	}{
		{due("sec", "plain"), time.Second},
		{due("five", "plain"), 5 * time.Second},
		{due("daily", "plain"), MaxDefaultStartingDeadline},
		{due("unknown", "plain"), MaxDefaultStartingDeadline},
		{due("sec", "own"), 42 * time.Second},
	} {
		if got := r.startingDeadline(c.due); got != c.want {
			t.Errorf("%s/%s: %s, want %s", c.due.Schedule.ID, c.due.Schedule.Job, got, c.want)
		}
	}
	r2 := NewRunner(RunnerOptions{Registry: reg, Logger: slog.New(slog.DiscardHandler), StartingDeadline: time.Minute,
		Slots: func(id string) (record.NextFunc, bool) { n, ok := slots[id]; return n, ok }})
	defer r2.Shutdown(time.Second)
	if got := r2.startingDeadline(due("sec", "plain")); got != time.Minute {
		t.Errorf("runner default: %s, want 1m", got)
	}
	if got := r2.startingDeadline(due("sec", "own")); got != 42*time.Second {
		t.Errorf("own over runner default: %s, want 42s", got)
	}
}

// A fire that comes due while the queue is at its bound is not queued:
// it is reported not run (queue_full), never silently lost.
func TestRunnerQueueBound(t *testing.T) {
	t.Parallel()
	reg := actions.NewRegistry()
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	reg.Register("block", actions.Action{Handler: jobs.HandlerFunc(func(context.Context, jobs.Run) error { started <- struct{}{}; <-release; return nil }), Policy: jobs.Policy{Overlap: jobs.OverlapAllow}})
	var mu sync.Mutex
	var reasons []string
	r := NewRunner(RunnerOptions{Registry: reg, Logger: slog.New(slog.DiscardHandler), Workers: 1, QueueLimit: 2,
		Hooks: Hooks{NotRun: func(_ string, _ time.Time, reason string) { mu.Lock(); reasons = append(reasons, reason); mu.Unlock() }}})
	t.Cleanup(func() { r.Shutdown(10 * time.Second) })
	slot := time.Now().Add(time.Hour)
	go r.Fire(dueAt("block", slot))
	<-started
	for i := range 2 {
		go r.Fire(dueAt("block", slot.Add(time.Duration(i+1)*time.Second)))
	}
	waitUntil(t, "two fires queued", func() bool { return r.gate.Waiting() == 2 })
	third := make(chan struct{})
	go func() { defer close(third); r.Fire(dueAt("block", slot.Add(10*time.Second))) }()
	select {
	case <-third:
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("a fire past the queue bound was queued")
	}
	mu.Lock()
	got := fmt.Sprint(reasons)
	mu.Unlock()
	if got != "["+NotRunQueueFull+"]" {
		t.Fatalf("not-run reasons %s, want one %s", got, NotRunQueueFull)
	}
	close(release)
}

// waitUntil polls cond until it holds, failing the test after 10 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// replica is one claimer: a store and the instance and incarnation it
// claims as.
type replica struct {
	*runstore.Store
	inst, inc string
}

func (r replica) claim(t testing.TB, now time.Time, ttl time.Duration, fires ...record.FireClaim) []record.ClaimOutcome {
	t.Helper()
	return r.ClaimBatch(testCtx(t), record.BatchClaim{Fires: fires, Instance: r.inst, Incarnation: r.inc, Now: now, TTL: ttl})
}

// claimOne claims one fire and wants result.
func (r replica) claimOne(t testing.TB, f record.FireClaim, now time.Time, want record.ClaimResult) record.ClaimOutcome {
	t.Helper()
	o := r.claim(t, now, 10*time.Second, f)[0]
	if o.Err != nil {
		t.Fatalf("claim %s at %s by %s/%s: %v", f.JobID, f.Slot.Format(time.TimeOnly), r.inst, r.inc, o.Err)
	}
	if o.Result != want {
		t.Fatalf("claim %s at %s by %s/%s = %v (%+v), want %v", f.JobID, f.Slot.Format(time.TimeOnly), r.inst, r.inc, o.Result, o, want)
	}
	return o
}

func (r replica) end(t *testing.T, l record.Lease, at time.Time) {
	t.Helper()
	if errs := r.EndBatch(testCtx(t), []record.LeaseEnd{{Lease: l, End: record.RunEnd{Status: record.StatusSucceeded, EndedAt: at}}}); errs[0] != nil {
		t.Fatalf("end %s: %v", l.RunID, errs[0])
	}
}
