package firepath

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cronswap/cronswap/internal/actions"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/jobs"
	"github.com/cronswap/cronswap/schedule"
)

// Runner executes fires. With a Store, each fire of (job, slot) runs at most
// once across all replicas sharing the database: the fire is admitted by
// the gate (the local bounds), claimed in a batch with the other fires
// due at the same time (one record per slot, and the job's lock for a
// policy that takes it), run on its own goroutine while the replica's
// leases are renewed together, and its end is written in a batch too. A
// run whose lease cannot be renewed is cancelled when the lease runs out
// by the local clock. Shutdown stops it taking fires and waits for
// running actions.
type Runner struct {
	opts   RunnerOptions
	log    *slog.Logger
	clock  Clock
	gate   *Gate
	ctx    context.Context
	cancel context.CancelCauseFunc
	// stop is closed when Shutdown begins: fires still waiting (for their
	// grace, a claim retry, admission) are dropped.
	stop     chan struct{}
	stopOnce sync.Once

	claims *batcher[claimRequest, record.ClaimOutcome]
	ends   *batcher[record.LeaseEnd, error]
	leases *leaseKeeper
	// latency is the claim-latency estimate, fed by the claim batches.
	latency claimLatency

	mu       sync.Mutex
	stopping bool
	running  sync.WaitGroup
	// draining names the jobs whose buffered fires this replica is taking
	// up on a goroutine of its own (drainSoon).
	draining map[string]bool

	// missed holds the missed slots waiting to be recorded; flushing
	// writes them (nil without a store).
	missed    *ledger
	flushMu   sync.Mutex
	flushOnce sync.Once
	flushStop chan struct{}
	flushDone chan struct{}
	// dbAnswered is set by a claim that reached the database, so that the
	// flusher tries again at once instead of waiting out its backoff.
	dbAnswered atomic.Bool

	// retries runs further attempts of failed runs (nil: no store).
	retries *retrier
}

// errShutdown is the cancellation cause of actions still running when the
// grace period ends.
var errShutdown = errors.New("cancelled by shutdown: grace period over")

