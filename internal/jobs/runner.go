package jobs

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

	"github.com/cronswap/cronswap/schedule"
)

// Hooks report what the fire path does, for metrics. Any may be nil. They
// are called synchronously and must be quick.
type Hooks struct {
	// Dispatched is called when a fire's action starts (after its claim),
	// with when the fire was due (its slot plus its planned jitter,
	// schedule.Due.At) and the time; at minus due is the fire's start
	// lateness.
	Dispatched func(jobID string, due, at time.Time)
	// Claimed is called after each claim with its result (ClaimResult's
	// String, or "error").
	Claimed func(jobID string, result string)
	// ClaimBatch is called after each claim batch with the number of fires
	// it claimed together and how long the store took to answer.
	ClaimBatch func(size int, took time.Duration)
	// OwnerTakeover is called when this replica won a fire of a job it
	// does not own (its owner had not claimed it within the grace).
	OwnerTakeover func(jobID string)
	// RunEnded is called when a fire ends with a run status (succeeded,
	// failed, abandoned, skipped).
	RunEnded func(jobID, status string)
	// NotRun is called for a fire that was not run for a reason other than
	// another replica having it: "database_unreachable", "claim_error",
	// "shutting_down", "starting_deadline", "queue_full".
	NotRun func(jobID string, slot time.Time, reason string)
	// Missed is called for each missed record this replica wrote, with
	// the number of slots it covers.
	Missed func(jobID, reason string, slots int64)
}

// Reasons a fire was not run, as passed to Hooks.NotRun. Those that are
// also reasons of missed records are the same strings.
const (
	NotRunUnreachable      = MissedUnreachable
	NotRunClaimError       = "claim_error"
	NotRunShuttingDown     = MissedShuttingDown
	NotRunStartingDeadline = MissedStartingDeadline
	NotRunQueueFull        = MissedQueueFull
)

// Defaults of RunnerOptions: what a zero field means.
const (
	// DefaultLockTTL is the lock lease.
	DefaultLockTTL = 10 * time.Minute
	// DefaultOpTimeout bounds each database operation of the fire path.
	DefaultOpTimeout = 10 * time.Second
	// DefaultQueueLimit bounds the fires waiting for admission (a
	// category's max_running or the workers bound). A fire that comes due
	// while the queue is full is not run and recorded missed (queue_full).
	// The starting deadline keeps the queue short in practice; the bound
	// caps memory when it cannot.
	DefaultQueueLimit = 100_000
	// MaxDefaultStartingDeadline caps the default starting deadline, which
	// is otherwise the time to the job's next slot: an every-second job
	// gets 1 s, an hourly or daily one 5 minutes — room for a database
	// failover or a short outage, not for a run hours late.
	MaxDefaultStartingDeadline = 5 * time.Minute
	// DefaultClaimRetry is the first wait before a claim that could not
	// reach the database is tried again (the daemon's setting of
	// RunnerOptions.ClaimRetry).
	DefaultClaimRetry = time.Second
	// DefaultMissedBacklog bounds the missed ranges waiting to be recorded
	// (see Runner.RecordMissed).
	DefaultMissedBacklog = 10_000
	// DefaultClaimGrace is how long after a fire was due a replica that
	// does not own the job waits before it claims the fire itself (the
	// owner dead or stalled). It is capped at half the fire's starting
	// deadline, so an every-second job's fire is still taken over in time.
	DefaultClaimGrace = 2 * time.Second
)

// Batching of the fire path's requests: a batch takes every request that
// arrived while earlier batches were out, up to the maximum; a few batches
// are out at once.
const (
	claimBatchMax      = 1000
	claimBatchesAtOnce = 4
	endBatchMax        = 1000
	endBatchesAtOnce   = 2
)

// missedMargin is added to a slot's starting deadline before it is
// recorded missed: another replica's clock may run this far behind and
// still start the fire within its deadline by its own clock.
const missedMargin = time.Second

// missedFlushAtShutdown bounds how long Shutdown waits for missed slots
// to become recordable (their deadline to pass) before the process exits.
const missedFlushAtShutdown = 5 * time.Second

