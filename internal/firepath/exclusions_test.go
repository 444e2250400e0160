package firepath

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/actions"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/internal/runstore"
	"github.com/cronswap/cronswap/jobs"
	"github.com/cronswap/cronswap/schedule"
)

func lookupString(raw bson.Raw, key string) (string, bool) {
	val, err := raw.LookupErr(key)
	if err != nil {
		return "", false
	}
	return val.StringValueOK()
}

// bufferOf returns the buffer array of a lock document; ok is false when
// the field is there but is not an array (damage: TakeBuffered clears it).
func bufferOf(raw bson.Raw) (bson.Raw, bool) {
	val, err := raw.LookupErr(record.LockBufferField)
	if err != nil {
		return nil, true
	}
	arr, ok := val.ArrayOK()
	return bson.Raw(arr), ok
}

// Three replicas fire a job every second for a while; a window covers some
// of its slots for category billing only. The slots inside are recorded
// skipped once each with the window's reason and never run; the others
// run once; a job of another category is not touched. A fire inside the
// window does not wait for admission (here: the only worker is busy).
func TestFirePathBlackoutSkipsInsideWindow(t *testing.T) {
	t.Parallel()
	e := newFireEnv(t)
	var ran sync.Map
	var runs atomic.Int64
	e.reg.Register("billing_job", actions.Action{Handler: jobs.HandlerFunc(func(ctx context.Context, f jobs.Run) error {
		runs.Add(1)
		if _, dup := ran.LoadOrStore(f.RunID, true); dup {
			t.Errorf("%s ran twice", f.RunID)
		}
		return nil
	}), Policy: jobs.Policy{Overlap: jobs.OverlapAllow}})
	// Slots just past, so that no replica waits for them to come.
	start := time.Now().Truncate(time.Second).Add(-20 * time.Second)
	from, to := start.Add(3*time.Second), start.Add(6*time.Second)
	window := func(jobID, category string, slot time.Time) (record.Exclusion, bool) {
		if category == "billing" && !slot.Before(from) && slot.Before(to) {
			return record.BlackoutExclusion("freeze", "year-end freeze"), true
		}
		return record.Exclusion{}, false
	}
	var replicas []*Runner
	for _, inst := range []string{"r1", "r2", "r3"} {
		r := NewRunner(RunnerOptions{Registry: e.reg, InstanceID: inst, Logger: slog.New(slog.DiscardHandler),
			Store: runstore.New(e.locks, e.runs, runstore.Options{Instance: inst, Logger: slog.New(slog.DiscardHandler)}),
			TTL:   time.Minute, Blackout: window, Owns: func(string) bool { return inst == "r1" }, ClaimGrace: 20 * time.Millisecond,
			Hooks: Hooks{RunEnded: func(id, status string) { e.record(&e.ended, id+":"+status) }}})
		t.Cleanup(func() { r.Shutdown(30 * time.Second) })
		replicas = append(replicas, r)
	}
	due := func(id, category string, slot time.Time) schedule.Due {
		d := dueAt(id, slot)
		d.Schedule.Category = category
		d.Schedule.Job = "billing_job"
		return d
	}
	const slots = 9
	for i := range slots {
		// Slot by slot, as the engine fires them (a slot older than one
		// already claimed is not run).
		slot := start.Add(time.Duration(i) * time.Second)
		var wg sync.WaitGroup
		for _, r := range replicas {
			wg.Go(func() { r.Fire(due("billing", "billing", slot)) })
			wg.Go(func() { r.Fire(due("reports", "reports", slot)) })
		}
		wg.Wait()
	}
	recs := e.runDocs(t, "billing")
	if len(recs) != slots {
		t.Fatalf("billing: %d records, want %d: %+v", len(recs), slots, recs)
	}
	for _, rec := range recs {
		inside := !rec.ScheduledAt.Before(from) && rec.ScheduledAt.Before(to)
		switch {
		case inside && (rec.Status != record.StatusSkipped || rec.BlackoutID != "freeze" || rec.Reason != "year-end freeze"):
			t.Errorf("slot %s inside the window: %+v, want skipped by freeze", rec.ScheduledAt, rec)
		case !inside && rec.Status != record.StatusSucceeded:
			t.Errorf("slot %s outside the window: %+v, want succeeded", rec.ScheduledAt, rec)
		}
	}
	if got := len(e.runDocs(t, "reports")); got != slots {
		t.Errorf("reports (another category): %d records, want %d runs", got, slots)
	}
	if n := runs.Load(); n != 2*slots-3 {
		t.Errorf("%d actions ran, want %d (the 3 slots of billing inside the window not)", n, 2*slots-3)
	}
	if n := e.count(&e.ended, "billing:skipped"); n != 3 {
		t.Errorf("%d skipped ends reported, want 3", n)
	}
}

