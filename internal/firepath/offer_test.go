package firepath

import (
	"context"
	"fmt"
	"slices"
	"sync"
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

// A slot Offer hands in that a later slot overtook (claimed first, here by
// the engine's own fire) is recorded missed, hand_over, and reported so;
// the same slot fired the usual way is skipped.
func TestRunnerOfferOvertakenSlotRecordedMissed(t *testing.T) {
	t.Parallel()
	store := newMemStore()
	reg := actions.NewRegistry()
	reg.Register("a", actions.Action{Handler: jobs.HandlerFunc(func(context.Context, jobs.Run) error { return nil }),
		Policy: jobs.Policy{Overlap: jobs.OverlapSkip}})
	var mu sync.Mutex
	var missed, skipped []string
	r := memRunner(t, store, reg, "r1", func(o *RunnerOptions) {
		o.Hooks.Missed = func(id, reason string, n int64) {
			mu.Lock()
			defer mu.Unlock()
			missed = append(missed, fmt.Sprintf("%s %s %d", id, reason, n))
		}
		o.Hooks.Skipped = func(id, reason string) {
			mu.Lock()
			defer mu.Unlock()
			skipped = append(skipped, id)
		}
	})
	base := time.Now().Truncate(time.Second).Add(-5 * time.Second)
	for _, id := range []string{"offered", "fired"} {
		r.Fire(memDue(id, base.Add(2*time.Second))) // the later slot, claimed first
	}
	r.Offer(memDue("offered", base), time.Minute)
	r.Fire(memDue("fired", base))
	if rec, ok := store.record(record.RunID("offered", base)); !ok || rec.Status != record.StatusMissed || rec.Reason != record.MissedHandOver {
		t.Errorf("offered slot: record %+v (found %v), want missed %s", rec, ok, record.MissedHandOver)
	}
	if rec, ok := store.record(record.RunID("fired", base)); !ok || rec.Status != record.StatusSkipped {
		t.Errorf("fired slot: record %+v (found %v), want skipped", rec, ok)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"offered hand_over 1"}; !slices.Equal(missed, want) {
		t.Errorf("missed reported %v, want %v", missed, want)
	}
	if want := []string{"fired"}; !slices.Equal(skipped, want) {
		t.Errorf("skipped reported %v, want %v", skipped, want)
	}
}
