package record

import (
	"time"

	"github.com/cronswap/cronswap/internal/notify"
	"github.com/cronswap/cronswap/schedule"
)

// FieldBlackoutID is the job_runs field naming the blackout window a
// skipped record's slot fell in.
const FieldBlackoutID = "blackout_id"

// FieldCalendar is the job_runs field naming the calendar on whose date a
// skipped record's slot fell (the schedule excludes it).
const FieldCalendar = "calendar"

// RunScheduleField is the schedule a fire came due under, kept on the
// record of a fire that waits — buffered on its job's lock, or retrying —
// so that whichever replica runs it later runs it as it came due: the
// same action, args and category, and any field a schedule has.
const RunScheduleField = "schedule"

// Fields of a buffered job_runs record written by earlier versions, which
// kept three fields of the schedule instead of RunScheduleField; a taker
// still reads them.
const (
	RunBufferedActionField   = "overlap_action"
	RunBufferedArgsField     = "overlap_args"
	RunBufferedCategoryField = "overlap_category"
)

// StatusBuffered marks the record of a fire whose slot is won while the
// job's lock is held, under a policy that buffers: it becomes running when
// a replica takes the lock for it (docs/locks.md, overlap policies).
const StatusBuffered = "buffered"

// ReasonReplaced is the RunEnd.Reason of a run stopped because a later
// fire of its cancel_other job replaced it (recorded abandoned by design,
// not by a fault).
const ReasonReplaced = "replaced"

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
	// EndObserved is set when the holder only saw the run's end after its
	// process had stalled (frozen, paused): EndedAt is then when the end
	// was observed, and the run ended after EndedAfter (docs/locks.md).
	EndObserved bool      `bson:"end_observed,omitempty" json:"end_observed,omitempty"`
	EndedAfter  time.Time `bson:"ended_after,omitempty" json:"ended_after,omitzero"`
	// ExitCode is set for exec actions that ran: 0 when they succeeded.
	ExitCode *int `bson:"exit_code,omitempty" json:"exit_code,omitempty"`
	// Stdout and Stderr are the tails (the last DefaultTailBytes, trimmed)
	// of what an exec action printed; empty when it printed nothing.
	Stdout string `bson:"stdout,omitempty" json:"stdout,omitempty"`
	Stderr string `bson:"stderr,omitempty" json:"stderr,omitempty"`
	// AnswerStatus and Answer are an http action's answer: its status
	// code and the first bytes of its body (DefaultTailBytes, trimmed),
	// secrets redacted; absent when there was no answer.
	AnswerStatus int    `bson:"answer_status,omitempty" json:"answer_status,omitempty"`
	Answer       string `bson:"answer,omitempty" json:"answer,omitempty"`
	// LeaseUntil is renewed with the lock while the run is running; a
	// running record past it belongs to a dead holder and is marked
	// abandoned by SweepExpired.
	LeaseUntil time.Time `bson:"lease_until,omitempty" json:"lease_until,omitzero"`
	// ExpireAt drives the TTL index (runs.retention after the run ended or
	// was skipped). Every writer sets it; a record written without one has
	// no expire_at and is kept, where a zero date would have the TTL
	// monitor delete it at its next pass (and with it the record that
	// makes the slot's fire run once).
	ExpireAt time.Time `bson:"expire_at,omitempty" json:"-"`

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
	// Calendar is set on a skipped record whose slot fell on a date of a
	// calendar its schedule excludes (FieldCalendar); Reason is then
	// CalendarReason of it.
	Calendar string `bson:"calendar,omitempty" json:"calendar,omitempty"`

	// Notice is the record's pending notification (failed, abandoned,
	// missed), written by the same write as its status and removed by the
	// notification relay once moved (package notify).
	Notice *notify.Notice `bson:"notice,omitempty" json:"-"`

	// Claim is the token of the acquisition that wrote the record
	// (Lease.Token): renewals and the end match it.
	Claim string `bson:"claim,omitempty" json:"-"`
	// Schedule is the schedule a waiting fire came due under
	// (RunScheduleField): set while it is buffered or retrying.
	Schedule *schedule.Schedule `bson:"schedule,omitempty" json:"-"`
}

// StatusRetrying marks the record of a slot whose last attempt failed and
// whose next attempt is due at its retry_at (RetryPolicy): the slot is
// still undecided, and any replica may run the next attempt from then on.
const StatusRetrying = "retrying"

// Fields of job_runs that retries own (docs/retry.md).
const (
	// FieldAttempt is the record's current (or last) attempt, 1 the first.
	FieldAttempt = "attempt"
	// FieldAttempts lists every ended attempt of the slot, oldest first.
	FieldAttempts = "attempts"
	// FieldRetryAt is when the next attempt is due, while the record is
	// StatusRetrying (lease_until says the same, for the index).
	FieldRetryAt = "retry_at"
)

// AttemptDoc is one entry of a run record's attempts list: one ended
// attempt of the slot.
type AttemptDoc struct {
	Attempt   int       `bson:"attempt" json:"attempt"`
	Fence     int64     `bson:"fence" json:"fence"`
	Instance  string    `bson:"instance" json:"instance"`
	StartedAt time.Time `bson:"started_at,omitempty" json:"started_at,omitzero"`
	EndedAt   time.Time `bson:"ended_at" json:"ended_at"`
	// Status is what the attempt ended with: StatusRetrying when another
	// attempt followed it, else the slot's final status.
	Status   string `bson:"status" json:"status"`
	Error    string `bson:"error,omitempty" json:"error,omitempty"`
	ExitCode *int   `bson:"exit_code,omitempty" json:"exit_code,omitempty"`
	// AnswerStatus is an http action's answer status in this attempt.
	AnswerStatus int `bson:"answer_status,omitempty" json:"answer_status,omitempty"`
}
