package firepath

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/actions"
	"github.com/cronswap/cronswap/internal/notify"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/internal/runstore"
	"github.com/cronswap/cronswap/jobs"
	"github.com/cronswap/cronswap/schedule"
)

// attemptLog records the attempts an action saw.
type attemptLog struct {
	mu    sync.Mutex
	fires []jobs.Run
}

func (a *attemptLog) add(f jobs.Run) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.fires = append(a.fires, f)
	return len(a.fires)
}

func (a *attemptLog) all() []jobs.Run {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]jobs.Run(nil), a.fires...)
}

// retryRunner is a replica of e for retry tests: it looks schedules up
// like the engine (every job armed, running the action named like it),
// polls for due retries every poll and claims others' after grace.
func (e *fireEnv) retryRunner(t *testing.T, instance string, poll, grace time.Duration) *Runner {
	t.Helper()
	r := NewRunner(RunnerOptions{
		Registry:   e.reg,
		InstanceID: instance,
		Logger:     slog.New(slog.DiscardHandler),
		Store:      runstore.New(e.locks, e.runs, runstore.Options{Instance: instance, Logger: slog.New(slog.DiscardHandler)}),
		TTL:        time.Minute,
		Lookup: func(id string) (schedule.Schedule, bool) {
			return schedule.Schedule{ID: id, Enabled: true}, true
		},
		RetryPoll:  poll,
		ClaimGrace: grace,
		Hooks: Hooks{
			Claimed:  func(id, result string) { e.record(&e.claimed, id+":"+result) },
			RunEnded: func(id, status string) { e.record(&e.ended, id+":"+status) },
			NotRun:   func(id string, slot time.Time, reason string) { e.record(&e.notRun, id+":"+reason) },
		},
	})
	t.Cleanup(func() { r.Shutdown(30 * time.Second) })
	return r
}

func (e *fireEnv) runDoc(t *testing.T, id string) record.RunDoc {
	t.Helper()
	var d record.RunDoc
	if err := e.runs.FindOne(testCtx(t), bson.D{{Key: "_id", Value: id}}).Decode(&d); err != nil {
		t.Fatalf("run %s: %v", id, err)
	}
	return d
}

func (e *fireEnv) waitStatus(t *testing.T, id, status string) record.RunDoc {
	t.Helper()
	var d record.RunDoc
	waitFor(t, 20*time.Second, "run "+id+" "+status, func() bool {
		d = record.RunDoc{} // Decode leaves the fields a document lacks as they were
		err := e.runs.FindOne(testCtx(t), bson.D{{Key: "_id", Value: id}}).Decode(&d)
		return err == nil && d.Status == status
	})
	return d
}

// testBackoff is the backoff of the retry tests that fire during it: longer
// than any of them runs, so that a fire lands during the backoff however
// loaded the machine is; the test ends the backoff itself (endBackoff)
// once it has checked what happened during it.
const testBackoff = time.Minute

// endBackoff does what r's timer for the attempt after failed of run id
// (d's slot) does when due, now: the attempt is claimed and run (or
// refused), and endBackoff returns once it is done. The timer is stopped.
func endBackoff(r *Runner, d schedule.Due, id string, failed int) {
	t := r.retries
	t.mu.Lock()
	if tm := t.timers[id]; tm != nil {
		tm.Stop()
		delete(t.timers, id)
	}
	t.mu.Unlock()
	t.attempt(d.Schedule, id, d.Slot, failed+1, time.Now())
}

