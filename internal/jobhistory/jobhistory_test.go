package jobhistory_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/internal/history"
	"github.com/cronswap/cronswap/internal/jobhistory"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/internal/testmongo"
	"github.com/cronswap/cronswap/internal/triggers"
)

func ctx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

var t0 = time.Date(2027, 3, 1, 10, 0, 0, 0, time.UTC)

// mongoshID is the ObjectId of the run-now request mongosh inserts.
func mongoshID() bson.ObjectID {
	id, _ := bson.ObjectIDFromHex("6b8542180000000000000007")
	return id
}

// seed writes, for job "a": a run-now by alice at t0+1m (with args, run
// and succeeded), a mongosh run-now without requested_at or requester at
// t0+2m (its ObjectId's time), a backfill by bob of three slots at t0+3m
// (one succeeded, two pending), a rejected request at t0+4m, a resume by
// carol at t0+5m; and what must not be listed: requests of job "b", a
// string-id run-now and a backfill request that do not say when.
func seed(t *testing.T, db *mongo.Database) {
	t.Helper()
	coll := triggers.Collection(db)
	if err := triggers.EnsureIndexes(ctx(t), coll); err != nil {
		t.Fatal(err)
	}
	args, _ := bson.Marshal(bson.D{{Key: "region", Value: "eu"}})
	id, err := triggers.RunNow(ctx(t), coll, "a", args, "alice", t0.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := coll.UpdateOne(ctx(t), bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$set", Value: bson.D{
		{Key: triggers.FieldStatus, Value: record.StatusSucceeded}, {Key: triggers.FieldRunID, Value: triggers.RunIDOf(id.Hex())}}}}); err != nil {
		t.Fatal(err)
	}
	slots := []time.Time{t0.Add(-3 * time.Hour), t0.Add(-2 * time.Hour), t0.Add(-time.Hour)}
	var plan []triggers.BackfillSlot
	for _, s := range slots {
		plan = append(plan, triggers.BackfillSlot{Slot: s, RunID: record.RunID("a", s)})
	}
	if n, err := triggers.RequestBackfill(ctx(t), coll, "a", plan, "bob", false, t0.Add(3*time.Minute)); err != nil || n != 3 {
		t.Fatalf("backfill: %d %v", n, err)
	}
	if _, err := coll.UpdateOne(ctx(t), bson.D{{Key: "_id", Value: triggers.BackfillIDPrefix + plan[1].RunID}},
		bson.D{{Key: "$set", Value: bson.D{{Key: triggers.FieldStatus, Value: record.StatusSucceeded}}}}); err != nil {
		t.Fatal(err)
	}
	docs := []any{
		bson.D{{Key: "_id", Value: mongoshID()}, {Key: "job_id", Value: "a"}},
		bson.D{{Key: "_id", Value: "bad-one"}, {Key: "job_id", Value: "a"}, {Key: "requested_at", Value: t0.Add(4 * time.Minute)},
			{Key: "requested_by", Value: "dave"}, {Key: "status", Value: triggers.StatusRejected}, {Key: "error", Value: "invalid trigger"}},
		bson.D{{Key: "_id", Value: "when-unknown"}, {Key: "job_id", Value: "a"}},
		bson.D{{Key: "_id", Value: "backfill/undated"}, {Key: "job_id", Value: "a"}, {Key: "slot", Value: t0}},
		bson.D{{Key: "_id", Value: bson.NewObjectIDFromTimestamp(t0.Add(2*time.Minute + time.Second))}, {Key: "job_id", Value: "b"}},
		bson.D{{Key: "_id", Value: "b-run"}, {Key: "job_id", Value: "b"}, {Key: "requested_at", Value: t0.Add(time.Minute)}},
	}
	if _, err := coll.InsertMany(ctx(t), docs); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Collection(record.PausesCollection).InsertOne(ctx(t), bson.D{{Key: "_id", Value: "a"},
		{Key: "state", Value: record.PauseStateResumed}, {Key: "paused_at", Value: t0}, {Key: "resumed_at", Value: t0.Add(5 * time.Minute)},
		{Key: "resumed_by", Value: "carol"}, {Key: "updated_at", Value: t0.Add(5 * time.Minute)}}); err != nil {
		t.Fatal(err)
	}
}