// RunnerOptions configures a Runner. A zero field means its default.
type RunnerOptions struct {
	Registry   *Registry
	InstanceID string
	// Incarnation names this process among the lives of InstanceID (the
	// membership's); a lock held by InstanceID under another incarnation
	// is taken over at once. Default: a random one per Runner.
	Incarnation string
	Logger      *slog.Logger
	// Done, if set, is called after each run with its outcome.
	Done func(f Fire, err error, took time.Duration)

	// Store coordinates replicas through job_locks and job_runs. Nil runs
	// every fire without locks or records (one process, tests, embedding).
	Store BatchStore
	// Clock gives "now" for leases and run times; default SystemClock.
	Clock Clock
	// TTL is the lock lease (config lock.ttl); every running lease of the
	// replica is renewed every TTL/3. Default DefaultLockTTL.
	TTL time.Duration
	// Workers, when positive, bounds how many actions run at once on this
	// replica (config workers); waiting fires are admitted round-robin by
	// category. 0: no bound.
	Workers int
	// Categories bounds how many actions of a category run at once on
	// this replica (config categories.<name>.max_running).
	Categories map[string]int
	// OpTimeout bounds each database operation of the fire path; default
	// DefaultOpTimeout.
	OpTimeout time.Duration
	Hooks     Hooks

	// QueueLimit bounds the fires waiting for admission (config
	// queue_limit); default DefaultQueueLimit.
	QueueLimit int
	// StartingDeadline is how long after it was due (slot plus jitter) a
	// fire may still start, for actions without their own
	// (Spec.StartingDeadline); config starting_deadline. 0 means the time
	// from the slot to the job's next slot, at most
	// MaxDefaultStartingDeadline (that cap when Slots is nil).
	StartingDeadline time.Duration
	// Slots gives the slot sequence of an armed job (the engine's); nil
	// when there is none to ask.
	Slots func(jobID string) (NextFunc, bool)
	// CatchupWindow gives the catch-up window of an action (0: none): a
	// catch-up fire (FireCatchUp) may start that late, so a slot is not
	// recorded missed before its window has passed either.
	CatchupWindow func(action string) time.Duration
	// ClaimRetry is the first wait before a claim that could not reach the
	// database is tried again, doubling up to OpTimeout, as long as the
	// next try can still start the fire within its starting deadline.
	// 0 means no retry.
	ClaimRetry time.Duration
	// MissedBacklog bounds the missed ranges waiting to be recorded;
	// default DefaultMissedBacklog.
	MissedBacklog int

	// Owns reports whether this replica owns a job (members.Owner over the
	// live members): the owner claims a fire as soon as it is due, any
	// other replica only after ClaimGrace. Nil: every job is owned.
	// Ownership spreads the work; exactly-once does not depend on it.
	Owns func(jobID string) bool
	// ClaimGrace is how long a replica that does not own a job waits
	// before claiming its fire; default DefaultClaimGrace. On a slow
	// database the wait is longer: twice the claim-latency estimate
	// (Runner.claimGrace).
	ClaimGrace time.Duration
	// Blackout reports the blackout window, if any, that a fire of job
	// jobID (of category) at slot falls in: such a fire is not run, and
	// its slot is recorded skipped with the window's id and reason. Nil:
	// no blackouts.
	Blackout func(jobID, category string, slot time.Time) (Blackout, bool)

	// Lookup gives the armed schedule of a job (the engine's), so that a
	// retry another replica left pending can be run here; nil: only this
	// replica's own failed attempts are retried here.
	Lookup func(jobID string) (schedule.Schedule, bool)
	// RetryPoll is how often the replica looks for retries whose writer
	// did not take them; default the sweep's interval (a third of TTL,
	// 5 s to a minute). Only with actions that retry.
	RetryPoll time.Duration
	// Requests, if set, is told of the off-schedule runs (run-now
	// requests) this replica takes from a lock's buffer and runs, so that
	// the request learns their outcome whichever replica buffered it.
	Requests RequestReporter
}

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

	claims *batcher[claimRequest, ClaimOutcome]
	ends   *batcher[LeaseEnd, error]
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
	// writes them (nil without a MissedStore).
	missed      *ledger
	missedStore MissedStore
	flushMu     sync.Mutex
	flushOnce   sync.Once
	flushStop   chan struct{}
	flushDone   chan struct{}
	// dbAnswered is set by a claim that reached the database, so that the
	// flusher tries again at once instead of waiting out its backoff.
	dbAnswered atomic.Bool

	// retries runs further attempts of failed runs (nil: no action
	// retries, or the store cannot); pauses pauses jobs after failures
	// (nil: the store cannot).
	retries *retrier
	pauses  PauseStore
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
	if rs, ok := opts.Store.(RetryStore); ok && opts.Registry != nil && opts.Registry.anyRetries() {
		if opts.RetryPoll <= 0 {
			opts.RetryPoll = sweepInterval(opts.TTL)
		}
		r.retries = newRetrier(r, rs, opts.RetryPoll)
	}
	if ps, ok := opts.Store.(PauseStore); ok {
		r.pauses = ps
	}
	if ms, ok := opts.Store.(MissedStore); ok {
		r.missedStore = ms
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
	r.claim(d, deadline, spec, !owner, func(lease Lease, won bool) {
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
func (r *Runner) beforeClaim(d schedule.Due, deadline time.Duration, owner bool) (release func(), spec Spec, ok bool) {
	spec, ok = r.opts.Registry.Lookup(d.Schedule.ActionName())
	if !ok {
		f := r.newFire(d, Lease{})
		err := fmt.Errorf("job %s: %w %q", d.Schedule.ID, ErrUnknownAction, d.Schedule.ActionName())
		r.log.Error("fire names an unknown action", "job_id", d.Schedule.ID, "scheduled_at", d.Slot.UTC(),
			"action", d.Schedule.ActionName())
		if r.opts.Done != nil {
			r.opts.Done(f, err, 0)
		}
		return nil, Spec{}, false
	}
	if !owner && !r.waitGrace(d, deadline) {
		return nil, Spec{}, false
	}
	if r.blackedOut(d, deadline, !owner) {
		return nil, Spec{}, false
	}
	rel, ok := r.admit(d, deadline)
	if !ok {
		return nil, Spec{}, false
	}
	handed := false
	defer func() {
		if !handed {
			rel()
		}
	}()
	if r.late(d, deadline) {
		r.drop(d, deadline, NotRunStartingDeadline, "fire not started within its starting deadline")
		return nil, Spec{}, false
	}
	if r.opts.Store == nil {
		f := r.newFire(d, Lease{})
		log := r.log.With("job_id", f.JobID, "scheduled_at", f.ScheduledAt, "run_id", f.RunID)
		took, err := r.execute(log, d, spec, f, nil)
		if r.opts.Done != nil {
			r.opts.Done(f, err, took)
		}
		return nil, Spec{}, false
	}
	if r.paused(d, deadline, spec) {
		return nil, Spec{}, false
	}
	handed = true
	return rel, spec, true
}

// runClaimed runs a fire this replica won the claim of under lease, or
// records it missed when the claim answered past its deadline.
func (r *Runner) runClaimed(d schedule.Due, deadline time.Duration, spec Spec, lease Lease) {
	if r.retriesLocal(spec) {
		lease.Attempt = 1
	}
	f := r.newFire(d, lease)
	log := r.log.With("job_id", f.JobID, "scheduled_at", f.ScheduledAt, "run_id", f.RunID, "fence", f.Fence)
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
func (r *Runner) newFire(d schedule.Due, l Lease) Fire {
	f := Fire{JobID: d.Schedule.ID, ScheduledAt: d.Slot.UTC(), RunID: l.RunID, Fence: l.Fence,
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
	r.queueMissed(d.Schedule, d.Delay, MissedRange{JobID: d.Schedule.ID, From: d.Slot.UTC(), To: d.Slot.UTC(), Count: 1, Reason: reason})
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
func (r *Runner) execute(log *slog.Logger, d schedule.Due, spec Spec, f Fire, lease *Lease) (time.Duration, error) {
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
		r.leases.hold(*lease, cancel)
	}
	startedAt := r.clock.Now()
	if h := r.opts.Hooks.Dispatched; h != nil {
		h(f.JobID, d.At(), r.clock.Now())
	}
	log.Info("run started", "action", d.Schedule.ActionName())
	out, err := runSafely(ctx, spec.Action, f)
	took := time.Since(start)
	endedAt := r.clock.Now()
	if lease != nil {
		r.leases.forget(lease.RunID)
	}

	status := StatusSucceeded
	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, ErrCancelledByOverlap):
		status = StatusAbandoned
		err = cause
	case errors.Is(cause, ErrLockLost):
		status = StatusAbandoned
		if err == nil {
			err = cause
		} else {
			err = fmt.Errorf("%w: %w", cause, err)
		}
	case errors.Is(cause, errShutdown) && err != nil:
		status = StatusAbandoned
		err = fmt.Errorf("%w: %w", errShutdown, err)
	case err != nil:
		status = StatusFailed
	}
	if lease != nil {
		status = r.finish(log, d, spec, *lease, status, err, out, startedAt, endedAt)
	}
	switch status {
	case StatusSucceeded:
		log.Info("run succeeded", "duration", took)
	case StatusRetrying: // finish logged it
	default:
		log.Warn("run "+status, "duration", took, "error", err)
	}
	r.runEnded(f.JobID, status)
	return took, err
}

// finish writes the run's end (freeing the lock); it returns the status
// on record: abandoned if another replica had taken the run over.
func (r *Runner) finish(log *slog.Logger, d schedule.Due, spec Spec, l Lease, status string, runErr error, out Output,
	startedAt, endedAt time.Time) string {
	end := RunEnd{Status: status, EndedAt: endedAt, Output: out, StartedAt: startedAt, ExitCode: out.ExitCode}
	if runErr != nil {
		end.Error = runErr.Error()
	}
	if errors.Is(runErr, ErrCancelledByOverlap) {
		end.Reason = ReasonReplaced
	}
	var ee *ExitError
	if errors.As(runErr, &ee) {
		code := ee.Code
		end.ExitCode = &code
		if end.Output.Stderr == "" {
			end.Output.Stderr = ee.Stderr
		}
	}
	r.planRetry(spec, l, &end)
	err := r.ends.submit(LeaseEnd{Lease: l, End: end})
	switch {
	case err == nil:
		r.afterEnd(log, d, spec, l, end)
		status = end.Status
	case errors.Is(err, ErrLockLost):
		log.Warn("the run had been taken over by another replica; its true end is recorded on the abandoned record",
			"error", err)
		status = StatusAbandoned
	default:
		log.Warn("could not record the run's end; trying again until the database answers", "error", err)
		r.leases.retryEnd(LeaseEnd{Lease: l, End: end})
	}
	return status
}

// missClaimed records a fire whose claim won too late to start: its
// running record becomes a missed record (starting_deadline) and the lock
// is freed.
func (r *Runner) missClaimed(log *slog.Logger, d schedule.Due, deadline time.Duration, l Lease) {
	now := r.clock.Now()
	log.Info("fire not started within its starting deadline; claimed too late", "reason", MissedStartingDeadline,
		"starting_deadline", deadline, "late_by", now.Sub(d.At()))
	r.notRun(l.JobID, l.Slot, NotRunStartingDeadline)
	end := LeaseEnd{Lease: l, End: RunEnd{Status: StatusMissed, EndedAt: now, Reason: MissedStartingDeadline,
		Error: fmt.Sprintf("not started within its starting deadline (%s)", deadline)}}
	err := r.ends.submit(end)
	switch {
	case errors.Is(err, ErrLockLost):
		return // taken over meanwhile: the record says abandoned
	case err != nil:
		log.Warn("could not record the missed slot; trying again until the database answers", "error", err)
		r.leases.retryEnd(end)
		return
	}
	r.reportMissed(MissedRange{JobID: l.JobID, From: l.Slot, To: l.Slot, Count: 1, Reason: MissedStartingDeadline})
}

// endBatch writes a batch of ends.
func (r *Runner) endBatch(ends []LeaseEnd) []error {
	ctx, cancel := r.opCtx()
	defer cancel()
	return r.opts.Store.EndBatch(ctx, ends)
}

// runSafely runs the action, with its output when it reports one, and
// turns a panic into an error.
func runSafely(ctx context.Context, a Action, f Fire) (out Output, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("action panicked: %v", p)
		}
	}()
	if oa, ok := a.(OutputAction); ok {
		return oa.RunOutput(ctx, f)
	}
	return Output{}, a.Run(ctx, f)
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
