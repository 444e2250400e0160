package firepath

import (
	"context"
	"errors"
	"time"

	"github.com/cronswap/cronswap/internal/record"
)

// claimInBatch claims f in the next claim batch, and calls then with the
// answer on a goroutine of its own: a fire waiting for its batch holds no
// goroutine. A claim that could not reach the database is tried again
// (RunnerOptions.ClaimRetry) while the fire can still start in time, when
// its kind says so.
func (r *Runner) claimInBatch(f *fire, then func(claimAnswer)) {
	req := claimRequest{FireClaim: r.fireClaim(f), startBy: f.startBy, trace: f.trace}
	if f.claimWait == 0 {
		f.claimWait = r.opts.ClaimRetry
	}
	answered := func(o record.ClaimOutcome) {
		if h := r.opts.Hooks.Claimed; h != nil {
			if o.Err != nil {
				h(req.JobID, ClaimedError)
			} else {
				h(req.JobID, o.Result.String())
			}
		}
		if o.Err == nil {
			r.dbAnswered.Store(true)
		} else if r.claimAgain(f, o, then) {
			return
		}
		then(claimAnswer{ClaimOutcome: o})
	}
	// The answer is taken on a goroutine of its own: the batch's goroutine
	// answers the other fires of the batch meanwhile.
	ok := r.claims.TryEnqueue(req, r.opts.QueueLimit, func(o record.ClaimOutcome) { go answered(o) })
	if !ok {
		then(claimAnswer{notQueued: true})
	}
}

// fireClaim is what f asks of its claim batch: its slot (or an off-schedule
// run's own identity, its fence the claim time), the policy it claims
// under, whether it checks for the owner's record first, its exclusion,
// a cron slot's max_runs and what it is recorded missed with when a later
// slot overtook it, and, when it may wait on the lock, the schedule it
// came due under.
func (r *Runner) fireClaim(f *fire) record.FireClaim {
	o := f.action.Overlap
	fc := record.FireClaim{JobID: f.jobID(), Slot: f.due.Slot.UTC(), Overlap: o, Check: !f.owner, Exclusion: f.exclusion}
	if f.runID != "" {
		fc.RunID, fc.Fence, fc.OffSchedule = f.runID, r.clock.Now().UnixMilli(), true
		fc.Buffer = f.mayWait && o.Buffers()
	} else {
		fc.MaxRuns, fc.OvertakenReason = f.due.Schedule.MaxRuns, f.overtaken
	}
	if o.Buffers() && (!fc.OffSchedule || fc.Buffer) {
		fc.Schedule = &f.due.Schedule
	}
	return fc
}

// claimAgain reports whether f's claim goes on after the answer o: the
// database could not be reached and a retry still fits before the fire's
// deadline (the wait is on this goroutine, then the fire is queued
// again), or the runner stopped during that wait (the fire is dropped).
func (r *Runner) claimAgain(f *fire, o record.ClaimOutcome, then func(claimAnswer)) bool {
	wait := f.claimWait
	if !f.kind.retryClaim || errors.Is(o.Err, record.ErrOutcomeUnknown) || !errors.Is(o.Err, record.ErrUnreachable) ||
		wait <= 0 || r.clock.Now().Add(wait).After(f.startBy) {
		return false
	}
	f.logger(r.log).Warn("could not reach the database to claim the fire; trying again", "error", o.Err, "retry_in", wait)
	f.claimWait = min(2*wait, r.opts.OpTimeout)
	f.claimRetried = true
	t := time.NewTimer(wait)
	select {
	case <-t.C:
		r.claimInBatch(f, then)
	case <-r.stop:
		t.Stop()
		r.notStarted(f, NotRunShuttingDown, "shutting down; fire not claimed")
		then(claimAnswer{nothing: true})
	}
	return true
}

// claimRequest is one fire for the claim batcher: the fire and when it
// must have started by (its slot plus jitter plus starting deadline).
type claimRequest struct {
	record.FireClaim
	startBy time.Time
	// trace is the fire's (nil: not traced): its claim's span is linked to
	// the span of the batch that carries it.
	trace *fireTrace
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
	batchSpan := r.traceBatch(reqs, sent)
	start := r.clock.Now()
	got := r.opts.Store.ClaimBatch(ctx, record.BatchClaim{Fires: fires, Instance: r.opts.InstanceID,
		Incarnation: r.opts.Incarnation, Now: r.clock.Now(), TTL: r.opts.TTL})
	end := r.clock.Now()
	took := end.Sub(start)
	endSpan(batchSpan, nil)
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
	r.ends.WaitFewer(ctx, endBacklog)
}

// errClaimTooLate answers a fire whose starting deadline passed while it
// waited for its claim batch to go out: it is not sent.
var errClaimTooLate = errors.New("starting deadline passed before the claim could be sent")

// minClaimBudget is the least time a claim batch is given, even for
// fires about to pass their deadline: one round trip and a read-back.
const minClaimBudget = 200 * time.Millisecond

// laterOf returns the later of a and b.
func laterOf(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