// checkAttempts checks the attempts list of d: one entry per attempt, the
// fences FenceOf(slot)+attempt-1, the statuses given.
func checkAttempts(t *testing.T, d record.RunDoc, slot time.Time, statuses ...string) {
	t.Helper()
	if len(d.Attempts) != len(statuses) {
		t.Fatalf("run %s: %d attempts recorded (%+v), want %d", d.ID, len(d.Attempts), d.Attempts, len(statuses))
	}
	for i, a := range d.Attempts {
		if a.Attempt != i+1 || a.Fence != record.FenceOf(slot)+int64(i) || a.Status != statuses[i] || a.EndedAt.IsZero() {
			t.Errorf("run %s attempt %d: %+v, want attempt %d, fence %d, status %s, an end", d.ID, i, a, i+1,
				record.FenceOf(slot)+int64(i), statuses[i])
		}
		if i > 0 && !a.StartedAt.After(d.Attempts[i-1].EndedAt) {
			t.Errorf("run %s attempt %d started %v, not after the previous ended %v", d.ID, i+1, a.StartedAt, d.Attempts[i-1].EndedAt)
		}
	}
}

// An action failing twice then succeeding gives three attempts of one
// slot — one record, one run id — with increasing fences, the lock held
// by the slot during the backoff (a later slot is skipped) and free at the
// end with the last attempt's fence.
func TestRetryFailingTwiceThenSucceeding(t *testing.T) {
	t.Parallel()
	e := newFireEnv(t)
	var seen attemptLog
	e.reg.Register("flaky", actions.Action{Handler: jobs.HandlerFunc(func(ctx context.Context, f jobs.Run) error {
		if seen.add(f) <= 2 {
			return errors.New("not yet")
		}
		return nil
	}), Policy: jobs.Policy{Retry: jobs.RetryPolicy{Attempts: 3, Backoff: testBackoff, MaxBackoff: testBackoff}}})
	r := e.retryRunner(t, "r1", time.Hour, DefaultClaimGrace)
	slot := time.Now().Truncate(time.Second).UTC()
	id := record.RunID("flaky", slot)
	r.Fire(dueAt("flaky", slot))
	if d := e.runDoc(t, id); d.Status != record.StatusRetrying || d.Attempt != 1 || d.RetryAt.IsZero() || !d.LeaseUntil.Equal(d.RetryAt) ||
		d.Notice != nil {
		t.Fatalf("after the first attempt: %+v, want retrying at attempt 1 with retry_at = lease_until, no failure notice", d)
	}
	// A later slot during the backoff: the slot's run still holds the lock.
	r.Fire(dueAt("flaky", slot.Add(time.Second)))
	if got := e.runDoc(t, record.RunID("flaky", slot.Add(time.Second))); got.Status != record.StatusSkipped {
		t.Errorf("a later slot during the backoff: %s, want skipped", got.Status)
	}
	endBackoff(r, dueAt("flaky", slot), id, 1)
	endBackoff(r, dueAt("flaky", slot), id, 2)
	d := e.waitStatus(t, id, record.StatusSucceeded)
	checkAttempts(t, d, slot, record.StatusRetrying, record.StatusRetrying, record.StatusSucceeded)
	if d.Attempt != 3 || d.Fence != record.FenceOf(slot)+2 || d.Error != "" {
		t.Errorf("final record %+v: want attempt 3, fence %d, no error", d, record.FenceOf(slot)+2)
	}
	fires := seen.all()
	if len(fires) != 3 {
		t.Fatalf("the action ran %d times, want 3", len(fires))
	}
	for i, f := range fires {
		if f.RunID != id || f.Slot != slot || f.Attempt != i+1 || f.Fence != record.FenceOf(slot)+int64(i) {
			t.Errorf("attempt %d saw %+v: want run %s, slot %v, attempt %d, fence %d", i+1, f, id, slot, i+1, record.FenceOf(slot)+int64(i))
		}
	}
	var lock record.LockDoc
	if err := e.locks.FindOne(testCtx(t), bson.D{{Key: "_id", Value: "flaky"}}).Decode(&lock); err != nil {
		t.Fatal(err)
	}
	if lock.State != record.LockFree || lock.Fence != record.FenceOf(slot)+2 || lock.LastOutcome != record.StatusSucceeded {
		t.Errorf("lock after the last attempt: %+v, want free, fence %d, succeeded", lock, record.FenceOf(slot)+2)
	}
}

