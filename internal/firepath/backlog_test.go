package firepath

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cronswap/cronswap/internal/actions"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/jobs"
)

// Under a backlog, what waits on the fire path is bounded by entries, not
// by goroutines or by the rate at which fires arrive (when it was not, RSS
// grew to gigabytes with 100,000 schedules and a database that could not
// keep up).

// A submitted fire waiting for its claim batch holds no goroutine: with
// the claims stalled, thousands of fires wait as queue entries, and they
// all run once the database answers.
func TestRunnerSubmittedFiresWaitWithoutGoroutines(t *testing.T) {
	store := newMemStore()
	release := make(chan struct{})
	var held atomic.Int32
	store.beforeClaim = func(b record.BatchClaim) { held.Add(int32(len(b.Fires))); <-release }
	reg := actions.NewRegistry()
	var ran atomic.Int32
	reg.Register("a", actions.Action{Handler: jobs.HandlerFunc(func(context.Context, jobs.Run) error { ran.Add(1); return nil })})
	r := memRunner(t, store, reg, "r1", nil)
	const n = 5 * claimBatchMax
	base := runtime.NumGoroutine()
	slot := time.Now()
	for i := range n {
		r.Submit(memDue(fmt.Sprintf("j%d", i), slot))
	}
	waitUntil(t, "every fire held in a claim batch or waiting for one", func() bool {
		return int(held.Load())+r.claims.Waiting() == n
	})
	// The batches out (claimBatchesAtOnce) and the runner's own: a few,
	// not one per fire.
	if extra := runtime.NumGoroutine() - base; extra > 100 {
		t.Fatalf("%d goroutines more with %d fires waiting for a claim, want a few", extra, n)
	}
	close(release)
	waitUntil(t, "every fire run", func() bool { return ran.Load() == n })
}

// While run ends wait to be written, claim batches wait: the fires
// between their claim and their end write (a goroutine each, their lock
// held) stay bounded instead of growing with every claim won.
func TestRunnerClaimsWaitForEndsToBeWritten(t *testing.T) {
	store := newMemStore()
	releaseEnds := make(chan struct{})
	store.beforeEnd = func([]record.LeaseEnd) { <-releaseEnds }
	reg := actions.NewRegistry()
	var ran atomic.Int32
	reg.Register("a", actions.Action{Handler: jobs.HandlerFunc(func(context.Context, jobs.Run) error { ran.Add(1); return nil })})
	var r *Runner
	var worst atomic.Int64 // the most ends waiting when a claim batch went out
	store.beforeClaim = func(record.BatchClaim) {
		w := int64(r.ends.Waiting())
		for {
			old := worst.Load()
			if w <= old || worst.CompareAndSwap(old, w) {
				break
			}
		}
	}
	var done atomic.Int32
	r = memRunner(t, store, reg, "r1", func(o *RunnerOptions) {
		o.Done = func(jobs.Run, error, time.Duration) { done.Add(1) }
	})
	const n = 20 * claimBatchMax
	slot := time.Now()
	for i := range n {
		r.Submit(memDue(fmt.Sprintf("j%d", i), slot))
	}
	waitUntil(t, "the ends backed up", func() bool { return r.ends.Waiting() >= endBacklog })
	close(releaseEnds)
	waitUntil(t, "every fire done", func() bool { return done.Load() == n })
	if ran.Load() != n {
		t.Fatalf("%d fires ran, want %d", ran.Load(), n)
	}
	// A batch checks before it goes out; the batches already out may add
	// their fires' ends after that check.
	if bound := int64(endBacklog + claimBatchesAtOnce*claimBatchMax); worst.Load() > bound {
		t.Fatalf("a claim batch went out with %d ends waiting, want at most %d", worst.Load(), bound)
	}
}

// Unknown claims are settled a batch per request, so a backlog drains a
// batch at a time, and at most maxPendingEnds of them wait.
func TestLeaseKeeperDisownsInBoundedBatches(t *testing.T) {
	t.Parallel()
	store := newMemStore()
	reg := actions.NewRegistry()
	reg.Register("a", actions.Action{Handler: jobs.HandlerFunc(func(context.Context, jobs.Run) error { return nil })})
	r := memRunner(t, store, reg, "r1", nil)
	k := r.leases
	// The keeper's own loop may settle some meanwhile: either way each
	// request is bounded.
	const n = 2*retryBatchMax + 500
	slot := time.Now()
	for i := range n {
		id := fmt.Sprintf("j%d", i)
		k.disown(record.Lease{JobID: id, RunID: record.RunID(id, slot), Slot: slot, Instance: "r1"})
	}
	waitUntil(t, "every unknown claim settled", func() bool {
		k.retryPending()
		store.mu.Lock()
		defer store.mu.Unlock()
		return len(store.disowned) == n
	})
	store.mu.Lock()
	calls := append([]int(nil), store.disownCalls...)
	store.mu.Unlock()
	for _, c := range calls {
		if c > retryBatchMax {
			t.Fatalf("Disown calls %v: want at most %d claims each", calls, retryBatchMax)
		}
	}
}

// At most maxPendingEnds unknown claims wait: past it the oldest is
// dropped.
func TestLeaseKeeperBoundsUnknownClaims(t *testing.T) {
	t.Parallel()
	k := &leaseKeeper{r: &Runner{log: slog.New(slog.DiscardHandler)}}
	slot := time.Now()
	for i := range maxPendingEnds + 10 {
		id := fmt.Sprintf("j%d", i)
		k.disown(record.Lease{JobID: id, RunID: record.RunID(id, slot), Slot: slot})
	}
	if got := len(k.orphan); got != maxPendingEnds {
		t.Fatalf("%d unknown claims waiting, want %d", got, maxPendingEnds)
	}
	if first := k.orphan[0].JobID; first != "j10" {
		t.Fatalf("oldest waiting %s, want j10 (the 10 oldest dropped)", first)
	}
}

// BenchmarkWaitingFireMemory reports what a fire waiting for its claim
// batch costs: heap and goroutine stacks in use, per fire, with the
// claims stalled (b.N is ignored: one backlog of 20,000 fires).
func BenchmarkWaitingFireMemory(b *testing.B) {
	const fires = 20 * claimBatchMax
	store := newMemStore()
	release := make(chan struct{})
	var held atomic.Int32
	store.beforeClaim = func(c record.BatchClaim) { held.Add(int32(len(c.Fires))); <-release }
	reg := actions.NewRegistry()
	reg.Register("a", actions.Action{Handler: jobs.HandlerFunc(func(context.Context, jobs.Run) error { return nil })})
	r := NewRunner(RunnerOptions{Registry: reg, InstanceID: "r1", Logger: slog.New(slog.DiscardHandler), Store: store,
		StartingDeadline: time.Minute})
	defer r.Shutdown(10 * time.Second)
	inUse := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapInuse + m.StackInuse
	}
	before := inUse()
	slot := time.Now()
	for i := range fires {
		r.Submit(memDue(fmt.Sprintf("job-%06d", i), slot))
	}
	for int(held.Load())+r.claims.Waiting() < fires {
		time.Sleep(time.Millisecond)
	}
	after := inUse()
	b.ReportMetric(float64(after-before)/fires, "B/waiting-fire")
	close(release)
}
