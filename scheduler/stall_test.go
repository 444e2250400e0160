package scheduler

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/cronswap/cronswap/schedule"
)

// stallFire is what the engine handed the test: a fire through Fire, or
// through Stalled with the slot after which slots were skipped.
type stallFire struct {
	slot, after time.Time
	stalled     bool
}

// stallEngine returns an engine whose clock runs offset ahead of the wall
// clock robfig's timers use, and the fires it hands out: moving offset
// forward makes the next timer run late for the engine, as after a
// stall of the process.
func stallEngine(t *testing.T, opts Options) (*Engine, *atomic.Int64, chan stallFire) {
	t.Helper()
	var offset atomic.Int64
	fires := make(chan stallFire, 100)
	opts.Now = func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	opts.Fire = func(d schedule.Due) { fires <- stallFire{slot: d.Slot} }
	opts.Stalled = func(d schedule.Due, after time.Time) { fires <- stallFire{slot: d.Slot, after: after, stalled: true} }
	return newEngine(t, opts), &offset, fires
}

func nextStallFire(t *testing.T, fires chan stallFire) stallFire {
	t.Helper()
	select {
	case f := <-fires:
		return f
	case <-time.After(15 * time.Second):
		t.Fatal("no fire within 15s")
		return stallFire{}
	}
}

// A timer that runs three seconds after its slot (the process stalled)
// hands its fire to Stalled, naming the last slot reported before the
// three it skipped; the fires after it, on time again, go to Fire.
func TestStalledFireNamesTheSkippedSlots(t *testing.T) {
	e, offset, fires := stallEngine(t, Options{})
	expect(t, e.Reload(sch("tick", "* * * * * *")), Added)
	first := nextStallFire(t, fires)
	if first.stalled {
		t.Fatalf("first fire %+v handed to Stalled", first)
	}
	offset.Store(int64(3 * time.Second))
	// Fires already under way when the clock moved may still be on time;
	// the first one the engine sees late is the stalled one.
	var got stallFire
	for got = nextStallFire(t, fires); !got.stalled; got = nextStallFire(t, fires) {
		if got.slot.Sub(first.slot) > 10*time.Second {
			t.Fatalf("no fire handed to Stalled; last %+v", got)
		}
		first = got
	}
	if !got.after.Equal(first.slot) {
		t.Errorf("stalled fire of %s names %s as the last slot before the gap, want %s", got.slot, got.after, first.slot)
	}
	if n := got.slot.Sub(got.after); n < 3*time.Second || n > 4*time.Second {
		t.Errorf("stalled fire of %s after %s: want 2 or 3 skipped slots in between", got.slot, got.after)
	}
	for range 2 {
		if f := nextStallFire(t, fires); f.stalled || f.slot.Sub(got.slot) > 3*time.Second {
			t.Errorf("fire %+v after the stall: want on time, through Fire", f)
		} else {
			got = f
		}
	}
}

// The slots a job spent unarmed here (its timer disarmed by Rearm, or
// never armed yet) are not a stall: its first fire after being armed
// again goes to Fire.
func TestRearmedJobIsNotAStall(t *testing.T) {
	var arms atomic.Bool
	arms.Store(true)
	e, _, fires := stallEngine(t, Options{Arms: func(string) bool { return arms.Load() }})
	expect(t, e.Reload(sch("tick", "* * * * * *")), Added)
	before := nextStallFire(t, fires)
	arms.Store(false)
	if _, _, disarmed := e.Rearm(nil); len(disarmed) != 1 {
		t.Fatalf("disarmed %v", disarmed)
	}
	// Drain the fires of the disarmed entry; wait until at least three
	// slots passed unarmed.
	for deadline := time.Now().Add(15 * time.Second); time.Since(before.slot) < 4*time.Second; {
		select {
		case f := <-fires:
			before = f
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the job never stopped firing")
		}
	}
	arms.Store(true)
	if armed, _, _ := e.Rearm(nil); len(armed) != 1 {
		t.Fatalf("armed %v", armed)
	}
	f := nextStallFire(t, fires)
	if f.stalled {
		t.Errorf("first fire after re-arming (%s) handed to Stalled after %s", f.slot, f.after)
	}
	if f.slot.Sub(before.slot) < 3*time.Second {
		t.Errorf("first fire after re-arming is %s, the last before %s: want the unarmed slots in between", f.slot, before.slot)
	}
}
