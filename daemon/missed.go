package daemon

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/cronswap/cronswap/internal/members"
	"github.com/cronswap/cronswap/internal/pace"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/schedule"
)

// decidedAtStart is the latest decided slot of each job at or before the
// instant this daemon's engine began firing (less the longest jitter
// delay, so none of it is this daemon's own doing), read while it fires.
// ok is false when it could not be read.
type decidedAtStart struct {
	// read is closed once readDecided has its answer (or its failure):
	// the start-up gaps are computed from it, so they wait for it.
	read     chan struct{}
	readOnce sync.Once
	mu       sync.Mutex
	slots    map[string]time.Time
	// asked holds the jobs whose decided slot was read (once each, a
	// prefix of planDecided's list, sharing its array). Both are dropped
	// once recordStartupGaps has walked them.
	asked []string
	ok    bool
	// vouchers are the other members that fired when the read was made,
	// by which the jobs they arm were not asked for; view is the live
	// view it was made in. Both are fixed before the engine starts and
	// read by confirmVouchers.
	vouchers, view []members.Member
	// firingAt is when the engine began firing, and notAfter the latest
	// slot it cannot have claimed (planDecided): set before
	// parts.engineStarted is closed.
	firingAt, notAfter time.Time
}

// decidedReadTimeout bounds one try of a read of the decided slots of
// decidedReadSlice jobs (readDecidedSlots).
const decidedReadTimeout = 10 * time.Second

// decidedReadSlice is how many jobs' decided slots one try reads (the
// Service's decidedSlice; tests make it smaller): a read of a million
// jobs on a busy server goes a slice at a time, each with its own tries,
// rather than all within one timeout.
const decidedReadSlice = 10000

// backgroundReadDivisor divides decidedReadSlice for a background read of
// the decided slots (readDecidedSlots).
const backgroundReadDivisor = 10

// slots gives the runner the slot sequence of an armed job.
func (s *Service) slots(id string) (record.NextFunc, bool) {
	next, ok := s.engine.NextFunc(id)
	return next, ok
}

// planDecided chooses, just before the engine starts, the armed jobs
// whose decided slots readDecided will read, and the instant it reads
// them at: the latest a slot this engine cannot have claimed may be
// (firingAt less the longest delay of an armed job's fires: a jittered
// job fires a slot that late after it).
//
// A job that another live member fires (Member.FiringSince) and arms
// (members.Armers over the live view, or every job when that member does
// not divide) is not asked for: that member decides its slots while this
// one starts, so it has no start-up gap. A replica joining a live
// deployment thus reads nothing. Those members vouch for the jobs until
// confirmVouchers has seen each heartbeat after this engine began
// firing; they are stored here, before the engine starts.
func (s *Service) planDecided(firingAt time.Time) (ids []string, notAfter time.Time) {
	view := s.members.LiveView()
	firing := firingOthers(view, s.opts.InstanceID)
	armedIDs, maxDelay := s.engine.ArmedIDs()
	ids = orphaned(armedIDs, view, firing)
	s.decided.mu.Lock()
	s.decided.vouchers, s.decided.view = firing, view
	s.decided.mu.Unlock()
	if len(firing) > 0 {
		s.log.Info("start-up: other members fire already; the decided slots are read only for the jobs none of them arms",
			"firing", liveKey(firing), "armed", len(armedIDs), "asked", len(ids))
	}
	notAfter = firingAt.Add(-maxDelay)
	s.decided.mu.Lock()
	s.decided.notAfter = notAfter
	s.decided.mu.Unlock()
	return ids, notAfter
}

// readDecided reads the decided slots of ids at or before notAfter
// (planDecided) while the engine fires, and then closes s.decided.read:
// what this engine's own claims decide comes after notAfter, so neither
// waits for the other. A failure is logged: the start-up gaps are then
// looked for only among the jobs whose slices were read.
func (s *Service) readDecided(ctx context.Context, ids []string, notAfter time.Time) {
	defer s.decided.readOnce.Do(func() { close(s.decided.read) })
	slots, unread, err := s.readDecidedSlots(ctx, "start-up", ids, notAfter, false)
	s.decided.mu.Lock()
	defer s.decided.mu.Unlock()
	if err != nil && ctx.Err() == nil {
		s.log.Warn("could not read the decided slots of some jobs; their slots missed while no replica ran are not recorded this time",
			"collection", record.LocksCollection, "jobs", len(unread), "read", len(ids)-len(unread), "error", err)
	}
	if ctx.Err() != nil {
		return
	}
	s.decided.asked = ids[:len(ids)-len(unread)]
	s.decided.slots, s.decided.ok = slots, true
}

