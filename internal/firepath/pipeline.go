package firepath

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cronswap/cronswap/internal/actions"
	"github.com/cronswap/cronswap/internal/lifetime"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/jobs"
)

// The one fire path. Every kind of fire (fire.go) goes through the same
// sequence, and its kind only says which steps apply and how:
//
//	enter → action → grace (a job another replica owns) → blackout
//	      → admission → deadline → pause → claim → [action, admission:
//	        a fire known only by its claim] → run → end → follow-ups → exit
//
// A claim in a batch answers on a goroutine of its own (a fire waiting for
// its batch holds none); the other claims answer on the caller's.

// start takes f through the fire path; f.done, if set, is called once f is
// finished.
func (r *Runner) start(f *fire) {
	r.traceFire(f)
	if !r.enter() {
		r.notStarted(f, NotRunShuttingDown, "shutting down; fire not started")
		f.finish()
		return
	}
	if r.opts.Store == nil && !f.kind.withoutStore {
		r.notStarted(f, NotRunClaimError, "no store to claim the fire in")
		r.exit(f)
		return
	}
	if f.kind.claims != claimFromBuffer && !r.resolve(f) {
		r.exit(f)
		return
	}
	if f.kind.graced && !f.owner && !r.waitGrace(f) {
		r.exit(f)
		return
	}
	if f.kind.excludes && r.excluded(f) {
		// The slot is recorded skipped through the claim batch, without
		// waiting for admission; nothing runs.
		if r.opts.Store == nil {
			f.logSkipped(f.logger(r.log), claimAnswer{})
			r.skipped(f.jobID(), f.skipReason(claimAnswer{}))
			r.exit(f)
			return
		}
		r.claim(f)
		return
	}
	if f.kind.claims != claimFromBuffer {
		if !r.admit(f) {
			r.exit(f)
			return
		}
		if r.late(f) {
			r.notStarted(f, NotRunStartingDeadline, "fire not started within its starting deadline")
			r.exit(f)
			return
		}
		if r.opts.Store == nil {
			r.runUnclaimed(f)
			r.exit(f)
			return
		}
		if f.kind.pauses && r.paused(f) {
			r.exit(f)
			return
		}
	}
	r.claim(f)
}

// startWait is start, returning when f is finished.
func (r *Runner) startWait(f *fire) {
	done := make(chan struct{})
	f.done = func() { close(done) }
	r.start(f)
	<-done
}

// enter counts a fire in (Shutdown waits for it); false when shutting down.
func (r *Runner) enter() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopping {
		return false
	}
	r.running.Add(1)
	return true
}

// exit ends f: its admission is released, and its caller told.
func (r *Runner) exit(f *fire) {
	if f.release != nil {
		f.release()
		f.release = nil
	}
	r.running.Done()
	f.finish()
}

// finish calls f.done once.
func (f *fire) finish() {
	f.endTrace()
	if f.done != nil {
		done := f.done
		f.done = nil
		done()
	}
}

// resolve looks up the action f's schedule names; false when f is handled
// instead: a retry its action no longer allows is given up, and a fire of
// an unknown action is not run (one already claimed is ended failed).
func (r *Runner) resolve(f *fire) bool {
	name := f.due.Schedule.ActionName()
	a, ok := r.opts.Registry.Lookup(name)
	if ok {
		if f.attempt > 0 && (!a.Retry.Enabled() || f.attempt > a.Retry.Attempts) {
			r.retries.giveUp(f.runID, f.attempt-1, f.jobID(), f.due.Slot, fmt.Sprintf(
				"not retried: action %s allows %d attempts now", name, max(a.Retry.Attempts, 1)))
			return false
		}
		f.action, f.resolved = a, true
		return true
	}
	err := fmt.Errorf("job %s: %w %q", f.jobID(), actions.ErrUnknownAction, name)
	log := f.logger(r.log)
	switch {
	case f.won:
		log.Error(f.kind.noun+" names an unknown action", "action", name)
		now := r.clock.Now()
		r.finish(log, f, record.RunEnd{Status: record.StatusFailed, StartedAt: now, EndedAt: now}, err, actions.Output{})
		r.runEnded(f.jobID(), record.StatusFailed)
		f.tell(OffScheduleResult{Ran: true, Status: record.StatusFailed, Error: err.Error(), Lease: f.lease})
		r.report(f)
		r.done(r.newRun(f.due, f.lease), err, 0)
	case f.kind.notRun == leavePending:
		log.Warn(f.kind.noun+" names an action unknown here; left pending", "action", name)
	default:
		log.Error(f.kind.noun+" names an unknown action", "action", name)
		f.tell(OffScheduleResult{NotRun: NotRunUnknownAction, Error: err.Error()})
		r.done(r.newRun(f.due, f.lease), err, 0)
	}
	return false
}

