package firepath

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cronswap/cronswap/internal/actions"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/jobs"
	"github.com/cronswap/cronswap/schedule"
)

// memRunner is a runner on store with instance id inst.
func memRunner(t *testing.T, store record.Store, reg *actions.Registry, inst string, mod func(*RunnerOptions)) *Runner {
	t.Helper()
	o := RunnerOptions{Registry: reg, InstanceID: inst, Logger: slog.New(slog.DiscardHandler), Store: store,
		StartingDeadline: time.Minute}
	if mod != nil {
		mod(&o)
	}
	r := NewRunner(o)
	t.Cleanup(func() { r.Shutdown(10 * time.Second) })
	return r
}

func memDue(id string, slot time.Time) schedule.Due {
	return schedule.Due{Schedule: schedule.Schedule{ID: id, Enabled: true, Job: "a"}, Slot: slot}
}

// Fires that come due while a claim batch is out are claimed together in
// the next: a burst costs a few store calls, not one per fire.
func TestRunnerClaimsABurstInBatches(t *testing.T) {
	t.Parallel()
	store := newMemStore()
	first := make(chan struct{})
	var held atomic.Int32
	store.beforeClaim = func(b record.BatchClaim) {
		held.Add(int32(len(b.Fires)))
		<-first
	}
	reg := actions.NewRegistry()
	var ran atomic.Int32
	reg.Register("a", actions.Action{Handler: jobs.HandlerFunc(func(context.Context, jobs.Run) error { ran.Add(1); return nil })})
	r := memRunner(t, store, reg, "r1", nil)
	slot := time.Now().Truncate(time.Second)
	const n = 1000
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { r.Fire(memDue(fmt.Sprintf("j%d", i), slot)) })
	}
	// The first batches are held until every other fire waits behind them.
	waitUntil(t, "the first batches out and the other fires waiting", func() bool {
		return int(held.Load())+r.claims.Waiting() == n
	})
	close(first)
	wg.Wait()
	if got := ran.Load(); got != n {
		t.Fatalf("%d actions ran, want %d", got, n)
	}
	sizes := store.batchSizes()
	total := 0
	for _, s := range sizes {
		total += s
	}
	if total != n || len(sizes) > claimBatchesAtOnce+n/claimBatchMax+1 {
		t.Fatalf("claim batches %v: want %d fires in at most %d batches", sizes, n, claimBatchesAtOnce+n/claimBatchMax+1)
	}
}

// Two replicas sharing the store run each fire of a burst exactly once.
func TestRunnerBurstExactlyOnceAcrossReplicas(t *testing.T) {
	t.Parallel()
	store := newMemStore()
	reg := actions.NewRegistry()
	var mu sync.Mutex
	runs := map[string]int{}
	reg.Register("a", actions.Action{Handler: jobs.HandlerFunc(func(_ context.Context, f jobs.Run) error {
		mu.Lock()
		runs[f.RunID]++
		mu.Unlock()
		return nil
	})})
	r1 := memRunner(t, store, reg, "r1", nil)
	r2 := memRunner(t, store, reg, "r2", nil)
	slot := time.Now().Truncate(time.Second)
	var wg sync.WaitGroup
	for i := range 500 {
		d := memDue(fmt.Sprintf("j%d", i), slot)
		wg.Go(func() { r1.Fire(d) })
		wg.Go(func() { r2.Fire(d) })
	}
	wg.Wait()
	if len(runs) != 500 {
		t.Fatalf("%d fires ran, want 500", len(runs))
	}
	for id, n := range runs {
		if n != 1 {
			t.Fatalf("fire %s ran %d times", id, n)
		}
	}
}

