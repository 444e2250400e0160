package firepath

import (
	"context"
	"errors"
	"time"

	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/schedule"
)

// DefaultOffScheduleDeadline is how long after it was offered an
// off-schedule run (a trigger, a backfilled slot) may still start: long
// enough for a database failover, the claim grace and a full admission
// queue; beyond it the run is not started and its request says why.
const DefaultOffScheduleDeadline = 5 * time.Minute

// OffScheduleFire is one run that is not the job's next cron slot: a run
// requested through the triggers collection, or an earlier slot of the job
// offered again by a backfill. It goes through the same path as a cron
// fire (owner or grace, admission, claim batch, action, end batch), under
// the job's overlap policy, exactly once across replicas by its RunID.
type OffScheduleFire struct {
	// Schedule is the job's schedule (also when the job is paused or
	// disabled), with the args the run is to get.
	Schedule schedule.Schedule
	// RunID is the run's identity: the run record's _id. A backfilled slot
	// has RunID(job, slot); a trigger an id no cron slot can have.
	RunID string
	// Slot is the run record's scheduled_at (the backfilled slot, or the
	// trigger's time: never a whole second, which every cron slot is).
	Slot time.Time
	// Offered is when this replica was handed the fire: the claim grace of
	// a replica that does not own the job and the starting deadline count
	// from it.
	Offered time.Time
	// Deadline is how long after Offered the run may still start; 0 means
	// DefaultOffScheduleDeadline.
	Deadline time.Duration
	// Started, if set, is called with the lease when this replica won the
	// claim, just before the action starts.
	Started func(record.Lease)
	// Buffer: under a policy that buffers (buffer_one, buffer_all,
	// cancel_other) the run waits on the job's lock like a cron fire
	// while another run holds it (OffScheduleResult.Status is then
	// StatusBuffered, and it is run by whichever replica takes it from the
	// lock's buffer, which tells RunnerOptions.Requests). False (a
	// backfilled slot): it is skipped then.
	Buffer bool
}

// RequestReporter is told of the off-schedule runs that waited on their
// job's lock (OffScheduleFire.Buffer) and that this replica took from the
// buffer: the replica that handled the request has returned from
// RunOffSchedule long before (Status StatusBuffered), and may be gone.
// Each call is bounded by ctx; an error is logged.
type RequestReporter interface {
	// BufferedStarted is called when the run's action starts, at at.
	BufferedStarted(ctx context.Context, l record.Lease, at time.Time) error
	// BufferedEnded is called when the run ended, or could not be
	// started (Status StatusMissed, NotRun says why), at at.
	BufferedEnded(ctx context.Context, l record.Lease, res OffScheduleResult, at time.Time) error
}

// NotRunUnknownAction is OffScheduleResult.NotRun for a fire whose job
// names an action the registry does not have.
const NotRunUnknownAction = "unknown_action"

// OffScheduleResult says how an off-schedule fire ended on this replica.
type OffScheduleResult struct {
	// Ran: this replica claimed and ran it; Status and Error are the run's.
	Ran bool
	// Status is the run's status (succeeded, failed, abandoned) when Ran;
	// StatusSkipped when the job's lock was held; StatusBuffered when the
	// run waits on the lock (OffScheduleFire.Buffer; Error says for what,
	// Lease is its claim); empty otherwise.
	Status string
	// Error is the run's error, or why the fire was skipped or not run.
	Error string
	// Lease is the won claim when Ran.
	Lease record.Lease
	// AlreadyFired: another record under RunID (or of its slot) exists:
	// another replica has the run, or a backfilled slot was decided.
	AlreadyFired bool
	// NotRun is set (a Hooks.NotRun reason, or NotRunUnknownAction) when the
	// fire was not claimed for another reason: shutting down, the starting
	// deadline, the database unreachable, a claim error.
	NotRun string
}

// RunOffSchedule takes of through the fire path, as a fire of its own
// kind, and returns when it is done. It runs on the caller's goroutine
// (one per fire, like Fire). The run's record is of.RunID at of.Slot; its
// fence is the claim time in Unix milliseconds, above the fence of every
// earlier acquisition of the lock (the claim takes the lock only then),
// and its run id is what the action sees as CRONSWAP_RUN_ID. A Runner
// without a store cannot coordinate replicas and refuses it.
func (r *Runner) RunOffSchedule(of OffScheduleFire) OffScheduleResult {
	deadline := of.Deadline
	if deadline <= 0 {
		deadline = DefaultOffScheduleDeadline
	}
	// Its lateness and deadline count from when it was offered.
	d := schedule.Due{Schedule: of.Schedule, Slot: of.Slot.UTC(), Delay: of.Offered.Sub(of.Slot)}
	f := &fire{kind: kindOffSchedule, due: d, deadline: deadline, startBy: of.Offered.Add(deadline),
		owner: r.owns(of.Schedule.ID), runID: of.RunID, mayWait: of.Buffer, started: of.Started,
		result: &OffScheduleResult{}}
	r.startWait(f)
	return *f.result
}

// offScheduleStatus is the status execute recorded for a run that ended
// with err.
func offScheduleStatus(err error) string {
	switch {
	case err == nil:
		return record.StatusSucceeded
	case errors.Is(err, record.ErrLockLost), errors.Is(err, errShutdown), errors.Is(err, ErrCancelledByOverlap):
		return record.StatusAbandoned
	}
	return record.StatusFailed
}
