package triggers

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/internal/testmongo"
)

// A run-now run's scheduled_at is never a whole second (every cron slot
// is one), is the same for the same request, and a bump moves it on,
// still off the whole second.
func TestRunSlotNeverAWholeSecond(t *testing.T) {
	whole := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	for _, key := range []string{"a", "b", "6b0ee7100000000f08bafef9", strings.Repeat("x", 200)} {
		for _, at := range []time.Time{whole, whole.Add(999 * time.Millisecond), whole.Add(1500 * time.Microsecond)} {
			prev := time.Time{}
			for bump := range 1100 {
				s := RunSlot(key, at, bump)
				if s.Nanosecond() == 0 || s.Nanosecond()%int(time.Millisecond) != 0 {
					t.Fatalf("RunSlot(%q, %v, %d) = %v: want whole milliseconds, never a whole second", key, at, bump, s)
				}
				if !s.After(prev) {
					t.Fatalf("RunSlot(%q, %v, %d) = %v, not after %v", key, at, bump, s, prev)
				}
				prev = s
			}
			if !RunSlot(key, at, 0).Equal(RunSlot(key, at, 0)) {
				t.Fatal("not deterministic")
			}
		}
	}
	if got := RunSlot("k", whole.Add(1234*time.Millisecond), 0); !got.Equal(whole.Add(1234 * time.Millisecond)) {
		t.Errorf("a time off the whole second is kept: got %v", got)
	}
}

// Decode reads what operators write and defaults requested_at to the
// ObjectId's time; a request's final status is recognised before anything
// else, so a refused request is not refused again.
func TestDecodeRequest(t *testing.T) {
	oid := bson.NewObjectID()
	raw, _ := bson.Marshal(bson.D{{Key: "_id", Value: oid}, {Key: "job_id", Value: "j"}, {Key: "args", Value: bson.D{{Key: "a", Value: 1}}}})
	r, err := Decode(raw)
	if err != nil || r.Key != oid.Hex() || r.JobID != "j" || r.Args != `{"a":1}` || !r.RequestedAt.Equal(oid.Timestamp()) || r.Backfill() {
		t.Fatalf("Decode: %+v, %v", r, err)
	}
	raw, _ = bson.Marshal(bson.D{{Key: "_id", Value: "x"}, {Key: "job_id", Value: 3}, {Key: "status", Value: StatusRejected}})
	r, err = Decode(raw)
	if err == nil || !Final(r.Status) {
		t.Fatalf("a refused request: %+v, %v: want the error and its final status", r, err)
	}
}

// A request left running by a replica that died mid-run gets its run's
// outcome from the record at the next full read.
func TestReplaceAllReconcilesRunningRequest(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	ctx := context.Background()
	runID := RunIDOf("dead")
	if _, err := e.db.Collection(record.RunsCollection).InsertOne(ctx, record.RunDoc{ID: runID, JobID: "report",
		ScheduledAt: time.Now().Truncate(time.Second).Add(7 * time.Millisecond), Status: record.StatusAbandoned,
		Error: "lease passed", AbandonedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "dead"}, {Key: "job_id", Value: "report"},
		{Key: "status", Value: StatusRunning}, {Key: "run_id", Value: runID}}); err != nil {
		t.Fatal(err)
	}
	raw, _ := e.coll.FindOne(ctx, bson.D{{Key: "_id", Value: "dead"}}).Raw()
	e.replicas[0].ReplaceAll(func(yield func(bson.Raw, error) bool) { yield(raw, nil) })
	m := e.final(t, raw.Lookup("_id"))
	if m[FieldStatus] != record.StatusAbandoned || m[FieldError] != "lease passed" {
		t.Errorf("reconciled request %v: want abandoned with the record's error", m)
	}
	if n := len(e.runs("report")); n != 0 {
		t.Errorf("a running request ran again (%d)", n)
	}
}

// A run's end written before its running write (they go in different
// batches, two of which may be out at once) still leaves the request
// with the run's start, fence and instance; the late running write then
// matches nothing and changes nothing.
func TestFinishBeforeTheRunningWriteKeepsTheStart(t *testing.T) {
	t.Parallel()
	db := testmongo.NewDatabase(t, testmongo.Client(t))
	ctx := context.Background()
	coll := Collection(db)
	_, runs := record.Collections(db)
	store := NewStore(coll, runs, nil, time.Hour, "a")
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "r1"}, {Key: "job_id", Value: "report"}}); err != nil {
		t.Fatal(err)
	}
	raw, err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: "r1"}}).Raw()
	if err != nil {
		t.Fatal(err)
	}
	id := raw.Lookup("_id")
	startedAt := time.Now().Add(-time.Second).Truncate(time.Millisecond)
	start := RunStart{Lease: record.Lease{JobID: "report", RunID: RunIDOf("r1"), Instance: "a", Fence: 42}, At: startedAt}
	if err := store.Finish(ctx, id, RunIDOf("r1"), start, record.StatusSucceeded, "", time.Now()); err != nil {
		t.Fatal(err)
	}
	late := make(chan error, 1)
	store.StartedLater(id, start.Lease, startedAt, func(err error) { late <- err })
	if err := <-late; err != nil {
		t.Fatal(err)
	}
	var m bson.M
	if err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: "r1"}}).Decode(&m); err != nil {
		t.Fatal(err)
	}
	started, _ := m[FieldStartedAt].(bson.DateTime)
	if m[FieldStatus] != record.StatusSucceeded || m[FieldInstance] != "a" || m[FieldFence] != int64(42) ||
		!started.Time().Equal(startedAt) || m[FieldEndedAt] == nil {
		t.Errorf("request %v: want succeeded on a, fence 42, started at %v, an end", m, startedAt)
	}
}