// A replica that does not own a job claims its fire only after the grace:
// the owner's claim comes first and the other replica's finds it taken;
// with no owner claiming, the other replica runs it after the grace and
// says so.
func TestRunnerNonOwnerClaimsAfterGrace(t *testing.T) {
	t.Parallel()
	store := newMemStore()
	reg := actions.NewRegistry()
	ranBy := make(chan string, 10)
	reg.Register("a", actions.Action{Handler: jobs.HandlerFunc(func(_ context.Context, f jobs.Run) error { ranBy <- f.InstanceID; return nil })})
	const grace = 300 * time.Millisecond
	var takeovers atomic.Int32
	other := memRunner(t, store, reg, "other", func(o *RunnerOptions) {
		o.Owns = func(string) bool { return false }
		o.ClaimGrace = grace
		o.Hooks.OwnerTakeover = func(string) { takeovers.Add(1) }
	})
	owner := memRunner(t, store, reg, "owner", func(o *RunnerOptions) { o.Owns = func(string) bool { return true } })

	slot := time.Now()
	done := make(chan struct{})
	go func() { defer close(done); other.Fire(memDue("j", slot)) }()
	owner.Fire(memDue("j", slot))
	<-done
	if got := <-ranBy; got != "owner" {
		t.Fatalf("ran by %s, want the owner", got)
	}
	if takeovers.Load() != 0 || len(ranBy) != 0 {
		t.Fatalf("the non-owner ran the fire too (takeovers %d)", takeovers.Load())
	}

	// No owner claims the next slot: the other replica runs it, not
	// before the grace.
	slot2 := time.Now()
	other.Fire(memDue("j", slot2))
	if got := <-ranBy; got != "other" {
		t.Fatalf("ran by %s, want the other replica", got)
	}
	if rec, _ := store.record(record.RunID("j", slot2)); rec.StartedAt.Sub(slot2) < grace {
		t.Fatalf("claimed %v after the slot, before the grace %v", rec.StartedAt.Sub(slot2), grace)
	}
	if takeovers.Load() != 1 {
		t.Fatalf("owner takeovers %d, want 1", takeovers.Load())
	}
}

// Long actions do not hold anything other fires wait for: 50 fires of
// actions that block all start, with the default options.
func TestRunnerLongActionsDoNotDelayOthers(t *testing.T) {
	t.Parallel()
	store := newMemStore()
	reg := actions.NewRegistry()
	release := make(chan struct{})
	var started atomic.Int32
	reg.Register("a", actions.Action{Handler: jobs.HandlerFunc(func(ctx context.Context, _ jobs.Run) error {
		started.Add(1)
		<-release
		return nil
	})})
	r := memRunner(t, store, reg, "r1", nil)
	slot := time.Now()
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() { r.Fire(memDue(fmt.Sprintf("j%d", i), slot)) })
	}
	waitUntil(t, "all 50 long actions started", func() bool { return started.Load() == 50 })
	close(release)
	wg.Wait()
}

// A category's max_running bounds its actions on the replica; other
// categories are not held by it.
func TestRunnerCategoryMaxRunning(t *testing.T) {
	t.Parallel()
	store := newMemStore()
	reg := actions.NewRegistry()
	release := make(chan struct{})
	var running, peak, others atomic.Int32
	reg.Register("a", actions.Action{Handler: jobs.HandlerFunc(func(ctx context.Context, f jobs.Run) error {
		n := running.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		<-release
		running.Add(-1)
		return nil
	})})
	reg.Register("b", actions.Action{Handler: jobs.HandlerFunc(func(context.Context, jobs.Run) error { others.Add(1); return nil })})
	r := memRunner(t, store, reg, "r1", func(o *RunnerOptions) { o.Categories = map[string]int{"billing": 3} })
	slot := time.Now()
	var wg sync.WaitGroup
	for i := range 10 {
		d := memDue(fmt.Sprintf("bill%d", i), slot)
		d.Schedule.Category = "billing"
		wg.Go(func() { r.Fire(d) })
	}
	waitUntil(t, "three billing actions running", func() bool { return running.Load() == 3 })
	for i := range 5 {
		d := memDue(fmt.Sprintf("other%d", i), slot)
		d.Schedule.Job = "b"
		r.Fire(d)
	}
	if others.Load() != 5 {
		t.Fatalf("%d actions of another category ran while billing was full, want 5", others.Load())
	}
	close(release)
	wg.Wait()
	if peak.Load() != 3 {
		t.Fatalf("peak billing actions %d, want 3", peak.Load())
	}
}

// A run whose renewals do not land is cancelled when its lease runs out
// by the local clock, without waiting for the database to answer.
func TestRunnerCancelsAtLocalLeaseDeadline(t *testing.T) {
	t.Parallel()
	store := newMemStore()
	store.renew = func(ctx context.Context, _ []record.Lease) ([]record.Lease, error) {
		<-ctx.Done() // the database does not answer
		return nil, ctx.Err()
	}
	reg := actions.NewRegistry()
	const ttl = 600 * time.Millisecond
	cancelled := make(chan error, 1)
	var start time.Time
	reg.Register("a", actions.Action{Handler: jobs.HandlerFunc(func(ctx context.Context, _ jobs.Run) error {
		start = time.Now()
		<-ctx.Done()
		cancelled <- context.Cause(ctx)
		return ctx.Err()
	})})
	var ended atomic.Value
	r := memRunner(t, store, reg, "r1", func(o *RunnerOptions) {
		o.TTL = ttl
		o.Hooks.RunEnded = func(_, status string) { ended.Store(status) }
	})
	r.Fire(memDue("j", time.Now()))
	cause := <-cancelled
	if !errors.Is(cause, record.ErrLockLost) {
		t.Fatalf("cancelled by %v, want the lease running out", cause)
	}
	if took := time.Since(start); took > ttl {
		t.Fatalf("cancelled %v after the start, after the lease (%v) ended", took, ttl)
	}
	if ended.Load() != record.StatusAbandoned {
		t.Fatalf("run ended %v, want abandoned", ended.Load())
	}
}

