package triggers

import (
	"context"
	"errors"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/actions"
	"github.com/cronswap/cronswap/internal/firepath"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/internal/runstore"
	"github.com/cronswap/cronswap/jobs"
	"github.com/cronswap/cronswap/schedule"
)

// holdJob is an action whose cron runs (the holders) wait until released
// or cancelled, and whose requested runs end at once.
type holdJob struct {
	release chan struct{}
	mu      sync.Mutex
	runs    []heldRun
}

type heldRun struct {
	fire       jobs.Run
	start, end time.Time
	cause      error
}

func newHoldJob() *holdJob { return &holdJob{release: make(chan struct{})} }

func (h *holdJob) Handle(ctx context.Context, f jobs.Run) error {
	h.mu.Lock()
	i := len(h.runs)
	h.runs = append(h.runs, heldRun{fire: f, start: time.Now()})
	h.mu.Unlock()
	var err error
	if !strings.HasPrefix(f.RunID, RunIDPrefix) {
		select {
		case <-h.release:
		case <-ctx.Done():
			err = context.Cause(ctx)
		}
	}
	h.mu.Lock()
	h.runs[i].end, h.runs[i].cause = time.Now(), err
	h.mu.Unlock()
	return err
}

func (h *holdJob) snapshot() []heldRun {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]heldRun(nil), h.runs...)
}

// waitFor polls cond until it holds, failing the test at the deadline.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// overlapJob registers job under policy with a holdJob and a schedule.
func (e *env) overlapJob(t *testing.T, job string, policy jobs.Overlap) *holdJob {
	t.Helper()
	h := newHoldJob()
	e.reg.Register(job, actions.Action{Handler: h, Policy: jobs.Policy{Overlap: policy}})
	e.schedule(t, bson.D{{Key: "_id", Value: job}, {Key: "cron_expr", Value: "0 * * * *"}})
	return h
}

// hold fires job's cron slot on replica i and waits for its run to start;
// the returned channel closes when the fire returns.
func (e *env) hold(t *testing.T, i int, job string, h *holdJob, slot time.Time) <-chan struct{} {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.runners[i].Fire(schedule.Due{Schedule: schedule.Schedule{ID: job, Enabled: true}, Slot: slot})
	}()
	waitFor(t, 10*time.Second, "the holder to start", func() bool { return len(h.snapshot()) == 1 })
	return done
}

