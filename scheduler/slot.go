package scheduler

import (
	"sync"
	"time"

	"github.com/robfig/cron/v3"
)

// prever is a schedule that can name its previous activation directly.
type prever interface {
	Prev(t time.Time) time.Time
}

// maxLookback bounds how far back prevActivation searches: about 8.5 years,
// enough for the rarest satisfiable cron expression (29 February, every four
// years).
const maxLookback = (1 << 28) * time.Second

// maxWalk bounds the final forward walk of prevActivation.
const maxWalk = 10000

// prevActivation returns the latest activation time s of sched with
// s <= now, or the zero time if there is none within maxLookback.
//
// It looks back from now in doubling steps (1s, 2s, 4s, ...) until Next of
// the probe lands at or before now, bisects between the last two probes down
// to one second (cron activations are whole seconds) and finally, unless now
// is less than a second after the activation found, walks forward with Next
// while the following activation is still <= now, so the result is always a
// value that sched.Next itself produced.
func prevActivation(sched cron.Schedule, now time.Time) time.Time {
	now = now.Round(0) // wall clock only, like the schedules
	if p, ok := sched.(prever); ok {
		return p.Prev(now)
	}
	// hits reports whether Next(t) lands at or before now, and returns it.
	hits := func(t time.Time) (time.Time, bool) {
		n := sched.Next(t)
		return n, !n.IsZero() && !n.After(now)
	}
	// Invariant: hits(lo) with s = Next(lo), and !hits(hi); Next(now) > now,
	// so hi = now holds.
	var lo, s time.Time
	hi := now
	found := false
	for d := time.Second; d <= maxLookback; d *= 2 {
		t := now.Add(-d)
		if n, ok := hits(t); ok {
			lo, s, found = t, n, true
			break
		}
		hi = t
	}
	if !found {
		return time.Time{}
	}
	for hi.Sub(lo) > time.Second {
		mid := lo.Add(hi.Sub(lo) / 2)
		if n, ok := hits(mid); ok {
			lo, s = mid, n
		} else {
			hi = mid
		}
	}
	// Activations are whole seconds, so none lies in (s, s+1s): the walk
	// is only needed when now is a second or more after s. That spares the
	// common fire, woken within a second of its slot, one more Next.
	if now.Sub(s) < time.Second {
		return s
	}
	for range maxWalk {
		n := sched.Next(s)
		if n.IsZero() || n.After(now) {
			break
		}
		s = n
	}
	return s
}

// slotState remembers the last slot reported for one job.
type slotState struct {
	mu   sync.Mutex
	last time.Time
}

// claim returns the slot for a run of sched at wall time now, or false when
// the run has no slot of its own left (see the package comment on slots).
// planned are activations of sched known in advance (see firing.Next; zero
// values are ignored): when one lies within the second up to now, it is the
// latest activation <= now, as activations are whole seconds, and no search
// is needed.
func (st *slotState) claim(sched cron.Schedule, now time.Time, planned ...time.Time) (time.Time, bool) {
	s, _, ok := st.claimAfter(sched, now, planned...)
	return s, ok
}

// claimAfter is claim, also returning the slot reported before (zero for
// the job's first).
func (st *slotState) claimAfter(sched cron.Schedule, now time.Time, planned ...time.Time) (slot, prev time.Time, ok bool) {
	var s time.Time
	for _, p := range planned {
		if d := now.Round(0).Sub(p); !p.IsZero() && d >= 0 && d < time.Second {
			s = p
			break
		}
	}
	if s.IsZero() {
		s = prevActivation(sched, now)
	}
	if s.IsZero() {
		return time.Time{}, time.Time{}, false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	prev = st.last
	if !st.last.IsZero() && !s.After(st.last) {
		n := sched.Next(st.last)
		if n.IsZero() || n.After(now.Round(0)) {
			return time.Time{}, time.Time{}, false
		}
		s = n
	}
	st.last = s
	return s, prev, true
}