// A lease counts from when its claim was sent, not from when the answer
// arrived: a claim whose answer took the whole TTL leaves a lease that has
// already run out by the time the run starts, and the run is cancelled at
// once instead of a TTL later. (Counting from the answer, the run would
// go on for a minute while another replica could take the lease.)
func TestRunnerCountsTheLeaseFromTheClaimSent(t *testing.T) {
	t.Parallel()
	clock := &manualClock{now: time.Now()}
	store := newMemStore()
	const ttl = time.Minute
	store.beforeClaim = func(record.BatchClaim) { clock.Add(ttl) } // the answer comes a TTL later
	store.renew = func(ctx context.Context, _ []record.Lease) ([]record.Lease, error) {
		<-ctx.Done() // the database does not answer
		return nil, ctx.Err()
	}
	reg := actions.NewRegistry()
	cancelled := make(chan error, 1)
	reg.Register("a", actions.Action{Handler: jobs.HandlerFunc(func(ctx context.Context, _ jobs.Run) error {
		<-ctx.Done()
		cancelled <- context.Cause(ctx)
		return ctx.Err()
	})})
	ended := make(chan string, 1)
	r := memRunner(t, store, reg, "r1", func(o *RunnerOptions) {
		o.TTL, o.Clock = ttl, clock
		o.Hooks.RunEnded = func(_, status string) { ended <- status }
	})
	go r.Fire(memDue("j", clock.Now())) // Fire returns when the run has ended
	select {
	case status := <-ended:
		if status != record.StatusAbandoned {
			t.Fatalf("run ended %s, want abandoned", status)
		}
	case <-time.After(ttl / 6): // before the first renewal is even due
		t.Fatal("the run went on with a lease that ran out while its claim was answered")
	}
	// The action may not have started at all; if it did, the lease's end
	// is what stopped it.
	select {
	case cause := <-cancelled:
		if !errors.Is(cause, record.ErrLockLost) {
			t.Fatalf("cancelled by %v, want the lease running out", cause)
		}
	default:
	}
}

// A run that takes a while to stop (an exec action's kill_grace) is
// cancelled that much before its local lease deadline: a program that
// ignores SIGTERM is SIGKILLed by the time the lease runs out, not a
// kill_grace after it.
func TestRunnerStopsAGracefulRunBeforeItsLeaseRunsOut(t *testing.T) {
	t.Parallel()
	store := newMemStore()
	store.renew = func(ctx context.Context, _ []record.Lease) ([]record.Lease, error) {
		<-ctx.Done() // the database does not answer
		return nil, ctx.Err()
	}
	const ttl, grace = 3 * time.Second, 1500 * time.Millisecond
	reg := actions.NewRegistry()
	started := filepath.Join(t.TempDir(), "started")
	reg.Register("a", actions.Action{Handler: &actions.ExecAction{KillGrace: grace,
		Argv: []string{"sh", "-c", `trap '' TERM; touch "$1"; sleep 60`, "sh", started}}})
	ended := make(chan string, 1)
	r := memRunner(t, store, reg, "r1", func(o *RunnerOptions) {
		o.TTL = ttl
		o.Hooks.RunEnded = func(_, status string) { ended <- status }
	})
	// The lease is written by the claim, after this: it ends after
	// fired+ttl by the local clock.
	fired := time.Now()
	go r.Fire(memDue("j", fired))
	status := <-ended
	took := time.Since(fired)
	if _, err := os.Stat(started); err != nil {
		t.Fatalf("the program never started: %v", err)
	}
	if status != record.StatusAbandoned {
		t.Errorf("run ended %s, want abandoned (its lease ran out)", status)
	}
	// Cancelled at ttl - margin - grace (1.35 s), SIGKILLed a grace later
	// (2.85 s); without the earlier deadline it would be killed at 4.35 s.
	if limit := ttl + 500*time.Millisecond; took > limit {
		t.Errorf("the program ended %v after the fire, past its %v lease (limit %v): the kill grace ran past it", took, ttl, limit)
	}
	if took < ttl-localLeaseMargin(ttl)-grace {
		t.Errorf("the run ended after %v, before its deadline", took)
	}
}