// doc reads request id.
func (e *env) doc(t *testing.T, id bson.RawValue) bson.M {
	t.Helper()
	var m bson.M
	if err := e.coll.FindOne(context.Background(), bson.D{{Key: "_id", Value: id}}).Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

// waitStatus waits until request id says status and returns it.
func (e *env) waitStatus(t *testing.T, id bson.RawValue, status string) bson.M {
	t.Helper()
	var m bson.M
	waitFor(t, 20*time.Second, "request status "+status, func() bool {
		m = e.doc(t, id)
		return m[FieldStatus] == status
	})
	return m
}

// checkRequested checks that request id (final doc m) ran once as its
// own run after the holder, with a fence above the holder's slot's.
func checkRequested(t *testing.T, h *holdJob, id bson.RawValue, m bson.M, holderSlot time.Time) jobs.Run {
	t.Helper()
	key, _ := KeyOf(id)
	if m[FieldStatus] != record.StatusSucceeded || m[FieldRunID] != RunIDOf(key) {
		t.Fatalf("request %v: want succeeded under %s", m, RunIDOf(key))
	}
	if fence, _ := m[FieldFence].(int64); fence <= record.FenceOf(holderSlot) {
		t.Errorf("request's fence %v, want above the holder's %d", m[FieldFence], record.FenceOf(holderSlot))
	}
	for _, f := range []string{FieldInstance, FieldStartedAt, FieldEndedAt} {
		if m[f] == nil {
			t.Errorf("request %v: no %s", m, f)
		}
	}
	runs := h.snapshot()
	var mine []heldRun
	for _, r := range runs {
		if r.fire.RunID == RunIDOf(key) {
			mine = append(mine, r)
		}
	}
	if len(mine) != 1 {
		t.Fatalf("the request's run ran %d times, want once (runs %+v)", len(mine), runs)
	}
	if mine[0].start.Before(runs[0].end) || mine[0].fire.Slot.Nanosecond() == 0 || mine[0].fire.Fence <= runs[0].fire.Fence {
		t.Errorf("request's run %+v: want it after the holder %+v ended, off the whole second, its fence above", mine[0], runs[0])
	}
	return mine[0].fire
}

// Under buffer_one a run-now request that comes while a cron run holds
// the lock says buffered, a second one is skipped (at most one waits), and
// the first runs once when the holder ends, under its own identity and
// args; the request gets the outcome.
func TestRunNowBufferOneWaitsForTheHolder(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2)
	h := e.overlapJob(t, "buf1", jobs.OverlapBufferOne)
	slot := time.Now().Truncate(time.Second).UTC()
	done := e.hold(t, 0, "buf1", h, slot)
	id := e.insert(t, bson.D{{Key: "job_id", Value: "buf1"}, {Key: "args", Value: bson.D{{Key: "k", Value: "now"}}}})
	m := e.waitStatus(t, id, StatusBuffered)
	if key, _ := KeyOf(id); m[FieldRunID] != RunIDOf(key) || !strings.Contains(m[FieldReason].(string), record.RunID("buf1", slot)) {
		t.Errorf("buffered request %v: want its run id and the holder named", m)
	}
	second := e.final(t, e.insert(t, bson.D{{Key: "job_id", Value: "buf1"}}))
	if second[FieldStatus] != record.StatusSkipped || !strings.Contains(second[FieldError].(string), "already waiting") {
		t.Errorf("second request %v: want skipped, one already waiting", second)
	}
	if n := len(h.snapshot()); n != 1 {
		t.Fatalf("%d runs while the holder runs, want 1", n)
	}
	close(h.release)
	<-done
	f := checkRequested(t, h, id, e.final(t, id), slot)
	if string(f.Args) != `{"k":"now"}` {
		t.Errorf("args %s, want the request's", f.Args)
	}
	e.idle(t)
	if n := len(h.snapshot()); n != 2 {
		t.Errorf("%d runs, want the holder and the request's", n)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if want := map[string]int{StatusBuffered: 1, record.StatusSkipped: 1, record.StatusSucceeded: 1}; !maps.Equal(e.outcomes, want) {
		t.Errorf("outcomes counted %v, want %v: each once across the replicas", e.outcomes, want)
	}
}

// The holder's replica dies (its lease passes) with a request buffered,
// and the replica that buffered it shuts down too: the other replica's
// sweep takes the request from the lock's buffer, runs it and writes its
// outcome on the request.
func TestRunNowBufferedRunsAfterTheHolderDied(t *testing.T) {
	t.Parallel()
	const ttl = 3 * time.Second
	e := newEnvTTL(t, 2, ttl)
	h := e.overlapJob(t, "bufd", jobs.OverlapBufferOne)
	close(h.release)
	slot := time.Now().Truncate(time.Second).UTC()
	locks, runs := record.Collections(e.db)
	dead := runstore.New(locks, runs, runstore.Options{Instance: "dead"})
	out := dead.ClaimBatch(context.Background(), record.BatchClaim{Instance: "dead", Incarnation: "d1", Now: time.Now(), TTL: ttl,
		Fires: []record.FireClaim{{JobID: "bufd", Slot: slot, Overlap: jobs.OverlapBufferOne}}})
	if out[0].Err != nil || out[0].Result != record.Acquired {
		t.Fatalf("dead holder's claim: %+v", out[0])
	}
	id := e.insert(t, bson.D{{Key: "job_id", Value: "bufd"}})
	e.waitStatus(t, id, StatusBuffered)
	// The replica that buffered it (the owner) goes: another must run it.
	e.runners[0].Shutdown(5 * time.Second)
	e.replicas[0].Close()
	m := e.final(t, id)
	key, _ := KeyOf(id)
	if m[FieldStatus] != record.StatusSucceeded || m[FieldRunID] != RunIDOf(key) || m[FieldInstance] != "b" {
		t.Fatalf("request %v: want succeeded on b under %s", m, RunIDOf(key))
	}
	if fence, _ := m[FieldFence].(int64); fence <= record.FenceOf(slot) {
		t.Errorf("request's fence %v, want above the dead holder's %d", m[FieldFence], record.FenceOf(slot))
	}
	got := h.snapshot()
	if len(got) != 1 || got[0].fire.RunID != RunIDOf(key) || got[0].fire.InstanceID != "b" {
		t.Fatalf("runs %+v, want the request's once on b", got)
	}
}

// Under cancel_other a run-now request replaces the holder on another
// replica: the holder stops within 2 s (abandoned, reason replaced, naming
// the request's run), and the request runs once across three replicas.
func TestRunNowCancelOtherReplacesTheHolder(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 3)
	h := e.overlapJob(t, "canc", jobs.OverlapCancelOther)
	slot := time.Now().Truncate(time.Second).UTC()
	done := e.hold(t, 1, "canc", h, slot) // b: not the owner, after the grace
	asked := time.Now()
	id := e.insert(t, bson.D{{Key: "job_id", Value: "canc"}})
	key, _ := KeyOf(id)
	waitFor(t, 10*time.Second, "the holder to stop", func() bool { return !h.snapshot()[0].end.IsZero() })
	held := h.snapshot()[0]
	if took := held.end.Sub(asked); took > 2*time.Second || !errors.Is(held.cause, firepath.ErrCancelledByOverlap) {
		t.Errorf("holder stopped %v after the request, cause %v: want within 2s, cancelled by overlap", took, held.cause)
	}
	<-done
	checkRequested(t, h, id, e.final(t, id), slot)
	var rec bson.M
	if err := e.db.Collection(record.RunsCollection).FindOne(context.Background(), bson.D{{Key: "_id", Value: record.RunID("canc", slot)}}).Decode(&rec); err != nil {
		t.Fatal(err)
	}
	if rec["status"] != record.StatusAbandoned || rec["reason"] != record.ReasonReplaced || !strings.Contains(rec["error"].(string), RunIDOf(key)) {
		t.Errorf("holder's record %v: want abandoned, reason replaced, naming %s", rec, RunIDOf(key))
	}
	e.idle(t)
	if n := len(h.snapshot()); n != 2 {
		t.Errorf("%d runs, want the holder and the request's once", n)
	}
}

// Under skip a request that comes while a run holds the lock is skipped
// and names the holder; the holder runs on.
func TestRunNowSkippedUnderSkip(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2)
	h := e.overlapJob(t, "skp", jobs.OverlapSkip)
	slot := time.Now().Truncate(time.Second).UTC()
	done := e.hold(t, 0, "skp", h, slot)
	m := e.final(t, e.insert(t, bson.D{{Key: "job_id", Value: "skp"}}))
	if m[FieldStatus] != record.StatusSkipped || !strings.Contains(m[FieldError].(string), record.RunID("skp", slot)) {
		t.Errorf("request %v: want skipped naming the holder", m)
	}
	close(h.release)
	<-done
	if runs := h.snapshot(); len(runs) != 1 || runs[0].cause != nil {
		t.Errorf("runs %+v: want the holder alone, untouched", runs)
	}
}
