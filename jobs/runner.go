package jobs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cronswap/cronswap/schedule"
)

// Hooks report what the fire path does, for metrics. Any may be nil. They
// are called synchronously and must be quick.
type Hooks struct {
	// Dispatched is called when a worker picks a fire up, with when the
	// fire was due (its slot plus its planned jitter, schedule.Due.At) and
	// the time; at minus due is the fire's lateness.
	Dispatched func(jobID string, due, at time.Time)
	// Claimed is called after each claim with its result (ClaimResult's
	// String, or "error").
	Claimed func(jobID string, result string)
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
	// DefaultWorkersPerCPU is the worker pool's size per CPU: most actions
	// wait on I/O or a child process.
	DefaultWorkersPerCPU = 4
	// DefaultQueueLimit bounds the fires waiting for a worker. A fire that
	// comes due while the queue is full is not run and recorded missed
	// (queue_full). The starting deadline keeps the queue short in
	// practice; the bound caps memory when it cannot.
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
)

// missedMargin is added to a slot's starting deadline before it is
// recorded missed: another replica's clock may run this far behind and
// still start the fire within its deadline by its own clock.
const missedMargin = time.Second

// missedFlushAtShutdown bounds how long Shutdown waits for missed slots
// to become recordable (their deadline to pass) before the process exits.
const missedFlushAtShutdown = 5 * time.Second

// DefaultWorkers is the worker pool's size when RunnerOptions.Workers is
// 0: DefaultWorkersPerCPU per CPU.
func DefaultWorkers() int { return DefaultWorkersPerCPU * runtime.NumCPU() }

// RunnerOptions configures a Runner. A zero field means its default.
type RunnerOptions struct {
	Registry   *Registry
	InstanceID string
	Logger     *slog.Logger
	// Done, if set, is called after each run with its outcome.
	Done func(f Fire, err error, took time.Duration)

	// Store coordinates replicas through job_locks and job_runs. Nil runs
	// every fire without locks or records (one process, tests, embedding).
	Store LockStore
	// Clock gives "now" for leases and run times; default SystemClock.
	Clock Clock
	// TTL is the lock lease (config lock.ttl); renewed every TTL/3 while an
	// action runs. Default DefaultLockTTL.
	TTL time.Duration
	// Workers bounds how many fires run at once (config workers); default
	// DefaultWorkers().
	Workers int
	// OpTimeout bounds each database operation of the fire path; default
	// DefaultOpTimeout.
	OpTimeout time.Duration
	Hooks     Hooks

	// QueueLimit bounds the fires waiting for a worker (config
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
}

// Runner executes fires. With a Store, each fire of (job, slot) runs at most
// once across all replicas sharing the database: a worker passes the
// in-process guard, claims the fire with one conditional update, runs the
// action while renewing the lease, releases fenced by holder and fence,
// and records the run. Shutdown stops it taking fires and waits for
// running actions.
type Runner struct {
	opts   RunnerOptions
	log    *slog.Logger
	clock  Clock
	pool   *Pool
	guard  *keyGuard
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	stopping bool
	running  sync.WaitGroup

	activeMu sync.Mutex
	active   map[string]struct{} // run ids of this process's claims and runs in progress

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
	if opts.Workers <= 0 {
		opts.Workers = DefaultWorkers()
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
	ctx, cancel := context.WithCancelCause(context.Background())
	r := &Runner{opts: opts, log: opts.Logger, clock: opts.Clock, pool: NewBoundedPool(opts.Workers, opts.QueueLimit),
		guard: newKeyGuard(), ctx: ctx, cancel: cancel, active: map[string]struct{}{}}
	if ms, ok := opts.Store.(MissedStore); ok {
		r.missedStore = ms
		r.missed = newLedger(opts.MissedBacklog)
		r.flushStop, r.flushDone = make(chan struct{}), make(chan struct{})
		go r.flushLoop()
	}
	return r
}

// Fire handles one fire of an armed schedule and returns when it is done
// (run, skipped, lost to another replica, or dropped at shutdown). The
// schedule names the action, its args and its dispatch category. It is the
// scheduler's fire callback, which runs on a goroutine of its own; the
// worker pool bounds how many fires run at once.
func (r *Runner) Fire(d schedule.Due) { r.dispatch(d, r.startingDeadline(d)) }

// FireCatchUp is Fire for a slot offered by the catch-up after downtime:
// the fire may start up to window after it was due (or its starting
// deadline, when that is longer).
func (r *Runner) FireCatchUp(d schedule.Due, window time.Duration) {
	r.dispatch(d, max(window, r.startingDeadline(d)))
}

// dispatch queues the fire for a worker; deadline is how long after
// d.At() it may still start.
func (r *Runner) dispatch(d schedule.Due, deadline time.Duration) {
	r.mu.Lock()
	if r.stopping {
		r.mu.Unlock()
		r.drop(d, deadline, NotRunShuttingDown, "shutting down; fire not started")
		return
	}
	r.running.Add(1)
	r.mu.Unlock()
	defer r.running.Done()

	done := make(chan struct{})
	err := r.pool.Offer(d.Schedule.Category,
		func() { defer close(done); r.fire(d, deadline) },
		func() {
			defer close(done)
			r.drop(d, deadline, NotRunShuttingDown, "shutting down; queued fire not started")
		})
	switch {
	case errors.Is(err, ErrPoolFull):
		r.drop(d, deadline, NotRunQueueFull, "fire not started: the queue of fires waiting for a worker is full")
		return
	case err != nil:
		r.drop(d, deadline, NotRunShuttingDown, "shutting down; fire not started")
		return
	}
	<-done
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
// context, so releases and records still happen at shutdown.
func (r *Runner) opCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), r.opts.OpTimeout)
}