// With attempts exhausted the slot ends failed, every attempt recorded.
func TestRetryExhaustedEndsFailed(t *testing.T) {
	t.Parallel()
	e := newFireEnv(t)
	var seen attemptLog
	e.reg.Register("broken", actions.Action{Handler: jobs.HandlerFunc(func(ctx context.Context, f jobs.Run) error { seen.add(f); return errors.New("always") }), Policy: jobs.Policy{Overlap: jobs.OverlapAllow, Retry: jobs.RetryPolicy{Attempts: 2, Backoff: 100 * time.Millisecond}}})
	r := e.retryRunner(t, "r1", time.Hour, DefaultClaimGrace)
	slot := time.Now().Truncate(time.Second).UTC()
	r.Fire(dueAt("broken", slot))
	d := e.waitStatus(t, record.RunID("broken", slot), record.StatusFailed)
	checkAttempts(t, d, slot, record.StatusRetrying, record.StatusFailed)
	if d.Error != "always" || len(seen.all()) != 2 || d.Notice == nil || d.Notice.Kind != notify.KindFailed {
		t.Errorf("final %+v after %d runs: want error always, 2 runs, a failed notice", d, len(seen.all()))
	}
}

// The pending attempt is state in the database: the replica whose attempt
// failed stops before it is due, and of two others polling for due
// retries exactly one runs the next attempt.
func TestRetrySurvivesReplicaGone(t *testing.T) {
	t.Parallel()
	e := newFireEnv(t)
	var seen attemptLog
	e.reg.Register("flaky", actions.Action{Handler: jobs.HandlerFunc(func(ctx context.Context, f jobs.Run) error {
		if seen.add(f) == 1 {
			return errors.New("first fails")
		}
		return nil
	}), Policy: jobs.Policy{Retry: jobs.RetryPolicy{Attempts: 3, Backoff: 200 * time.Millisecond}}})
	a := e.retryRunner(t, "a", time.Hour, 100*time.Millisecond)
	slot := time.Now().Truncate(time.Second).UTC()
	id := record.RunID("flaky", slot)
	a.Fire(dueAt("flaky", slot))
	if !a.Shutdown(10 * time.Second) {
		t.Fatal("replica a did not shut down")
	}
	if d := e.runDoc(t, id); d.Status != record.StatusRetrying {
		t.Fatalf("after a stopped: %s, want retrying", d.Status)
	}
	e.retryRunner(t, "b", 50*time.Millisecond, 100*time.Millisecond)
	e.retryRunner(t, "c", 50*time.Millisecond, 100*time.Millisecond)
	d := e.waitStatus(t, id, record.StatusSucceeded)
	checkAttempts(t, d, slot, record.StatusRetrying, record.StatusSucceeded)
	fires := seen.all()
	if len(fires) != 2 {
		t.Fatalf("the action ran %d times, want 2 (once per attempt)", len(fires))
	}
	if fires[1].InstanceID == "a" || fires[1].InstanceID != d.Instance || d.Attempts[1].Instance != d.Instance {
		t.Errorf("attempt 2 ran on %s, record says %s: want b or c, the same", fires[1].InstanceID, d.Instance)
	}
	// No third attempt shows up later.
	time.Sleep(300 * time.Millisecond)
	if n := len(seen.all()); n != 2 {
		t.Errorf("the action ran %d times, want 2", n)
	}
}