// line renders an operation for comparison.
func line(o jobhistory.Operation) string {
	s := o.At.Format("15:04") + " " + o.Op + " by " + o.By
	if o.Op == jobhistory.OpRunNow {
		s += " " + o.Status + " run " + o.RunID + " args " + string(o.Args) + " error " + o.Error
	}
	if o.Slots != nil {
		s += " " + o.Slots.First.Format("15:04") + ".." + o.Slots.Last.Format("15:04")
		for _, st := range []string{record.StatusSucceeded, triggers.StatusPending} {
			s += " " + st + "=" + string(rune('0'+o.Slots.Statuses[st]))
		}
		s += " of " + string(rune('0'+o.Slots.Count))
	}
	return s
}

// Every operation is derived from its own record: who and when, the
// request's outcome, a backfill as one operation over its slots; what
// does not say when, and other jobs, are left out.
func TestReadDerivesTheOperationsOfAJob(t *testing.T) {
	db := testmongo.NewDatabase(t, testmongo.Client(t))
	seed(t, db)
	ops, err := jobhistory.Read(ctx(t), db, "a", jobhistory.Query{})
	if err != nil {
		t.Fatal(err)
	}
	var runNowID string
	for _, o := range ops {
		if o.By == "alice" {
			runNowID = o.TriggerID
		}
	}
	want := []string{
		`10:01 run_now by alice succeeded run trigger/` + runNowID + ` args {"region":"eu"} error `,
		`10:02 run_now by  pending run trigger/` + mongoshID().Hex() + " args  error ",
		`10:03 backfill by bob 07:00..09:00 succeeded=1 pending=2 of 3`,
		`10:04 run_now by dave rejected run  args  error invalid trigger`,
		`10:05 resume_after_failures by carol`,
	}
	if len(ops) != len(want) {
		t.Fatalf("%d operations, want %d: %+v", len(ops), len(want), ops)
	}
	for i, o := range ops {
		if got := line(o); !strings.HasPrefix(got, want[i]) {
			t.Errorf("operation %d: %q, want %q", i, got, want[i])
		}
	}

	// A range, and the newest first with a limit.
	ops, err = jobhistory.Read(ctx(t), db, "a", jobhistory.Query{From: t0.Add(2 * time.Minute), To: t0.Add(4 * time.Minute)})
	if err != nil || len(ops) != 3 || ops[0].At != t0.Add(2*time.Minute) || ops[2].Op != jobhistory.OpRunNow || ops[2].By != "dave" {
		t.Fatalf("range: %+v %v", ops, err)
	}
	ops, err = jobhistory.Read(ctx(t), db, "a", jobhistory.Query{Limit: 2, NewestFirst: true})
	if err != nil || len(ops) != 2 || ops[0].Op != jobhistory.OpResumeAfterFailures || ops[1].By != "dave" {
		t.Fatalf("newest 2: %+v %v", ops, err)
	}
}

// List merges the edits with the operations, newest first, limited.
func TestListMergesEditsAndOperations(t *testing.T) {
	db := testmongo.NewDatabase(t, testmongo.Client(t))
	seed(t, db)
	edits := []any{
		history.Entry{ID: "e1", JobID: "a", At: t0, Op: history.OpInsert, Changes: []history.Change{}},
		history.Entry{ID: "e2", JobID: "a", At: t0.Add(150 * time.Second), Op: history.OpUpdate, UpdatedBy: "erin",
			UpdateMessage: "earlier", Changes: []history.Change{}},
		history.Entry{ID: "e3", JobID: "a", At: t0.Add(5 * time.Minute), Op: history.OpUpdate, Changes: []history.Change{}},
	}
	if _, err := db.Collection(history.CollectionName).InsertMany(ctx(t), edits); err != nil {
		t.Fatal(err)
	}
	items, err := jobhistory.List(ctx(t), db, "a", 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, it := range items {
		if it.Edit != nil {
			got = append(got, "edit "+it.Edit.ID)
		} else {
			got = append(got, it.Operation.Op+" "+it.Operation.By)
		}
	}
	want := "resume_after_failures carol|edit e3|run_now dave|backfill bob|edit e2|run_now |run_now alice|edit e1"
	if strings.Join(got, "|") != want {
		t.Fatalf("list:\n%s\nwant:\n%s", strings.Join(got, "|"), want)
	}
	items, err = jobhistory.List(ctx(t), db, "a", 3)
	if err != nil || len(items) != 3 || items[2].Operation == nil || items[2].Operation.By != "dave" {
		t.Fatalf("list of 3: %+v %v", items, err)
	}
}
