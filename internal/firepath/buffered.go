package firepath

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/jobs"
	"github.com/cronswap/cronswap/schedule"
)

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
func (r *Runner) drainAfter(jobID string, overlap jobs.Overlap) {
	if r.opts.Store == nil {
		return
	}
	for !r.stopped() {
		f := r.bufferedFire(jobID, overlap, true)
		r.startWait(f)
		if !f.won {
			return
		}
	}
}

// drainSoon takes up the fires buffered on jobID's lock on a goroutine of
// its own (each admitted by the gate like a fire), unless this replica is
// doing so already.
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
			f := r.bufferedFire(jobID, overlap, false)
			r.startWait(f)
			if !f.won {
				return
			}
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
		// for the lease (they renew and end alike) until the record says
		// which action runs.
		r.drainSoon(id, policies[0])
	}
}

// takeBuffered is the claim of a buffered fire: the lock of its job for
// the first fire waiting on it, whose record says the schedule it came
// due under (and so the action that runs).
func (r *Runner) takeBuffered(f *fire, then func(claimAnswer)) {
	ctx, cancel := r.opCtx()
	run, err := r.opts.Store.TakeBuffered(ctx, f.jobID(), record.BufferTake{Instance: r.opts.InstanceID,
		Incarnation: r.opts.Incarnation, Overlap: f.overlap, Clock: r.clock.Now, TTL: r.opts.TTL})
	cancel()
	if err != nil {
		f.logger(r.log).Warn("could not take a buffered fire; another replica or the next look takes it", "error", err)
	}
	if run == nil {
		then(claimAnswer{nothing: true})
		return
	}
	f.due = schedule.Due{Schedule: run.Schedule, Slot: run.Lease.Slot}
	if a, ok := r.opts.Registry.Lookup(run.Schedule.ActionName()); ok {
		run.Lease.Overlap = a.Overlap
	}
	f.logger(r.log).Info("buffered fire taken up", "overlap", run.Lease.Overlap, "off_schedule", run.Lease.OffSchedule)
	then(claimAnswer{ClaimOutcome: record.ClaimOutcome{Result: record.Acquired, Lease: run.Lease}})
}

// report tells RunnerOptions.Requests how the off-schedule run f, which
// waited on its job's lock, ended (or could not start): the replica that
// handled its request returned from RunOffSchedule long before.
func (r *Runner) report(f *fire) {
	l := f.lease
	if !f.kind.reports || !l.OffSchedule || r.opts.Requests == nil || f.result == nil {
		return
	}
	res := *f.result
	res.Lease = l
	ctx, cancel := r.opCtx()
	defer cancel()
	if err := r.opts.Requests.BufferedEnded(ctx, l, res, r.clock.Now()); err != nil {
		f.logger(r.log).Warn("could not report a buffered run's end to its request", "status", res.Status, "error", err)
	}
}

// reportStarted tells RunnerOptions.Requests that the off-schedule run
// under l, which waited on its job's lock, starts.
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

// bufferedClaim handles a claim whose fire was buffered: a run of this
// replica that the fire asked to stop is stopped at once, and when the
// lock may have no live holder the fire is taken up here.
func (r *Runner) bufferedClaim(log *slog.Logger, id string, overlap jobs.Overlap, o record.ClaimOutcome) {
	log.Info("fire buffered", "reason", o.Reason, "holder", o.Holder, "holder_run_id", o.HolderRunID,
		"overlap", overlap)
	if o.CancelRunID != "" {
		r.leases.cancelRun(o.CancelRunID, o.Lease.RunID)
	}
	if o.HolderRunID == "" || o.Holder == r.opts.InstanceID {
		// No live holder (the fire waits behind others), or this
		// replica's own run, which takes it up when it ends — unless it
		// ended meanwhile: a look costs one find.
		r.drainSoon(id, overlap)
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