// NewRunner returns a runner ready to take fires.
func NewRunner(opts RunnerOptions) *Runner {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Clock == nil {
		opts.Clock = SystemClock{}
	}
	if opts.TTL <= 0 {
		opts.TTL = DefaultLockTTL
	}
	if opts.OpTimeout <= 0 {
		opts.OpTimeout = DefaultOpTimeout
	}
	if opts.QueueLimit <= 0 {
		opts.QueueLimit = DefaultQueueLimit
	}
	if opts.MissedBacklog <= 0 {
		opts.MissedBacklog = DefaultMissedBacklog
	}
	if opts.ClaimGrace <= 0 {
		opts.ClaimGrace = DefaultClaimGrace
	}
	if opts.Incarnation == "" {
		opts.Incarnation = newIncarnation()
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	r := &Runner{opts: opts, log: opts.Logger, clock: opts.Clock,
		gate: NewGate(opts.Workers, opts.Categories, opts.QueueLimit),
		ctx:  ctx, cancel: cancel, stop: make(chan struct{})}
	if opts.Store != nil {
		r.claims = newBatcher(claimBatchMax, claimBatchesAtOnce, r.claimBatch)
		r.ends = newBatcher(endBatchMax, endBatchesAtOnce, r.endBatch)
		r.leases = newLeaseKeeper(r)
	}
	// The retrier exists whatever is registered yet (a Go program registers
	// its handlers after the runner is built); it polls only while some
	// registered action retries.
	if opts.Store != nil && opts.Registry != nil {
		if opts.RetryPoll <= 0 {
			opts.RetryPoll = sweepInterval(opts.TTL)
		}
		r.retries = newRetrier(r, opts.Store, opts.RetryPoll)
	}
	if opts.Store != nil {
		r.missed = newLedger(opts.MissedBacklog)
		r.flushStop, r.flushDone = make(chan struct{}), make(chan struct{})
		go r.flushLoop()
	}
	return r
}

// Fire handles one fire of an armed schedule and returns when it is done
// (run, skipped, lost to another replica, or dropped). The schedule names
// the action, its args and its dispatch category. The action runs on a
// goroutine the runner starts once the fire is claimed (without a store,
// on the caller's).
func (r *Runner) Fire(d schedule.Due) { r.dispatchWait(d, r.startingDeadline(d)) }

// Submit handles a fire as Fire does, but returns once the fire waits for
// its claim batch (or was handled without one): it is the scheduler's fire
// callback, which runs on a goroutine of its own, and a fire waiting for a
// claim then holds no goroutine — under a backlog the queue costs its
// entries (bounded by QueueLimit), not a goroutine stack each. Shutdown
// waits for submitted fires as for any other.
func (r *Runner) Submit(d schedule.Due) { r.dispatch(d, r.startingDeadline(d), nil) }

// FireCatchUp is Fire for a slot offered by the catch-up after downtime:
// the fire may start up to window after it was due (or its starting
// deadline, when that is longer).
func (r *Runner) FireCatchUp(d schedule.Due, window time.Duration) {
	r.dispatchWait(d, max(window, r.startingDeadline(d)))
}

// dispatchWait is dispatch, returning when the fire is done.
func (r *Runner) dispatchWait(d schedule.Due, deadline time.Duration) {
	done := make(chan struct{})
	r.dispatch(d, deadline, func() { close(done) })
	<-done
}

// dispatch takes a fire through ownership, admission, claim and run;
// deadline is how long after d.At() it may still start. The steps up to
// the claim run on the caller's goroutine; the claim answers on another,
// which runs the fire. done, if not nil, is called once the fire is done.
func (r *Runner) dispatch(d schedule.Due, deadline time.Duration, done func()) {
	finished := func() {
		if done != nil {
			done()
		}
	}
	r.mu.Lock()
	if r.stopping {
		r.mu.Unlock()
		r.drop(d, deadline, NotRunShuttingDown, "shutting down; fire not started")
		finished()
		return
	}
	r.running.Add(1)
	r.mu.Unlock()
	owner := r.owns(d)
	release, spec, ok := r.beforeClaim(d, deadline, owner)
	if !ok {
		r.running.Done()
		finished()
		return
	}
	r.claim(d, deadline, spec, !owner, func(lease record.Lease, won bool) {
		defer finished()
		defer r.running.Done()
		defer release()
		if won {
			r.runClaimed(d, deadline, spec, lease)
		}
	})
}

// owns reports whether this replica claims d as its job's owner (at once,
// without checking first).
func (r *Runner) owns(d schedule.Due) bool {
	return r.opts.Store == nil || r.opts.Owns == nil || r.opts.Owns(d.Schedule.ID)
}

// beforeClaim takes the fire through the steps before its claim: the
// action's lookup, the grace of a job another replica owns, blackouts,
// admission, the deadline and a pause; owner says this replica owns the
// job. Without a store the fire is run here. It returns the admission's
// release and the action when the fire goes on to its claim; false when
// it was handled (dropped, skipped, or run without a store).
func (r *Runner) beforeClaim(d schedule.Due, deadline time.Duration, owner bool) (release func(), spec actions.Action, ok bool) {
	spec, ok = r.opts.Registry.Lookup(d.Schedule.ActionName())
	if !ok {
		f := r.newFire(d, record.Lease{})
		err := fmt.Errorf("job %s: %w %q", d.Schedule.ID, actions.ErrUnknownAction, d.Schedule.ActionName())
		r.log.Error("fire names an unknown action", "job_id", d.Schedule.ID, "scheduled_at", d.Slot.UTC(),
			"action", d.Schedule.ActionName())
		if r.opts.Done != nil {
			r.opts.Done(f, err, 0)
		}
		return nil, actions.Action{}, false
	}
	if !owner && !r.waitGrace(d, deadline) {
		return nil, actions.Action{}, false
	}
	if r.blackedOut(d, deadline, !owner) {
		return nil, actions.Action{}, false
	}
	rel, ok := r.admit(d, deadline)
	if !ok {
		return nil, actions.Action{}, false
	}
	handed := false
	defer func() {
		if !handed {
			rel()
		}
	}()
	if r.late(d, deadline) {
		r.drop(d, deadline, NotRunStartingDeadline, "fire not started within its starting deadline")
		return nil, actions.Action{}, false
	}
	if r.opts.Store == nil {
		f := r.newFire(d, record.Lease{})
		log := r.log.With("job_id", f.JobID, "scheduled_at", f.Slot, "run_id", f.RunID)
		took, err := r.execute(log, d, spec, f, nil)
		if r.opts.Done != nil {
			r.opts.Done(f, err, took)
		}
		return nil, actions.Action{}, false
	}
	if r.paused(d, deadline, spec) {
		return nil, actions.Action{}, false
	}
	handed = true
	return rel, spec, true
}

// runClaimed runs a fire this replica won the claim of under lease, or
// records it missed when the claim answered past its deadline.
func (r *Runner) runClaimed(d schedule.Due, deadline time.Duration, spec actions.Action, lease record.Lease) {
	if r.retriesLocal(spec) {
		lease.Attempt = 1
	}
	f := r.newFire(d, lease)
	log := r.log.With("job_id", f.JobID, "scheduled_at", f.Slot, "run_id", f.RunID, "fence", f.Fence)
	if r.late(d, deadline) {
		// The claim answered too late: the slot is this replica's, and it
		// is recorded missed instead of run.
		r.missClaimed(log, d, deadline, lease)
		r.drainAfter(f.JobID, spec)
		return
	}
	took, err := r.execute(log, d, spec, f, &lease)
	if r.opts.Done != nil {
		r.opts.Done(f, err, took)
	}
	r.drainAfter(f.JobID, spec)
}

// newFire is what the action is handed for d, run under l (zero without
// a store: a run id of its own, fence 0).
func (r *Runner) newFire(d schedule.Due, l record.Lease) jobs.Run {
	f := jobs.Run{JobID: d.Schedule.ID, Slot: d.Slot.UTC(), RunID: l.RunID, Fence: l.Fence,
		InstanceID: r.opts.InstanceID, Args: json.RawMessage(d.Schedule.Args), Attempt: l.Attempt}
	if f.RunID == "" {
		f.RunID = newRunID() // without a store every fire is a run of its own
	}
	return f
}

// waitGrace holds a fire of a job another replica owns until its grace
// has passed (the owner claims first); false when the runner stopped
// meanwhile (the fire is dropped).
func (r *Runner) waitGrace(d schedule.Due, deadline time.Duration) bool {
	wait := d.At().Add(r.claimGrace(deadline)).Sub(r.clock.Now())
	if wait <= 0 {
		return true
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.stop:
		r.drop(d, deadline, NotRunShuttingDown, "shutting down; fire of a job owned by another replica not claimed")
		return false
	}
}

// claimGrace is how long after a fire is due this replica waits before
// claiming it for another replica that owns the job: ClaimGrace, or
// graceFactor times the claim-latency estimate when that is longer (an
// owner that is merely slow on a slow database claims first; this
// replica's own batches share that database, so its estimate stands for
// the owner's), at most half the fire's starting deadline so that a dead
// owner's fire is still taken over in time.
func (r *Runner) claimGrace(deadline time.Duration) time.Duration {
	est := min(r.latency.estimate(r.clock.Now()), r.opts.OpTimeout)
	return min(max(r.opts.ClaimGrace, graceFactor*est), deadline/2)
}

// admit waits for the gate (the category's and the replica's bounds) at
// most until the fire's starting deadline; false when the fire was
// dropped instead.
func (r *Runner) admit(d schedule.Due, deadline time.Duration) (release func(), ok bool) {
	// Shutdown closes the gate, which wakes every waiter.
	ctx, cancel := context.WithTimeout(context.Background(), d.At().Add(deadline).Sub(r.clock.Now()))
	defer cancel()
	release, err := r.gate.Acquire(ctx, d.Schedule.Category)
	switch {
	case err == nil:
		return release, true
	case errors.Is(err, ErrGateFull):
		r.drop(d, deadline, NotRunQueueFull, "fire not started: the queue of fires waiting for admission is full")
	case errors.Is(err, ErrGateClosed) || r.stopped():
		r.drop(d, deadline, NotRunShuttingDown, "shutting down; waiting fire not started")
	default:
		r.drop(d, deadline, NotRunStartingDeadline, "fire not admitted within its starting deadline")
	}
	return nil, false
}

func (r *Runner) stopped() bool {
	select {
	case <-r.stop:
		return true
	default:
		return false
	}
}

// startingDeadline is how long after d.At() the fire may still start: the
// action's own, else the runner's, else the time to the job's next slot
// capped at MaxDefaultStartingDeadline.
func (r *Runner) startingDeadline(d schedule.Due) time.Duration {
	if spec, ok := r.opts.Registry.Lookup(d.Schedule.ActionName()); ok && spec.StartingDeadline > 0 {
		return spec.StartingDeadline
	}
	if r.opts.StartingDeadline > 0 {
		return r.opts.StartingDeadline
	}
	if r.opts.Slots != nil {
		if next, ok := r.opts.Slots(d.Schedule.ID); ok {
			if n := next(d.Slot); n.After(d.Slot) {
				return min(n.Sub(d.Slot), MaxDefaultStartingDeadline)
			}
		}
	}
	return MaxDefaultStartingDeadline
}

// late reports whether a fire due at d.At() with deadline can no longer
// start now.
func (r *Runner) late(d schedule.Due, deadline time.Duration) bool {
	return r.clock.Now().After(d.At().Add(deadline))
}

// dropReason is the reason a fire stopped by reason is not run:
// starting_deadline once its deadline has passed, whatever else stopped it.
func (r *Runner) dropReason(d schedule.Due, deadline time.Duration, reason string) string {
	if reason != NotRunClaimError && r.late(d, deadline) {
		return NotRunStartingDeadline
	}
	return reason
}

// drop handles a fire that is not run: it is logged (unless msg is empty:
// the caller logged it) and counted with its reason (dropReason), and
// queued to be recorded missed.
func (r *Runner) drop(d schedule.Due, deadline time.Duration, reason, msg string) {
	reason = r.dropReason(d, deadline, reason)
	if msg != "" {
		r.log.Info(msg, "job_id", d.Schedule.ID, "scheduled_at", d.Slot.UTC(), "reason", reason,
			"starting_deadline", deadline)
	}
	r.notRun(d.Schedule.ID, d.Slot, reason)
	if reason == NotRunClaimError {
		return // the database answered and refused: nothing is known about the slot
	}
	r.queueMissed(d.Schedule, d.Delay, record.MissedRange{JobID: d.Schedule.ID, From: d.Slot.UTC(), To: d.Slot.UTC(), Count: 1, Reason: reason})
}

func (r *Runner) notRun(id string, slot time.Time, reason string) {
	if r.opts.Hooks.NotRun != nil {
		r.opts.Hooks.NotRun(id, slot, reason)
	}
}

func (r *Runner) runEnded(id, status string) {
	if r.opts.Hooks.RunEnded != nil {
		r.opts.Hooks.RunEnded(id, status)
	}
}

// opCtx bounds one database operation; it is not tied to the runner's
// context, so ends and records are still written at shutdown.
func (r *Runner) opCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), r.opts.OpTimeout)
}

