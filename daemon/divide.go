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
	var prev []members.Member
	t := time.NewTicker(redivideEvery)
	defer t.Stop()
	for {
		live := s.members.LiveView()
		if key := liveKey(live); key != last {
			armed, disarmed := s.engine.Rearm()
			orphans := armed // the first division: no view to tell
			if last != "" {
				orphans = orphaned(armed, prev, live)
			}
			if last != "" || len(armed)+len(disarmed) > 0 {
				s.log.Info("live members changed; schedules re-divided", "live", key,
					"armed_here", len(armed), "disarmed_here", len(disarmed), "handed_over", len(orphans),
					"armed", s.engine.Len())
			}
			last = key
			if len(orphans) > 0 {
				s.handOver(ctx, orphans, time.Now())
			}
		}
		// The view of the same members is kept as it is read, so that a
		// member that goes is judged by its last heartbeat seen (orphaned),
		// not by the one it had when it joined the view.
		prev = live
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

// orphaned returns the jobs of ids (just armed here) that no member of
// the previous live view prev armed and live still holds while firing
// since before the other went: both their armers (members.Armers over
// prev, as Membership.Arms chose them) are gone, or the one left had not
// begun firing (Member.FiringSince, as live has it) by the last heartbeat
// of the one gone (its HeartbeatAt in prev), so the slots between may
// have had no replica. The others were armed by a firing armer all
// along, whose fires decided their slots. A member of prev that does not
// divide armed every job: while it lives, and fired before the last
// heartbeat of every member gone since prev, none is orphaned.
func orphaned(ids []string, prev, live []members.Member) []string {
	alive := make(map[string]members.Member, len(live))
	for _, m := range live {
		alive[m.ID] = m
	}
	// firedBefore reports whether m is in live and fired since at or
	// before t (any time, when t is zero).
	firedBefore := func(m members.Member, t time.Time) bool {
		l, ok := alive[m.ID]
		return ok && !l.FiringSince.IsZero() && (t.IsZero() || !l.FiringSince.After(t))
	}
	// lastGone is the earliest last heartbeat of prev's members gone from
	// live: a member firing since before it fired while all of them lived.
	var lastGone time.Time
	for _, m := range prev {
		if _, ok := alive[m.ID]; !ok && (lastGone.IsZero() || m.HeartbeatAt.Before(lastGone)) {
			lastGone = m.HeartbeatAt
		}
	}
	for _, m := range prev {
		if !m.Divides && firedBefore(m, lastGone) {
			return nil
		}
	}
	covers := func(a, other members.Member) bool {
		if a.ID == "" {
			return false
		}
		if _, ok := alive[other.ID]; ok || other.ID == "" {
			return firedBefore(a, time.Time{}) // no death between them
		}
		return firedBefore(a, other.HeartbeatAt)
	}
	var out []string
	for _, id := range ids {
		first, second := members.Armers(id, prev)
		if covers(first, second) || covers(second, first) {
			continue
		}
		out = append(out, id)
	}
	return out
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

// handOverReads bounds the tries of the hand-over's read of the decided
// slots; the waits between them double from a second.
const handOverReads = 4

// handOver offers the fire path, for each job just armed here at now that
// no live replica armed before (orphaned), the slots of the hand-over:
// those after its last decided slot (its lock's last_slot) and before this
// engine's first activation of it, within handOverWindow before now — each
// once, oldest first, whatever the job's catch-up setting (the claim
// decides: a slot another replica ran, or is running, is not run again).
// The slots between the last decided one and the window are recorded
// missed (record.MissedHandOver): no replica armed the job then. When the
// decided slots of a job cannot be read (handOverReads tries of its
// slice), the window's slots are recorded missed, hand_over, rather than
// left without a record; the recorder leaves out any a replica decided.
func (s *Service) handOver(ctx context.Context, ids []string, now time.Time) {
	decided, unread, err := s.readDecidedSlots(ctx, "hand-over", ids, now)
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		s.log.Warn("hand-over: could not read the decided slots of some jobs; their slots of the hand-over window are recorded missed",
			"collection", record.LocksCollection, "jobs", len(unread), "read", len(ids)-len(unread), "reason", record.MissedHandOver, "error", err)
	}
	unknown := make(map[string]bool, len(unread))
	for _, id := range unread {
		unknown[id] = true
	}
	window := s.handOverWindow()
	sem := make(chan struct{}, handOverWorkers)
	var wg sync.WaitGroup
	for _, id := range ids {
		last, ok := decided[id]
		known := !unknown[id]
		if !ok && known {
			continue // never decided anywhere: a new job, the start-up gaps' and catch-up's business
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		wg.Go(func() {
			defer func() { <-sem }()
			s.handOverJob(ctx, id, last, known, now, window)
		})
	}
	wg.Wait()
}

// handOverJob is handOver for one job whose last decided slot is last
// (known false: it could not be read; the window's slots are then
// recorded missed).
func (s *Service) handOverJob(ctx context.Context, id string, last time.Time, known bool, now time.Time, window time.Duration) {
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
	missed := func(lo, hi time.Time) {
		first, lastMissed, n, _ := record.CountSlots(next, lo, hi)
		if n > 0 {
			m := record.MissedRange{JobID: id, From: first.UTC(), To: lastMissed.UTC(), Count: n, Reason: record.MissedHandOver}
			s.log.Info("hand-over: slots no replica armed", "job_id", id, "scheduled_at", m.From,
				"last_scheduled_at", m.To, "count", m.Count, "reason", m.Reason)
			s.runner.RecordMissed(st.Schedule, delay, m)
		}
	}
	if !known {
		// The window's slots, up to this engine's first: no telling which
		// were decided; the recorder leaves those out.
		missed(start.Add(-time.Nanosecond), from.Add(-delay))
		return
	}
	// Slots after last and before start: recorded missed.
	if hi := start.Add(-time.Nanosecond); hi.After(last) {
		missed(last, hi)
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
		// Claimed one after the other, oldest first; the runs go on.
		s.runner.Offer(d, time.Since(slot)+window)
	}
}
