package firepath

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cronswap/cronswap/internal/actions"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/jobs"
)

// The claim-latency estimate: claim budgets and the
// non-owner's grace follow what the database's claim batches take.

// The estimate is the 90th percentile of the recent batches; none before
// latencyMinSamples of them, and none once they are older than
// latencyMaxAge.
func TestClaimLatencyEstimate(t *testing.T) {
	t.Parallel()
	var l claimLatency
	now := time.Now()
	if got := l.estimate(now); got != 0 {
		t.Fatalf("estimate %v with no batches, want 0", got)
	}
	for i := range latencyMinSamples - 1 {
		l.observe(now, time.Duration(i+1)*time.Second)
	}
	if got := l.estimate(now); got != 0 {
		t.Fatalf("estimate %v with %d batches, want 0 (too few)", got, latencyMinSamples-1)
	}
	// 1 s … 10 s: the 90th percentile is 9 s.
	for i := latencyMinSamples - 1; i < 10; i++ {
		l.observe(now, time.Duration(i+1)*time.Second)
	}
	if got := l.estimate(now); got != 9*time.Second {
		t.Fatalf("estimate %v over 1 s … 10 s, want 9s", got)
	}
	// A full window of fast batches replaces the slow ones.
	for range latencyWindow {
		l.observe(now, 5*time.Millisecond)
	}
	if got := l.estimate(now); got != 5*time.Millisecond {
		t.Fatalf("estimate %v after a window of 5 ms batches, want 5ms", got)
	}
	if got := l.estimate(now.Add(latencyMaxAge + time.Second)); got != 0 {
		t.Fatalf("estimate %v once every batch is older than %v, want 0", got, latencyMaxAge)
	}
}

// slowStore is a memStore whose claim batches take took by the runner's
// manual clock; it records the fires sent and the budget each batch had.
type slowStore struct {
	*memStore
	clock *manualClock
	took  time.Duration

	mu      sync.Mutex
	sent    map[string]bool
	budgets []time.Duration
}

func newSlowStore(clock *manualClock, took time.Duration) *slowStore {
	return &slowStore{memStore: newMemStore(), clock: clock, took: took, sent: map[string]bool{}}
}

func (s *slowStore) ClaimBatch(ctx context.Context, b record.BatchClaim) []record.ClaimOutcome {
	s.mu.Lock()
	for _, f := range b.Fires {
		s.sent[f.JobID] = true
	}
	if dl, ok := ctx.Deadline(); ok {
		s.budgets = append(s.budgets, time.Until(dl))
	}
	s.mu.Unlock()
	out := s.memStore.ClaimBatch(ctx, b)
	s.clock.Add(s.took)
	return out
}

func (s *slowStore) wasSent(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sent[id]
}

func (s *slowStore) lastBudget() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.budgets[len(s.budgets)-1]
}

// warmUp runs n fires one after the other, each in a batch of its own,
// so that the runner measured n batches.
func warmUp(t *testing.T, r *Runner, clock Clock, n int) {
	t.Helper()
	for i := range n {
		r.Fire(memDue(fmt.Sprintf("warm%d", i), clock.Now()))
	}
}

// claimReq is a claim request for a fire of job id that must start within
// left of now.
func claimReq(id string, now time.Time, left time.Duration) claimRequest {
	return claimRequest{FireClaim: record.FireClaim{JobID: id, Slot: now.UTC()}, startBy: now.Add(left)}
}

