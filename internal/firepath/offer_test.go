package firepath

import (
	"context"
	"testing"
	"time"

	"github.com/cronswap/cronswap/internal/actions"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/jobs"
)

// Offer returns once the slot's claim is answered, while its run goes on:
// slots offered one after the other are claimed one batch each, in order.
func TestRunnerOfferReturnsOnceClaimed(t *testing.T) {
	t.Parallel()
	store := newMemStore()
	reg := actions.NewRegistry()
	release := make(chan struct{})
	started := make(chan time.Time, 10)
	reg.Register("a", actions.Action{Handler: jobs.HandlerFunc(func(ctx context.Context, f jobs.Run) error {
		started <- f.Slot
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}), Policy: jobs.Policy{Overlap: jobs.OverlapAllow}})
	r := memRunner(t, store, reg, "r1", nil)
	base := time.Now().Truncate(time.Second).Add(-5 * time.Second)
	for i := range 3 {
		slot := base.Add(time.Duration(i) * time.Second)
		offered := make(chan struct{})
		go func() { defer close(offered); r.Offer(memDue("j", slot), time.Minute) }()
		waitClosed(t, offered, 10*time.Second, "Offer returning while the run goes on")
		rec, ok := store.record(record.RunID("j", slot))
		if !ok || rec.Status != record.StatusRunning {
			t.Fatalf("slot %d: record %+v (found %v) when Offer returned, want running", i, rec, ok)
		}
	}
	if b := store.batchSizes(); len(b) != 3 {
		t.Errorf("claim batches %v, want one per offered slot", b)
	}
	close(release)
	for range 3 {
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("an offered slot never ran")
		}
	}
}
