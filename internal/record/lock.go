package record

import (
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Fields of a job_locks document written by the overlap policies that
// buffer (docs/locks.md).
const (
	// LockBufferField is the array of fires waiting for the lock, in the
	// order buffered (slot order for cron fires): {run_id, slot, category,
	// at, by, off_schedule (a run-now request)}.
	LockBufferField = "overlap_buffer"
	// LockCancelField asks the holding run to stop (cancel_other):
	// {run_id (the run to stop), by (the run replacing it), at}.
	LockCancelField = "overlap_cancel"
)

// LockRunsField is the job's run count: how many of its cron slots
// started (a retry is an attempt of its slot, and off-schedule runs do not
// count). The claim that starts a slot increments it in its own
// conditional write, which a schedule's max_runs bounds, so a slot past
// max_runs never starts whatever the replicas racing for it
// (docs/locks.md#the-run-count). Absent means 0.
const LockRunsField = "runs"

// BufferEntry is one fire waiting on a job's lock (LockBufferField): a
// cron slot, or an off-schedule run (OffSchedule).
type BufferEntry struct {
	RunID    string    `bson:"run_id"`
	Slot     time.Time `bson:"slot"`
	Category string    `bson:"category,omitempty"`
	At       time.Time `bson:"at"`
	By       string    `bson:"by"`
	// OffSchedule marks an off-schedule run (a run-now request): Slot is
	// its scheduled_at, not a cron slot; it neither moves the lock's last
	// slot nor is stale by its fence, which is offScheduleFence's.
	OffSchedule bool `bson:"off_schedule,omitempty"`
	// MaxRuns is the max_runs of the schedule a cron fire came due under
	// (0: none): the fire is taken only while the run count is below it,
	// and counts one more run then.
	MaxRuns int `bson:"max_runs,omitempty"`
}

// CancelOf reads a cancel request (LockCancelField's value).
func CancelOf(val bson.RawValue) (runID, by string) {
	d, ok := val.DocumentOK()
	if !ok {
		return "", ""
	}
	runID, _ = LookupString(d, "run_id")
	by, _ = LookupString(d, "by")
	return runID, by
}

// WaitingFire is a fire waiting on a job's lock (LockBufferField), as
// operators see it.
type WaitingFire struct {
	// RunID and ScheduledAt are the fire's (a run-now request's own, when
	// OffSchedule).
	RunID       string    `json:"run_id"`
	ScheduledAt time.Time `json:"scheduled_at"`
	// By is the replica that buffered it, At when.
	By          string    `json:"by"`
	At          time.Time `json:"at"`
	OffSchedule bool      `json:"off_schedule,omitempty"`
}

// Waiting returns how many fires wait on the lock and the first of them
// (nil when none does, or its entry is damaged).
func (l LockDoc) Waiting() (int, *WaitingFire) {
	arr, ok := l.Buffer.ArrayOK()
	if !ok {
		return 0, nil
	}
	vals, err := arr.Values()
	if err != nil || len(vals) == 0 {
		return 0, nil
	}
	var e BufferEntry
	if err := vals[0].Unmarshal(&e); err != nil || e.RunID == "" {
		return len(vals), nil
	}
	return len(vals), &WaitingFire{RunID: e.RunID, ScheduledAt: e.Slot.UTC(), By: e.By, At: e.At.UTC(), OffSchedule: e.OffSchedule}
}

// PendingCancel returns the run the lock's cancel request (cancel_other)
// asks to stop and the run replacing it; empty when none is pending.
func (l LockDoc) PendingCancel() (runID, by string) { return CancelOf(l.Cancel) }

// Lock states: a lock document is either free or held by one run, said by
// one explicit state field rather than by a combination of flags. The
// state table in docs/locks.md lists every combination of the fields, what it means
// and how the daemon repairs the damaged ones.
const (
	LockFree    = "free"
	LockRunning = "running"
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
	// Claim is the token of the holding acquisition (Lease.Token):
	// renewals and the end of the holding run match it.
	Claim string `bson:"claim,omitempty" json:"-"`
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
	// Runs is the job's run count (LockRunsField).
	Runs int64 `bson:"runs,omitempty" json:"runs"`
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