// execute runs the action with its timeout; with a lease the lease keeper
// renews it while the action runs (cancelling the action if the lock is
// lost or the lease runs out), then the end is written.
func (r *Runner) execute(log *slog.Logger, d schedule.Due, spec actions.Action, f jobs.Run, lease *record.Lease) (time.Duration, error) {
	// The run's time starts before its timeout does, so a run stopped by
	// its timeout never reports a shorter duration than the timeout.
	start := time.Now()
	ctx, cancel := context.WithCancelCause(r.ctx)
	defer cancel(nil)
	if spec.Timeout > 0 {
		var cancelT context.CancelFunc
		ctx, cancelT = context.WithTimeout(ctx, spec.Timeout)
		defer cancelT()
	}
	if lease != nil {
		// A run that takes a while to stop (kill_grace) is cancelled that
		// much before its lease runs out, so it never outlives it.
		r.leases.holdStopping(*lease, cancel, actions.StopGraceOf(spec.Handler))
	}
	startedAt := r.clock.Now()
	if h := r.opts.Hooks.Dispatched; h != nil {
		h(f.JobID, d.At(), r.clock.Now())
	}
	log.Info("run started", "action", d.Schedule.ActionName())
	out, err := runSafely(ctx, spec.Handler, f)
	took := time.Since(start)
	endedAt := r.clock.Now()
	if lease != nil {
		r.leases.forget(lease.RunID)
	}

	status := record.StatusSucceeded
	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, ErrCancelledByOverlap):
		status = record.StatusAbandoned
		err = cause
	case errors.Is(cause, record.ErrLockLost):
		status = record.StatusAbandoned
		if err == nil {
			err = cause
		} else {
			err = fmt.Errorf("%w: %w", cause, err)
		}
	case errors.Is(cause, errShutdown) && err != nil:
		status = record.StatusAbandoned
		err = fmt.Errorf("%w: %w", errShutdown, err)
	case err != nil:
		status = record.StatusFailed
	}
	if lease != nil {
		status = r.finish(log, d, spec, *lease, status, err, out, startedAt, endedAt)
	}
	switch status {
	case record.StatusSucceeded:
		log.Info("run succeeded", "duration", took)
	case record.StatusRetrying: // finish logged it
	default:
		log.Warn("run "+status, "duration", took, "error", err)
	}
	r.runEnded(f.JobID, status)
	return took, err
}

