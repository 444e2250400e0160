package firepath

import (
	"log/slog"
	"time"

	"github.com/cronswap/cronswap/internal/actions"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/jobs"
	"github.com/cronswap/cronswap/schedule"
)

// fireKind is what sets one kind of fire apart on the one fire path
// (pipeline.go): how it is admitted, what it claims, where its identity
// and fence come from, its deadline, and what follows its run. Kinds
// differ in these data only; every fire goes through Runner.start.
type fireKind struct {
	// name is the kind in logs (fire=<name>); noun what they call a fire
	// of the kind ("off-schedule run claimed elsewhere").
	name, noun string
	// claims says what the fire claims.
	claims claimSource
	// withoutStore: a runner without a store runs the fire unclaimed
	// (one process, tests); the other kinds need a store.
	withoutStore bool
	// graced: a replica that does not own the job waits the claim grace
	// before claiming (the owner claims first) and claims with a check.
	graced bool
	// excludes: a fire whose slot falls in a blackout window, or on a
	// date of a calendar its schedule excludes, is recorded skipped
	// instead.
	excludes bool
	// pauses: a fire of a job paused after failures is not run.
	pauses bool
	// retryClaim: a claim that could not reach the database is tried
	// again while the fire can still start in time.
	retryClaim bool
	// lateAfterClaim: a claim won after the fire's starting deadline is
	// recorded missed instead of run.
	lateAfterClaim bool
	// notRun says what becomes of a fire that is not run before it holds
	// a claim.
	notRun notRunRule
	// attempts: the run is attempt 1 of a slot that its action retries
	// (never an off-schedule run).
	attempts bool
	// drain says how the fires buffered behind its run are taken up.
	drain drainRule
	// reports: an off-schedule run that waited on the lock tells its
	// request of its start and end (RunnerOptions.Requests): the replica
	// that handled the request may be long gone.
	reports bool
}

// claimSource is what a fire claims.
type claimSource int

const (
	// claimInBatch: its run record (and the job's lock) in a claim batch
	// with the fires due at the same time (RunID(job, slot), or an
	// off-schedule run's own id).
	claimInBatch claimSource = iota
	// claimFromBuffer: the first fire waiting on the job's lock
	// (TakeBuffered): its schedule comes with it, so the action is known
	// after the claim, and the fire is admitted after it.
	claimFromBuffer
	// claimAttempt: the next attempt of a retrying slot (ClaimRetry).
	claimAttempt
)

// notRunRule is what becomes of a fire not run before its claim.
type notRunRule int

const (
	// recordMissed: the slot is recorded missed once no replica can start
	// it (Runner.drop).
	recordMissed notRunRule = iota
	// tellCaller: the caller learns why (OffScheduleResult.NotRun).
	tellCaller
	// leavePending: the fire stays in the database for a later try (a
	// retry attempt, a buffered fire).
	leavePending
)

// drainRule is how the fires buffered behind a run are taken up.
type drainRule int

const (
	// drainInline: on the run's goroutine, within its admission.
	drainInline drainRule = iota
	// drainAsync: on a goroutine of their own (the caller learns of the
	// run's end first).
	drainAsync
	// drainNone: the loop that took the fire takes the next.
	drainNone
)

// The kinds of fire.
var (
	// kindSlot is a cron slot, as the engine fires it (also a catch-up
	// fire: the same, with a longer deadline).
	kindSlot = &fireKind{name: "slot", noun: "fire", claims: claimInBatch, withoutStore: true, graced: true, excludes: true,
		pauses: true, retryClaim: true, lateAfterClaim: true, notRun: recordMissed, attempts: true, drain: drainInline}
	// kindOffSchedule is a run asked for through triggers: run-now or a
	// backfilled slot.
	kindOffSchedule = &fireKind{name: "off_schedule", noun: "off-schedule run", claims: claimInBatch, graced: true, lateAfterClaim: true,
		notRun: tellCaller, drain: drainAsync}
	// kindBuffered is a fire taken from its job's lock's buffer.
	kindBuffered = &fireKind{name: "buffered", noun: "buffered fire", claims: claimFromBuffer, notRun: leavePending, attempts: true,
		drain: drainNone, reports: true}
	// kindRetry is a further attempt of a failed slot.
	kindRetry = &fireKind{name: "retry", noun: "retry", claims: claimAttempt, notRun: leavePending, drain: drainInline}
)