// fire runs on a worker.
func (r *Runner) fire(d schedule.Due, deadline time.Duration) {
	id, slot, action := d.Schedule.ID, d.Slot.UTC(), d.Schedule.ActionName()
	if h := r.opts.Hooks.Dispatched; h != nil {
		h(id, d.At(), r.clock.Now())
	}
	if r.late(d, deadline) {
		r.drop(d, deadline, NotRunStartingDeadline, "fire not started within its starting deadline")
		return
	}
	f := Fire{JobID: id, ScheduledAt: slot, RunID: newRunID(), InstanceID: r.opts.InstanceID,
		Args: json.RawMessage(d.Schedule.Args)}
	log := r.log.With("job_id", id, "scheduled_at", slot, "run_id", f.RunID)
	spec, ok := r.opts.Registry.Lookup(action)
	if !ok {
		err := fmt.Errorf("job %s: %w %q", id, ErrUnknownAction, action)
		log.Error("fire names an unknown action", "action", action)
		if r.opts.Done != nil {
			r.opts.Done(f, err, 0)
		}
		return
	}
	if r.opts.Store == nil {
		took, err := r.execute(log, action, spec, f, nil)
		if r.opts.Done != nil {
			r.opts.Done(f, err, took)
		}
		return
	}
	lease, ok := r.claim(log, d, deadline, f, spec)
	if !ok {
		return
	}
	f.Fence = lease.Fence
	log = log.With("fence", lease.Fence)
	if r.late(d, deadline) {
		// The claim answered too late: the slot is this replica's, and it
		// is recorded missed instead of run.
		r.missClaimed(log, d, deadline, lease)
		return
	}
	took, err := r.execute(log, action, spec, f, &lease)
	if r.opts.Done != nil {
		r.opts.Done(f, err, took)
	}
}

