package jobs

import (
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/notify"
)

// Collection names of the fire path's records: one lock document per job,
// one run record per claimed or skipped fire. Every package that reads or
// writes them (the daemon, `cronswap init`, the command line) names them
// through these constants.
const (
	LocksCollection = "job_locks"
	RunsCollection  = "job_runs"
)

// Lock states: a lock document is either free or held by one run, said by
// one explicit state field rather than by a combination of flags. The
// state table in docs/locks.md lists every combination of the fields, what it means
// and how the daemon repairs the damaged ones.
const (
	LockFree    = "free"
	LockRunning = "running"
)

// Run statuses, as recorded in job_runs and in a lock's last outcome.
const (
	StatusRunning = "running"
	// StatusClaiming marks the record of a fire whose slot is won while
	// its job's lock is being taken (overlap forbid): within the same
	// claim batch it becomes running, or skipped when the lock is held. A
	// record left claiming by a holder that died is swept abandoned.
	StatusClaiming  = "claiming"
	StatusSucceeded = "succeeded"
	StatusFailed    = "failed"
	StatusSkipped   = "skipped"
	StatusAbandoned = "abandoned"
	// StatusMissed marks a record of slots that did not run, with the
	// reason in RunDoc.Reason (one of the Missed* reasons).
	StatusMissed = "missed"
)

// LockDoc is one document of job_locks: the lock of one job.
type LockDoc struct {
	// JobID is the job's id (the schedules _id).
	JobID string `bson:"_id" json:"job_id"`
	// State is LockFree or LockRunning.
	State string `bson:"state" json:"state"`
	// Holder is the instance id of the replica running the job ("" when free).
	Holder string `bson:"holder" json:"holder"`
	// Incarnation is the holder's process (its membership incarnation): a
	// lock held by this instance under another incarnation is left over
	// from a previous life and is taken over at once.
	Incarnation string `bson:"incarnation,omitempty" json:"incarnation,omitempty"`
	// RunID identifies the holder's run, RunID(job, slot) ("" when free).
	RunID string `bson:"run_id" json:"run_id"`
	// AcquiredAt is when the holder took the lock.
	AcquiredAt time.Time `bson:"acquired_at" json:"acquired_at"`
	// LeaseUntil is when the lock expires unless renewed; past it any
	// replica may take it over.
	LeaseUntil time.Time `bson:"lease_until" json:"lease_until"`
	// Fence is FenceOf(slot) of the run that last acquired the lock (the
	// slot in Unix ms): it increases with every acquisition, since a lock
	// is acquired only for a slot later than LastSlot.
	Fence int64 `bson:"fence" json:"fence"`
	// LastSlot is the scheduled time of the last fire claimed for the job.
	LastSlot time.Time `bson:"last_slot" json:"last_slot"`
	// LastOutcome is the status the last finished run ended with.
	LastOutcome string `bson:"last_outcome,omitempty" json:"last_outcome,omitempty"`
	// LastEndedAt is when the last run ended.
	LastEndedAt time.Time `bson:"last_ended_at,omitempty" json:"last_ended_at,omitzero"`
	// UpdatedAt is when the document was last written.
	UpdatedAt time.Time `bson:"updated_at" json:"updated_at"`
	// RepairedAt and RepairReason are set when the daemon last found the
	// document damaged and reset it (docs/locks.md).
	RepairedAt   time.Time `bson:"repaired_at,omitempty" json:"repaired_at,omitzero"`
	RepairReason string    `bson:"repair_reason,omitempty" json:"repair_reason,omitempty"`
	// Buffer and Cancel are LockBufferField and LockCancelField as stored
	// (kept raw: a damaged one does not fail the read); Waiting and
	// PendingCancel read them.
	Buffer bson.RawValue `bson:"overlap_buffer,omitempty" json:"-"`
	Cancel bson.RawValue `bson:"overlap_cancel,omitempty" json:"-"`
}