// admit waits for the gate (the category's and the replica's bounds) at
// most until f's starting deadline; false when f was not admitted (and is
// handled).
func (r *Runner) admit(f *fire) bool {
	ctx := context.Background()
	if !f.startBy.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, f.startBy)
		defer cancel()
	}
	// Shutdown closes the gate, which wakes every waiter.
	span := r.childSpan(f, SpanAdmission)
	release, err := r.gate.Acquire(ctx, f.due.Schedule.Category)
	endSpan(span, err)
	if err == nil {
		f.release = release
		return true
	}
	reason, msg := r.admissionFailed(err)
	r.notStarted(f, reason, msg)
	return false
}

// admitHolding admits a fire that already holds its claim (a buffered
// fire), keeping its lease meanwhile; a fire that cannot be admitted is
// recorded missed.
func (r *Runner) admitHolding(f *fire) bool {
	ctx, cancel := context.WithCancelCause(r.ctx)
	defer cancel(nil)
	r.leases.hold(f.lease, cancel)
	release, err := r.gate.Acquire(ctx, f.due.Schedule.Category)
	if l, ok := r.leases.forget(f.lease.RunID); ok {
		f.lease = l // as renewed while the fire waited
	}
	if err == nil {
		f.release = release
		return true
	}
	reason, msg := r.admissionFailed(err)
	if reason == NotRunStartingDeadline {
		reason = NotRunShuttingDown // no deadline: only the runner's end stops the wait
	}
	f.logger(r.log).Info(msg, "reason", reason)
	r.missClaimed(f, reason, msg)
	return false
}

// admissionFailed is the reason and message of a fire the gate refused
// with err.
func (r *Runner) admissionFailed(err error) (reason, msg string) {
	switch {
	case errors.Is(err, ErrGateFull):
		return NotRunQueueFull, "fire not started: the queue of fires waiting for admission is full"
	case errors.Is(err, ErrGateClosed) || r.stopped():
		return NotRunShuttingDown, "shutting down; waiting fire not started"
	}
	return NotRunStartingDeadline, "fire not admitted within its starting deadline"
}

// notStarted handles a fire not run before it holds a claim, for reason
// (msg, when set, is logged), as its kind says.
func (r *Runner) notStarted(f *fire, reason, msg string) {
	switch f.kind.notRun {
	case recordMissed:
		r.drop(f, reason, msg)
	case tellCaller:
		if msg != "" {
			f.logger(r.log).Info(msg, "reason", reason)
		}
		r.notRun(f.jobID(), f.due.Slot, reason)
		if f.result != nil && f.result.NotRun == "" {
			f.tell(OffScheduleResult{NotRun: reason, Error: msg})
		}
	case leavePending:
		if msg != "" {
			f.logger(r.log).Info(msg+"; left pending", "reason", reason)
		}
	}
}

// notRunReason is the one mapping from a claim's error to the reason its
// fire is not run (Hooks.NotRun, the missed record, the request's
// outcome).
func notRunReason(err error) string {
	switch {
	case errors.Is(err, record.ErrUnreachable):
		return NotRunUnreachable
	case errors.Is(err, errClaimTooLate):
		return NotRunStartingDeadline
	}
	return NotRunClaimError
}