// A fire in a blackout window is recorded at once even while the gate is
// full: it runs nothing, so it does not wait for a worker.
func TestFirePathBlackoutDoesNotWaitForAdmission(t *testing.T) {
	t.Parallel()
	e := newFireEnv(t)
	release := make(chan struct{})
	started := make(chan struct{})
	e.reg.Register("busy", actions.Action{Handler: jobs.HandlerFunc(func(ctx context.Context, f jobs.Run) error {
		close(started)
		<-release
		return nil
	}), Policy: jobs.Policy{Overlap: jobs.OverlapAllow}})
	e.reg.Register("quiet", actions.Action{Handler: jobs.HandlerFunc(func(ctx context.Context, f jobs.Run) error { return nil })})
	r := NewRunner(RunnerOptions{Registry: e.reg, InstanceID: "r1", Logger: slog.New(slog.DiscardHandler), Workers: 1,
		Store: runstore.New(e.locks, e.runs, runstore.Options{Instance: "r1", Logger: slog.New(slog.DiscardHandler)}),
		TTL:   time.Minute, StartingDeadline: time.Minute,
		Blackout: func(jobID, _ string, _ time.Time) (record.Exclusion, bool) {
			return record.BlackoutExclusion("w", "r"), jobID == "quiet"
		}})
	t.Cleanup(func() { close(release); r.Shutdown(30 * time.Second) })
	slot := time.Now().Truncate(time.Second)
	go r.Fire(dueAt("busy", slot))
	<-started
	done := make(chan struct{})
	go func() { defer close(done); r.Fire(dueAt("quiet", slot)) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the blackout fire waited for the busy worker")
	}
	if rec := e.run(t, record.RunID("quiet", slot)); rec.Status != record.StatusSkipped || rec.BlackoutID != "w" {
		t.Fatalf("record %+v, want skipped by w", rec)
	}
	var raw bson.Raw
	raw, _ = e.runs.FindOne(testCtx(t), bson.D{{Key: record.FieldBlackoutID, Value: "w"}}).Raw()
	if raw == nil {
		t.Fatalf("no record found by %s", record.FieldBlackoutID)
	}
}

// storeEnv is a database of the test server with job_locks and job_runs.
type storeEnv struct {
	db    *mongo.Database
	locks *mongo.Collection
	runs  *mongo.Collection
}

func (e storeEnv) replica(instance, incarnation string) replica {
	return replica{runstore.New(e.locks, e.runs, runstore.Options{Instance: instance, Logger: slog.New(slog.DiscardHandler)}),
		instance, incarnation}
}

func (e storeEnv) lock(t testing.TB, id string) record.LockDoc {
	t.Helper()
	var d record.LockDoc
	if err := e.locks.FindOne(testCtx(t), bson.D{{Key: "_id", Value: id}}).Decode(&d); err != nil {
		t.Fatalf("lock %s: %v", id, err)
	}
	return d
}

func (e storeEnv) runDocs(t testing.TB, jobID string) []record.RunDoc {
	t.Helper()
	cur, err := e.runs.Find(testCtx(t), bson.D{{Key: "job_id", Value: jobID}},
		options.Find().SetSort(bson.D{{Key: "scheduled_at", Value: 1}}))
	if err != nil {
		t.Fatal(err)
	}
	var out []record.RunDoc
	if err := cur.All(testCtx(t), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func (e storeEnv) run(t testing.TB, runID string) record.RunDoc {
	t.Helper()
	var d record.RunDoc
	if err := e.runs.FindOne(testCtx(t), bson.D{{Key: "_id", Value: runID}}).Decode(&d); err != nil {
		t.Fatalf("run %s: %v", runID, err)
	}
	return d
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func (e storeEnv) bufferRunIDs(t *testing.T, job string) []string {
	t.Helper()
	raw, err := e.locks.FindOne(testCtx(t), bson.D{{Key: "_id", Value: job}}).Raw()
	if err != nil {
		t.Fatalf("lock %s: %v", job, err)
	}
	arr, ok := bufferOf(raw)
	if !ok {
		t.Fatalf("lock %s: buffer not an array: %s", job, raw)
	}
	var ids []string
	if arr != nil {
		vals, _ := bson.RawArray(arr).Values()
		for _, v := range vals {
			id, _ := lookupString(v.Document(), "run_id")
			ids = append(ids, id)
		}
	}
	return ids
}
