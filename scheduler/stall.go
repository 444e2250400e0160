package scheduler

import (
	"time"

	"github.com/robfig/cron/v3"
)

// A stall (the process frozen, a paused VM, a long stop-the-world pause)
// longer than a job's period makes robfig run the job's entry once when
// the process runs again, and the slot identity names the latest slot: the
// slots in between were never reported. Run asks skipped about each fire,
// and hands a fire with skipped slots to Options.Stalled, whose callee
// decides them (runs them or records them missed) before firing the slot.

// skipped reports whether the entry, firing sched delay after each slot,
// skipped slots before slot, given the slot reported before it (last, zero for none): after is then the latest
// slot the entry was not to fire itself — last, or, when the entry was
// armed after it, the last slot before the entry's first activation — and
// the skipped slots are those of the schedule strictly after after and
// before slot. Activations are whole seconds, so a slot at most a second
// after last costs no search.
func (f *firing) skipped(sched cron.Schedule, delay time.Duration, slot, last time.Time) (after time.Time, ok bool) {
	ns := f.from.Load()
	if ns == 0 {
		return time.Time{}, false
	}
	after = time.Unix(0, ns).Add(-delay) // the entry fires the slots after it
	if last.After(after) {
		after = last
	}
	if slot.Sub(after) <= time.Second {
		return time.Time{}, false
	}
	n := sched.Next(after)
	return after, !n.IsZero() && n.Before(slot)
}