// A renewal that finds the run no longer this replica's cancels it.
func TestRunnerRenewalFindsLeaseLost(t *testing.T) {
	t.Parallel()
	store := newMemStore()
	var lose atomic.Bool
	store.renew = func(_ context.Context, leases []record.Lease) ([]record.Lease, error) {
		if lose.Load() {
			return leases, nil
		}
		return nil, nil
	}
	reg := actions.NewRegistry()
	cancelled := make(chan error, 1)
	reg.Register("a", actions.Action{Handler: jobs.HandlerFunc(func(ctx context.Context, _ jobs.Run) error {
		<-ctx.Done()
		cancelled <- context.Cause(ctx)
		return nil
	})})
	r := memRunner(t, store, reg, "r1", func(o *RunnerOptions) { o.TTL = 300 * time.Millisecond })
	go r.Fire(memDue("j", time.Now()))
	waitUntil(t, "the run held", func() bool {
		r.leases.mu.Lock()
		defer r.leases.mu.Unlock()
		return len(r.leases.held) == 1
	})
	lose.Store(true)
	if cause := <-cancelled; !errors.Is(cause, record.ErrLockLost) {
		t.Fatalf("cancelled by %v, want the lock lost", cause)
	}
}

// A claim whose outcome was lost is not run and its record, if it
// landed, is disowned.
func TestRunnerDisownsUnknownClaims(t *testing.T) {
	t.Parallel()
	store := newMemStore()
	var fail atomic.Bool
	fail.Store(true)
	store.claimErr = func() error {
		if fail.Load() {
			return fmt.Errorf("claim: %w: %w: connection cut", record.ErrUnreachable, record.ErrOutcomeUnknown)
		}
		return nil
	}
	reg := actions.NewRegistry()
	var ran atomic.Int32
	reg.Register("a", actions.Action{Handler: jobs.HandlerFunc(func(context.Context, jobs.Run) error { ran.Add(1); return nil })})
	var notRun atomic.Value
	r := memRunner(t, store, reg, "r1", func(o *RunnerOptions) {
		o.TTL = 300 * time.Millisecond
		o.ClaimRetry = time.Millisecond
		o.Hooks.NotRun = func(_ string, _ time.Time, reason string) { notRun.Store(reason) }
	})
	slot := time.Now()
	r.Fire(memDue("j", slot))
	if ran.Load() != 0 {
		t.Fatal("a fire whose claim outcome was lost ran")
	}
	if notRun.Load() != NotRunUnreachable {
		t.Fatalf("not-run reason %v, want %s", notRun.Load(), NotRunUnreachable)
	}
	waitUntil(t, "the unknown claim disowned", func() bool {
		store.mu.Lock()
		defer store.mu.Unlock()
		return len(store.disowned) == 1 && store.disowned[0].RunID == record.RunID("j", slot)
	})
}

// Fires waiting for a claim batch are bounded by the queue limit: past it
// a fire is not run (queue_full) instead of piling up while the database
// does not keep up.
func TestRunnerBoundsFiresWaitingForAClaim(t *testing.T) {
	t.Parallel()
	store := newMemStore()
	release := make(chan struct{})
	var held atomic.Int32
	store.beforeClaim = func(b record.BatchClaim) { held.Add(int32(len(b.Fires))); <-release }
	reg := actions.NewRegistry()
	reg.Register("a", actions.Action{Handler: jobs.HandlerFunc(func(context.Context, jobs.Run) error { return nil })})
	var full atomic.Int32
	const limit, n = 5, 100
	r := memRunner(t, store, reg, "r1", func(o *RunnerOptions) {
		o.QueueLimit = limit
		o.Hooks.NotRun = func(_ string, _ time.Time, reason string) {
			if reason == NotRunQueueFull {
				full.Add(1)
			}
		}
	})
	slot := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { r.Fire(memDue(fmt.Sprintf("j%d", i), slot)) })
	}
	waitUntil(t, "every fire held in a batch, waiting, or refused", func() bool {
		return int(held.Load())+r.claims.Waiting()+int(full.Load()) == n
	})
	if w := r.claims.Waiting(); w > limit {
		t.Fatalf("%d fires wait for a claim, want at most %d", w, limit)
	}
	if full.Load() == 0 {
		t.Fatalf("no fire refused as queue_full with %d held and %d waiting", held.Load(), r.claims.Waiting())
	}
	close(release)
	wg.Wait()
}