// RunDoc is one document of job_runs: one fire that was claimed or skipped.
// Its _id, RunID(job, slot), admits one record per fire; (JobID,
// ScheduledAt) is unique too.
type RunDoc struct {
	// ID is the run id, RunID(JobID, ScheduledAt) (the CRONSWAP_RUN_ID
	// the action saw), or MissedID for a missed range.
	ID          string    `bson:"_id" json:"run_id"`
	JobID       string    `bson:"job_id" json:"job_id"`
	ScheduledAt time.Time `bson:"scheduled_at" json:"scheduled_at"`
	Instance    string    `bson:"instance" json:"instance"`
	// Incarnation is the process of Instance that wrote the record.
	Incarnation string    `bson:"incarnation,omitempty" json:"incarnation,omitempty"`
	Fence       int64     `bson:"fence" json:"fence"`
	Status      string    `bson:"status" json:"status"`
	StartedAt   time.Time `bson:"started_at" json:"started_at"`
	EndedAt     time.Time `bson:"ended_at,omitempty" json:"ended_at,omitzero"`
	Error       string    `bson:"error,omitempty" json:"error,omitempty"`
	// AbandonedAt is when the record was marked abandoned (its lease had
	// passed without a renewal); EndedAt stays unset until the holder, if
	// it comes back, writes its true end, with EndStatus (what the holder
	// saw: succeeded, failed, ...) and EndError.
	AbandonedAt time.Time `bson:"abandoned_at,omitempty" json:"abandoned_at,omitzero"`
	EndStatus   string    `bson:"end_status,omitempty" json:"end_status,omitempty"`
	EndError    string    `bson:"end_error,omitempty" json:"end_error,omitempty"`
	// ExitCode is set for exec actions that ran: 0 when they succeeded.
	ExitCode *int `bson:"exit_code,omitempty" json:"exit_code,omitempty"`
	// Stdout and Stderr are the tails (the last DefaultTailBytes, trimmed)
	// of what an exec action printed; empty when it printed nothing.
	Stdout string `bson:"stdout,omitempty" json:"stdout,omitempty"`
	Stderr string `bson:"stderr,omitempty" json:"stderr,omitempty"`
	// LeaseUntil is renewed with the lock while the run is running; a
	// running record past it belongs to a dead holder and is marked
	// abandoned by SweepExpired.
	LeaseUntil time.Time `bson:"lease_until,omitempty" json:"lease_until,omitzero"`
	// ExpireAt drives the TTL index (runs.retention after the run ended or
	// was skipped).
	ExpireAt time.Time `bson:"expire_at" json:"-"`

	// Attempt is the slot's current (or last) attempt when its action
	// retries (1 the first; 0: the action does not retry); Attempts lists
	// the ended attempts; RetryAt, while Status is StatusRetrying, is when
	// the next attempt is due (docs/retry.md).
	Attempt  int          `bson:"attempt,omitempty" json:"attempt,omitempty"`
	Attempts []AttemptDoc `bson:"attempts,omitempty" json:"attempts,omitempty"`
	RetryAt  time.Time    `bson:"retry_at,omitempty" json:"retry_at,omitzero"`

	// The fields below are set on missed records (Status StatusMissed)
	// only. ScheduledAt is then the first missed slot of the range.

	// LastScheduledAt is the last missed slot of the range (equal to
	// ScheduledAt for one slot).
	LastScheduledAt time.Time `bson:"last_scheduled_at,omitempty" json:"last_scheduled_at,omitzero"`
	// Count is the number of slots in the range.
	Count int64 `bson:"count,omitempty" json:"count,omitempty"`
	// Reason says why the slots did not run (MissedNoReplica, ...), or,
	// for a skipped record, why it was skipped.
	Reason string `bson:"reason,omitempty" json:"reason,omitempty"`
	// RecordedAt is when the record was written.
	RecordedAt time.Time `bson:"recorded_at,omitempty" json:"recorded_at,omitzero"`
	// BlackoutID is set on a skipped record whose slot fell in a blackout
	// window (FieldBlackoutID): the window's _id; Reason is its reason.
	BlackoutID string `bson:"blackout_id,omitempty" json:"blackout_id,omitempty"`

	// Notice is the record's pending notification (failed, abandoned,
	// missed), written by the same write as its status and removed by the
	// notification relay once moved (package notify).
	Notice *notify.Notice `bson:"notice,omitempty" json:"-"`
}