// claim takes the fire through the in-process guard and the store. It
// returns the lease when this replica is to run the fire and its running
// record is written. A claim that cannot reach the database is tried again
// (RunnerOptions.ClaimRetry) while the fire can still start in time.
func (r *Runner) claim(log *slog.Logger, d schedule.Due, deadline time.Duration, f Fire, spec Spec) (Lease, bool) {
	req := ClaimRequest{JobID: f.JobID, Slot: f.ScheduledAt, Instance: r.opts.InstanceID, RunID: f.RunID,
		Overlap: spec.Overlap, TTL: r.opts.TTL}
	req.Running = r.isActive
	r.setActive(f.RunID, true)
	won := false
	defer func() {
		if !won {
			r.setActive(f.RunID, false)
		}
	}()
	var c Claim
	var err error
	retried := false
	for wait := r.opts.ClaimRetry; ; wait = min(2*wait, r.opts.OpTimeout) {
		actx, acancel := r.opCtx()
		r.guard.lock(f.JobID)
		req.Now = r.clock.Now()
		c, err = r.opts.Store.Claim(actx, req)
		r.guard.unlock(f.JobID)
		acancel()
		if h := r.opts.Hooks.Claimed; h != nil {
			if err != nil {
				h(f.JobID, "error")
			} else {
				h(f.JobID, c.Result.String())
			}
		}
		if err == nil {
			r.dbAnswered.Store(true)
		}
		if err == nil || !errors.Is(err, ErrUnreachable) || wait <= 0 ||
			r.clock.Now().Add(wait).After(d.At().Add(deadline)) {
			break
		}
		log.Warn("could not reach the database to claim the fire; trying again", "error", err, "retry_in", wait)
		select {
		case <-time.After(wait):
		case <-r.ctx.Done():
			r.drop(d, deadline, NotRunShuttingDown, "shutting down; fire not claimed")
			return Lease{}, false
		}
		retried = true
	}
	if err != nil {
		reason := NotRunClaimError
		if errors.Is(err, ErrUnreachable) {
			reason = NotRunUnreachable
		}
		reason = r.dropReason(d, deadline, reason)
		log.Warn("fire not run: could not claim it", "reason", reason, "error", err)
		r.drop(d, deadline, reason, "")
		return Lease{}, false
	}
	ctx, cancel := r.opCtx()
	defer cancel()
	switch c.Result {
	case AlreadyFired:
		log.Debug("fire claimed elsewhere")
		if retried || r.late(d, deadline) {
			// An earlier try may have won the slot without an answer, or
			// the answer came after the deadline: if no replica recorded
			// the slot, it is recorded missed once nothing can start it.
			reason := r.dropReason(d, deadline, MissedUnreachable)
			r.queueMissed(d.Schedule, d.Delay, MissedRange{JobID: f.JobID, From: f.ScheduledAt, To: f.ScheduledAt, Count: 1, Reason: reason})
		}
		return Lease{}, false
	case Skipped:
		if r.late(d, deadline) {
			// The slot is consumed, but it could not have started anyway:
			// past its deadline that is the reason on record.
			log.Info("fire not started within its starting deadline (and the lock was held)", "reason", MissedStartingDeadline,
				"starting_deadline", deadline, "holder", c.Holder, "holder_run_id", c.HolderRunID)
			r.notRun(f.JobID, f.ScheduledAt, NotRunStartingDeadline)
			r.queueMissed(d.Schedule, d.Delay, MissedRange{JobID: f.JobID, From: f.ScheduledAt, To: f.ScheduledAt, Count: 1,
				Reason: MissedStartingDeadline})
			return Lease{}, false
		}
		reason := fmt.Sprintf("overlap %s: run %s of %s still holds the lock", spec.Overlap, c.HolderRunID, c.Holder)
		log.Info("fire skipped: the previous run still holds the lock", "holder", c.Holder, "holder_run_id", c.HolderRunID)
		if err := r.opts.Store.RecordSkip(ctx, f.JobID, f.ScheduledAt, r.opts.InstanceID, f.RunID, reason, r.clock.Now()); err != nil {
			log.Warn("could not record the skipped fire", "error", err)
		}
		r.runEnded(f.JobID, StatusSkipped)
		return Lease{}, false
	case TakenOver:
		log.Warn("lock taken over from a holder whose lease expired", "previous_holder", c.Holder, "previous_run_id", c.HolderRunID)
	}
	if err := r.opts.Store.StartRun(ctx, c.Lease, r.clock.Now(), r.opts.TTL); err != nil {
		// Without its record the run is not started: at most once.
		log.Warn("fire not run: could not record its start", "error", err)
		if rerr := r.opts.Store.Release(ctx, c.Lease, StatusAbandoned, r.clock.Now()); rerr != nil {
			log.Warn("could not release the lock", "error", rerr)
		}
		if !errors.Is(err, ErrLockLost) {
			r.drop(d, deadline, NotRunUnreachable, "fire not run: its start could not be recorded")
		}
		return Lease{}, false
	}
	won = true
	return c.Lease, true
}

// missClaimed records a fire whose claim won too late to start: its
// running record becomes a missed record (starting_deadline) and the lock
// is released.
func (r *Runner) missClaimed(log *slog.Logger, d schedule.Due, deadline time.Duration, l Lease) {
	defer r.setActive(l.RunID, false)
	now := r.clock.Now()
	log.Info("fire not started within its starting deadline; claimed too late", "reason", MissedStartingDeadline,
		"starting_deadline", deadline, "late_by", now.Sub(d.At()))
	r.notRun(l.JobID, l.Slot, NotRunStartingDeadline)
	ctx, cancel := r.opCtx()
	defer cancel()
	if err := r.opts.Store.Release(ctx, l, StatusMissed, now); err != nil && !errors.Is(err, ErrLockLost) {
		log.Warn("could not release the lock; it frees itself when its lease ends", "error", err)
	}
	err := r.opts.Store.FinishRun(ctx, l, RunEnd{Status: StatusMissed, EndedAt: now, Reason: MissedStartingDeadline,
		Error: fmt.Sprintf("not started within its starting deadline (%s)", deadline)})
	if err != nil {
		log.Warn("could not record the missed slot", "error", err)
		return
	}
	r.reportMissed(MissedRange{JobID: l.JobID, From: l.Slot, To: l.Slot, Count: 1, Reason: MissedStartingDeadline})
}

func (r *Runner) setActive(runID string, on bool) {
	r.activeMu.Lock()
	defer r.activeMu.Unlock()
	if on {
		r.active[runID] = struct{}{}
	} else {
		delete(r.active, runID)
	}
}

func (r *Runner) isActive(runID string) bool {
	r.activeMu.Lock()
	defer r.activeMu.Unlock()
	_, ok := r.active[runID]
	return ok
}

