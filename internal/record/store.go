package record

import (
	"context"
	"time"
)

// Store is everything the fire path asks of the database about job_runs,
// job_locks and job_pauses (package runstore implements it on MongoDB).
// Every batch method serves many fires with one request per collection (a
// few more only when something is contended, damaged or lost), and no
// method reads and then writes without a condition.
type Store interface {
	// Claims, renewals and ends of runs.

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

	// Buffered fires (the overlap policies that buffer).

	// TakeBuffered takes the lock of job jobID for the first fire waiting
	// on it, when the lock is free, past its lease or left by a previous
	// incarnation of instance: the lock becomes the fire's (fence
	// FenceOf(its slot)) and its buffered record running under instance.
	// It returns nil when no fire is there to take (none waits, a live
	// run holds the lock, another replica took it first).
	TakeBuffered(ctx context.Context, jobID string, t BufferTake) (*BufferedRun, error)
	// PendingBuffers lists (at most limit) the jobs whose lock has fires
	// waiting and is free or past its lease: their holder ended without
	// taking the next fire, or died.
	PendingBuffers(ctx context.Context, now time.Time, limit int) ([]string, error)
	// CancelRequests returns, of the leases given, the run ids that a
	// later fire asked to stop (cancel_other), each with the run id of
	// the fire replacing it.
	CancelRequests(ctx context.Context, leases []Lease) (map[string]string, error)

	// Further attempts of failed runs (jobs.RetryPolicy).

	// ClaimRetry takes attempt c.Attempt of the slot: one conditional
	// update of its record (retrying at the attempt before → running at
	// this one, with its fence), the arbiter of the attempt across
	// replicas, and under a policy that takes the lock one update of the
	// job's lock, still held by the slot's run (fenced by run_id), to this
	// replica and the attempt's fence. ErrRetryTaken: not this replica's to
	// run; ErrRetryLockLost: the attempt was recorded failed instead; any
	// other error: nothing is known to be claimed.
	ClaimRetry(ctx context.Context, c RetryClaim) (Lease, error)
	// DueRetries returns up to limit records retrying whose next attempt
	// was due before before.
	DueRetries(ctx context.Context, before time.Time, limit int) ([]RunDoc, error)
	// GiveUpRetry ends a retrying record that is not to be retried (its
	// action no longer retries, or its retry state is damaged) as failed
	// with why; attempt, when positive, is the attempt it must be at.
	GiveUpRetry(ctx context.Context, runID string, attempt int, why string, now time.Time) error

	// Pauses after failures (jobs.Policy.PauseAfterFailures).

	// Paused returns the job's pause document and whether it pauses the
	// job (a damaged document is logged and does not).
	Paused(ctx context.Context, jobID string) (PauseDoc, bool, error)
	// PauseIfFailing pauses the job when its last c.Failures runs that
	// succeeded or failed, of slots after its last resume, all failed;
	// paused reports whether this call paused it.
	PauseIfFailing(ctx context.Context, c PauseCheck) (p PauseDoc, paused bool, err error)

	// Slots that did not run.

	// RecordMissed records m as missed, less the slots the database
	// already decided (run, skipped or recorded missed, here or on another
	// replica): it first moves the job's last slot up to m.To, so that no
	// claim can take a slot of the range any more, then writes one record
	// per stretch of undecided slots (next counts them; nil when the job's
	// schedule is unknown: then the range is written only if no slot of it
	// is decided). It returns the records it wrote; one already written by
	// another replica is not returned.
	RecordMissed(ctx context.Context, m MissedRange, next NextFunc, instance string, now time.Time) ([]MissedRange, error)
	// DecidedSlots returns, for each of ids the database knows, the latest
	// slot decided for it at or before notAfter: the lock's last slot,
	// else (no lock, or its last slot is after notAfter) the newest
	// record in job_runs at or before notAfter.
	DecidedSlots(ctx context.Context, ids []string, notAfter time.Time) (map[string]time.Time, error)
}
