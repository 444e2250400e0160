package jobs

import (
	"context"
	"errors"
	"time"

	"github.com/cronswap/cronswap/schedule"
)

// claim takes the fire through a claim batch. It returns the lease when
// this replica is to run the fire (its running record is written). A
// claim that could not reach the database is tried again
// (RunnerOptions.ClaimRetry) while the fire can still start in time;
// check says this replica does not own the job.
func (r *Runner) claim(d schedule.Due, deadline time.Duration, spec Spec, check bool) (Lease, bool) {
	id, slot := d.Schedule.ID, d.Slot.UTC()
	log := r.log.With("job_id", id, "scheduled_at", slot)
	fc := claimRequest{FireClaim: FireClaim{JobID: id, Slot: slot, Overlap: spec.Overlap, Check: check},
		startBy: d.At().Add(deadline)}
	if spec.Overlap.buffers() {
		fc.Action, fc.Args, fc.Category = d.Schedule.ActionName(), d.Schedule.Args, d.Schedule.Category
	}
	var o ClaimOutcome
	retried := false
	for wait := r.opts.ClaimRetry; ; wait = min(2*wait, r.opts.OpTimeout) {
		var queued bool
		o, queued = r.claims.submitBounded(fc, r.opts.QueueLimit)
		if !queued {
			// The database is not keeping up: the fires waiting for a
			// claim batch are bounded like those waiting for admission,
			// so memory stays bounded under a backlog.
			r.drop(d, deadline, NotRunQueueFull, "fire not claimed: the queue of fires waiting for a claim is full")
			return Lease{}, false
		}
		if h := r.opts.Hooks.Claimed; h != nil {
			if o.Err != nil {
				h(id, "error")
			} else {
				h(id, o.Result.String())
			}
		}
		if o.Err == nil {
			r.dbAnswered.Store(true)
			break
		}
		if errors.Is(o.Err, ErrOutcomeUnknown) {
			// The record may have landed as this replica's: it is turned
			// into a missed record once the database answers again, and
			// the fire is not tried again (a retry would find the record
			// and could not tell it was ours to run).
			l := o.Lease
			if l.RunID == "" {
				l = Lease{JobID: id, RunID: RunID(id, slot), Instance: r.opts.InstanceID,
					Incarnation: r.opts.Incarnation, Slot: slot, Overlap: spec.Overlap}
			}
			r.leases.disown(l)
			break
		}
		if !errors.Is(o.Err, ErrUnreachable) || wait <= 0 || r.clock.Now().Add(wait).After(d.At().Add(deadline)) {
			break
		}
		log.Warn("could not reach the database to claim the fire; trying again", "error", o.Err, "retry_in", wait)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-r.stop:
			t.Stop()
			r.drop(d, deadline, NotRunShuttingDown, "shutting down; fire not claimed")
			return Lease{}, false
		}
		retried = true
	}
	if o.Err != nil {
		reason := NotRunClaimError
		switch {
		case errors.Is(o.Err, ErrUnreachable):
			reason = NotRunUnreachable
		case errors.Is(o.Err, errClaimTooLate):
			reason = NotRunStartingDeadline
		}
		reason = r.dropReason(d, deadline, reason)
		log.Warn("fire not run: could not claim it", "reason", reason, "error", o.Err)
		r.drop(d, deadline, reason, "")
		return Lease{}, false
	}
	if len(o.Repaired) > 0 {
		log.Warn("lock document was damaged; repaired before claiming", "damage", o.Repaired)
	}
	switch o.Result {
	case AlreadyFired:
		log.Debug("fire claimed elsewhere")
		if retried || r.late(d, deadline) {
			// An earlier try may have been refused without an answer, or
			// the answer came after the deadline: if no replica recorded
			// the slot, it is recorded missed once nothing can start it.
			reason := r.dropReason(d, deadline, MissedUnreachable)
			r.queueMissed(d.Schedule, d.Delay, MissedRange{JobID: id, From: slot, To: slot, Count: 1, Reason: reason})
		}
		return Lease{}, false
	case Skipped:
		log.Info("fire skipped", "reason", o.Reason, "holder", o.Holder, "holder_run_id", o.HolderRunID)
		r.runEnded(id, StatusSkipped)
		if spec.Overlap.buffers() && o.Holder == "" {
			r.drainSoon(id, spec.Overlap) // fires may wait on a lock no live run holds
		}
		return Lease{}, false
	case Buffered:
		r.bufferedClaim(log, id, spec, o)
		return Lease{}, false
	}
	if check {
		log.Info("fire claimed for its owner, which had not claimed it within the grace")
		if h := r.opts.Hooks.OwnerTakeover; h != nil {
			h(id)
		}
	}
	return o.Lease, true
}

// claimRequest is one fire for the claim batcher: the fire and when it
// must have started by (its slot plus jitter plus starting deadline).
type claimRequest struct {
	FireClaim
	startBy time.Time
}

// claimBatch claims a batch of fires in one store call, after checking
// that the indexes the claim relies on are in place. The call may take
// until the most urgent fire of the batch could still start (at least
// minClaimBudget, at most OpTimeout): a database that does not answer in
// time leaves the fires not run instead of claimed late, and the fires
// that could wait longer are tried again (ClaimRetry) — one slow batch
// never holds up the fires queued behind it past their deadlines. A fire
// whose deadline passed while it waited for its batch is not sent.
func (r *Runner) claimBatch(reqs []claimRequest) []ClaimOutcome {
	out := make([]ClaimOutcome, len(reqs))
	var fires []FireClaim
	var sent []int
	var first time.Time
	now := r.clock.Now()
	for i, q := range reqs {
		if now.After(q.startBy) {
			// It waited for this batch past its deadline: not sent.
			out[i].Err = errClaimTooLate
			continue
		}
		fires = append(fires, q.FireClaim)
		sent = append(sent, i)
		if first.IsZero() || q.startBy.Before(first) {
			first = q.startBy
		}
	}
	if len(fires) == 0 {
		return out
	}
	budget := min(max(first.Sub(now), minClaimBudget), r.opts.OpTimeout)
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	r.leases.beforeClaim(ctx)
	start := time.Now()
	got := r.opts.Store.ClaimBatch(ctx, BatchClaim{Fires: fires, Instance: r.opts.InstanceID,
		Incarnation: r.opts.Incarnation, Now: r.clock.Now(), TTL: r.opts.TTL})
	if h := r.opts.Hooks.ClaimBatch; h != nil {
		h(len(fires), time.Since(start))
	}
	r.log.Debug("claim batch", "fires", len(fires), "late", len(reqs)-len(fires), "took", time.Since(start), "budget", budget)
	for k, i := range sent {
		out[i] = got[k]
	}
	r.leases.afterClaim()
	return out
}

// errClaimTooLate answers a fire whose starting deadline passed while it
// waited for its claim batch to go out: it is not sent.
var errClaimTooLate = errors.New("starting deadline passed before the claim could be sent")

// minClaimBudget is the least time a claim batch is given, even for
// fires about to pass their deadline: one round trip and a read-back.
const minClaimBudget = 200 * time.Millisecond