// finish writes the run's end (freeing the lock); it returns the status
// on record: abandoned if another replica had taken the run over.
func (r *Runner) finish(log *slog.Logger, d schedule.Due, spec actions.Action, l record.Lease, status string, runErr error, out actions.Output,
	startedAt, endedAt time.Time) string {
	end := record.RunEnd{Status: status, EndedAt: endedAt, Stdout: out.Stdout, Stderr: out.Stderr, StartedAt: startedAt, ExitCode: out.ExitCode,
		AnswerStatus: out.AnswerStatus, Answer: out.Answer}
	if runErr != nil {
		end.Error = runErr.Error()
	}
	if errors.Is(runErr, ErrCancelledByOverlap) {
		end.Reason = record.ReasonReplaced
	}
	var ee *actions.ExitError
	if errors.As(runErr, &ee) {
		code := ee.Code
		end.ExitCode = &code
		if end.Stderr == "" {
			end.Stderr = ee.Stderr
		}
	}
	r.planRetry(spec, l, &end)
	err := r.ends.submit(record.LeaseEnd{Lease: l, End: end})
	switch {
	case err == nil:
		r.afterEnd(log, d, spec, l, end)
		status = end.Status
	case errors.Is(err, record.ErrLockLost):
		log.Warn("the run had been taken over by another replica; its true end is recorded on the abandoned record",
			"error", err)
		status = record.StatusAbandoned
	default:
		log.Warn("could not record the run's end; trying again until the database answers", "error", err)
		r.leases.retryEnd(record.LeaseEnd{Lease: l, End: end})
	}
	return status
}

