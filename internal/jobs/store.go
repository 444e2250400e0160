package jobs

import (
	"context"
	"errors"
	"time"
)

// Clock is where the fire path reads "now" for leases and run times. Slots
// never come from it: they are the scheduler's deterministic cron slots.
type Clock interface {
	Now() time.Time
}

// SystemClock is the real clock.
type SystemClock struct{}

// Now implements Clock.
func (SystemClock) Now() time.Time { return time.Now() }

// ErrLockLost is returned by renewals and releases when the lock (or, for a
// job whose overlap policy takes no lock, the run record) is no longer the
// caller's: taken over after its lease, force-released by an operator, or
// repaired as damaged.
var ErrLockLost = errors.New("lock lost")

// ErrUnreachable wraps the errors of a claim that could not reach the
// database: the fire is not run (at most once beats at least once).
var ErrUnreachable = errors.New("database unreachable")

// ClaimResult says how a claim ended.
type ClaimResult int

// Claim results.
const (
	// Acquired: the claim won the slot and, under a policy that takes the
	// lock, the job's lock (free, past its lease, or left by a previous
	// incarnation of this instance).
	Acquired ClaimResult = iota + 1
	// Skipped: this claim won the slot, but a live run holds the lock
	// (OverlapForbid) or a later slot of the job was claimed first: the
	// slot is consumed and its record says skipped, with the reason.
	Skipped
	// AlreadyFired: the slot was claimed or skipped by someone else.
	AlreadyFired
	// Buffered: this claim won the slot while the job's lock was held (or
	// other fires were waiting for it) under a policy that buffers: the
	// fire waits on the lock, its record says buffered, and it runs when a
	// replica takes the lock for it (TakeBuffered).
	Buffered
)

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
	}
	return "error"
}

// ErrOutcomeUnknown is wrapped (with ErrUnreachable) in the Err of a claim
// outcome when this replica's run record may have been written although
// its answer was lost: the fire must not run, and the caller hands its
// lease to Disown, which turns such a record into a missed one.
var ErrOutcomeUnknown = errors.New("claim outcome unknown")

// RunID is the id of the run of job jobID at slot: job_runs' _id, the
// lock's run_id and the CRONSWAP_RUN_ID an action sees. It is the same on
// every replica, so the always-present _id index admits one record per
// (job, slot); the part after the last "@" is a time, so distinct
// (job, slot) pairs never share an id.
func RunID(jobID string, slot time.Time) string {
	return jobID + "@" + slot.UTC().Format(time.RFC3339Nano)
}

// FenceOf is the fence of the run at slot: the slot in Unix milliseconds.
// A lock is acquired only for a slot later than its last slot, so the
// fences a job's lock hands out strictly increase; an action passes
// CRONSWAP_FENCE to a resource that refuses writes with a lower fence.
func FenceOf(slot time.Time) int64 { return slot.UnixMilli() }

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
	Overlap Overlap
	// Attempt is the attempt of the slot this lease runs (1 the first)
	// when the job's action retries failed runs (RetryPolicy); 0 when it
	// does not. Fence is then FenceOf(Slot)+Attempt-1 (AttemptFence).
	Attempt int
	// OffSchedule: the run is not a cron slot of the job
	// (FireClaim.OffSchedule); its end does not move the lock's last slot.
	OffSchedule bool
}

// FireClaim is one fire of a claim batch.
type FireClaim struct {
	JobID   string
	Slot    time.Time // UTC cron slot
	Overlap Overlap
	// Check: this replica is not the job's owner: first look whether the
	// slot is already recorded (one find for all Check fires of the batch)
	// and insert only those that are not.
	Check bool
	// Action, Args and Category are what the fire names (the schedule's
	// action, its args JSON and its dispatch category); a buffered fire's
	// record keeps them, so that whichever replica runs it later runs the
	// same.
	Action, Args, Category string
	// Blackout, when set, names the blackout window the fire falls in:
	// its slot is recorded skipped with the window's id and reason, and
	// it does not run (the outcome is Skipped, or AlreadyFired).
	Blackout *Blackout
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
	// Result is Acquired, Skipped or AlreadyFired; zero when Err is set.
	Result ClaimResult
	// Lease is set when Result is Acquired.
	Lease Lease
	// Holder and HolderRunID name the live holder when Result is Skipped
	// and it is known.
	Holder      string
	HolderRunID string
	// Reason says why the fire was skipped (Result Skipped) or why the
	// slot is already decided (AlreadyFired, when known).
	Reason string
	// CancelRunID names the holding run this fire asked to stop (Result
	// Buffered under OverlapCancelOther), when it asked.
	CancelRunID string
	// Repaired lists the damage found and repaired in the lock document
	// on the way (empty when none).
	Repaired []string
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
	Status   string
	EndedAt  time.Time
	Error    string
	ExitCode *int
	// Output is what the run printed (exec actions).
	Output Output
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
}

// LeaseEnd is one run's end for EndBatch.
type LeaseEnd struct {
	Lease Lease
	End   RunEnd
}

// BatchStore is the fire path's view of job_locks and job_runs: every
// method serves many fires with one request per collection (a few more
// only when something is contended, damaged or lost), and none reads and
// then writes without a condition.
type BatchStore interface {
	// ClaimBatch claims the fires of b; the outcomes have the same
	// indexes as b.Fires.
	ClaimBatch(ctx context.Context, b BatchClaim) []ClaimOutcome
	// RenewBatch extends lease_until to now+ttl of every lease's run
	// record and, for leases whose overlap takes the lock, of its lock.
	// lost lists the leases no longer this run's (record not running,
	// lock run_id differs). err: not known (nothing lost reported).
	RenewBatch(ctx context.Context, leases []Lease, now time.Time, ttl time.Duration) (lost []Lease, err error)
	// EndBatch frees the locks (fenced by run_id) and records the ends,
	// one request per collection. Per end (same index): nil; an error
	// wrapping ErrLockLost when the record was no longer running
	// (abandoned by a taker) — its true ended_at is still written; another
	// error: not written. Status StatusMissed converts the running record
	// into a missed record of its slot.
	EndBatch(ctx context.Context, ends []LeaseEnd) []error
	// Disown turns records this replica may have inserted without knowing
	// (instance and incarnation match, still running) into missed records
	// with reason, and frees the locks they may hold; a record that is not
	// there is fine.
	Disown(ctx context.Context, leases []Lease, reason string, now time.Time) error
	// SweepExpired marks abandoned the running records whose lease passed
	// (holder died): status abandoned, abandoned_at now, error why,
	// expire_at; ended_at is not set (the holder writes its true end if
	// it comes back). It returns the records it abandoned, at most limit.
	SweepExpired(ctx context.Context, now time.Time, limit int) ([]RunDoc, error)
	// SweepPreviousLives marks abandoned the running records of instance
	// written under an incarnation other than incarnation: runs of a
	// previous life of this process's instance id, which cannot be running
	// any more.
	SweepPreviousLives(ctx context.Context, instance, incarnation string, now time.Time) ([]RunDoc, error)
	// VerifyIndexes checks job_runs' indexes and recreates any missing;
	// recreated reports whether one was missing.
	VerifyIndexes(ctx context.Context) (recreated bool, err error)
}
