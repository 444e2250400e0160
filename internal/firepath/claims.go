package firepath

import (
	"context"
	"errors"
	"time"

	"github.com/cronswap/cronswap/internal/actions"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/schedule"
)

// claim takes the fire through a claim batch and calls then with its
// outcome: the lease and true when this replica is to run the fire (its
// running record is written). A fire waiting for its batch holds no
// goroutine: claim returns once the fire is queued, and then runs on a
// goroutine of its own when the batch answers (on the caller's when the
// fire was not queued). A claim that could not reach the database is
// tried again (RunnerOptions.ClaimRetry) while the fire can still start
// in time; check says this replica does not own the job. then is called
// exactly once.
func (r *Runner) claim(d schedule.Due, deadline time.Duration, spec actions.Action, check bool, then func(record.Lease, bool)) {
	fc := claimRequest{FireClaim: record.FireClaim{JobID: d.Schedule.ID, Slot: d.Slot.UTC(), Overlap: spec.Overlap, Check: check},
		startBy: d.At().Add(deadline)}
	if spec.Overlap.Buffers() {
		fc.Action, fc.Args, fc.Category = d.Schedule.ActionName(), d.Schedule.Args, d.Schedule.Category
	}
	c := &claimTry{r: r, d: d, deadline: deadline, spec: spec, req: fc, wait: r.opts.ClaimRetry, then: then}
	c.submit()
}

// claimTry is one fire's claim in progress, across its tries.
type claimTry struct {
	r        *Runner
	d        schedule.Due
	deadline time.Duration
	spec     actions.Action
	req      claimRequest
	// wait is the wait before the next try after an unreachable database;
	// retried is set once a try was made again.
	wait    time.Duration
	retried bool
	then    func(record.Lease, bool)
}

// submit queues the claim for the next batch; a full queue drops the fire.
func (c *claimTry) submit() {
	if c.r.claims.enqueue(c.req, c.r.opts.QueueLimit, c.answered) {
		return
	}
	// The database is not keeping up: the fires waiting for a claim batch
	// are bounded like those waiting for admission, so memory stays
	// bounded under a backlog.
	c.r.drop(c.d, c.deadline, NotRunQueueFull, "fire not claimed: the queue of fires waiting for a claim is full")
	c.then(record.Lease{}, false)
}

// answered takes the batch's answer o: the claim is tried again, or
// settled.
func (c *claimTry) answered(o record.ClaimOutcome) {
	if h := c.r.opts.Hooks.Claimed; h != nil {
		if o.Err != nil {
			h(c.req.JobID, "error")
		} else {
			h(c.req.JobID, o.Result.String())
		}
	}
	if c.again(o) {
		return
	}
	c.then(c.settle(o))
}

// again reports whether the claim goes on after the answer o: the
// database could not be reached and a retry still fits before the fire's
// deadline (the wait is on this goroutine, then the fire is queued
// again), or the runner stopped during that wait (the fire is dropped).
func (c *claimTry) again(o record.ClaimOutcome) bool {
	r, d := c.r, c.d
	if o.Err == nil {
		r.dbAnswered.Store(true)
		return false
	}
	if errors.Is(o.Err, record.ErrOutcomeUnknown) {
		// The record may have landed as this replica's: it is turned
		// into a missed record once the database answers again, and the
		// fire is not tried again (a retry would find the record and
		// could not tell it was ours to run).
		l := o.Lease
		if l.RunID == "" {
			l = record.Lease{JobID: c.req.JobID, RunID: record.RunID(c.req.JobID, c.req.Slot), Instance: r.opts.InstanceID,
				Incarnation: r.opts.Incarnation, Slot: c.req.Slot, Overlap: c.spec.Overlap}
		}
		r.leases.disown(l)
		return false
	}
	wait := c.wait
	if !errors.Is(o.Err, record.ErrUnreachable) || wait <= 0 || r.clock.Now().Add(wait).After(d.At().Add(c.deadline)) {
		return false
	}
	r.log.Warn("could not reach the database to claim the fire; trying again", "job_id", c.req.JobID,
		"scheduled_at", c.req.Slot, "error", o.Err, "retry_in", wait)
	c.wait = min(2*wait, r.opts.OpTimeout)
	c.retried = true
	t := time.NewTimer(wait)
	select {
	case <-t.C:
		c.submit()
	case <-r.stop:
		t.Stop()
		r.drop(d, c.deadline, NotRunShuttingDown, "shutting down; fire not claimed")
		c.then(record.Lease{}, false)
	}
	return true
}