// With claim batches that take 3 s, a fire with 1 s left is not sent (it
// is dropped as past its starting deadline, the reason recorded), and a
// batch is given at least the 3 s it needs (without the estimate: the
// 2 s its most urgent fire has left).
func TestClaimBatchSkipsHopelessFiresOnASlowDatabase(t *testing.T) {
	t.Parallel()
	clock := &manualClock{now: time.Now()}
	const took = 3 * time.Second
	store := newSlowStore(clock, took)
	reg := actions.NewRegistry()
	var ran atomic.Int32
	reg.Register("a", actions.Action{Handler: jobs.HandlerFunc(func(context.Context, jobs.Run) error { ran.Add(1); return nil })})
	var mu sync.Mutex
	notRun := map[string]string{}
	r := memRunner(t, store, reg, "r1", func(o *RunnerOptions) {
		o.Clock = clock
		o.Hooks.NotRun = func(id string, _ time.Time, reason string) { mu.Lock(); notRun[id] = reason; mu.Unlock() }
	})
	warmUp(t, r, clock, latencyMinSamples)
	if est := r.LatencyEstimate(); est != took {
		t.Fatalf("estimate %v after %d batches of %v, want %v", est, latencyMinSamples, took, took)
	}

	now := clock.Now()
	out := r.claimBatch([]claimRequest{claimReq("near", now, time.Second), claimReq("mid", now, 2*time.Second),
		claimReq("far", now, time.Minute)})
	if store.wasSent("near") {
		t.Fatal("the fire with 1 s left was sent in a batch that takes 3 s")
	}
	if out[0].Err != errClaimTooLate {
		t.Fatalf("fire with 1 s left: %+v, want errClaimTooLate", out[0])
	}
	for i, id := range []string{"mid", "far"} {
		if !store.wasSent(id) || out[i+1].Err != nil || out[i+1].Result != record.Acquired {
			t.Fatalf("fire %s: sent %v, outcome %+v; want sent and acquired", id, store.wasSent(id), out[i+1])
		}
	}
	// The budget is set just before the call: the margin is the time
	// between the two, far below the 1 s between the old budget and the
	// new.
	if b := store.lastBudget(); b < took-500*time.Millisecond {
		t.Fatalf("batch budget %v, want at least the estimate %v", b, took)
	}

	// Through the fire path: a fire with 1 s left is not sent, and is
	// recorded not run for its starting deadline.
	d := memDue("late", clock.Now().Add(-time.Minute+time.Second))
	r.Fire(d)
	if store.wasSent("late") {
		t.Fatal("the fire with 1 s left was sent")
	}
	mu.Lock()
	reason := notRun["late"]
	mu.Unlock()
	if reason != NotRunStartingDeadline {
		t.Fatalf("fire with 1 s left not run for %q, want %q", reason, NotRunStartingDeadline)
	}
	// A fire with time to spare still runs.
	before := ran.Load()
	r.Fire(memDue("spare", clock.Now()))
	if ran.Load() != before+1 {
		t.Fatal("a fire with a minute left did not run")
	}
}

// With a healthy database nothing changes: every fire is sent however
// little time it has left, the budget is as without an estimate, and the
// grace is ClaimGrace.
func TestClaimBatchFastDatabaseChangesNothing(t *testing.T) {
	t.Parallel()
	clock := &manualClock{now: time.Now()}
	store := newSlowStore(clock, 5*time.Millisecond)
	reg := actions.NewRegistry()
	reg.Register("a", actions.Action{Handler: jobs.HandlerFunc(func(context.Context, jobs.Run) error { return nil })})
	r := memRunner(t, store, reg, "r1", func(o *RunnerOptions) { o.Clock = clock })
	warmUp(t, r, clock, 2*latencyMinSamples)
	if est := r.LatencyEstimate(); est != 5*time.Millisecond {
		t.Fatalf("estimate %v, want 5ms", est)
	}
	now := clock.Now()
	out := r.claimBatch([]claimRequest{claimReq("urgent", now, time.Millisecond), claimReq("soon", now, 150*time.Millisecond)})
	for i, id := range []string{"urgent", "soon"} {
		if !store.wasSent(id) || out[i].Err != nil {
			t.Fatalf("fire %s: sent %v, outcome %+v; want sent", id, store.wasSent(id), out[i])
		}
	}
	if b := store.lastBudget(); b > minClaimBudget {
		t.Fatalf("budget %v, want at most minClaimBudget %v (as without an estimate)", b, minClaimBudget)
	}
	if g := r.claimGrace(time.Minute); g != DefaultClaimGrace {
		t.Fatalf("grace %v with a fast database, want ClaimGrace %v", g, DefaultClaimGrace)
	}
}

// The grace grows with the estimate, at most half the starting deadline.
func TestClaimGraceFollowsTheEstimate(t *testing.T) {
	t.Parallel()
	r := NewRunner(RunnerOptions{Registry: actions.NewRegistry(), InstanceID: "r1"})
	defer r.Shutdown(time.Second)
	if g := r.claimGrace(time.Minute); g != DefaultClaimGrace {
		t.Fatalf("grace %v with no estimate, want %v", g, DefaultClaimGrace)
	}
	seedLatency(r, 3*time.Second)
	if g, want := r.claimGrace(time.Minute), graceFactor*3*time.Second; g != want {
		t.Fatalf("grace %v with batches of 3 s, want %v", g, want)
	}
	if g := r.claimGrace(4 * time.Second); g != 2*time.Second {
		t.Fatalf("grace %v for a fire with a 4 s starting deadline, want 2s (half)", g)
	}
	seedLatency(r, time.Hour) // a batch that overran its budget
	if g, want := r.claimGrace(time.Hour), graceFactor*DefaultOpTimeout; g != want {
		t.Fatalf("grace %v with an overrun batch, want %v (the estimate capped at OpTimeout)", g, want)
	}
}

