package scheduler

import "time"

// LastSlot returns the latest slot of armed job id at or before now — the
// slot the engine would have fired most recently had it been running — and
// false when the job is not armed or has no activation within reach. It is
// what catch-up after downtime looks at.
func (e *Engine) LastSlot(id string, now time.Time) (time.Time, bool) {
	r := e.load(id)
	if r == nil || !r.valid || r.fire == nil {
		return time.Time{}, false
	}
	s := prevActivation(r.sched(), now)
	return s, !s.IsZero()
}
