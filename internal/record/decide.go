package record

import (
	"fmt"
	"time"

	"github.com/cronswap/cronswap/internal/lifetime"
	"github.com/cronswap/cronswap/jobs"
)

// ClaimFire is a fire's side of a claim decision: the lease it asks for
// (its job, slot or identity, policy, and who claims: instance,
// incarnation, token) and what this claim already did for it.
type ClaimFire struct {
	Lease Lease
	// MayWait: under a policy that buffers, the fire waits on the lock
	// while a live run holds it (a cron fire, a run-now request); a
	// backfilled slot may not, and is skipped then.
	MayWait bool
	// Pushed: this claim sent the write putting the fire on the lock's
	// buffer (whether it landed is read back).
	Pushed bool
	// Taken says whether a taker of buffered fires already started the
	// fire's record; asked for (ClaimLookTaken) only when it matters.
	Taken Known
	// MaxRuns is the schedule's max_runs (0: none); off-schedule fires
	// have none.
	MaxRuns int
	// OvertakenReason is FireClaim.OvertakenReason: a cron slot overtaken
	// by a later slot claimed first is recorded missed with it, not
	// skipped.
	OvertakenReason string
	// Now is the claimer's clock.
	Now time.Time
}

// Known is a fact a decision may need a read for: not asked yet, or its
// answer.
type Known int

// Answers of a Known.
const (
	Unasked Known = iota
	Yes
	No
)

// ClaimStep is what a claim does next for one fire, as DecideClaim says.
type ClaimStep int

// Claim steps.
const (
	// ClaimAgain: the lock may be taken (free, past its lease, left by a
	// previous life of this instance, or changed in between): write
	// again, with ClaimDecision.Fence when it is set, taking it over when
	// ClaimDecision.TakeOver is.
	ClaimAgain ClaimStep = iota + 1
	// ClaimRepair: the document is damaged (LockState.Damage): repair it,
	// then write again.
	ClaimRepair
	// ClaimAcquired: the fire holds the lock (its write landed, its
	// answer lost), or, under OverlapAllow, its slot.
	ClaimAcquired
	// ClaimWaiting: the fire waits on the lock's buffer (Buffered).
	ClaimWaiting
	// ClaimPush: put the fire on the lock's buffer, then decide again.
	ClaimPush
	// ClaimSkip: the fire is not run (Skipped): a live run holds the lock,
	// the buffer is full, or a later slot was claimed (recorded missed
	// instead when ClaimDecision.MissedReason is set).
	ClaimSkip
	// ClaimLookTaken: read whether a taker of buffered fires already
	// started the fire, then decide again with ClaimFire.Taken set.
	ClaimLookTaken
)

// ClaimDecision is DecideClaim's answer.
type ClaimDecision struct {
	Step ClaimStep
	// Reason says why the fire is skipped or waits.
	Reason string
	// MissedReason, with ClaimSkip of a cron slot overtaken by a later
	// slot claimed first, is ClaimFire.OvertakenReason: the slot is
	// recorded missed with it instead of skipped (Reason says what
	// overtook it).
	MissedReason string
	// MaxRunsReached: skipped because the job's run count reached
	// ClaimFire.MaxRuns (lifetime.ReasonMaxRuns).
	MaxRunsReached bool
	// Holder and HolderRunID name the live run holding the lock, when
	// there is one (ClaimSkip, ClaimWaiting, ClaimPush), and, with
	// TakeOver, the run that is no longer live.
	Holder, HolderRunID string
	// TakeOver, with ClaimAgain under a policy that takes the lock: the
	// lock is held by a run that is no longer live (past its lease, or
	// left by a previous incarnation of the claimer's instance), and the
	// next write takes it over from that run (ClaimResult TakenOver);
	// without it the next write takes the lock only while it is free.
	TakeOver bool
	// CancelRunID is the run this fire asked to stop (ClaimWaiting under
	// OverlapCancelOther).
	CancelRunID string
	// Fence, with ClaimAgain of an off-schedule fire, is the fence to take
	// the lock with: the lock's plus one, when the claimer's clock is
	// behind the lock's last acquisition.
	Fence int64
}

