package firepath

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/cronswap/cronswap/internal/actions"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/jobs"
	"github.com/cronswap/cronswap/schedule"
)

// A fire recorded skipped tells Hooks.Skipped why: overlap when the job's
// lock is held by a live run, blackout when its slot is inside a window.
func TestSkippedHookSaysWhy(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var skips []string
	hooks := Hooks{Skipped: func(id, reason string) { mu.Lock(); skips = append(skips, id+":"+reason); mu.Unlock() }}
	got := func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), skips...) }

	started, release := make(chan struct{}), make(chan struct{})
	reg := actions.NewRegistry()
	reg.Register("slow", actions.Action{Handler: jobs.HandlerFunc(func(context.Context, jobs.Run) error {
		close(started)
		<-release
		return nil
	})})
	r := NewRunner(RunnerOptions{Registry: reg, InstanceID: "a", Logger: slog.New(slog.DiscardHandler), Store: newMemStore(),
		TTL: time.Minute, Hooks: hooks})
	defer r.Shutdown(5 * time.Second)
	s := schedule.Schedule{ID: "long", Enabled: true, Job: "slow"}
	slot := time.Now().Truncate(time.Second)
	r.Submit(schedule.Due{Schedule: s, Slot: slot})
	<-started
	r.Fire(schedule.Due{Schedule: s, Slot: slot.Add(time.Second)}) // the first still holds the lock
	close(release)
	if g := got(); len(g) != 1 || g[0] != "long:"+SkipOverlap {
		t.Fatalf("skips %v, want long:%s", g, SkipOverlap)
	}

	reg.Register("quick", actions.Action{Handler: jobs.HandlerFunc(func(context.Context, jobs.Run) error { return nil })})
	b := NewRunner(RunnerOptions{Registry: reg, InstanceID: "b", Logger: slog.New(slog.DiscardHandler), Hooks: hooks,
		Blackout: func(string, string, time.Time) (record.Exclusion, bool) {
			return record.BlackoutExclusion("freeze", ""), true
		}})
	defer b.Shutdown(5 * time.Second)
	b.Fire(schedule.Due{Schedule: schedule.Schedule{ID: "frozen", Enabled: true, Job: "quick"}, Slot: slot})
	if g := got(); len(g) != 2 || g[1] != "frozen:"+SkipBlackout {
		t.Fatalf("skips %v, want frozen:%s last", g, SkipBlackout)
	}
}
