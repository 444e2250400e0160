package firepath

import (
	"context"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/cronswap/cronswap/internal/actions"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/jobs"
	"github.com/cronswap/cronswap/schedule"
)

// MinLockTTL is the shortest lock lease (config lock.ttl) the configuration
// accepts. A running action's lease is renewed every TTL/3, each renewal
// bounded by that same interval, and a run is abandoned once a renewal can
// no longer land before the lease ends. At 3 s a renewal every second
// still has time for one slow or failed database round trip and for a
// clock difference of well under a second between replicas; a shorter
// lease abandons runs on ordinary latency. It is a floor, not a
// recommendation: a lease that must survive a replica-set election wants
// 30 s or more (the default is DefaultLockTTL).
const MinLockTTL = 3 * time.Second

// NotRunPaused is passed to Hooks.NotRun for a fire of a paused job.
const NotRunPaused = record.MissedPaused

// Hooks report what the fire path does, for metrics. Any may be nil. They
// are called synchronously and must be quick.
type Hooks struct {
	// Dispatched is called when a fire's action starts (after its claim),
	// with the action's context (holding the run's span when the fire is
	// traced), the schedule's category, when the fire was due (its slot plus
	// its planned jitter, schedule.Due.At) and the time; at minus due is
	// the fire's start lateness.
	Dispatched func(ctx context.Context, jobID, category string, due, at time.Time)
	// Claimed is called after each claim with its result (ClaimedResults).
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
	// another replica having it, with why (NotRunReasons).
	NotRun func(jobID string, slot time.Time, reason string)
	// Missed is called for each missed record this replica wrote, with
	// the number of slots it covers.
	Missed func(jobID, reason string, slots int64)
	// Skipped is called, after RunEnded, for a fire recorded skipped, with
	// why (SkipReasons).
	Skipped func(jobID, reason string)
}

// ClaimedError is the result passed to Hooks.Claimed for a claim that
// ended without a decision (ClaimOutcome.Err).
const ClaimedError = "error"

// ClaimedResults returns every result passed to Hooks.Claimed: each
// record.ClaimResult's String, and ClaimedError.
func ClaimedResults() []string {
	var out []string
	for _, r := range record.ClaimResults() {
		out = append(out, r.String())
	}
	return append(out, ClaimedError)
}

// Reasons a fire is recorded skipped, as passed to Hooks.Skipped.
const (
	// SkipOverlap: the job's lock was held by a live run (overlap skip).
	SkipOverlap = "overlap"
	// SkipBlackout: the slot fell in a blackout window.
	SkipBlackout = "blackout"
	// SkipCalendar: the slot fell on a date of a calendar its schedule
	// excludes.
	SkipCalendar = "calendar"
	// SkipMaxRuns: the job's run count had reached its max_runs (the job
	// is ended: RunnerOptions.Ended).
	SkipMaxRuns = "max_runs"
)

// SkipReasons lists every reason passed to Hooks.Skipped.
var SkipReasons = []string{SkipOverlap, SkipBlackout, SkipCalendar, SkipMaxRuns}

// Reasons a fire was not run, as passed to Hooks.NotRun. Those that are
// also reasons of missed records are the same strings.
const (
	NotRunUnreachable      = record.MissedUnreachable
	NotRunClaimError       = "claim_error"
	NotRunShuttingDown     = record.MissedShuttingDown
	NotRunStartingDeadline = record.MissedStartingDeadline
	NotRunQueueFull        = record.MissedQueueFull
)

// NotRunReasons lists every reason passed to Hooks.NotRun.
var NotRunReasons = []string{NotRunUnreachable, NotRunClaimError, NotRunShuttingDown, NotRunStartingDeadline,
	NotRunQueueFull, NotRunPaused}

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
	// DefaultShutdownGrace is how long a shutdown lets running actions
	// finish before it cancels them (Runner.Shutdown's grace) when none is
	// set: config shutdown.grace, daemon.Options.ShutdownGrace.
	DefaultShutdownGrace = 30 * time.Second
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
	Registry   *actions.Registry
	InstanceID string
	// Incarnation names this process among the lives of InstanceID (the
	// membership's); a lock held by InstanceID under another incarnation
	// is taken over at once. Default: a random one per Runner.
	Incarnation string
	Logger      *slog.Logger
	// Done, if set, is called after each run with its outcome.
	Done func(f jobs.Run, err error, took time.Duration)

	// Store coordinates replicas through job_locks and job_runs. Nil runs
	// every fire without locks or records (one process, tests, embedding).
	Store record.Store
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
	// (jobs.Policy.StartingDeadline); config starting_deadline. 0 means the time
	// from the slot to the job's next slot, at most
	// MaxDefaultStartingDeadline (that cap when Slots is nil).
	StartingDeadline time.Duration
	// Slots gives the slot sequence of an armed job (the engine's); nil
	// when there is none to ask.
	Slots func(jobID string) (record.NextFunc, bool)
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
	// jobID (of category) at slot falls in (record.BlackoutExclusion):
	// such a fire is not run, and its slot is recorded skipped with the
	// window's id and reason. Nil: no blackouts.
	Blackout func(jobID, category string, slot time.Time) (record.Exclusion, bool)
	// Calendars reports the calendar, if any, of those s excludes on
	// whose date slot falls (record.CalendarExclusion): such a fire is
	// not run either, and its slot is recorded skipped with reason
	// calendar:<name>. Asked after Blackout, only for a schedule that
	// excludes calendars. Nil: no calendars.
	Calendars func(s schedule.Schedule, slot time.Time) (record.Exclusion, bool)
	// Ended, if set, is told of a job whose claim found its run count at
	// the max_runs of s, the schedule the fire came due under: the job is
	// to fire no more (the daemon disarms it: scheduler.Engine.End).
	Ended func(s schedule.Schedule, reason string)

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

	// Tracer, when set, makes a trace of every fire (trace.go): its root
	// span with the admission, claim, run and end write as children, a
	// span per claim batch, the action handed the run's span. Nil traces
	// nothing and costs nothing.
	Tracer trace.Tracer
	// ArmedBy, when set, returns the span of the schedule change that
	// armed a job's timer, which the job's fires link to.
	ArmedBy func(jobID string) (trace.SpanContext, bool)
}

// Clock is where the fire path reads "now" for leases and run times. Slots
// never come from it: they are the scheduler's deterministic cron slots.
type Clock interface {
	Now() time.Time
}

// SystemClock is the real clock.
type SystemClock struct{}

// Now implements Clock.
func (SystemClock) Now() time.Time { return time.Now() }
