package daemon

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/cronswap/cronswap/internal/firepath"
	"github.com/cronswap/cronswap/internal/members"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/schedule"
)

// Dividing the schedules (Options.DivideSchedules): the engine arms a job
// only when this replica is one of its armers among the live members
// (members.Armers: its owner and its next owner), and keeps every other
// job's last known good unarmed. When the live members change, runDivide
// re-asks the engine (Engine.Rearm): the jobs that moved here are armed,
// those that moved away disarmed. A member that dies leaves each of its
// jobs armed by the other armer, which claims the job's fires after the
// claim grace as it always did; a member that joins arms its share from
// its first full read, while the members it displaces still fire until
// they see it. Exactly once stays with the claim.

// armsFunc is the engine's Options.Arms: with DivideSchedules, whether
// this replica arms the job (members.Membership.Arms); nil (every job)
// otherwise.
func (s *Service) armsFunc() func(string) bool {
	if !s.opts.DivideSchedules {
		return nil
	}
	return s.members.Arms
}

// redivideEvery is how often runDivide looks at the live members; a change
// is noticed within it of the view changing (after a heartbeat's read, or
// a lease passing).
const redivideEvery = time.Second

// handOverWorkers bounds the jobs whose hand-over slots are offered at
// once.
const handOverWorkers = 16

// runDivide re-divides the schedules each time the live members differ
// from those it last divided for, until ctx ends. Call it once the engine
// has started.
func (s *Service) runDivide(ctx context.Context) {
	if !s.opts.DivideSchedules {
		return
	}
	var last string
	t := time.NewTicker(redivideEvery)
	defer t.Stop()
	for {
		if key := liveKey(s.members.LiveView()); key != last {
			armed, disarmed := s.engine.Rearm()
			if last != "" || len(armed)+len(disarmed) > 0 {
				s.log.Info("live members changed; schedules re-divided", "live", key,
					"armed_here", len(armed), "disarmed_here", len(disarmed), "armed", s.engine.Len())
			}
			last = key
			if len(armed) > 0 {
				s.handOver(ctx, armed, time.Now())
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// liveKey names a live view by its members' instance ids.
func liveKey(live []members.Member) string {
	ids := make([]string, len(live))
	for i, m := range live {
		ids[i] = m.ID
	}
	return strings.Join(ids, ",")
}

// handOverWindow is how long a job can have gone without an armed replica
// before it was armed here: both its armers gone (noticed when their
// lease passes, then at the next redivide tick after the view's read)
// and the claim grace of a fire due meanwhile.
func (s *Service) handOverWindow() time.Duration {
	return s.members.Lease() + s.members.Heartbeat() + redivideEvery + s.claimGrace()
}

// claimGrace is the runner's claim grace: Options.ClaimGrace or its
// default.
func (s *Service) claimGrace() time.Duration {
	if s.opts.ClaimGrace > 0 {
		return s.opts.ClaimGrace
	}
	return firepath.DefaultClaimGrace
}

// handOver offers the fire path, for each job just armed here at now, the
// slots of the hand-over: those after its last decided slot (its lock's
// last_slot) and before this engine's first activation of it, within
// handOverWindow before now — each once, oldest first, whatever the job's
// catch-up setting (the claim decides: a slot another replica ran, or is
// running, is not run again). The slots between the last decided one and
// the window are recorded missed (record.MissedHandOver): no replica armed
// the job then. A job whose lock cannot be read is left to its timer.
func (s *Service) handOver(ctx context.Context, ids []string, now time.Time) {
	rctx, cancel := context.WithTimeout(ctx, decidedReadTimeout)
	decided, err := s.store.DecidedSlots(rctx, ids, now)
	cancel()
	if err != nil {
		s.log.Warn("hand-over: could not read the decided slots; the jobs armed here fire from their next slot",
			"jobs", len(ids), "error", err)
		return
	}
	window := s.handOverWindow()
	sem := make(chan struct{}, handOverWorkers)
	var wg sync.WaitGroup
	for _, id := range ids {
		last, ok := decided[id]
		if !ok {
			continue // never decided anywhere: a new job, the start-up gaps' and catch-up's business
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		wg.Go(func() {
			defer func() { <-sem }()
			s.handOverJob(ctx, id, last, now, window)
		})
	}
	wg.Wait()
}

// handOverJob is handOver for one job whose last decided slot is last.
func (s *Service) handOverJob(ctx context.Context, id string, last, now time.Time, window time.Duration) {
	st, ok := s.engine.Get(id)
	if !ok || !st.Armed {
		return // disarmed again meanwhile
	}
	var from time.Time
	var delay time.Duration
	for deadline := time.Now().Add(firesFromWait); ; {
		if from, delay, ok = s.engine.FiresFrom(id); ok || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
	next, ok := s.engine.NextFunc(id)
	if from.IsZero() || !ok {
		return
	}
	start := now.Add(-window)
	if !st.UpdatedAt.IsZero() && st.UpdatedAt.After(start) {
		start = st.UpdatedAt // the schedule was not in force before
	}
	// Slots after last and before start: recorded missed.
	if lo, hi := last, start.Add(-time.Nanosecond); hi.After(lo) {
		first, lastMissed, n, _ := record.CountSlots(next, lo, hi)
		if n > 0 {
			m := record.MissedRange{JobID: id, From: first.UTC(), To: lastMissed.UTC(), Count: n, Reason: record.MissedHandOver}
			s.log.Info("hand-over: slots no replica armed", "job_id", id, "scheduled_at", m.From,
				"last_scheduled_at", m.To, "count", m.Count, "reason", m.Reason)
			s.runner.RecordMissed(st.Schedule, delay, m)
		}
	}
	// Slots from start (and after last) until this engine fires: offered.
	lo := last
	if b := start.Add(-time.Nanosecond); b.After(lo) {
		lo = b
	}
	var slots []time.Time
	for t := next(lo); !t.IsZero() && t.Add(delay).Before(from); t = next(t) {
		slots = append(slots, t)
	}
	if len(slots) == 0 {
		return
	}
	s.log.Info("hand-over: offering the slots since the job was last decided", "job_id", id,
		"scheduled_at", slots[0], "last_scheduled_at", slots[len(slots)-1], "count", len(slots))
	for _, slot := range slots {
		if ctx.Err() != nil {
			return
		}
		d := schedule.Due{Schedule: st.Schedule, Slot: slot, Delay: delay}
		s.runner.FireCatchUp(d, time.Since(slot)+window)
	}
}