// execute runs the action with its timeout; with a lease it renews it
// while the action runs (cancelling the action if the lock is lost), then
// releases it and records the run's end.
func (r *Runner) execute(log *slog.Logger, action string, spec Spec, f Fire, lease *Lease) (time.Duration, error) {
	start := time.Now()
	ctx, cancel := context.WithCancelCause(r.ctx)
	defer cancel(nil)
	if spec.Timeout > 0 {
		var cancelT context.CancelFunc
		ctx, cancelT = context.WithTimeout(ctx, spec.Timeout)
		defer cancelT()
	}
	stopRenew := make(chan struct{})
	renewDone := make(chan struct{})
	if lease != nil {
		go r.renew(log, *lease, cancel, stopRenew, renewDone)
	} else {
		close(renewDone)
	}
	log.Info("run started", "action", action)
	out, err := runSafely(ctx, spec.Action, f)
	took := time.Since(start)
	endedAt := r.clock.Now()
	close(stopRenew)
	<-renewDone

	status := StatusSucceeded
	cause := context.Cause(ctx)
	switch {
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
		status = r.finish(log, *lease, status, err, out, endedAt)
		r.setActive(lease.RunID, false)
	}
	switch status {
	case StatusSucceeded:
		log.Info("run succeeded", "duration", took)
	default:
		log.Warn("run "+status, "duration", took, "error", err)
	}
	r.runEnded(f.JobID, status)
	return took, err
}

// finish releases the lock and records the run's end; it returns the
// status recorded (abandoned if the lock turned out lost).
func (r *Runner) finish(log *slog.Logger, l Lease, status string, runErr error, out Output, endedAt time.Time) string {
	ctx, cancel := r.opCtx()
	defer cancel()
	if err := r.opts.Store.Release(ctx, l, status, r.clock.Now()); err != nil {
		if errors.Is(err, ErrLockLost) && status != StatusAbandoned {
			log.Warn("lock lost before the run ended; recording it abandoned", "error", err)
			status = StatusAbandoned
		} else if !errors.Is(err, ErrLockLost) {
			log.Warn("could not release the lock; it frees itself when its lease ends", "error", err)
		}
	}
	end := RunEnd{Status: status, EndedAt: endedAt, Output: out}
	if runErr != nil {
		end.Error = runErr.Error()
	}
	var ee *ExitError
	if errors.As(runErr, &ee) {
		code := ee.Code
		end.ExitCode = &code
		if end.Output.Stderr == "" {
			end.Output.Stderr = ee.Stderr
		}
	}
	if err := r.opts.Store.FinishRun(ctx, l, end); err != nil {
		if errors.Is(err, ErrLockLost) {
			log.Info("run record was already closed by another replica", "error", err)
		} else {
			log.Warn("could not record the run's end", "error", err)
		}
	}
	return status
}

// renew extends the lease every TTL/3 until stop is closed. A renewal that
// finds the lock taken cancels the action at once; failing renewals are
// retried until the lease would run out before the next try, and then
// cancel the action too (another replica may take the lock from then on).
func (r *Runner) renew(log *slog.Logger, l Lease, cancel context.CancelCauseFunc, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	interval := max(r.opts.TTL/3, time.Millisecond)
	t := time.NewTicker(interval)
	defer t.Stop()
	leaseEnd := time.Now().Add(r.opts.TTL)
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		ctx, cancelOp := context.WithTimeout(context.Background(), min(interval, r.opts.OpTimeout))
		err := r.opts.Store.Renew(ctx, l, r.clock.Now(), r.opts.TTL)
		cancelOp()
		if err == nil {
			leaseEnd = time.Now().Add(r.opts.TTL)
			continue
		}
		if errors.Is(err, ErrLockLost) {
			log.Warn("lock lost while running; cancelling the action", "error", err)
			cancel(err)
			return
		}
		if !time.Now().Add(interval).Before(leaseEnd) {
			log.Warn("could not renew the lock before its lease ends; cancelling the action", "error", err)
			cancel(fmt.Errorf("%w: renewal failed: %w", ErrLockLost, err))
			return
		}
		log.Warn("lock renewal failed; retrying", "error", err)
	}
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

// Shutdown stops taking fires (queued ones are dropped) and waits for
// running actions; after grace it cancels them and waits for them to return
// (at most abandonAfterCancel). Each run releases its lock and records its
// end before Shutdown returns. It reports whether every action ended within
// the grace period.
func (r *Runner) Shutdown(grace time.Duration) bool {
	r.mu.Lock()
	r.stopping = true
	r.mu.Unlock()
	r.pool.Close()
	done := make(chan struct{})
	go func() { r.running.Wait(); r.pool.Wait(); close(done) }()
	t := time.NewTimer(grace)
	defer t.Stop()
	defer r.stopFlushing()
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
