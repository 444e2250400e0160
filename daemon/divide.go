package daemon

import (
	"context"
	"slices"
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
// re-asks the engine (Engine.Rearm): the jobs that moved here are armed
// (at once when no live replica fired them meanwhile, else at the
// engine's pace), those that moved away disarmed. A member that dies
// leaves each of its jobs armed by the other armer, which claims the
// job's fires after the claim grace as it always did; a member that joins
// arms its share from its first full read, while the members it displaces
// still fire until they see it. Exactly once stays with the claim.

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
//
// A re-division arms at once only the jobs no live replica fired
// meanwhile (orphanRule), and hands them over, their fires held until
// their slots of the hand-over are claimed (handOverGates); the jobs
// another armer fires, all of them after a single death, are armed at the
// engine's pace (Engine.ArmPaced) until the view changes again. Since
// those are armed here only from the end of their round, a round is kept
// until every live member has heartbeated after it: a member gone before
// that may have left one of them with no replica between its death and
// the round, and such jobs are handed over too.
func (s *Service) runDivide(ctx context.Context) {
	if !s.opts.DivideSchedules {
		return
	}
	var last string
	var prev []members.Member
	var rounds []armRound
	t := time.NewTicker(redivideEvery)
	defer t.Stop()
	// The hand-overs' background reads (handOverRest) go on beside the
	// loop, which keeps following the live members meanwhile.
	var background sync.WaitGroup
	defer background.Wait()
	handOverRest := func(ids []string, from time.Time) {
		if len(ids) > 0 {
			background.Go(func() { s.handOverSome(ctx, ids, from, true) })
		}
	}
	for {
		live := s.members.LiveView()
		if key := liveKey(live); key != last {
			started := time.Now()
			var urgent func(string) bool // the first division: every job at once, and handed over
			if last != "" {
				urgent = orphanRule(prev, live, s.opts.InstanceID, neverHere)
				// The fires of the jobs armed at once wait for their
				// hand-over (handOverGates), from before the first is armed.
				s.gates.expect(func(id string) bool {
					from, _, ok := s.engine.FiresFrom(id)
					return ok && !from.Before(started) && urgent(id)
				})
			}
			armed, deferred, disarmed := s.engine.Rearm(urgent)
			var late map[time.Time][]string
			if last != "" {
				late = s.armedLateAndOrphaned(rounds, prev, live, armed)
			}
			if last != "" || len(armed)+len(deferred)+len(disarmed) > 0 {
				nLate := 0
				for _, ids := range late {
					nLate += len(ids)
				}
				s.log.Info("live members changed; schedules re-divided", "live", key,
					"armed_here", len(armed), "deferred_here", len(deferred), "disarmed_here", len(disarmed),
					"handed_over", len(armed)+nLate, "armed", s.engine.Len())
			}
			// Each hand-over offers the slots of the jobs due in its window
			// now, and reads the others in the background once the deferred
			// jobs are armed.
			due, rest := s.inWindow(armed, started)
			if last != "" {
				s.gates.hold(due)
			}
			s.handOverSome(ctx, due, started, false)
			s.gates.release(due...)
			last = key
			// A job armed late is handed over as of its round's start: this
			// replica's own claims of it all come after.
			lateRest := map[time.Time][]string{}
			for from, ids := range late {
				due, lateRest[from] = s.inWindow(ids, from)
				s.handOverSome(ctx, due, from, false)
			}
			if len(deferred) > 0 {
				paced, notArmed := s.engine.ArmPaced(deferred, func() bool {
					return ctx.Err() != nil || liveKey(s.members.LiveView()) != key
				})
				s.log.Info("schedules re-divided: the deferred jobs armed at the engine's pace", "live", key,
					"armed_here", len(paced), "not_armed", len(notArmed), "took", time.Since(started), "armed", s.engine.Len())
				if len(paced) > 0 {
					slices.Sort(paced)
					rounds = append(rounds, armRound{ids: paced, from: started, at: time.Now()})
				}
			}
			handOverRest(rest, started)
			for from, ids := range lateRest {
				handOverRest(ids, from)
			}
		}
		rounds = slices.DeleteFunc(rounds, func(r armRound) bool { return heardSince(live, s.opts.InstanceID, r.at) })
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

// fireArmed is the engine's fire callback: the fire goes to the fire
// path's claim batch (Runner.Submit), unless its job is being handed over
// (handOverGates). Then it waits for the hand-over's offers and the fires
// of the job before it, and is offered with the hand-over window to start
// in, its claim answered before the next one's.
func (s *Service) fireArmed(d schedule.Due) {
	gate := s.gates.turn(d.Schedule.ID)
	if gate == nil {
		s.runner.Submit(d)
		return
	}
	defer s.gates.done(d.Schedule.ID, gate)
	s.runner.Offer(d, s.handOverWindow())
}

// armRound is the jobs one re-division armed here at the engine's pace
// (sorted), from when it began (none was armed before) until at (all
// were).
type armRound struct {
	ids      []string
	from, at time.Time
}

// armedLateAndOrphaned returns, by the start of the latest round that
// armed each, the jobs armed here by rounds (and not by this re-division,
// armed) that are still armed and orphaned when this replica is taken to
// fire each only since the end of that round (orphanRule over prev and
// live).
func (s *Service) armedLateAndOrphaned(rounds []armRound, prev, live []members.Member, armed []string) map[time.Time][]string {
	if len(rounds) == 0 {
		return nil
	}
	// latest returns the latest round that armed id (one of rounds).
	latest := func(id string) armRound {
		var found armRound
		for _, r := range rounds {
			if _, ok := slices.BinarySearch(r.ids, id); ok && r.at.After(found.at) {
				found = r
			}
		}
		return found
	}
	orphan := orphanRule(prev, live, s.opts.InstanceID, func(id string) (time.Time, bool) {
		return latest(id).at, true
	})
	seen := make(map[string]bool, len(armed))
	for _, id := range armed {
		seen[id] = true
	}
	out := map[time.Time][]string{}
	for _, r := range rounds {
		for _, id := range r.ids {
			if seen[id] {
				continue
			}
			seen[id] = true
			if !orphan(id) {
				continue
			}
			if st, ok := s.engine.Get(id); ok && st.Armed {
				from := latest(id).from
				out[from] = append(out[from], id)
			}
		}
	}
	return out
}

// heardSince reports whether every member of live but self has
// heartbeated after at.
func heardSince(live []members.Member, self string, at time.Time) bool {
	for _, m := range live {
		if m.ID != self && !m.HeartbeatAt.After(at) {
			return false
		}
	}
	return true
}

// liveKey names a live view by its members' instance ids.
func liveKey(live []members.Member) string {
	ids := make([]string, len(live))
	for i, m := range live {
		ids[i] = m.ID
	}
	return strings.Join(ids, ",")
}

// neverHere is orphanRule's selfSince for jobs not armed here: this
// replica fired none of them.
func neverHere(string) (time.Time, bool) { return time.Time{}, false }

// orphaned returns the jobs of ids (just armed here) that orphanRule
// finds orphaned over prev and live, with no member taken for this
// replica (none of prev's armers of a job just armed here is this one).
// When every job is orphaned (a replica starting alone: at a first start
// that is every job it arms) it returns ids itself, not a copy; the
// caller must not modify ids while it uses the result.
func orphaned(ids []string, prev, live []members.Member) []string {
	orphan := orphanRule(prev, live, "", nil)
	for i, id := range ids {
		if orphan(id) {
			continue
		}
		out := slices.Clone(ids[:i])
		for _, id := range ids[i+1:] {
			if orphan(id) {
				out = append(out, id)
			}
		}
		return out
	}
	return ids
}

// orphanRule returns whether a job that no member of the previous live
// view prev armed and live still holds while firing since before the
// other went: both its armers (members.Armers over prev, as
// Membership.Arms chose them) are gone, or the one left had not begun
// firing (Member.FiringSince, as live has it) by the last heartbeat of
// the one gone (its HeartbeatAt in prev), so the slots between may have
// had no replica. The others were armed by a firing armer all along,
// whose fires decided their slots. A member of prev that does not divide
// armed every job: while it lives, and fired before the last heartbeat of
// every member gone since prev, none is orphaned.
//
// When one of a job's armers is self (this replica), selfSince gives when
// it began firing that job, if later than its FiringSince, or false when
// it did not arm it at all (a job it deferred, neverHere).
func orphanRule(prev, live []members.Member, self string, selfSince func(id string) (time.Time, bool)) func(id string) bool {
	alive := make(map[string]members.Member, len(live))
	for _, m := range live {
		alive[m.ID] = m
	}
	// firedBefore reports whether m is in live and fired job id since at
	// or before t (any time, when t is zero).
	firedBefore := func(m members.Member, id string, t time.Time) bool {
		l, ok := alive[m.ID]
		if !ok || l.FiringSince.IsZero() {
			return false
		}
		since := l.FiringSince
		if m.ID == self && selfSince != nil {
			at, armed := selfSince(id)
			if !armed {
				return false
			}
			if at.After(since) {
				since = at
			}
		}
		return t.IsZero() || !since.After(t)
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
		if !m.Divides && m.ID != self && firedBefore(m, "", lastGone) {
			return func(string) bool { return false }
		}
	}
	covers := func(a, other members.Member, id string) bool {
		if a.ID == "" {
			return false
		}
		if _, ok := alive[other.ID]; ok || other.ID == "" {
			return firedBefore(a, id, time.Time{}) // no death between them
		}
		return firedBefore(a, id, other.HeartbeatAt)
	}
	return func(id string) bool {
		first, second := members.Armers(id, prev)
		return !covers(first, second, id) && !covers(second, first, id)
	}
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

// The hand-over (runDivide, handOverSome): for each job just armed here
// at now that no live replica armed before (orphaned), the fire path is
// offered the slots after its last decided slot (its lock's last_slot)
// and before this engine's first activation of it, within handOverWindow
// before now — each once, oldest first, whatever the job's catch-up
// setting (the claim decides: a slot another replica ran, or is running,
// is not run again). The slots between the last decided one and the
// window are recorded missed (record.MissedHandOver): no replica armed the
// job then. When the decided slots of a job cannot be read (handOverReads
// tries of its slice), the window's slots are recorded missed, hand_over,
// rather than left without a record; the recorder leaves out any a
// replica decided.
//
// The jobs with a slot in the window go first (inWindow), in a read of
// their own: only their slots can still run, and they must be claimed
// before the engine's own first fires of the jobs, or the claim takes
// them no more: a slot overtaken by a later one is recorded missed,
// hand_over (Runner.Offer), not run (at a re-division, runDivide holds
// those fires until then: handOverGates; a job armed late was fired
// before). The others (two dead replicas leave tens of
// thousands of daily jobs, none due in the window) are read after them,
// in the background once the deferred jobs are armed, only to record
// older gaps: their reads as of now find the slots decided before it,
// whatever the engine claimed since.

// inWindow splits ids into the jobs with a slot in the hand-over window
// before now (a second after it included) and the others, in their order.
// A job the engine does not arm (disarmed again meanwhile) is among the
// others.
func (s *Service) inWindow(ids []string, now time.Time) (due, rest []string) {
	from := now.Add(-s.handOverWindow() - time.Nanosecond)
	for _, id := range ids {
		if next, ok := s.engine.NextFunc(id); ok {
			if t := next(from); !t.IsZero() && !t.After(now.Add(time.Second)) {
				due = append(due, id)
				continue
			}
		}
		rest = append(rest, id)
	}
	return due, rest
}

// handOverSome hands over the jobs ids (see "The hand-over" above), read
// together (in the background, readDecidedSlots, for the jobs with no
// slot in the window).
// It releases the fires of each job it offers slots for (handOverGates)
// once they are answered.
func (s *Service) handOverSome(ctx context.Context, ids []string, now time.Time, background bool) {
	if len(ids) == 0 {
		return
	}
	began := time.Now()
	decided, unread, err := s.readDecidedSlots(ctx, "hand-over", ids, now, background)
	if ctx.Err() != nil {
		return
	}
	if background {
		s.log.Info("hand-over: the decided slots of the jobs with none in the window read, in the background",
			"jobs", len(ids)-len(unread), "took", time.Since(began))
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
	defer s.gates.release(id) // its fires, held for this, go on
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
