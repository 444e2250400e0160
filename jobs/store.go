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
	JobID       string
	RunID       string
	Instance    string
	Incarnation string
	Slot        time.Time
	Fence       int64
	// Overlap is the claim's policy; under one that takes the lock, the
	// lease holds the job's lock.
	Overlap Overlap
}

// FireClaim is one fire of a claim batch.
type FireClaim struct {
	JobID   string
	Slot    time.Time
	Overlap Overlap
	// Check: this replica is not the job's owner: first look whether the
	// slot is already recorded and insert only those that are not.
	Check bool
}

// BatchClaim is one claim batch of a replica.
type BatchClaim struct {
	Fires       []FireClaim
	Instance    string
	Incarnation string
	Now         time.Time
	TTL         time.Duration
}

// ClaimOutcome answers one fire of a batch.
type ClaimOutcome struct {
	Result      ClaimResult
	Lease       Lease
	Holder      string
	HolderRunID string
	Reason      string
	Repaired    []string
	Err         error
}

// LeaseEnd is one run's end for EndBatch.
type LeaseEnd struct {
	Lease Lease
	End   RunEnd
}

// ErrOutcomeUnknown marks a claim whose record may have landed.
var ErrOutcomeUnknown = errors.New("claim outcome unknown")

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

// BatchStore is the fire path's store.
type BatchStore interface {
	ClaimBatch(ctx context.Context, b BatchClaim) []ClaimOutcome
	RenewBatch(ctx context.Context, leases []Lease, now time.Time, ttl time.Duration) (lost []Lease, err error)
	EndBatch(ctx context.Context, ends []LeaseEnd) []error
	Disown(ctx context.Context, leases []Lease, reason string, now time.Time) error
	SweepExpired(ctx context.Context, now time.Time, limit int) ([]RunDoc, error)
	VerifyIndexes(ctx context.Context) (recreated bool, err error)
}

// RunID is the run id of (jobID, slot).
func RunID(jobID string, slot time.Time) string {
	return jobID + "@" + slot.UTC().Format(time.RFC3339Nano)
}

// FenceOf is the fence of slot.
func FenceOf(slot time.Time) int64 { return slot.UnixMilli() }