// fire is one fire of any kind on its way through the fire path.
type fire struct {
	kind *fireKind
	// due is the schedule snapshot the fire carries (its action, args,
	// category, and any other field: the action's context holds it,
	// ScheduleOf), its slot (the record's scheduled_at) and its lateness
	// base, due.At(): the slot plus jitter — for an off-schedule run when
	// it was offered, for a retry attempt when it was due.
	due schedule.Due
	// deadline is how long after due.At() the fire may still start, and
	// startBy when (zero: no starting deadline).
	deadline time.Duration
	startBy  time.Time
	// owner: this replica owns the job and claims at once.
	owner bool
	// runID, when set, is an off-schedule run's identity; mayWait lets it
	// wait on the job's lock like a cron fire (a run-now request).
	runID   string
	mayWait bool
	// started, if set, is called with the lease just before the action
	// starts (an off-schedule run's caller).
	started func(record.Lease)
	// attempt is the attempt a retry fire claims.
	attempt int
	// overlap is the policy a buffered fire is taken under, until its
	// action is known.
	overlap jobs.Overlap
	// exclusion, when set, is why the slot is not run (a blackout window,
	// an excluded calendar): the claim records it skipped.
	exclusion *record.Exclusion
	// admitted: the fire runs within an admission it inherited (a
	// buffered fire taken up by the run it waited for).
	admitted bool
	// overtaken, when set, is the reason a cron slot is recorded missed
	// with if a later slot of its job was claimed first (a slot a
	// hand-over offers: Runner.Offer), instead of skipped.
	overtaken string

	// Set along the way.
	action       actions.Action
	resolved     bool
	release      func()
	lease        record.Lease
	won          bool
	claimWait    time.Duration
	claimRetried bool
	// result, when set, is how the fire ended, for a caller or a request
	// waiting to learn it (an off-schedule run, a buffered fire).
	result *OffScheduleResult
	done   func()
	// answered, if set, is called once the fire's claim is answered,
	// before it runs (Runner.Offer).
	answered func()
	// trace is the fire's trace; nil when it is not traced.
	trace *fireTrace
}

// tell records how f ended, when someone waits to learn it.
func (f *fire) tell(res OffScheduleResult) {
	if f.result != nil {
		*f.result = res
	}
}

// jobID is the fire's job.
func (f *fire) jobID() string { return f.due.Schedule.ID }

// logger is log with the fire's job, slot and run.
func (f *fire) logger(log *slog.Logger) *slog.Logger {
	log = log.With("job_id", f.jobID(), "scheduled_at", f.due.Slot.UTC())
	switch {
	case f.won:
		log = log.With("run_id", f.lease.RunID, "fence", f.lease.Fence)
	case f.runID != "":
		log = log.With("run_id", f.runID)
	}
	if f.kind != kindSlot {
		log = log.With("fire", f.kind.name)
	}
	if id := f.traceID(); id != "" {
		log = log.With("trace_id", id)
	}
	return log
}

// slotFire is the fire of cron slot d, which may start until deadline
// after it was due.
func (r *Runner) slotFire(d schedule.Due, deadline time.Duration) *fire {
	return &fire{kind: kindSlot, due: d, deadline: deadline, startBy: d.At().Add(deadline),
		owner: r.opts.Store == nil || r.owns(d.Schedule.ID)}
}

// bufferedFire is the next fire waiting on jobID's lock, to be taken under
// overlap; admitted when it runs within the admission of the run it
// waited for.
func (r *Runner) bufferedFire(jobID string, overlap jobs.Overlap, admitted bool) *fire {
	return &fire{kind: kindBuffered, due: schedule.Due{Schedule: schedule.Schedule{ID: jobID}}, overlap: overlap,
		admitted: admitted, owner: true, result: &OffScheduleResult{}}
}

// retryFire is attempt n of run runID, the slot of s, due at due; it may
// start until the starting deadline after it is taken up.
func (r *Runner) retryFire(s schedule.Schedule, runID string, slot time.Time, n int, due time.Time) *fire {
	d := schedule.Due{Schedule: s, Slot: slot}
	if due.After(slot) {
		d.Delay = due.Sub(slot) // lateness is counted from when the attempt was due
	}
	deadline := r.startingDeadline(d)
	return &fire{kind: kindRetry, due: d, deadline: deadline, startBy: r.clock.Now().Add(deadline), owner: true,
		runID: runID, attempt: n}
}

// owns reports whether this replica claims the job's fires as its owner
// (at once, without checking first).
func (r *Runner) owns(jobID string) bool { return r.opts.Owns == nil || r.opts.Owns(jobID) }