// readDecidedSlots reads the decided slots of ids at or before notAfter
// (runstore.Store DecidedSlots), decidedReadSlice jobs at a time, trying
// each slice handOverReads times with decidedReadTimeout each, the waits
// between tries doubling from a second; who names the reader in the
// logs. A slice whose tries all fail ends the read: decided then holds
// the slices read before it, unread the ids from it on (a suffix of ids),
// and err its last failure.
//
// A background read (background true: nothing waits for it but records
// of older gaps) goes in slices a tenth the size, and rests after each
// (pace.Rest): it asks the database for at most a quarter of its time,
// and never for long at a time, leaving it to the claims of the fires due
// meanwhile.
func (s *Service) readDecidedSlots(ctx context.Context, who string, ids []string, notAfter time.Time, background bool) (decided map[string]time.Time, unread []string, err error) {
	decided = map[string]time.Time{}
	slice := s.decidedSlice
	if background {
		slice = max(slice/backgroundReadDivisor, 1)
	}
	for i := 0; i < len(ids); i += slice {
		part := ids[i:min(i+slice, len(ids))]
		wait := time.Second
		for try := 1; ; try++ {
			rctx, cancel := context.WithTimeout(ctx, decidedReadTimeout)
			began := time.Now()
			slots, err := s.store.DecidedSlots(rctx, part, notAfter)
			took := time.Since(began)
			cancel()
			if err == nil {
				maps.Copy(decided, slots)
				if background && i+slice < len(ids) {
					if err := pace.Rest(ctx, took, nil); err != nil {
						return decided, ids[i+slice:], err
					}
				}
				break
			}
			if try == handOverReads || ctx.Err() != nil {
				return decided, ids[i:], err
			}
			s.log.Warn(who+": could not read the decided slots; trying again", "collection", record.LocksCollection,
				"jobs", len(part), "attempt", try, "retry_in", wait, "error", err)
			select {
			case <-ctx.Done():
				return decided, ids[i:], ctx.Err()
			case <-time.After(wait):
			}
			wait *= 2
		}
	}
	return decided, nil, nil
}

// firingOthers returns the members of view, other than instance, that
// fire (Member.FiringSince is set).
func firingOthers(view []members.Member, instance string) []members.Member {
	var out []members.Member
	for _, m := range view {
		if m.ID != instance && !m.FiringSince.IsZero() {
			out = append(out, m)
		}
	}
	return out
}