// claimAnswer is the answer to a fire's claim, whatever it claimed.
type claimAnswer struct {
	record.ClaimOutcome
	// nothing: there was nothing to claim (no buffered fire waits).
	nothing bool
	// notQueued: the queue of fires waiting for a claim batch is full.
	notQueued bool
	// ended: the claim itself recorded the fire's end with this status
	// (a retry whose lock was lost or that was replaced during its
	// backoff); freed: it freed the job's lock for fires waiting on it.
	ended string
	freed bool
	why   error
}

// claim claims f as its kind says and continues with claimed.
func (r *Runner) claim(f *fire) {
	then := func(a claimAnswer) { r.claimed(f, a) }
	if f.trace != nil {
		f.trace.claim = r.childSpan(f, SpanClaim)
		then = func(a claimAnswer) {
			endClaimSpan(f.trace.claim, a)
			r.claimed(f, a)
		}
	}
	switch f.kind.claims {
	case claimInBatch:
		r.claimInBatch(f, then)
	case claimFromBuffer:
		r.takeBuffered(f, then)
	case claimAttempt:
		r.claimAttempt(f, then)
	}
}

// claimed settles f's claim and, when f won it, runs it.
func (r *Runner) claimed(f *fire, a claimAnswer) {
	defer r.exit(f)
	if f.answered != nil {
		f.answered()
	}
	if !r.settle(f, a) {
		return
	}
	f.won, f.lease = true, a.Lease
	if !f.resolved && !r.resolve(f) {
		return
	}
	if !f.admitted && f.release == nil && !r.admitHolding(f) {
		return
	}
	r.run(f)
	r.followUp(f)
}

// settle handles the answer a of f's claim; true when f won it and is to
// run.
func (r *Runner) settle(f *fire, a claimAnswer) bool {
	if a.Err == nil && a.ended == "" && a.Result == record.Acquired && len(a.Repaired) == 0 && f.owner {
		return true // the common case: nothing to log
	}
	log := f.logger(r.log)
	id := f.jobID()
	switch {
	case a.nothing:
		return false
	case a.notQueued:
		// The database is not keeping up: the fires waiting for a claim
		// batch are bounded like those waiting for admission.
		r.notStarted(f, NotRunQueueFull, "fire not claimed: the queue of fires waiting for a claim is full")
		return false
	case a.Err != nil:
		if errors.Is(a.Err, record.ErrOutcomeUnknown) {
			// The record may have landed as this replica's: it becomes a
			// missed record once the database answers again, and the fire
			// is not tried again.
			l := a.Lease
			if l.RunID == "" {
				l = record.Lease{JobID: id, RunID: f.runID, Instance: r.opts.InstanceID, Incarnation: r.opts.Incarnation,
					Slot: f.due.Slot.UTC(), Overlap: f.action.Overlap}
				if l.RunID == "" {
					l.RunID = record.RunID(id, l.Slot)
				}
			}
			r.leases.disown(l)
		}
		reason := notRunReason(a.Err)
		log.Warn(f.kind.noun+" not run: could not claim it", "reason", r.dropReason(f, reason), "error", a.Err)
		if f.kind.notRun == tellCaller {
			f.tell(OffScheduleResult{NotRun: reason, Error: a.Err.Error()})
		}
		r.notStarted(f, reason, "")
		return false
	case a.ended != "":
		log.Warn(f.kind.noun+" not run: its claim recorded it "+a.ended, "error", a.why)
		r.runEnded(id, a.ended)
		if a.freed {
			r.followUp(f) // the fire replacing it waits on the lock just freed
		}
		return false
	}
	if len(a.Repaired) > 0 {
		log.Warn("lock document was damaged; repaired before claiming", "damage", a.Repaired)
	}
	switch a.Result {
	case record.AlreadyFired:
		log.Debug(f.kind.noun+" claimed elsewhere", "reason", a.Reason)
		f.tell(OffScheduleResult{AlreadyFired: true, Error: a.Reason})
		if f.kind.notRun == recordMissed && (f.claimRetried || r.late(f)) {
			// An earlier try may have been refused without an answer, or
			// the answer came after the deadline: if no replica recorded
			// the slot, it is recorded missed once nothing can start it.
			r.missSlot(f, r.dropReason(f, NotRunUnreachable))
		}
		return false
	case record.Skipped:
		f.logSkipped(log, a)
		r.skipped(id, f.skipReason(a))
		f.tell(OffScheduleResult{Status: record.StatusSkipped, Error: a.Reason})
		if a.MaxRunsReached && r.opts.Ended != nil {
			r.opts.Ended(f.due.Schedule, lifetime.ReasonMaxRuns)
		}
		if f.exclusion == nil && f.action.Overlap.Buffers() && a.Holder == "" {
			r.drainSoon(id, f.action.Overlap) // fires may wait on a lock no live run holds
		}
		return false
	case record.Missed:
		// Overtaken by a later slot claimed first: the claim recorded the
		// slot missed (logged as such).
		slot := f.due.Slot.UTC()
		r.reportMissed(record.MissedRange{JobID: id, From: slot, To: slot, Count: 1, Reason: a.Reason})
		f.tell(OffScheduleResult{Status: record.StatusMissed, NotRun: a.Reason})
		return false
	case record.Buffered:
		r.bufferedClaim(log, id, f.action.Overlap, a.ClaimOutcome)
		f.tell(OffScheduleResult{Status: record.StatusBuffered, Error: a.Reason, Lease: a.Lease})
		return false
	case record.TakenOver:
		// Runs as Acquired; the run it took the lock from is no longer
		// live (its holder dead, stalled past its lease, or this
		// instance's previous process).
		log.Info("took the job's lock over from a run no longer live", "holder", a.Holder, "holder_run_id", a.HolderRunID)
	}
	if f.kind.graced && !f.owner {
		log.Info("fire claimed for its owner, which had not claimed it within the grace")
		if h := r.opts.Hooks.OwnerTakeover; h != nil {
			h(id)
		}
	}
	return true
}

