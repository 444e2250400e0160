package firepath

import (
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/cronswap/cronswap/internal/actions"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/schedule"
)

// dueRetriesLimit bounds the due retries one poll takes.
const dueRetriesLimit = 100

// retrier runs the next attempts of failed runs (RetryPolicy). The pending
// attempt is state in job_runs (a record StatusRetrying with its
// retry_at), so it survives this replica: the replica whose attempt failed
// sets a local timer for retry_at, and every replica polls, at the sweep's
// pace, for retries due longer ago than the claim grace (their writer
// died, or its timer was lost with a restart). Which replica runs an
// attempt is decided by ClaimRetry's conditional update.
type retrier struct {
	r     *Runner
	store record.Store
	poll  time.Duration

	mu sync.Mutex
	// timers are the local timers of attempts this replica scheduled;
	// inflight the attempts being claimed or run here (by run id).
	timers   map[string]*time.Timer
	inflight map[string]bool
	closed   bool

	stop chan struct{}
	done chan struct{}
}

func newRetrier(r *Runner, store record.Store, poll time.Duration) *retrier {
	t := &retrier{r: r, store: store, poll: poll, timers: map[string]*time.Timer{}, inflight: map[string]bool{},
		stop: make(chan struct{}), done: make(chan struct{})}
	go t.loop()
	return t
}

// schedule sets the local timer of the attempt after failed of run id
// (d's slot), due at at.
func (t *retrier) schedule(d schedule.Due, id string, failed int, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	if old := t.timers[id]; old != nil {
		old.Stop()
	}
	t.timers[id] = time.AfterFunc(max(at.Sub(t.r.clock.Now()), 0), func() {
		t.mu.Lock()
		delete(t.timers, id)
		t.mu.Unlock()
		t.attempt(d.Schedule, id, d.Slot, failed+1, at)
	})
}

func (t *retrier) loop() {
	defer close(t.done)
	tick := time.NewTicker(t.poll)
	defer tick.Stop()
	for {
		select {
		case <-t.stop:
			return
		case <-tick.C:
			t.pollDue()
		}
	}
}

// pollDue takes the retries due longer ago than the claim grace: those
// whose writer did not take them itself. It reads nothing while no
// registered action retries.
func (t *retrier) pollDue() {
	if !t.r.opts.Registry.AnyRetries() {
		return
	}
	ctx, cancel := t.r.opCtx()
	defer cancel()
	docs, err := t.store.DueRetries(ctx, t.r.clock.Now().Add(-t.r.opts.ClaimGrace), dueRetriesLimit)
	if err != nil {
		t.r.log.Warn("could not look for due retries", "collection", record.RunsCollection, "error", err)
		return
	}
	for _, doc := range docs {
		if doc.Attempt < 1 {
			t.giveUp(doc.ID, 0, doc.JobID, doc.ScheduledAt,
				"damaged retry state: a retrying record without a valid attempt number; not retried")
			continue
		}
		if t.r.opts.Lookup == nil {
			t.r.log.Debug("a retry is due but this replica cannot look up schedules", "job_id", doc.JobID,
				"scheduled_at", doc.ScheduledAt, "run_id", doc.ID)
			continue
		}
		s, ok := t.r.opts.Lookup(doc.JobID)
		if !ok {
			t.r.log.Debug("a retry is due for a job this replica has not armed; left pending", "job_id", doc.JobID,
				"scheduled_at", doc.ScheduledAt, "run_id", doc.ID)
			continue
		}
		if doc.Schedule != nil {
			s = *doc.Schedule // the attempt runs as its slot came due
		}
		go t.attempt(s, doc.ID, doc.ScheduledAt.UTC(), doc.Attempt+1, doc.RetryAt)
	}
}

// attempt claims attempt n of run id (s's slot) and runs it.
func (t *retrier) attempt(s schedule.Schedule, id string, slot time.Time, n int, due time.Time) {
	t.mu.Lock()
	if t.closed || t.inflight[id] {
		t.mu.Unlock()
		return
	}
	t.inflight[id] = true
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		delete(t.inflight, id)
		t.mu.Unlock()
	}()
	t.r.startWait(t.r.retryFire(s, id, slot, n, due))
}

