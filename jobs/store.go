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

// ClaimRequest asks for one fire of a job.
type ClaimRequest struct {
	JobID string
	// Slot is the cron slot being fired; at most one claim per (JobID,
	// Slot) ever wins, and none for a slot at or before the job's last slot.
	Slot time.Time
	// Instance is this replica's id; RunID the id of the run if it wins.
	Instance string
	RunID    string
	// Overlap is the job's overlap policy: under OverlapForbid the claim
	// also takes the job's lock and is skipped while another run holds it;
	// under OverlapAllow only the slot is claimed.
	Overlap Overlap
	// Now is the claimer's clock, for leases; TTL the lease length.
	Now time.Time
	TTL time.Duration
	// Running, if set, reports whether a run id is one of this process's
	// runs in progress. A lock held under this Instance by a run that is
	// not is left over from a previous life of this instance (crashed and
	// restarted with the same instance id): it is taken over at once
	// instead of waiting for its lease.
	Running func(runID string) bool
}

// ClaimResult says how a claim ended.
type ClaimResult int

// Claim results.
const (
	// Acquired: the claim won; the lock was free (or the policy takes none).
	Acquired ClaimResult = iota + 1
	// TakenOver: the claim won a lock whose holder's lease had expired;
	// the holder's run has been marked abandoned.
	TakenOver
	// Skipped: a live run holds the lock (OverlapForbid) and this claim consumed
	// the slot as skipped; the caller records the skipped run.
	Skipped
	// AlreadyFired: the slot was claimed or skipped by someone else.
	AlreadyFired
)

// String returns the result as the lock_acquisitions_total label.
func (r ClaimResult) String() string {
	switch r {
	case Acquired:
		return "acquired"
	case TakenOver:
		return "taken_over"
	case Skipped:
		return "held"
	case AlreadyFired:
		return "already_fired"
	}
	return "error"
}

// Lease is a won claim: what renewals, the release and the run record are
// fenced by.
type Lease struct {
	JobID    string
	Slot     time.Time
	Instance string
	RunID    string
	Fence    int64
	// Overlap is the claim's policy; under one that takes the lock, the
	// lease holds the job's lock and renewals and the release are fenced
	// by it.
	Overlap Overlap
}

// Claim is the answer to a ClaimRequest.
type Claim struct {
	Result ClaimResult
	// Lease is set when Result is Acquired or TakenOver.
	Lease Lease
	// Holder and HolderRunID name the live holder when Result is Skipped,
	// or the previous (dead) holder when Result is TakenOver.
	Holder      string
	HolderRunID string
	// Repaired lists the damage found and repaired in the lock document on
	// the way (empty when none).
	Repaired []string
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
	// claim won but the action was not started).
	Reason string
}

// LockStore is the fire path's view of job_locks and job_runs. Every method
// is one or a few conditional atomic updates; none reads and then writes
// without a condition.
type LockStore interface {
	// Claim tries to win the fire (JobID, Slot). Damaged lock documents are
	// repaired on the way. An error wrapping ErrUnreachable means the
	// database could not be asked; the fire must not run.
	Claim(ctx context.Context, req ClaimRequest) (Claim, error)
	// StartRun inserts the running record of a won claim. A duplicate
	// (job id, slot) is ErrLockLost: someone else has the slot.
	StartRun(ctx context.Context, l Lease, now time.Time, ttl time.Duration) error
	// Renew extends the lease (and the run record's lease) to now+ttl;
	// ErrLockLost when it is no longer the caller's.
	Renew(ctx context.Context, l Lease, now time.Time, ttl time.Duration) error
	// Release frees the lock, fenced by holder and fence, recording the
	// outcome as the job's last; ErrLockLost when it was not the caller's.
	Release(ctx context.Context, l Lease, outcome string, now time.Time) error
	// FinishRun records the run's end, if the record is still running
	// (a taker may have marked it abandoned first).
	FinishRun(ctx context.Context, l Lease, end RunEnd) error
	// RecordSkip records a skipped fire.
	RecordSkip(ctx context.Context, jobID string, slot time.Time, instance, runID, reason string, now time.Time) error
}