// A retry whose slot lost the job's lock during the backoff (released by
// an operator, taken over) is recorded failed, not run.
func TestRetryLockLostDuringBackoff(t *testing.T) {
	t.Parallel()
	e := newFireEnv(t)
	var seen attemptLog
	e.reg.Register("flaky", actions.Action{Handler: jobs.HandlerFunc(func(ctx context.Context, f jobs.Run) error { seen.add(f); return errors.New("fails") }), Policy: jobs.Policy{Retry: jobs.RetryPolicy{Attempts: 3, Backoff: 300 * time.Millisecond}}})
	r := e.retryRunner(t, "r1", time.Hour, DefaultClaimGrace)
	slot := time.Now().Truncate(time.Second).UTC()
	r.Fire(dueAt("flaky", slot))
	if _, err := e.locks.UpdateOne(testCtx(t), bson.D{{Key: "_id", Value: "flaky"}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "state", Value: record.LockFree}, {Key: "run_id", Value: ""}}}}); err != nil {
		t.Fatal(err)
	}
	d := e.waitStatus(t, record.RunID("flaky", slot), record.StatusFailed)
	if d.Attempt != 2 || !strings.Contains(d.Error, record.ErrRetryLockLost.Error()) || len(seen.all()) != 1 || d.Notice == nil {
		t.Errorf("record %+v after %d runs: want attempt 2 failed without running", d, len(seen.all()))
	}
}

// A pending retry that is not to be run is ended failed, saying why: a
// retrying record without a valid attempt (damaged by hand), and one of
// an action that no longer retries (its config changed).
func TestRetryGivenUp(t *testing.T) {
	t.Parallel()
	e := newFireEnv(t)
	var seen attemptLog
	act := jobs.HandlerFunc(func(ctx context.Context, f jobs.Run) error { seen.add(f); return nil })
	e.reg.Register("retries", actions.Action{Handler: act, Policy: jobs.Policy{Retry: jobs.RetryPolicy{Attempts: 3}}})
	e.reg.Register("no_longer", actions.Action{Handler: act})
	past := time.Now().Add(-time.Minute).Truncate(time.Second).UTC()
	docs := []any{
		bson.D{{Key: "_id", Value: record.RunID("retries", past)}, {Key: "job_id", Value: "retries"}, {Key: "scheduled_at", Value: past},
			{Key: "status", Value: record.StatusRetrying}, {Key: "lease_until", Value: past}, {Key: record.FieldRetryAt, Value: past}},
		bson.D{{Key: "_id", Value: record.RunID("no_longer", past)}, {Key: "job_id", Value: "no_longer"}, {Key: "scheduled_at", Value: past},
			{Key: "status", Value: record.StatusRetrying}, {Key: record.FieldAttempt, Value: 1}, {Key: "lease_until", Value: past}, {Key: record.FieldRetryAt, Value: past}},
	}
	if _, err := e.runs.InsertMany(testCtx(t), docs); err != nil {
		t.Fatal(err)
	}
	e.retryRunner(t, "r1", 50*time.Millisecond, 10*time.Millisecond)
	if d := e.waitStatus(t, record.RunID("retries", past), record.StatusFailed); !strings.Contains(d.Error, "damaged retry state") || d.Notice == nil {
		t.Errorf("damaged: %+v", d)
	}
	if d := e.waitStatus(t, record.RunID("no_longer", past), record.StatusFailed); !strings.Contains(d.Error, "not retried") {
		t.Errorf("no longer retrying: %+v", d)
	}
	if n := len(seen.all()); n != 0 {
		t.Errorf("the action ran %d times, want 0", n)
	}
}

