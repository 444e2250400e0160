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

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/cronswap/cronswap/internal/actions"
	"github.com/cronswap/cronswap/internal/batch"
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

	claims *batch.Batcher[claimRequest, record.ClaimOutcome]
	ends   *batch.Batcher[record.LeaseEnd, error]
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
	// stalls tells when this process stalled (stallWatch).
	stalls stalls
	watch  *stallWatch
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
		ctx:  ctx, cancel: cancel, stop: make(chan struct{}), watch: newStallWatch()}
	r.stalls = r.watch
	if opts.Store != nil {
		r.claims = batch.New(claimBatchMax, claimBatchesAtOnce, r.claimBatch)
		r.ends = batch.New(endBatchMax, endBatchesAtOnce, r.endBatch)
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
func (r *Runner) Fire(d schedule.Due) { r.startWait(r.slotFire(d, r.startingDeadline(d))) }

// Submit handles a fire as Fire does, but returns once the fire waits for
// its claim batch (or was handled without one): it is the scheduler's fire
// callback, which runs on a goroutine of its own, and a fire waiting for a
// claim then holds no goroutine — under a backlog the queue costs its
// entries (bounded by QueueLimit), not a goroutine stack each. Shutdown
// waits for submitted fires as for any other.
func (r *Runner) Submit(d schedule.Due) { r.start(r.slotFire(d, r.startingDeadline(d))) }

// FireCatchUp is Fire for a slot offered by the catch-up after downtime:
// the fire may start up to window after it was due (or its starting
// deadline, when that is longer).
func (r *Runner) FireCatchUp(d schedule.Due, window time.Duration) {
	r.startWait(r.slotFire(d, max(window, r.startingDeadline(d))))
}

// Offer is FireCatchUp for a slot a hand-over offers, returning once the
// fire's claim is answered (or the fire ended without one) rather than
// when its run ends: offering a job's older slots one after the other,
// oldest first, each is claimed before the next, as the claim takes no
// slot older than one claimed. A slot a later one overtook all the same
// (claimed first by this replica's engine, or another's) is recorded
// missed, record.MissedHandOver, not skipped: no replica had the job
// armed when it was due.
func (r *Runner) Offer(d schedule.Due, window time.Duration) {
	f := r.slotFire(d, max(window, r.startingDeadline(d)))
	f.overtaken = record.MissedHandOver
	answered := make(chan struct{})
	var once sync.Once
	f.answered = func() { once.Do(func() { close(answered) }) }
	f.done = f.answered
	r.start(f)
	<-answered
}

// newRun is what the action is handed for due, run under l (zero without
// a store: a run id of its own, fence 0).
func (r *Runner) newRun(d schedule.Due, l record.Lease) jobs.Run {
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
func (r *Runner) waitGrace(f *fire) bool {
	wait := f.due.At().Add(r.claimGrace(f.deadline)).Sub(r.clock.Now())
	if wait <= 0 {
		return true
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.stop:
		r.notStarted(f, NotRunShuttingDown, "shutting down; fire of a job owned by another replica not claimed")
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

// late reports whether f can no longer start now (past its starting
// deadline; a fire without one is never late).
func (r *Runner) late(f *fire) bool {
	return !f.startBy.IsZero() && r.clock.Now().After(f.startBy)
}

// dropReason is the reason f, stopped by reason, is not run:
// starting_deadline once its deadline has passed, whatever else stopped
// it.
func (r *Runner) dropReason(f *fire, reason string) string {
	if reason != NotRunClaimError && r.late(f) {
		return NotRunStartingDeadline
	}
	return reason
}

// drop handles a slot that is not run: it is logged (unless msg is empty:
// the caller logged it) and counted with its reason (dropReason), and
// queued to be recorded missed.
func (r *Runner) drop(f *fire, reason, msg string) {
	reason = r.dropReason(f, reason)
	if msg != "" {
		r.log.Info(msg, "job_id", f.jobID(), "scheduled_at", f.due.Slot.UTC(), "reason", reason,
			"starting_deadline", f.deadline)
	}
	r.notRun(f.jobID(), f.due.Slot, reason)
	if reason == NotRunClaimError {
		return // the database answered and refused: nothing is known about the slot
	}
	r.missSlot(f, reason)
}

func (r *Runner) notRun(id string, slot time.Time, reason string) {
	if r.opts.Hooks.NotRun != nil {
		r.opts.Hooks.NotRun(id, slot, reason)
	}
}

// skipped ends a fire of job id recorded skipped for reason (SkipReasons).
func (r *Runner) skipped(id, reason string) {
	r.runEnded(id, record.StatusSkipped)
	if r.opts.Hooks.Skipped != nil {
		r.opts.Hooks.Skipped(id, reason)
	}
}

func (r *Runner) runEnded(id, status string) {
	if r.opts.Hooks.RunEnded != nil {
		r.opts.Hooks.RunEnded(id, status)
	}
}

// missSlot queues f's slot to be recorded missed for reason once no
// replica can start it any more.
func (r *Runner) missSlot(f *fire, reason string) {
	slot := f.due.Slot.UTC()
	r.queueMissed(f.due.Schedule, f.due.Delay, record.MissedRange{JobID: f.jobID(), From: slot, To: slot, Count: 1, Reason: reason})
}

// opCtx bounds one database operation; it is not tied to the runner's
// context, so ends and records are still written at shutdown.
func (r *Runner) opCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), r.opts.OpTimeout)
}

// execute runs f's action on run with its timeout; with a lease the lease
// keeper renews it while the action runs (cancelling the action if the
// lock is lost or the lease runs out), then the end is written. The
// action's context holds the schedule the fire carries (ScheduleOf).
func (r *Runner) execute(log *slog.Logger, f *fire, run jobs.Run, lease *record.Lease) (time.Duration, error) {
	spec := f.action
	// The run's time starts before its timeout does, so a run stopped by
	// its timeout never reports a shorter duration than the timeout.
	start := time.Now()
	ctx, cancel := context.WithCancelCause(context.WithValue(r.ctx, scheduleKey{}, f.due.Schedule))
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
	// The action runs in the run's span: an exec program, an http
	// request and a Go handler are handed its context.
	span := r.childSpan(f, SpanRun)
	if span != nil {
		span.SetAttributes(attribute.String("cronswap.run_id", run.RunID), attribute.Int64("cronswap.fence", run.Fence))
		ctx = trace.ContextWithSpan(ctx, span)
	}
	startedAt := r.clock.Now()
	if h := r.opts.Hooks.Dispatched; h != nil {
		h(ctx, run.JobID, f.due.Schedule.Category, f.due.At(), r.clock.Now())
	}
	log.Info("run started", "action", f.due.Schedule.ActionName())
	out, err := runSafely(ctx, spec.Handler, run)
	took := time.Since(start)
	end := r.endSeen(startedAt)
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
	if span != nil {
		span.SetAttributes(attribute.String("cronswap.status", status))
		endSpan(span, err)
	}
	if lease != nil {
		end.Status = status
		status = r.finish(log, f, end, err, out)
	}
	switch status {
	case record.StatusSucceeded:
		log.Info("run succeeded", "duration", took)
	case record.StatusRetrying: // finish logged it
	default:
		log.Warn("run "+status, "duration", took, "error", err)
	}
	r.runEnded(run.JobID, status)
	return took, err
}

// scheduleKey is the context key of the schedule a fire carries.
type scheduleKey struct{}

// ScheduleOf returns the schedule the fire whose action ctx belongs to
// came due under (as it was armed when its slot came due; for a buffered
// fire or a retry attempt, as its record kept it): every field of it, on
// every kind of fire. False outside an action's context.
func ScheduleOf(ctx context.Context) (schedule.Schedule, bool) {
	s, ok := ctx.Value(scheduleKey{}).(schedule.Schedule)
	return s, ok
}

// finish writes the end of f's run (freeing the lock): end holds its
// status and times, runErr and out what the action returned. It returns
// the status on record: abandoned if another replica had taken the run
// over.
func (r *Runner) finish(log *slog.Logger, f *fire, end record.RunEnd, runErr error, out actions.Output) string {
	l := f.lease
	end.Stdout, end.Stderr, end.ExitCode = out.Stdout, out.Stderr, out.ExitCode
	end.AnswerStatus, end.Answer = out.AnswerStatus, out.Answer
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
	r.planRetry(f, &end)
	if end.Observed {
		log.Warn("the run's end was observed after this process stalled; recorded with when it was observed and the bound",
			"ended_after", end.After, "observed_at", end.EndedAt)
	}
	status := end.Status
	c := f.carrier()
	end.TraceParent, end.TraceState = c.TraceParent, c.TraceState
	span := r.childSpan(f, SpanEnd)
	err := r.endInBatch(record.LeaseEnd{Lease: l, End: end})
	endSpan(span, err)
	switch {
	case err == nil:
		r.afterEnd(log, f, end)
		status = end.Status
	case errors.Is(err, record.ErrLockLost):
		log.Warn("the run had been taken over; its true end is recorded on the abandoned record, if it is still its own",
			"error", err)
		status = record.StatusAbandoned
	default:
		log.Warn("could not record the run's end; trying again until the database answers", "error", err)
		r.leases.retryEnd(record.LeaseEnd{Lease: l, End: end})
	}
	return status
}

// missClaimed records f, which holds its claim but is not started, missed
// for reason (why on its record): its record becomes a missed record of
// its slot and the lock is freed.
func (r *Runner) missClaimed(f *fire, reason, why string) {
	l := f.lease
	r.notRun(l.JobID, l.Slot, reason)
	f.tell(OffScheduleResult{Status: record.StatusMissed, NotRun: reason, Error: why, Lease: l})
	c := f.carrier()
	end := record.LeaseEnd{Lease: l, End: record.RunEnd{Status: record.StatusMissed, EndedAt: r.clock.Now(), Reason: reason,
		Error: why, TraceParent: c.TraceParent, TraceState: c.TraceState}}
	err := r.endInBatch(end)
	switch {
	case errors.Is(err, record.ErrLockLost):
		// Taken over meanwhile: the record says abandoned.
	case err != nil:
		f.logger(r.log).Warn("could not record the missed slot; trying again until the database answers", "error", err)
		r.leases.retryEnd(end)
	default:
		r.reportMissed(record.MissedRange{JobID: l.JobID, From: l.Slot, To: l.Slot, Count: 1, Reason: reason})
	}
	r.report(f)
}

// endBatch writes a batch of ends.
// endInBatch writes end in the next end batch and returns what the store
// answered for it. Its wait is bounded by the batch, not by a context: a
// batch is given the operation timeout (endBatch), and a run's end is
// written however the rest of the runner is ending.
func (r *Runner) endInBatch(end record.LeaseEnd) error {
	err, _ := r.ends.Submit(context.Background(), end) // a Background wait never ends early
	return err
}

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
	defer r.watch.close()
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
