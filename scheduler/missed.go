package scheduler

import "time"

// FiresFrom returns the time from which the armed entry of job id fires:
// the engine dispatches exactly the slots s with s+delay after it, so the
// slots at or before FiresFrom minus the job's delay were never this
// engine's to fire. It is the time robfig first asked the entry for its
// next activation (when the engine started, or when the job was armed on a
// running engine). ok is false while the job is not armed or robfig has not
// asked yet (an engine not started).
func (e *Engine) FiresFrom(id string) (from time.Time, delay time.Duration, ok bool) {
	r := e.load(id)
	if r == nil || r.fire == nil {
		return time.Time{}, 0, false
	}
	ns := r.fire.from.Load()
	if ns == 0 {
		return time.Time{}, 0, false
	}
	return time.Unix(0, ns), r.delay(id), true
}

// NextFunc returns the slot sequence job id is armed with: a function
// giving the first slot strictly after t. ok is false when the job is not
// armed. The function keeps the schedule of the moment it was taken, so a
// later edit of the job does not change it.
func (e *Engine) NextFunc(id string) (next func(t time.Time) time.Time, ok bool) {
	r := e.load(id)
	if r == nil || !r.valid || r.fire == nil {
		return nil, false
	}
	return r.sched().Next, true
}
