package record

import (
	"errors"
	"fmt"
	"time"

	"github.com/cronswap/cronswap/jobs"
	"github.com/cronswap/cronswap/schedule"
)

// Exclusion says why a fire that came due is not run: its slot falls in a
// blackout window, or on a date of a calendar its schedule excludes. The
// slot is recorded skipped, with the reason, in the claim batch (once
// across replicas, as a run would be).
type Exclusion struct {
	// BlackoutID names the window (FieldBlackoutID), Calendar the
	// calendar (FieldCalendar): one of them is set.
	BlackoutID, Calendar string
	// Reason is the skipped record's reason: the window's reason, or
	// CalendarReason of the calendar.
	Reason string
	// Error is the skipped record's error, what `cronswap runs list`
	// shows.
	Error string
}

// BlackoutExclusion is the exclusion of a slot in blackout window id,
// opened for reason.
func BlackoutExclusion(id, reason string) Exclusion {
	return Exclusion{BlackoutID: id, Reason: reason, Error: fmt.Sprintf("blackout %s: %s", id, reason)}
}

// CalendarExclusion is the exclusion of a slot on a date of calendar name
// (why says which date, or what is wrong with the calendar).
func CalendarExclusion(name, why string) Exclusion {
	return Exclusion{Calendar: name, Reason: CalendarReason(name), Error: CalendarReason(name) + ": " + why}
}

// CalendarReason is the reason on the record of a slot skipped because
// its date is in calendar name: "calendar:<name>".
func CalendarReason(name string) string { return "calendar:" + name }

// BufferTake is who takes a buffered fire, and the lease it gets.
type BufferTake struct {
	// Instance and Incarnation name the taking replica and process.
	Instance, Incarnation string
	// Overlap is the policy the lease is held under (it takes the lock).
	Overlap jobs.Overlap
	// Clock is read for each step (the fire's start is stamped after the
	// lock is taken, so never before the end of the run it follows).
	Clock func() time.Time
	// TTL is the lease length.
	TTL time.Duration
}

// BufferedRun is a buffered fire taken by TakeBuffered: its lease (held,
// renewed and ended like a claim's; Lease.OffSchedule for a run-now
// request, whose RunID and Slot are its own) and the schedule it came due
// under.
type BufferedRun struct {
	Lease    Lease
	Schedule schedule.Schedule
}

// ErrRetryTaken is returned by ClaimRetry when the attempt is not (or no
// longer) to be claimed: another replica claimed it, or the record is not
// retrying at that attempt any more.
var ErrRetryTaken = errors.New("retry already claimed")

// ErrRetryLockLost is returned by ClaimRetry when the slot's run no longer
// held the job's lock when its attempt was claimed (taken over after its
// lease, released by an operator): the attempt is recorded failed, not run.
var ErrRetryLockLost = errors.New("the job's lock was lost during the backoff")

// ErrRetryReplaced is returned by ClaimRetry when a cancel_other fire asked
// the slot's run to stop during the backoff: the slot is recorded
// abandoned (reason ReasonReplaced) and the lock freed for the fire
// replacing it, which the caller then takes up.
var ErrRetryReplaced = errors.New("replaced during the backoff")

// RetryClaim asks for the next attempt of a slot whose record is
// StatusRetrying at attempt Attempt-1.
type RetryClaim struct {
	JobID string
	Slot  time.Time
	// RunID is the record's _id; empty means RunID(JobID, Slot), a cron
	// slot's.
	RunID   string
	Attempt int
	Overlap jobs.Overlap
	// Instance and Incarnation name this replica and process.
	Instance    string
	Incarnation string
	// Now is the claimer's clock; TTL the lease length.
	Now time.Time
	TTL time.Duration
}

// ErrLockLost is returned by renewals and releases when the lock (or, for a
// job whose overlap policy takes no lock, the run record) is no longer the
// caller's: taken over after its lease, force-released by an operator, or
// repaired as damaged.
var ErrLockLost = errors.New("lock lost")

// ErrLockChanged answers an operator's release of a lock
// (runstore.Store.ReleaseLock) that is no longer held with the fence the
// operator saw: released or acquired again since it was read.
var ErrLockChanged = errors.New("the lock changed since it was read")

// ErrUnreachable wraps the errors of a claim that could not reach the
// database: the fire is not run (at most once beats at least once).
var ErrUnreachable = errors.New("database unreachable")

// ClaimResult says how a claim ended.
type ClaimResult int

