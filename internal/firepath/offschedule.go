package firepath

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cronswap/cronswap/internal/actions"
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

// RunOffSchedule takes f through the fire path and returns when it is
// done. It runs on the caller's goroutine (one per fire, like Fire). The
// run's record is f.RunID at f.Slot; its fence is the claim time in Unix
// milliseconds, above the fence of every earlier acquisition of the lock
// (the claim takes the lock only then), and its run id is what the action
// sees as CRONSWAP_RUN_ID. A Runner without a store cannot coordinate
// replicas and refuses it.
func (r *Runner) RunOffSchedule(f OffScheduleFire) OffScheduleResult {
	deadline := f.Deadline
	if deadline <= 0 {
		deadline = DefaultOffScheduleDeadline
	}
	d := schedule.Due{Schedule: f.Schedule, Slot: f.Slot.UTC()}
	id := f.Schedule.ID
	log := r.log.With("job_id", id, "run_id", f.RunID, "scheduled_at", d.Slot)
	if r.opts.Store == nil {
		return OffScheduleResult{NotRun: NotRunClaimError, Error: "no store to claim the run in"}
	}
	r.mu.Lock()
	if r.stopping {
		r.mu.Unlock()
		return OffScheduleResult{NotRun: NotRunShuttingDown, Error: "shutting down"}
	}
	r.running.Add(1)
	r.mu.Unlock()
	defer r.running.Done()

	spec, ok := r.opts.Registry.Lookup(f.Schedule.ActionName())
	if !ok {
		err := fmt.Errorf("job %s: %w %q", id, actions.ErrUnknownAction, f.Schedule.ActionName())
		log.Error("off-schedule run names an unknown action", "action", f.Schedule.ActionName())
		return OffScheduleResult{NotRun: NotRunUnknownAction, Error: err.Error()}
	}
	startBy := f.Offered.Add(deadline)
	owner := r.opts.Owns == nil || r.opts.Owns(id)
	if !owner {
		t := time.NewTimer(time.Until(f.Offered.Add(r.claimGrace(deadline))))
		select {
		case <-t.C:
		case <-r.stop:
			t.Stop()
			return OffScheduleResult{NotRun: NotRunShuttingDown, Error: "shutting down"}
		}
	}
	// The gate counts from the fire's due time; an off-schedule fire is
	// due when it was offered.
	gd := schedule.Due{Schedule: f.Schedule, Slot: f.Offered}
	actx, cancel := context.WithDeadline(context.Background(), startBy)
	release, err := r.gate.Acquire(actx, f.Schedule.Category)
	cancel()
	if err != nil {
		reason := NotRunStartingDeadline
		switch {
		case errors.Is(err, ErrGateFull):
			reason = NotRunQueueFull
		case errors.Is(err, ErrGateClosed) || r.stopped():
			reason = NotRunShuttingDown
		}
		r.notRun(id, d.Slot, reason)
		return OffScheduleResult{NotRun: reason, Error: "not admitted: " + err.Error()}
	}
	defer release()
	fc := record.FireClaim{JobID: id, Slot: d.Slot, Overlap: spec.Overlap, Check: !owner,
		RunID: f.RunID, Fence: r.clock.Now().UnixMilli(), OffSchedule: true}
	if f.Buffer && spec.Overlap.Buffers() {
		fc.Buffer = true
		fc.Action, fc.Args, fc.Category = f.Schedule.ActionName(), f.Schedule.Args, f.Schedule.Category
	}
	o, queued := r.claims.submitBounded(claimRequest{FireClaim: fc, startBy: startBy}, r.opts.QueueLimit)
	if !queued {
		r.notRun(id, d.Slot, NotRunQueueFull)
		return OffScheduleResult{NotRun: NotRunQueueFull, Error: "the queue of fires waiting for a claim is full"}
	}
	if h := r.opts.Hooks.Claimed; h != nil {
		if o.Err != nil {
			h(id, "error")
		} else {
			h(id, o.Result.String())
		}
	}
	if o.Err != nil {
		reason := NotRunClaimError
		if errors.Is(o.Err, record.ErrUnreachable) {
			reason = NotRunUnreachable
		}
		if errors.Is(o.Err, record.ErrOutcomeUnknown) {
			// The record may have landed as this replica's: it becomes a
			// missed record once the database answers, like a cron fire's.
			l := o.Lease
			if l.RunID == "" {
				l = record.Lease{JobID: id, RunID: f.RunID, Instance: r.opts.InstanceID, Incarnation: r.opts.Incarnation,
					Slot: d.Slot, Overlap: spec.Overlap}
			}
			r.leases.disown(l)
		}
		log.Warn("off-schedule run not started: could not claim it", "reason", reason, "error", o.Err)
		r.notRun(id, d.Slot, reason)
		return OffScheduleResult{NotRun: reason, Error: o.Err.Error()}
	}
	switch o.Result {
	case record.AlreadyFired:
		log.Debug("off-schedule run claimed elsewhere", "reason", o.Reason)
		return OffScheduleResult{AlreadyFired: true, Error: o.Reason}
	case record.Skipped:
		log.Info("off-schedule run skipped", "reason", o.Reason, "holder", o.Holder, "holder_run_id", o.HolderRunID)
		r.skipped(id, SkipOverlap)
		if spec.Overlap.Buffers() && o.Holder == "" {
			r.drainSoon(id, spec.Overlap) // fires may wait on a lock no live run holds
		}
		return OffScheduleResult{Status: record.StatusSkipped, Error: o.Reason}
	case record.Buffered:
		r.bufferedClaim(log, id, spec, o)
		return OffScheduleResult{Status: record.StatusBuffered, Error: o.Reason, Lease: o.Lease}
	}
	lease := o.Lease
	fire := r.newFire(d, lease)
	log = log.With("fence", fire.Fence)
	if spec.Overlap.Buffers() {
		// Fires buffered behind this run are taken up once it ended, on
		// a goroutine of their own: the caller learns of this run's end
		// without waiting for theirs.
		defer r.drainSoon(id, spec.Overlap)
	}
	if r.clock.Now().After(startBy) {
		r.missClaimed(log, gd, deadline, lease)
		return OffScheduleResult{NotRun: NotRunStartingDeadline, Error: "claimed after its starting deadline"}
	}
	if f.Started != nil {
		f.Started(lease)
	}
	_, runErr := r.execute(log, gd, spec, fire, &lease)
	res := OffScheduleResult{Ran: true, Lease: lease, Status: offScheduleStatus(runErr)}
	if runErr != nil {
		res.Error = runErr.Error()
	}
	return res
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