// claimAttempt is the claim of a retry fire: attempt f.attempt of its slot
// (ClaimRetry). The claim may itself record the slot's end: failed when
// the slot's run lost the job's lock during the backoff, abandoned when a
// cancel_other fire replaced it (whose fire then waits on the lock just
// freed).
func (r *Runner) claimAttempt(f *fire, then func(claimAnswer)) {
	ctx, cancel := r.opCtx()
	lease, err := r.opts.Store.ClaimRetry(ctx, record.RetryClaim{JobID: f.jobID(), Slot: f.due.Slot, RunID: f.runID,
		Attempt: f.attempt, Overlap: f.action.Overlap, Instance: r.opts.InstanceID, Incarnation: r.opts.Incarnation,
		Now: r.clock.Now(), TTL: r.opts.TTL})
	cancel()
	switch {
	case errors.Is(err, record.ErrRetryTaken):
		then(claimAnswer{ClaimOutcome: record.ClaimOutcome{Result: record.AlreadyFired, Reason: err.Error()}})
	case errors.Is(err, record.ErrRetryLockLost):
		then(claimAnswer{ended: record.StatusFailed, why: err})
	case errors.Is(err, record.ErrRetryReplaced):
		then(claimAnswer{ended: record.StatusAbandoned, freed: true, why: err})
	case err != nil:
		then(claimAnswer{ClaimOutcome: record.ClaimOutcome{Err: err}})
	default:
		then(claimAnswer{ClaimOutcome: record.ClaimOutcome{Result: record.Acquired, Lease: lease}})
	}
}

// giveUp ends a retrying record that is not to be retried as failed,
// saying why (in the log too).
func (t *retrier) giveUp(runID string, attempt int, jobID string, slot time.Time, why string) {
	ctx, cancel := t.r.opCtx()
	defer cancel()
	err := t.store.GiveUpRetry(ctx, runID, attempt, why, t.r.clock.Now())
	t.r.log.Warn("pending retry given up; the slot is recorded failed", "job_id", jobID, "scheduled_at", slot,
		"run_id", runID, "reason", why, "error", err)
	if err == nil {
		t.r.runEnded(jobID, record.StatusFailed)
	}
}

// close stops the timers and the poll; pending attempts stay in the
// database for any replica.
func (t *retrier) close() {
	if t == nil {
		return
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	t.closed = true
	for _, tm := range t.timers {
		tm.Stop()
	}
	t.mu.Unlock()
	close(t.stop)
	<-t.done
}

// planRetry turns the end of a failed attempt of f, whose action retries,
// into StatusRetrying with the next attempt's time, while attempts remain;
// the record keeps the schedule the slot came due under, for whichever
// replica runs the next attempt.
func (r *Runner) planRetry(f *fire, end *record.RunEnd) {
	spec, l := f.action, f.lease
	if r.retries == nil || l.Attempt == 0 || end.Status != record.StatusFailed || l.Attempt >= spec.Retry.Attempts {
		return
	}
	end.Status = record.StatusRetrying
	end.Schedule = &f.due.Schedule
	end.RetryAt = end.EndedAt.Add(spec.Retry.Delay(l.Attempt))
	// The lock stays the slot's until the attempt is due plus a lease, at
	// most what a healthy holder may write (farFuture, with room for skew).
	end.HoldUntil = end.RetryAt.Add(r.opts.TTL)
	if limit := end.EndedAt.Add(r.opts.TTL + max(r.opts.TTL, time.Minute)/2); end.HoldUntil.After(limit) {
		end.HoldUntil = limit
	}
}

// retriesLocal reports whether a fire of spec starts as attempt 1 of a
// slot that may be retried.
func (r *Runner) retriesLocal(spec actions.Action) bool {
	return r.retries != nil && spec.Retry.Enabled()
}

// logRetry says when the next attempt is due.
func logRetry(log *slog.Logger, l record.Lease, end record.RunEnd) {
	log.Warn("run failed; retrying", "attempt", l.Attempt, "retry_at", end.RetryAt, "error", end.Error)
}