// Claim results.
const (
	// Acquired: the claim won the slot and, under a policy that takes the
	// lock, the job's free lock.
	Acquired ClaimResult = iota + 1
	// Skipped: this claim won the slot, but a live run holds the lock
	// (OverlapSkip) or a later slot of the job was claimed first: the
	// slot is consumed and its record says skipped, with the reason.
	Skipped
	// AlreadyFired: the slot was claimed or skipped by someone else.
	AlreadyFired
	// Buffered: this claim won the slot while the job's lock was held (or
	// other fires were waiting for it) under a policy that buffers: the
	// fire waits on the lock, its record says buffered, and it runs when a
	// replica takes the lock for it (TakeBuffered).
	Buffered
	// Missed: this claim won the slot, but a later slot of the job was
	// claimed first, and the fire names what such a slot is recorded
	// with (FireClaim.OvertakenReason): the slot is consumed and its
	// record is a missed record of that one slot, with the reason.
	Missed
	// TakenOver: as Acquired (the fire runs), but the job's lock was held
	// by a run that is no longer live — past its lease, or left by a
	// previous incarnation of this instance — and this claim took it over
	// (ClaimOutcome.Holder and HolderRunID name that run).
	TakenOver
)

// Won reports whether the claim won the fire, which then runs: Acquired
// or TakenOver.
func (r ClaimResult) Won() bool { return r == Acquired || r == TakenOver }

// ClaimResults returns every ClaimResult, in their order.
func ClaimResults() []ClaimResult {
	return []ClaimResult{Acquired, Skipped, AlreadyFired, Buffered, Missed, TakenOver}
}

// String returns the result as the lock_acquisitions_total label.
func (r ClaimResult) String() string {
	switch r {
	case Acquired:
		return "acquired"
	case Skipped:
		return "held"
	case AlreadyFired:
		return "already_fired"
	case Buffered:
		return "buffered"
	case Missed:
		return "missed"
	case TakenOver:
		return "taken_over"
	}
	return "error"
}

// ErrOutcomeUnknown is wrapped (with ErrUnreachable) in the Err of a claim
// outcome when this replica's run record may have been written although
// its answer was lost: the fire must not run, and the caller hands its
// lease to Disown, which turns such a record into a missed one.
var ErrOutcomeUnknown = errors.New("claim outcome unknown")

// Lease is a won claim: what renewals, the end and the run record are
// fenced by.
type Lease struct {
	JobID string
	Slot  time.Time
	// Instance and Incarnation name the replica and the process that won.
	Instance    string
	Incarnation string
	// RunID is RunID(JobID, Slot); Fence is FenceOf(Slot).
	RunID string
	Fence int64
	// Overlap is the claim's policy; under one that takes the lock, the
	// lease holds the job's lock and renewals and the end are fenced by
	// the lock's run_id.
	Overlap jobs.Overlap
	// Attempt is the attempt of the slot this lease runs (1 the first)
	// when the job's action retries failed runs (RetryPolicy); 0 when it
	// does not. Fence is then FenceOf(Slot)+Attempt-1 (AttemptFence).
	Attempt int
	// Token is unique per acquisition (the record's and the lock's
	// claim field): renewals, the end and every later write of the run
	// match it, so a stale holder's write never lands on the record or
	// lock of a later acquisition of the same run id (docs/locks.md).
	Token string
	// OffSchedule: the run is not a cron slot of the job
	// (FireClaim.OffSchedule); its end does not move the lock's last slot.
	OffSchedule bool
	// Until is the lease_until the acquisition wrote: its Now (by the
	// claimer's clock, taken before the request went out) plus its TTL.
	// Every Store method that acquires a lease sets it; the holder's
	// local deadline counts from it, not from when the answer arrived.
	Until time.Time
}

// FireClaim is one fire of a claim batch.
type FireClaim struct {
	JobID   string
	Slot    time.Time // UTC cron slot
	Overlap jobs.Overlap
	// Check: this replica is not the job's owner: first look whether the
	// slot is already recorded (one find for all Check fires of the batch)
	// and insert only those that are not.
	Check bool
	// Schedule is the schedule the fire came due under (its action, args,
	// category, ...): a buffered fire's record keeps it (RunScheduleField),
	// so that whichever replica runs it later runs the same. Set only for
	// fires that may wait on the lock.
	Schedule *schedule.Schedule
	// Exclusion, when set, says why the fire is not run (a blackout
	// window, an excluded calendar): its slot is recorded skipped with the
	// reason (the outcome is Skipped, or AlreadyFired).
	Exclusion *Exclusion
	// MaxRuns, when positive, is the schedule's max_runs: a cron slot
	// whose claim finds the job's run count (LockRunsField) at it is
	// skipped (ClaimOutcome.MaxRunsReached); one that takes the lock, or
	// under OverlapAllow the slot, counts one more run in the same write.
	MaxRuns int
	// OvertakenReason, when set on a cron slot, is the reason its slot is
	// recorded missed with, rather than skipped, when its claim finds a
	// later slot of the job claimed first (Result Missed): a slot a
	// hand-over offers (MissedHandOver), due while no replica armed the
	// job, which the new armer's own fires overtook.
	OvertakenReason string
	// RunID and Fence, when not empty, replace RunID(JobID, Slot) and
	// FenceOf(Slot): the identity of an off-schedule run (OffSchedule).
	RunID string
	Fence int64
	// OffSchedule marks a fire that is not the job's next cron slot (a
	// triggered run, a backfilled slot): its claim neither requires a slot
	// later than the lock's last slot nor moves it, and it takes the lock
	// only while the lock's fence is below Fence, so fences still increase.
	OffSchedule bool
	// Buffer lets an OffSchedule fire wait on the job's lock like a cron
	// fire under a policy that buffers (buffer_one, buffer_all,
	// cancel_other): put on the lock's buffer (Buffered) instead of being
	// skipped while a run holds it. Without it (a backfilled slot) such a
	// fire is skipped, also while fires wait on the lock.
	Buffer bool
}