// seedLatency gives r a full window of claim batches that took took.
func seedLatency(r *Runner, took time.Duration) {
	for range latencyWindow {
		r.latency.observe(r.clock.Now(), took)
	}
}

// When claim batches are slow, a non-owner waits for them: an owner that
// claims after three times ClaimGrace — within twice the estimate — keeps
// its fire (without the estimate the non-owner claimed it after
// ClaimGrace and ran it).
func TestOwnerSlowOnASlowDatabaseKeepsItsFire(t *testing.T) {
	t.Parallel()
	store := newMemStore()
	const grace = 100 * time.Millisecond
	release := make(chan struct{})
	store.beforeClaim = func(b record.BatchClaim) {
		if b.Instance == "owner" {
			<-release
		}
	}
	reg := actions.NewRegistry()
	ranBy := make(chan string, 10)
	reg.Register("a", actions.Action{Handler: jobs.HandlerFunc(func(_ context.Context, f jobs.Run) error { ranBy <- f.InstanceID; return nil })})
	var takeovers atomic.Int32
	other := memRunner(t, store, reg, "other", func(o *RunnerOptions) {
		o.Owns = func(string) bool { return false }
		o.ClaimGrace = grace
		o.Hooks.OwnerTakeover = func(string) { takeovers.Add(1) }
	})
	owner := memRunner(t, store, reg, "owner", func(o *RunnerOptions) { o.Owns = func(string) bool { return true } })
	// The other replica's batches took 1 s: its grace is 2 s.
	seedLatency(other, time.Second)

	slot := time.Now()
	// The owner's claim answers 3 × ClaimGrace after the slot.
	time.AfterFunc(time.Until(slot.Add(3*grace)), func() { close(release) })
	done := make(chan struct{})
	go func() { defer close(done); other.Fire(memDue("j", slot)) }()
	owner.Fire(memDue("j", slot))
	<-done
	if got := receive(t, ranBy); got != "owner" {
		t.Fatalf("ran by %s, want the owner", got)
	}
	if takeovers.Load() != 0 || len(ranBy) != 0 {
		t.Fatalf("the non-owner took the fire over (takeovers %d)", takeovers.Load())
	}
}

// A dead owner's fire is still taken over, within half its starting
// deadline, however slow the batches were.
func TestDeadOwnerTakenOverWithinBoundedGrace(t *testing.T) {
	t.Parallel()
	store := newMemStore()
	reg := actions.NewRegistry()
	ranBy := make(chan string, 10)
	reg.Register("a", actions.Action{Handler: jobs.HandlerFunc(func(_ context.Context, f jobs.Run) error { ranBy <- f.InstanceID; return nil })})
	var takeovers atomic.Int32
	const deadline = 2 * time.Second
	other := memRunner(t, store, reg, "other", func(o *RunnerOptions) {
		o.Owns = func(string) bool { return false }
		o.ClaimGrace = 100 * time.Millisecond
		o.StartingDeadline = deadline
		o.Hooks.OwnerTakeover = func(string) { takeovers.Add(1) }
	})
	// Batches of 800 ms: a grace of 1.6 s, capped at 1 s; the fire then
	// has 1 s left, enough for such a batch.
	seedLatency(other, 800*time.Millisecond)

	slot := time.Now()
	other.Fire(memDue("j", slot))
	if got := receive(t, ranBy); got != "other" {
		t.Fatalf("ran by %s, want the other replica", got)
	}
	if takeovers.Load() != 1 {
		t.Fatalf("owner takeovers %d, want 1", takeovers.Load())
	}
	if rec, _ := store.record(record.RunID("j", slot)); rec.StartedAt.Sub(slot) < deadline/2 {
		t.Fatalf("claimed %v after the slot, before the grace %v", rec.StartedAt.Sub(slot), deadline/2)
	}
}

// receive returns the next value of c, failing the test if none comes
// within 10 s.
func receive[T any](t *testing.T, c <-chan T) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for a value")
		panic("unreachable")
	}
}