// DecideClaim says what a claim of fire f does about the job's lock as read
// back (l) after its conditional write did not match, or its answer was
// lost, or the fire was put on the lock's buffer. It is the one rule of
// every overlap policy against every lock state, for cron slots and
// off-schedule runs alike (docs/locks.md, the state table; docs/overlap.md);
// it does no I/O: the store reads and writes, and asks again with what it
// learnt. A cron slot must be later than the lock's last slot (one that
// is not is skipped, or recorded missed with its OvertakenReason), and its
// write moves it; an off-schedule run neither requires nor moves it, takes
// the lock only below its fence, and waits on the lock only when it may.
// A cron slot whose job's run count has reached its max_runs is skipped
// (after the checks that find its own write landed: that write counted
// it), neither run nor put on the buffer.
func DecideClaim(l LockState, f ClaimFire) ClaimDecision {
	lease := f.Lease
	o, off := lease.Overlap, lease.OffSchedule
	laterClaimed := !off && !l.LastSlot.Before(lease.Slot)
	capped := !off && f.MaxRuns > 0 && l.Runs >= int64(f.MaxRuns)
	switch {
	case len(l.Damage) > 0:
		return ClaimDecision{Step: ClaimRepair}
	case !o.TakesLock():
		// Only the slot: the write touches a sane document.
		switch {
		case off || l.LastSlot.Equal(lease.Slot):
			return ClaimDecision{Step: ClaimAcquired}
		case laterClaimed:
			return laterSlot(l, f)
		case capped:
			return maxRunsReached()
		}
		return ClaimDecision{Step: ClaimAgain}
	case l.State == LockRunning && l.RunID == lease.RunID && l.Claim == lease.Token &&
		l.Holder == lease.Instance && l.Incarnation == lease.Incarnation:
		return ClaimDecision{Step: ClaimAcquired} // this claim's write landed
	}
	waits := o.Buffers() && f.MayWait
	if waits && l.Waits(lease.RunID) {
		return waitingOn(l, lease)
	}
	// A cron fire's push also moves the last slot: a last slot before it
	// says the push did not land. An off-schedule fire leaves no trace.
	if waits && f.Pushed && (off || laterClaimed) {
		switch f.Taken {
		case Unasked:
			return ClaimDecision{Step: ClaimLookTaken}
		case Yes:
			return ClaimDecision{Step: ClaimWaiting, Reason: fmt.Sprintf("buffered and taken up at once (overlap %s)", o)}
		}
	}
	if laterClaimed {
		return laterSlot(l, f)
	}
	if capped {
		return maxRunsReached()
	}
	live := l.HeldLive(lease.Instance, lease.Incarnation, f.Now)
	if waits && (live || len(l.Waiting) > 0) {
		return pushOrFull(l, lease, live)
	}
	if live {
		return ClaimDecision{Step: ClaimSkip, Holder: l.Holder, HolderRunID: l.RunID,
			Reason: fmt.Sprintf("run %s of %s still holds the lock", l.RunID, l.Holder)}
	}
	if o.Buffers() && len(l.Waiting) > 0 {
		// An off-schedule fire that may not wait, behind fires waiting on
		// a lock no live run holds: the caller takes those up.
		return ClaimDecision{Step: ClaimSkip,
			Reason: fmt.Sprintf("%d fire(s) waiting for the lock (overlap %s)", len(l.Waiting), o)}
	}
	again := ClaimDecision{Step: ClaimAgain}
	if l.State == LockRunning {
		// Held, but not live: taken over.
		again.TakeOver, again.Holder, again.HolderRunID = true, l.Holder, l.RunID
	}
	if off && l.Fence >= lease.Fence {
		// The claimer's clock is behind the lock's last acquisition (another
		// replica's claim time, or a slot): the next fence instead.
		again.Fence = l.Fence + 1
	}
	return again
}

// maxRunsReached skips a fire whose job's run count reached its max_runs.
func maxRunsReached() ClaimDecision {
	return ClaimDecision{Step: ClaimSkip, MaxRunsReached: true, Reason: lifetime.ReasonMaxRuns}
}

// laterSlot skips a cron slot overtaken by the later slot l names, or,
// when f names a reason for that, records it missed.
func laterSlot(l LockState, f ClaimFire) ClaimDecision {
	return ClaimDecision{Step: ClaimSkip, MissedReason: f.OvertakenReason,
		Reason: fmt.Sprintf("a later slot was claimed (last slot %s)", l.LastSlot.UTC().Format(time.RFC3339Nano))}
}

// waitingOn answers a fire found on the lock's buffer.
func waitingOn(l LockState, lease Lease) ClaimDecision {
	d := ClaimDecision{Step: ClaimWaiting, Reason: WaitReason(l, lease.Overlap)}
	if l.State == LockRunning {
		d.Holder, d.HolderRunID = l.Holder, l.RunID
	}
	if l.CancelBy == lease.RunID {
		d.CancelRunID = l.CancelRunID
	}
	return d
}

// pushOrFull answers a fire that is to wait on the lock: put on its buffer
// when there is room, else skipped (naming the live holder, if any: without
// one the caller takes the waiting fires up itself).
func pushOrFull(l LockState, lease Lease, live bool) ClaimDecision {
	o := lease.Overlap
	limit, n := o.BufferLimit(), len(l.Waiting)
	if n < limit {
		d := ClaimDecision{Step: ClaimPush, Reason: WaitReason(l, o)}
		if live {
			d.Holder, d.HolderRunID = l.Holder, l.RunID
		}
		return d
	}
	if live {
		return ClaimDecision{Step: ClaimSkip, Holder: l.Holder, HolderRunID: l.RunID,
			Reason: fmt.Sprintf("%d fire(s) already waiting for the lock held by run %s of %s (overlap %s, at most %d)",
				n, l.RunID, l.Holder, o, limit)}
	}
	return ClaimDecision{Step: ClaimSkip,
		Reason: fmt.Sprintf("%d fire(s) already waiting for the lock (overlap %s, at most %d)", n, o, limit)}
}

// WaitReason is the reason on the record of a fire waiting on the lock l
// under policy o.
func WaitReason(l LockState, o jobs.Overlap) string {
	if l.State == LockRunning {
		return fmt.Sprintf("waiting for run %s of %s to end (overlap %s)", l.RunID, l.Holder, o)
	}
	return fmt.Sprintf("waiting behind the fires buffered before it (overlap %s)", o)
}
