package runstore

import (
	"errors"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/notify"
	"github.com/cronswap/cronswap/internal/record"
)

// An operator's release frees a lock held with the fence the operator saw,
// and then the holder's renewal finds its lease lost; a release with
// another fence, or of a free lock, changes nothing.
func TestReleaseLock(t *testing.T) {
	t.Parallel()
	e := newStoreEnv(t)
	a := e.replica("a", "a1")
	l := a.claimOne(t, forbid("j", base), base, record.Acquired).Lease
	at := base.Add(time.Second)
	if err := a.ReleaseLock(testCtx(t), "j", l.Fence+1, at); !errors.Is(err, record.ErrLockChanged) {
		t.Fatalf("release with another fence: %v, want ErrLockChanged", err)
	}
	if lk := e.lock(t, "j"); lk.State != record.LockRunning || lk.RunID != l.RunID {
		t.Fatalf("lock after a refused release: %+v", lk)
	}
	if err := a.ReleaseLock(testCtx(t), "j", l.Fence, at); err != nil {
		t.Fatal(err)
	}
	if lk := e.lock(t, "j"); lk.State != record.LockFree || lk.Holder != "" || lk.RunID != "" || !lk.LeaseUntil.Equal(at) {
		t.Fatalf("lock after the release: %+v, want free", lk)
	}
	lost, err := a.RenewBatch(testCtx(t), []record.Lease{l}, at, 10*time.Second)
	if err != nil || len(lost) != 1 || lost[0].RunID != l.RunID {
		t.Fatalf("renewal after the release: lost %+v, %v; want the run's lease lost", lost, err)
	}
	if err := a.ReleaseLock(testCtx(t), "j", l.Fence, at); !errors.Is(err, record.ErrLockChanged) {
		t.Fatalf("release of a free lock: %v, want ErrLockChanged", err)
	}
}

// Resuming a paused job records who and when, once; a job that is not
// paused is left alone.
func TestResumePaused(t *testing.T) {
	t.Parallel()
	e := newStoreEnv(t)
	a := e.replica("a", "a1")
	pauses := record.PausesCollectionOf(e.db)
	if _, err := pauses.InsertOne(testCtx(t), bson.D{{Key: "_id", Value: "j"}, {Key: "state", Value: record.PauseStatePaused},
		{Key: "paused_at", Value: base}, {Key: "updated_at", Value: base}}); err != nil {
		t.Fatal(err)
	}
	at := base.Add(time.Hour)
	for i, want := range []bool{true, false} {
		resumed, err := a.ResumePaused(testCtx(t), "j", "alice", at)
		if err != nil || resumed != want {
			t.Fatalf("resume %d: %v, %v; want %v", i+1, resumed, err, want)
		}
	}
	if resumed, err := a.ResumePaused(testCtx(t), "never-paused", "alice", at); err != nil || resumed {
		t.Fatalf("resume of a job never paused: %v, %v", resumed, err)
	}
	p, paused, err := a.Paused(testCtx(t), "j")
	if err != nil || paused || p.State != record.PauseStateResumed || p.ResumedBy != "alice" || !p.ResumedAt.Equal(at) {
		t.Fatalf("pause after the resume: %+v paused=%v %v", p, paused, err)
	}
}

// Only a missed record of one slot gives way to a backfill; a range stays.
func TestForgetMissed(t *testing.T) {
	t.Parallel()
	e := newStoreEnv(t)
	a := e.replica("a", "a1")
	one := record.RunDoc{ID: record.MissedID("j", base), JobID: "j", ScheduledAt: base, LastScheduledAt: base, Count: 1,
		Status: record.StatusMissed, Reason: record.MissedNoReplica}
	t1 := base.Add(time.Hour)
	rng := record.RunDoc{ID: record.MissedID("j", t1), JobID: "j", ScheduledAt: t1, LastScheduledAt: t1.Add(time.Minute), Count: 2,
		Status: record.StatusMissed, Reason: record.MissedNoReplica}
	if _, err := e.runs.InsertMany(testCtx(t), []any{one, rng}); err != nil {
		t.Fatal(err)
	}
	if gone, err := a.ForgetMissed(testCtx(t), rng); err != nil || gone {
		t.Fatalf("forget a range: %v, %v; want it kept", gone, err)
	}
	if gone, err := a.ForgetMissed(testCtx(t), one); err != nil || !gone {
		t.Fatalf("forget a one-slot record: %v, %v; want it gone", gone, err)
	}
	if n, _ := e.runs.CountDocuments(testCtx(t), bson.D{{Key: "_id", Value: one.ID}}); n != 0 {
		t.Fatal("the one-slot missed record is still there")
	}
	e.run(t, rng.ID)
}