// settle ends the claim with its last answer o: the lease and true when
// this replica runs the fire.
func (c *claimTry) settle(o record.ClaimOutcome) (record.Lease, bool) {
	r, d, deadline, spec := c.r, c.d, c.deadline, c.spec
	id, slot := c.req.JobID, c.req.Slot
	log := r.log.With("job_id", id, "scheduled_at", slot)
	if o.Err != nil {
		reason := NotRunClaimError
		switch {
		case errors.Is(o.Err, record.ErrUnreachable):
			reason = NotRunUnreachable
		case errors.Is(o.Err, errClaimTooLate):
			reason = NotRunStartingDeadline
		}
		reason = r.dropReason(d, deadline, reason)
		log.Warn("fire not run: could not claim it", "reason", reason, "error", o.Err)
		r.drop(d, deadline, reason, "")
		return record.Lease{}, false
	}
	if len(o.Repaired) > 0 {
		log.Warn("lock document was damaged; repaired before claiming", "damage", o.Repaired)
	}
	switch o.Result {
	case record.AlreadyFired:
		log.Debug("fire claimed elsewhere")
		if c.retried || r.late(d, deadline) {
			// An earlier try may have been refused without an answer, or
			// the answer came after the deadline: if no replica recorded
			// the slot, it is recorded missed once nothing can start it.
			reason := r.dropReason(d, deadline, record.MissedUnreachable)
			r.queueMissed(d.Schedule, d.Delay, record.MissedRange{JobID: id, From: slot, To: slot, Count: 1, Reason: reason})
		}
		return record.Lease{}, false
	case record.Skipped:
		log.Info("fire skipped", "reason", o.Reason, "holder", o.Holder, "holder_run_id", o.HolderRunID)
		r.skipped(id, SkipOverlap)
		if spec.Overlap.Buffers() && o.Holder == "" {
			r.drainSoon(id, spec.Overlap) // fires may wait on a lock no live run holds
		}
		return record.Lease{}, false
	case record.Buffered:
		r.bufferedClaim(log, id, spec, o)
		return record.Lease{}, false
	}
	if c.req.Check {
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
	record.FireClaim
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
//
// Once the database is slow (the claim-latency estimate is above
// minClaimBudget), a fire that cannot start in time either is not sent
// (hopeless), and the batch is given at least the estimate, up to the
// last of its fires' deadlines: a budget the batch cannot meet only ends
// in claims of unknown outcome, which cost a read-back on top.
func (r *Runner) claimBatch(reqs []claimRequest) []record.ClaimOutcome {
	r.waitForEnds(reqs)
	out := make([]record.ClaimOutcome, len(reqs))
	var fires []record.FireClaim
	var sent []int
	var first, last time.Time
	now := r.clock.Now()
	est := r.latency.estimate(now)
	for i, q := range reqs {
		if now.After(q.startBy) || hopeless(q.startBy.Sub(now), est) {
			// It waited for this batch past its deadline, or too close to
			// it for a batch to answer in time: not sent.
			out[i].Err = errClaimTooLate
			continue
		}
		fires = append(fires, q.FireClaim)
		sent = append(sent, i)
		if first.IsZero() || q.startBy.Before(first) {
			first = q.startBy
		}
		last = laterOf(last, q.startBy)
	}
	if len(fires) == 0 {
		return out
	}
	budget := claimBudget(first.Sub(now), last.Sub(now), est, r.opts.OpTimeout)
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	r.leases.beforeClaim(ctx)
	start := r.clock.Now()
	got := r.opts.Store.ClaimBatch(ctx, record.BatchClaim{Fires: fires, Instance: r.opts.InstanceID,
		Incarnation: r.opts.Incarnation, Now: r.clock.Now(), TTL: r.opts.TTL})
	end := r.clock.Now()
	took := end.Sub(start)
	r.latency.observe(end, took)
	if h := r.opts.Hooks.ClaimBatch; h != nil {
		h(len(fires), took)
	}
	r.log.Debug("claim batch", "fires", len(fires), "late", len(reqs)-len(fires), "took", took, "budget", budget,
		"latency_estimate", est)
	for k, i := range sent {
		out[i] = got[k]
	}
	r.leases.afterClaim()
	return out
}

// hopeless reports whether a fire with left before its starting deadline
// is not worth sending given the claim-latency estimate est: only once
// the database is slow (est above minClaimBudget, which every batch is
// given anyway — so with a healthy database nothing is dropped), and only
// when a batch would have to answer hopelessFactor times faster than est.
func hopeless(left, est time.Duration) bool {
	return est > minClaimBudget && left*hopelessFactor < est
}

// claimBudget is the time a claim batch is given: what its most urgent
// fire has left (urgent), at least minClaimBudget, raised to the
// claim-latency estimate est but not past the last fire's deadline
// (latest: then no fire of the batch can start any more), at most
// opTimeout.
func claimBudget(urgent, latest, est, opTimeout time.Duration) time.Duration {
	return min(max(urgent, minClaimBudget, min(est, latest)), opTimeout)
}

// LatencyEstimate returns the runner's claim-latency estimate: the 90th
// percentile of its recent claim batches' durations, 0 until enough
// batches were measured (docs/firepath.md, "Under a backlog").
func (r *Runner) LatencyEstimate() time.Duration { return r.latency.estimate(r.clock.Now()) }

// endBacklog bounds the run ends waiting for an end batch before a claim
// batch goes out: two full rounds of end batches.
const endBacklog = 2 * endBatchMax * endBatchesAtOnce

// waitForEnds holds a claim batch while more than endBacklog run ends
// wait to be written, at most until the last of its fires' deadlines
// (those that passed meanwhile are then not sent). Every fire a claim wins
// ends with an end write; when the database cannot keep up with both,
// ends go first, so the fires waiting between their claim and their end
// write — a goroutine each, and their lock held — stay bounded instead of
// growing with every claim won.
func (r *Runner) waitForEnds(reqs []claimRequest) {
	var last time.Time
	for _, q := range reqs {
		last = laterOf(last, q.startBy)
	}
	ctx, cancel := context.WithTimeout(context.Background(), last.Sub(r.clock.Now()))
	defer cancel()
	r.ends.waitFewer(ctx, endBacklog)
}

// errClaimTooLate answers a fire whose starting deadline passed while it
// waited for its claim batch to go out: it is not sent.
var errClaimTooLate = errors.New("starting deadline passed before the claim could be sent")

// minClaimBudget is the least time a claim batch is given, even for
// fires about to pass their deadline: one round trip and a read-back.
const minClaimBudget = 200 * time.Millisecond