// missClaimed records a fire whose claim won too late to start: its
// running record becomes a missed record (starting_deadline) and the lock
// is freed.
func (r *Runner) missClaimed(log *slog.Logger, d schedule.Due, deadline time.Duration, l record.Lease) {
	now := r.clock.Now()
	log.Info("fire not started within its starting deadline; claimed too late", "reason", record.MissedStartingDeadline,
		"starting_deadline", deadline, "late_by", now.Sub(d.At()))
	r.notRun(l.JobID, l.Slot, NotRunStartingDeadline)
	end := record.LeaseEnd{Lease: l, End: record.RunEnd{Status: record.StatusMissed, EndedAt: now, Reason: record.MissedStartingDeadline,
		Error: fmt.Sprintf("not started within its starting deadline (%s)", deadline)}}
	err := r.ends.submit(end)
	switch {
	case errors.Is(err, record.ErrLockLost):
		return // taken over meanwhile: the record says abandoned
	case err != nil:
		log.Warn("could not record the missed slot; trying again until the database answers", "error", err)
		r.leases.retryEnd(end)
		return
	}
	r.reportMissed(record.MissedRange{JobID: l.JobID, From: l.Slot, To: l.Slot, Count: 1, Reason: record.MissedStartingDeadline})
}

// endBatch writes a batch of ends.
func (r *Runner) endBatch(ends []record.LeaseEnd) []error {
	ctx, cancel := r.opCtx()
	defer cancel()
	return r.opts.Store.EndBatch(ctx, ends)
}

// runSafely runs the action, with its output when it reports one, and
// turns a panic into an error.
func runSafely(ctx context.Context, a jobs.Handler, f jobs.Run) (out actions.Output, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("action panicked: %v", p)
		}
	}()
	if oa, ok := a.(actions.OutputHandler); ok {
		return oa.HandleOutput(ctx, f)
	}
	return actions.Output{}, a.Handle(ctx, f)
}

// abandonAfterCancel bounds the wait for actions that ignore cancellation
// (a Go function that never looks at its context), so shutdown always ends.
const abandonAfterCancel = 10 * time.Second

// Shutdown stops taking fires (waiting ones are dropped) and waits for
// running actions; after grace it cancels them and waits for them to return
// (at most abandonAfterCancel). Each run frees its lock and records its
// end before Shutdown returns. It reports whether every action ended within
// the grace period.
func (r *Runner) Shutdown(grace time.Duration) bool {
	r.mu.Lock()
	r.stopping = true
	r.mu.Unlock()
	r.stopOnce.Do(func() { close(r.stop) })
	r.gate.Close()
	done := make(chan struct{})
	go func() { r.running.Wait(); close(done) }()
	t := time.NewTimer(grace)
	defer t.Stop()
	defer r.stopFlushing()
	defer r.leases.close()
	defer r.retries.close()
	select {
	case <-done:
		r.cancel(errShutdown)
		return true
	case <-t.C:
		r.log.Warn("grace period over; cancelling running actions", "grace", grace)
		r.cancel(errShutdown)
		select {
		case <-done:
		case <-time.After(abandonAfterCancel):
			r.log.Error("actions ignored cancellation; leaving them behind", "waited", abandonAfterCancel)
		}
		return false
	}
}

func newRunID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// newIncarnation returns a random name for this process's life.
func newIncarnation() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