// The relay's sources are job_runs and job_pauses: their notices are read,
// and cleared only while the document carries the same notice; a bad
// notice is cleared with its error.
func TestNoticeSources(t *testing.T) {
	t.Parallel()
	e := newStoreEnv(t)
	a := e.replica("a", "a1")
	sources := a.NoticeSources()
	if len(sources) != 2 || sources[0].Name() != record.RunsCollection || sources[1].Name() != record.PausesCollection {
		t.Fatalf("sources %v, want job_runs and job_pauses", sources)
	}
	runs, pauses := sources[0], sources[1]
	ctx := testCtx(t)
	if _, err := e.runs.InsertMany(ctx, []any{
		bson.D{{Key: "_id", Value: "moved"}, {Key: "job_id", Value: "j"}, {Key: "scheduled_at", Value: base},
			notify.Outbox(notify.KindFailed, base)},
		bson.D{{Key: "_id", Value: "newer"}, {Key: "job_id", Value: "k"}, {Key: "scheduled_at", Value: base},
			notify.Outbox(notify.KindAbandoned, base.Add(time.Second))},
		bson.D{{Key: "_id", Value: "bad"}, {Key: "job_id", Value: "l"}, {Key: "scheduled_at", Value: base},
			{Key: notify.OutboxField, Value: bson.D{{Key: "kind", Value: 7}}}},
		bson.D{{Key: "_id", Value: "quiet"}, {Key: "job_id", Value: "m"}, {Key: "scheduled_at", Value: base}},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := record.PausesCollectionOf(e.db).InsertOne(ctx, bson.D{{Key: "_id", Value: "j"}, notify.PauseNotice(base, "paused")}); err != nil {
		t.Fatal(err)
	}
	raws, err := runs.Notices(ctx, 100)
	if err != nil || len(raws) != 3 {
		t.Fatalf("notices of job_runs: %d, %v; want 3", len(raws), err)
	}
	if raws, err := pauses.Notices(ctx, 100); err != nil || len(raws) != 1 {
		t.Fatalf("notices of job_pauses: %d, %v; want 1", len(raws), err)
	}
	id := func(s string) bson.RawValue {
		_, v, err := bson.MarshalValue(s)
		if err != nil {
			t.Fatal(err)
		}
		return bson.RawValue{Type: bson.TypeString, Value: v}
	}
	err = runs.ClearNotices(ctx, []notify.Clear{
		{ID: id("moved"), Notice: notify.Notice{Kind: notify.KindFailed, At: base}},
		{ID: id("newer"), Notice: notify.Notice{Kind: notify.KindFailed, At: base}}, // an older notice than it carries
		{ID: id("bad"), Bad: "notice is a string"},
	})
	if err != nil {
		t.Fatal(err)
	}
	has := func(docID, field string) bool {
		n, err := e.runs.CountDocuments(ctx, bson.D{{Key: "_id", Value: docID}, {Key: field, Value: bson.D{{Key: "$exists", Value: true}}}})
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	if has("moved", notify.OutboxField) || !has("newer", notify.OutboxField) || has("bad", notify.OutboxField) ||
		!has("bad", notify.NoticeErrorField) {
		t.Fatal("after the clear: want moved's notice gone, newer's kept, bad's gone with its error")
	}
}