// run runs the action of f, which won its claim, under its lease, and
// writes its end; a claim won after f's starting deadline is recorded
// missed instead.
func (r *Runner) run(f *fire) {
	if f.kind.attempts && !f.lease.OffSchedule && f.lease.Attempt == 0 && r.retriesLocal(f.action) {
		f.lease.Attempt = 1
	}
	if f.kind.lateAfterClaim && r.late(f) {
		f.logger(r.log).Info("fire not started within its starting deadline; claimed too late",
			"reason", NotRunStartingDeadline, "starting_deadline", f.deadline, "late_by", r.clock.Now().Sub(f.due.At()))
		r.missClaimed(f, NotRunStartingDeadline, fmt.Sprintf("not started within its starting deadline (%s)", f.deadline))
		return
	}
	if f.started != nil {
		f.started(f.lease)
	}
	if f.kind.reports {
		r.reportStarted(f.lease)
	}
	run := r.newRun(f.due, f.lease)
	took, err := r.execute(f.logger(r.log), f, run, &f.lease)
	res := OffScheduleResult{Ran: true, Lease: f.lease, Status: offScheduleStatus(err)}
	if err != nil {
		res.Error = err.Error()
	}
	f.tell(res)
	r.report(f)
	r.done(run, err, took)
}

// runUnclaimed runs f without a store: no record, no lock, a run id of
// its own.
func (r *Runner) runUnclaimed(f *fire) {
	run := r.newRun(f.due, record.Lease{})
	log := r.log.With("job_id", run.JobID, "scheduled_at", run.Slot, "run_id", run.RunID)
	took, err := r.execute(log, f, run, nil)
	r.done(run, err, took)
}

// done tells RunnerOptions.Done of the end of run.
func (r *Runner) done(run jobs.Run, err error, took time.Duration) {
	if r.opts.Done != nil {
		r.opts.Done(run, err, took)
	}
}

// followUp takes up, as f's kind says, the fires buffered behind its run.
func (r *Runner) followUp(f *fire) {
	o := f.action.Overlap
	if !f.resolved || !o.Buffers() {
		return
	}
	switch f.kind.drain {
	case drainInline:
		r.drainAfter(f.jobID(), o)
	case drainAsync:
		r.drainSoon(f.jobID(), o)
	}
}