// BatchClaim is one claim batch of a replica.
type BatchClaim struct {
	Fires    []FireClaim
	Instance string
	// Incarnation identifies this process (members): a lock held by this
	// Instance under another incarnation is a previous life's and is
	// taken over at once.
	Incarnation string
	// Now is the claimer's clock, for leases; TTL the lease length.
	Now time.Time
	TTL time.Duration
}

// ClaimOutcome answers one fire of a batch (same index as
// BatchClaim.Fires).
type ClaimOutcome struct {
	// Result is Acquired, TakenOver, Skipped, AlreadyFired, Buffered or
	// Missed; zero when Err is set.
	Result ClaimResult
	// Lease is set when Result is Acquired or TakenOver.
	Lease Lease
	// Holder and HolderRunID name the live holder when Result is Skipped
	// and it is known, and the run whose lock was taken over when Result
	// is TakenOver.
	Holder      string
	HolderRunID string
	// Reason says why the fire was skipped (Result Skipped), why the
	// slot is already decided (AlreadyFired, when known), or the reason
	// its missed record gives (Missed).
	Reason string
	// CancelRunID names the holding run this fire asked to stop (Result
	// Buffered under OverlapCancelOther), when it asked.
	CancelRunID string
	// Repaired lists the damage found and repaired in the lock document
	// on the way (empty when none).
	Repaired []string
	// MaxRunsReached is set with Result Skipped when the job's run count
	// had reached the fire's MaxRuns: the job is to run no more slots.
	MaxRunsReached bool
	// Err is set when there is no decision. errors.Is(Err, ErrUnreachable):
	// the database could not be asked, or its answer was lost and could
	// not be read back; errors.Is(Err, ErrOutcomeUnknown) additionally
	// when this replica's record may have landed (the caller later calls
	// Disown for Lease, which is then filled in). Otherwise the server
	// refused (a claim error). With Err set this replica holds nothing and
	// must not run the fire.
	Err error
}

// RunEnd is the outcome of a run, written to its record.
type RunEnd struct {
	Status string
	// EndedAt is when the run ended, or, with Observed, when its end was
	// observed.
	EndedAt time.Time
	// Observed: the run's end was only seen after this process stalled
	// (frozen, paused): it ended between After and EndedAt, and EndedAt is
	// when it was observed (docs/locks.md, "The record tells the truth").
	Observed bool
	After    time.Time
	Error    string
	ExitCode *int
	// Stdout and Stderr are the tails of what the run printed (exec
	// actions).
	Stdout, Stderr string
	// AnswerStatus and Answer are an http action's answer (0 and "":
	// none).
	AnswerStatus int
	Answer       string
	// Reason is why the slot did not run, when Status is StatusMissed (the
	// claim won but the action was not started); ReasonReplaced for a run
	// a cancel_other fire stopped.
	Reason string
	// StartedAt is when the attempt started (kept in its attempts entry
	// when Lease.Attempt is set).
	StartedAt time.Time
	// RetryAt, with Status StatusRetrying, is when the next attempt of the
	// slot is due; HoldUntil is how long a lock-taking policy's lock stays
	// held by the slot's run for it (RetryAt plus the lease).
	RetryAt   time.Time
	HoldUntil time.Time
	// Schedule, with Status StatusRetrying, is the schedule the slot came
	// due under: the record keeps it (RunScheduleField) for whichever
	// replica runs the next attempt.
	Schedule *schedule.Schedule
	// TraceParent and TraceState are the W3C trace context of the fire's
	// span when tracing is on: a notice the end carries (failed,
	// abandoned, missed) carries it too, so that its deliveries continue
	// the fire's trace.
	TraceParent, TraceState string
}

// LeaseEnd is one run's end for EndBatch.
type LeaseEnd struct {
	Lease Lease
	End   RunEnd
}