// confirmVouchers follows the members that vouched for the jobs the
// start-up read left out (readDecided) until each has either heartbeated
// after this engine began firing at firingAt — it was alive then, so its
// jobs had no gap — or left the live view without one: it may have died
// before this engine fired, leaving the slots from its death to this
// engine's first without a replica. For the jobs armed here that no
// confirmed member arms (orphaned over the start's view), the slots after
// the last one decided before firingAt and before this engine's first are
// then recorded as the start-up gap would have recorded them
// (no_replica_running, or outside_catchup_window; the recorder leaves out
// any a replica decided, the catch-up's included): this engine's claims
// have moved each job past them, so they can no longer run. For a job
// whose decided slot cannot be read (handOverReads tries of its slice),
// the slots since the gone members were last seen alive are recorded the
// same way.
func (s *Service) confirmVouchers(ctx context.Context, firingAt time.Time) {
	s.decided.mu.Lock()
	pending, view := s.decided.vouchers, s.decided.view
	s.decided.mu.Unlock()
	var confirmed, gone []members.Member
	// The latest heartbeat seen of each member still pending.
	lastAlive := make(map[string]time.Time, len(pending))
	for _, m := range pending {
		lastAlive[m.ID] = m.HeartbeatAt
	}
	t := time.NewTicker(redivideEvery)
	defer t.Stop()
	for len(pending) > 0 {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		live := s.members.LiveView()
		pending = slices.DeleteFunc(pending, func(m members.Member) bool {
			i := slices.IndexFunc(live, func(l members.Member) bool { return l.ID == m.ID && l.Incarnation == m.Incarnation })
			switch {
			case i < 0:
				gone = append(gone, m)
			case live[i].HeartbeatAt.After(firingAt):
				confirmed = append(confirmed, m)
			default:
				lastAlive[m.ID] = live[i].HeartbeatAt
				return false
			}
			return true
		})
	}
	if len(gone) == 0 {
		if len(confirmed) > 0 {
			s.log.Info("start-up: the members that fired when this one started heartbeated since it fired",
				"confirmed", liveKey(confirmed))
		}
		return
	}
	armedIDs, _ := s.engine.ArmedIDs()
	ids := orphaned(armedIDs, view, confirmed)
	s.log.Warn("start-up: members that fired when this one started are gone without a heartbeat since it fired; the slots their jobs may have lost before this engine fired are looked for",
		"gone", liveKey(gone), "confirmed", liveKey(confirmed), "jobs", len(ids))
	if len(ids) == 0 {
		return
	}
	s.decided.mu.Lock()
	notAfter := s.decided.notAfter
	s.decided.mu.Unlock()
	decided, unread, err := s.readDecidedSlots(ctx, "start-up", ids, notAfter, false)
	if ctx.Err() != nil {
		return
	}
	// When the decided slots of a job cannot be read, its gap is taken to
	// start where the gone members were last seen alive, less the claim
	// grace and a re-divide tick (a slot due just before could still have
	// been theirs to claim): its slots are recorded missed, rather than
	// left without a record, and the recorder leaves out any a replica
	// decided.
	var aliveUntil time.Time
	if err != nil {
		for _, m := range gone {
			if at := lastAlive[m.ID]; aliveUntil.IsZero() || at.Before(aliveUntil) {
				aliveUntil = at
			}
		}
		aliveUntil = aliveUntil.Add(-s.claimGrace() - redivideEvery)
		s.log.Warn("start-up: could not read the decided slots of some jobs; their slots since the gone members were last seen alive are recorded missed",
			"collection", record.LocksCollection, "jobs", len(unread), "read", len(ids)-len(unread), "since", aliveUntil, "error", err)
	}
	unknown := make(map[string]bool, len(unread))
	for _, id := range unread {
		unknown[id] = true
	}
	now := time.Now()
	for _, id := range ids {
		last, ok := decided[id]
		if unknown[id] {
			last, ok = aliveUntil, true
		}
		if !ok || ctx.Err() != nil {
			continue // never decided anywhere: the catch-up's business, as at any start
		}
		st, ok := s.engine.Get(id)
		from, delay, fires := s.engine.FiresFrom(id)
		next, nextOK := s.engine.NextFunc(id)
		if !ok || !fires || !nextOK {
			continue // disarmed meanwhile
		}
		notBefore := now.Add(-s.opts.Retention)
		if st.UpdatedAt.After(notBefore) {
			notBefore = st.UpdatedAt
		}
		// The start-up gap's rule, computed late: no replica ran them.
		for _, m := range startupGaps(id, gapInput{decided: last, notBefore: notBefore, firesFrom: from, delay: delay,
			window: s.catchupFor(st.ActionName()), now: now, next: next}, s.log) {
			s.log.Info("start-up: slots missed while no replica ran", "job_id", m.JobID, "scheduled_at", m.From,
				"last_scheduled_at", m.To, "count", m.Count, "reason", m.Reason, "vouched_by_gone", true)
			s.runner.RecordMissed(st.Schedule, delay, m)
		}
	}
}

// firesFromWait bounds the wait for the engine's timers to start before
// the start-up gaps are computed.
const firesFromWait = 10 * time.Second

