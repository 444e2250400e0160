package firepath

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cronswap/cronswap/internal/actions"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/jobs"
	"github.com/cronswap/cronswap/schedule"
)

// laterOf returns the later of a and b.
func laterOf(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// ErrCancelledByOverlap is the cause of a run stopped because a later
// fire of its cancel_other job replaced it; the run is recorded abandoned.
var ErrCancelledByOverlap = errors.New("cancelled by a later fire (overlap cancel_other)")

// Who runs a buffered fire (overlap buffer_one, buffer_all, cancel_other):
//
//   - the replica whose run ends: right after its end is written, on the
//     same goroutine and within the same admission, it takes the lock for
//     the first fire waiting (TakeBuffered) and runs it, and so on while
//     fires wait;
//   - a replica whose claim put a fire on a lock that was not held by a
//     live run (its holder had ended meanwhile, or died);
//   - any replica with such a policy in its config, at each sweep
//     (lock.ttl/3, between 5 s and a minute), for locks with fires waiting
//     that are free or past their lease: the holder died, or ended without
//     taking them (shut down).
//
// Whichever of them takes the lock and turns the fire's record from
// buffered to running runs it: both writes are conditional, so a buffered
// fire runs once across replicas.

// pendingBuffersLimit bounds the jobs one periodic look takes up.
const pendingBuffersLimit = 1000

// drainAfter runs, on the goroutine of a run of jobID that just ended and
// within its admission, the fires buffered behind it, one after another.
func (r *Runner) drainAfter(jobID string, spec actions.Action) {
	if !spec.Overlap.Buffers() || r.opts.Store == nil {
		return
	}
	for !r.stopped() {
		run, ok := r.takeBuffered(jobID, spec.Overlap)
		if !ok {
			return
		}
		r.runBuffered(run, func() {})
	}
}

// drainSoon takes up the fires buffered on jobID's lock on a goroutine of
// its own (admitted by the gate like a fire), unless this replica is doing
// so already.
func (r *Runner) drainSoon(jobID string, overlap jobs.Overlap) {
	if r.opts.Store == nil {
		return
	}
	r.mu.Lock()
	if r.stopping || r.draining[jobID] {
		r.mu.Unlock()
		return
	}
	if r.draining == nil {
		r.draining = map[string]bool{}
	}
	r.draining[jobID] = true
	r.running.Add(1)
	r.mu.Unlock()
	go func() {
		defer r.running.Done()
		defer func() {
			r.mu.Lock()
			delete(r.draining, jobID)
			r.mu.Unlock()
		}()
		for !r.stopped() {
			run, ok := r.takeBuffered(jobID, overlap)
			if !ok {
				return
			}
			release, ok := r.admitBuffered(run)
			if !ok {
				return
			}
			r.runBuffered(run, release)
		}
	}()
}

// drainPending looks for locks with fires waiting that no live run will
// take up (one find), when this replica runs a policy that buffers.
func (r *Runner) drainPending() {
	store := r.opts.Store
	if store == nil || r.stopped() {
		return
	}
	policies := r.opts.Registry.BufferingPolicies()
	if len(policies) == 0 {
		return
	}
	ctx, cancel := r.opCtx()
	defer cancel()
	ids, err := store.PendingBuffers(ctx, r.clock.Now(), pendingBuffersLimit)
	if err != nil {
		r.log.Warn("could not look for buffered fires", "collection", record.LocksCollection, "error", err)
		return
	}
	for _, id := range ids {
		// The policy is the action's; the lock does not say which action
		// a job runs, so any buffering policy of this config stands in
		// for the lease (they renew and end alike). The record names the
		// action that runs.
		r.drainSoon(id, policies[0])
	}
}

// takeBuffered takes the lock of jobID for its first buffered fire.
func (r *Runner) takeBuffered(jobID string, overlap jobs.Overlap) (*record.BufferedRun, bool) {
	ctx, cancel := r.opCtx()
	defer cancel()
	run, err := r.opts.Store.TakeBuffered(ctx, jobID, record.BufferTake{Instance: r.opts.InstanceID,
		Incarnation: r.opts.Incarnation, Overlap: overlap, Clock: r.clock.Now, TTL: r.opts.TTL})
	if err != nil {
		r.log.Warn("could not take a buffered fire; another replica or the next look takes it", "job_id", jobID, "error", err)
		return nil, false
	}
	if run == nil {
		return nil, false
	}
	if spec, ok := r.opts.Registry.Lookup(run.ActionName(jobID)); ok {
		run.Lease.Overlap = spec.Overlap
	}
	return run, true
}

// admitBuffered waits for the gate for a taken buffered fire, its lease
// kept meanwhile; a fire that cannot be admitted is recorded missed.
func (r *Runner) admitBuffered(run *record.BufferedRun) (func(), bool) {
	ctx, cancel := context.WithCancelCause(r.ctx)
	defer cancel(nil)
	r.leases.hold(run.Lease, cancel)
	release, err := r.gate.Acquire(ctx, run.Category)
	r.leases.forget(run.Lease.RunID)
	if err == nil {
		return release, true
	}
	reason := NotRunShuttingDown
	if errors.Is(err, ErrGateFull) {
		reason = NotRunQueueFull
	}
	l := run.Lease
	r.log.Info("buffered fire not started", "job_id", l.JobID, "scheduled_at", l.Slot, "run_id", l.RunID, "reason", reason)
	r.notRun(l.JobID, l.Slot, reason)
	end := record.LeaseEnd{Lease: l, End: record.RunEnd{Status: record.StatusMissed, EndedAt: r.clock.Now(), Reason: reason,
		Error: "buffered fire not started: " + reason}}
	if err := r.ends.submit(end); err != nil && !errors.Is(err, record.ErrLockLost) {
		r.leases.retryEnd(end)
	}
	r.reportEnded(l, OffScheduleResult{Status: record.StatusMissed, NotRun: reason, Error: end.End.Error})
	return nil, false
}

// reportStarted tells RunnerOptions.Requests that the buffered
// off-schedule run l starts.
func (r *Runner) reportStarted(l record.Lease) {
	if !l.OffSchedule || r.opts.Requests == nil {
		return
	}
	ctx, cancel := r.opCtx()
	defer cancel()
	if err := r.opts.Requests.BufferedStarted(ctx, l, r.clock.Now()); err != nil {
		r.log.Warn("could not report a buffered run's start to its request", "job_id", l.JobID,
			"scheduled_at", l.Slot, "run_id", l.RunID, "error", err)
	}
}

// reportEnded tells RunnerOptions.Requests how the buffered off-schedule
// run l ended.
func (r *Runner) reportEnded(l record.Lease, res OffScheduleResult) {
	if !l.OffSchedule || r.opts.Requests == nil {
		return
	}
	res.Lease = l
	ctx, cancel := r.opCtx()
	defer cancel()
	if err := r.opts.Requests.BufferedEnded(ctx, l, res, r.clock.Now()); err != nil {
		r.log.Warn("could not report a buffered run's end to its request", "job_id", l.JobID,
			"scheduled_at", l.Slot, "run_id", l.RunID, "status", res.Status, "error", err)
	}
}

// runBuffered runs a taken buffered fire under its lease, then release.
func (r *Runner) runBuffered(run *record.BufferedRun, release func()) {
	defer release()
	l := run.Lease
	d := schedule.Due{Schedule: schedule.Schedule{ID: l.JobID, Enabled: true, Job: run.Action, Args: run.Args,
		Category: run.Category}, Slot: l.Slot}
	f := r.newFire(d, l)
	log := r.log.With("job_id", f.JobID, "scheduled_at", f.Slot, "run_id", f.RunID, "fence", f.Fence)
	spec, ok := r.opts.Registry.Lookup(run.ActionName(l.JobID))
	if !ok {
		err := fmt.Errorf("job %s: %w %q", l.JobID, actions.ErrUnknownAction, run.ActionName(l.JobID))
		log.Error("buffered fire names an unknown action", "action", run.ActionName(l.JobID))
		now := r.clock.Now()
		r.finish(log, d, actions.Action{}, l, record.StatusFailed, err, actions.Output{}, now, now)
		r.runEnded(l.JobID, record.StatusFailed)
		r.reportEnded(l, OffScheduleResult{Ran: true, Status: record.StatusFailed, Error: err.Error()})
		if r.opts.Done != nil {
			r.opts.Done(f, err, 0)
		}
		return
	}
	log.Info("buffered fire taken up", "overlap", spec.Overlap, "off_schedule", l.OffSchedule)
	if r.retriesLocal(spec) && !l.OffSchedule {
		l.Attempt = 1 // a buffered fire's slot is retried like any other
		f.Attempt = 1
	}
	r.reportStarted(l)
	took, err := r.execute(log, d, spec, f, &l)
	res := OffScheduleResult{Ran: true, Status: offScheduleStatus(err)}
	if err != nil {
		res.Error = err.Error()
	}
	r.reportEnded(l, res)
	if r.opts.Done != nil {
		r.opts.Done(f, err, took)
	}
}

// bufferedClaim handles a claim whose fire was buffered: a run of this
// replica that the fire asked to stop is stopped at once, and when the
// lock may have no live holder the fire is taken up here.
func (r *Runner) bufferedClaim(log *slog.Logger, id string, spec actions.Action, o record.ClaimOutcome) {
	log.Info("fire buffered", "reason", o.Reason, "holder", o.Holder, "holder_run_id", o.HolderRunID,
		"overlap", spec.Overlap)
	if o.CancelRunID != "" {
		r.leases.cancelRun(o.CancelRunID, o.Lease.RunID)
	}
	if o.HolderRunID == "" || o.Holder == r.opts.InstanceID {
		// No live holder (the fire waits behind others), or this
		// replica's own run, which takes it up when it ends — unless it
		// ended meanwhile: a look costs one find.
		r.drainSoon(id, spec.Overlap)
	}
}

// cancelRun stops this replica's run runID, which the run by replaces
// (cancel_other); false when this replica does not hold it.
func (k *leaseKeeper) cancelRun(runID, by string) bool {
	k.mu.Lock()
	h := k.held[runID]
	k.mu.Unlock()
	if h == nil {
		return false
	}
	k.r.log.Info("run replaced by a later fire; cancelling the action", "job_id", h.lease.JobID,
		"scheduled_at", h.lease.Slot, "run_id", runID, "replaced_by", by)
	h.cancel(fmt.Errorf("%w: replaced by run %s", ErrCancelledByOverlap, by))
	return true
}

// checkCancels asks the store (one find) whether a later fire asked one
// of this replica's cancel_other runs to stop, and stops those. It costs
// nothing while no such run is held; the keeper calls it every second.
func (k *leaseKeeper) checkCancels() {
	store := k.r.opts.Store
	if store == nil {
		return
	}
	k.mu.Lock()
	var leases []record.Lease
	for _, h := range k.held {
		if h.lease.Overlap == jobs.OverlapCancelOther {
			leases = append(leases, h.lease)
		}
	}
	k.mu.Unlock()
	if len(leases) == 0 {
		return
	}
	ctx, cancel := k.r.opCtx()
	defer cancel()
	asked, err := store.CancelRequests(ctx, leases)
	if err != nil {
		k.r.log.Warn("could not read cancel requests", "collection", record.LocksCollection, "runs", len(leases), "error", err)
		return
	}
	for run, by := range asked {
		k.cancelRun(run, by)
	}
}