// Under buffer_one a fire during the backoff waits behind the slot that is
// retrying (its run still holds the lock), and runs once the slot's last
// attempt ended: after it, not interleaved with its attempts.
func TestRetryBufferedFireWaitsForTheAttempts(t *testing.T) {
	t.Parallel()
	e := newFireEnv(t)
	var seen attemptLog
	e.reg.Register("flaky", actions.Action{Handler: jobs.HandlerFunc(func(ctx context.Context, f jobs.Run) error {
		if seen.add(f) == 1 {
			return errors.New("first fails")
		}
		return nil
	}), Policy: jobs.Policy{Overlap: jobs.OverlapBufferOne, Retry: jobs.RetryPolicy{Attempts: 2, Backoff: testBackoff}}})
	r := e.retryRunner(t, "r1", time.Hour, DefaultClaimGrace)
	slot := time.Now().Truncate(time.Second).UTC()
	r.Fire(dueAt("flaky", slot))
	next := slot.Add(time.Second)
	r.Fire(dueAt("flaky", next)) // during the backoff: buffered
	if d := e.runDoc(t, record.RunID("flaky", next)); d.Status != record.StatusBuffered {
		t.Fatalf("a fire during the backoff: %s, want buffered", d.Status)
	}
	endBackoff(r, dueAt("flaky", slot), record.RunID("flaky", slot), 1)
	e.waitStatus(t, record.RunID("flaky", slot), record.StatusSucceeded)
	later := e.waitStatus(t, record.RunID("flaky", next), record.StatusSucceeded)
	fires := seen.all()
	if len(fires) != 3 || fires[0].Slot != slot || fires[1].Slot != slot || fires[1].Attempt != 2 ||
		fires[2].Slot != next {
		t.Fatalf("runs in order %+v: want slot attempt 1, slot attempt 2, then the buffered fire", fires)
	}
	first := e.runDoc(t, record.RunID("flaky", slot))
	if !later.StartedAt.After(first.Attempts[1].EndedAt.Add(-time.Millisecond)) || later.Fence <= first.Fence {
		t.Errorf("buffered fire started %s (fence %d), the slot's last attempt ended %s (fence %d)", later.StartedAt,
			later.Fence, first.Attempts[1].EndedAt, first.Fence)
	}
}

// Under cancel_other a fire during the backoff replaces the retrying slot
// when its next attempt comes due: that attempt is not started, the slot
// is recorded abandoned (reason replaced, naming the run replacing it),
// and the new fire runs.
func TestRetryReplacedDuringBackoff(t *testing.T) {
	t.Parallel()
	e := newFireEnv(t)
	var seen attemptLog
	e.reg.Register("flaky", actions.Action{Handler: jobs.HandlerFunc(func(ctx context.Context, f jobs.Run) error {
		if seen.add(f) == 1 {
			return errors.New("first fails")
		}
		return nil
	}), Policy: jobs.Policy{Overlap: jobs.OverlapCancelOther, Retry: jobs.RetryPolicy{Attempts: 3, Backoff: testBackoff}}})
	r := e.retryRunner(t, "r1", time.Hour, DefaultClaimGrace)
	slot := time.Now().Truncate(time.Second).UTC()
	r.Fire(dueAt("flaky", slot))
	next := slot.Add(time.Second)
	r.Fire(dueAt("flaky", next)) // during the backoff: waits, asking the slot to stop
	if d := e.runDoc(t, record.RunID("flaky", next)); d.Status != record.StatusBuffered {
		t.Fatalf("a fire during the backoff: %s, want buffered", d.Status)
	}
	// The attempt comes due: it is not run, the slot is replaced.
	endBackoff(r, dueAt("flaky", slot), record.RunID("flaky", slot), 1)
	d := e.waitStatus(t, record.RunID("flaky", slot), record.StatusAbandoned)
	if d.Reason != record.ReasonReplaced || !strings.Contains(d.Error, record.RunID("flaky", next)) || !strings.Contains(d.Error, record.ErrRetryReplaced.Error()) || d.Notice == nil {
		t.Errorf("replaced slot %+v: want abandoned, reason replaced, naming %s, notified", d, record.RunID("flaky", next))
	}
	e.waitStatus(t, record.RunID("flaky", next), record.StatusSucceeded)
	fires := seen.all()
	if len(fires) != 2 || fires[0].Slot != slot || fires[1].Slot != next {
		t.Errorf("runs %+v: want the slot's first attempt, then the replacing fire (no second attempt)", fires)
	}
}