// recordStartupGaps finds, for each armed job, the slots since its last
// decided one that no replica ran and that neither this engine nor the
// catch-up will run, and hands them to the runner to be recorded missed
// (no_replica_running, or outside_catchup_window for those older than the
// job's catch-up window). catchUp are the slots the catch-up offers. It
// first waits for readDecided's answer: the catch-up that calls it starts
// at the first full sync, when that read has only just been sent.
func (s *Service) recordStartupGaps(ctx context.Context, now time.Time, catchUp []schedule.Due) {
	select {
	case <-s.decided.read:
	case <-ctx.Done():
		return
	}
	s.decided.mu.Lock()
	decided, asked, ok := s.decided.slots, s.decided.asked, s.decided.ok
	// Asked once, at start-up: the map and the list (one entry per armed
	// job) are not kept past this walk.
	s.decided.slots, s.decided.asked = nil, nil
	s.decided.mu.Unlock()
	if !ok {
		return
	}
	offered := make(map[string]time.Time, len(catchUp))
	for _, c := range catchUp {
		offered[c.Schedule.ID] = c.Slot
	}
	retention := s.opts.Retention
	waitUntil := time.Now().Add(firesFromWait)
	// Only the jobs asked for: a replica starting beside firing members
	// asked for few or none, and walks no more.
	for _, id := range asked {
		st, ok := s.engine.Get(id)
		if !ok || !st.Armed {
			continue // disarmed since: its armers' fires say what happened
		}
		// A job that never fired anywhere is due since its document was
		// written (as the catch-up counts it); without updated_at there is
		// no telling since when.
		last, ok := decided[st.ID]
		if !ok && st.UpdatedAt.IsZero() {
			continue
		}
		var from time.Time
		var delay time.Duration
		for {
			var ok bool
			if from, delay, ok = s.engine.FiresFrom(st.ID); ok || time.Now().After(waitUntil) {
				break
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
		next, ok := s.engine.NextFunc(st.ID)
		if from.IsZero() || !ok {
			continue // disarmed or re-armed meanwhile: its fires say what happened
		}
		notBefore := now.Add(-retention)
		if st.UpdatedAt.After(notBefore) {
			notBefore = st.UpdatedAt
		}
		for _, m := range startupGaps(st.ID, gapInput{
			decided: last, notBefore: notBefore, firesFrom: from, delay: delay,
			catchUp: offered[st.ID], window: s.catchupFor(st.ActionName()), now: now, next: next,
		}, s.log) {
			s.log.Info("start-up: slots missed while no replica ran", "job_id", m.JobID, "scheduled_at", m.From,
				"last_scheduled_at", m.To, "count", m.Count, "reason", m.Reason)
			s.runner.RecordMissed(st.Schedule, delay, m)
		}
	}
}

// gapInput is what the start-up gap of one job is computed from.
type gapInput struct {
	// decided is the latest decided slot; the gap starts after it.
	decided time.Time
	// notBefore: slots before it are not in the gap (the schedule was not
	// in force, or the record would already be past its retention).
	notBefore time.Time
	// firesFrom and delay: this engine fires the slots s with s+delay
	// after firesFrom; the gap ends before them.
	firesFrom time.Time
	delay     time.Duration
	// catchUp is the slot the catch-up offers (zero: none); the gap ends
	// before it.
	catchUp time.Time
	// window is the job's catch-up window (0: off); slots older than it
	// at now are outside it.
	window time.Duration
	now    time.Time
	next   record.NextFunc
	// reason is the reason of the gap's slots within the catch-up window
	// (empty: no_replica_running, the start-up's); those older are
	// outside_catchup_window, unless reason is given: then the window is
	// not looked at.
	reason string
}

// startupGaps returns the missed ranges of one job's start-up gap: every
// slot after the decided one (and not before notBefore) that this engine
// does not fire and the catch-up does not offer, collapsed into at most two
// ranges — the slots older than the catch-up window
// (outside_catchup_window) and the others (no_replica_running). A stall's
// gap (stall.go) goes the same way, all of it under its own reason.
func startupGaps(id string, in gapInput, log *slog.Logger) []record.MissedRange {
	hi := in.firesFrom.Add(-in.delay)
	if !in.catchUp.IsZero() && !in.catchUp.After(hi) {
		hi = in.catchUp.Add(-time.Nanosecond)
	}
	lo := in.decided
	if b := in.notBefore.Add(-time.Nanosecond); b.After(lo) {
		lo = b
	}
	if !hi.After(lo) {
		return nil
	}
	type part struct {
		after, through time.Time
		reason         string
	}
	reason := in.reason
	if reason == "" {
		reason = record.MissedNoReplica
	}
	parts := []part{{lo, hi, reason}}
	if in.window > 0 && in.reason == "" {
		// The catch-up offers only slots s with now-s <= window.
		cut := in.now.Add(-in.window).Add(-time.Nanosecond)
		switch {
		case !cut.After(lo):
		case !cut.Before(hi):
			parts = []part{{lo, hi, record.MissedOutsideCatchup}}
		default:
			parts = []part{{lo, cut, record.MissedOutsideCatchup}, {cut, hi, record.MissedNoReplica}}
		}
	}
	var out []record.MissedRange
	for _, p := range parts {
		first, last, n, complete := record.CountSlots(in.next, p.after, p.through)
		if !complete {
			log.Warn("start-up: gap too long to walk; recording its first slots only", "job_id", id,
				"scheduled_at", first, "last_scheduled_at", last, "count", n, "reason", p.reason)
		}
		if n > 0 {
			out = append(out, record.MissedRange{JobID: id, From: first.UTC(), To: last.UTC(), Count: n, Reason: p.reason})
		}
	}
	return out
}
