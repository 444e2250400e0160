package triggers

import (
	"context"
	"maps"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/actions"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/jobs"
)

// insertRaw inserts docs at once and hands each, as inserted, to every
// replica, as their change streams would; it returns their _ids.
func (e *env) insertRaw(t *testing.T, docs ...bson.D) []bson.RawValue {
	t.Helper()
	ctx := context.Background()
	many := make([]any, len(docs))
	for i, d := range docs {
		many[i] = d
	}
	if _, err := e.coll.InsertMany(ctx, many); err != nil {
		t.Fatal(err)
	}
	ids := make([]bson.RawValue, len(docs))
	raws := make([]bson.Raw, len(docs))
	for i, d := range docs {
		raw, err := bson.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		raws[i], ids[i] = raw, bson.Raw(raw).Lookup("_id")
	}
	for _, s := range e.replicas {
		for _, raw := range raws {
			s.Upsert(raw)
		}
	}
	return ids
}

// Every malformed request is marked rejected, each counted once across
// three replicas: also two whose _ids are of a type that has no key (they
// used to share one and the second was only logged), and one whose status
// is not a string (the write matched only a missing status).
func TestMalformedRequestsAllRejectedOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 3)
	docs := []bson.D{
		{{Key: "_id", Value: 11}, {Key: "job_id", Value: "report"}},
		{{Key: "_id", Value: 12}, {Key: "job_id", Value: "report"}},
		{{Key: "_id", Value: bson.D{{Key: "a", Value: 1}}}, {Key: "job_id", Value: "report"}},
		{{Key: "_id", Value: 3.5}, {Key: "job_id", Value: "report"}},
		{{Key: "_id", Value: "st"}, {Key: "job_id", Value: "report"}, {Key: "status", Value: 5}},
		{{Key: "_id", Value: "nojob"}},
		{{Key: "_id", Value: "badargs"}, {Key: "job_id", Value: "report"}, {Key: "args", Value: bson.A{1}}},
	}
	ids := e.insertRaw(t, docs...)
	for i, id := range ids {
		m := e.final(t, id)
		if m[FieldStatus] != StatusRejected || m[FieldError] == nil {
			t.Errorf("request %d %v: %v, want rejected with its error", i, docs[i], m)
		}
	}
	e.idle(t)
	if n := len(e.runs("report")); n != 0 {
		t.Errorf("malformed requests ran %d times", n)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if want := map[string]int{StatusRejected: len(docs)}; !maps.Equal(e.outcomes, want) {
		t.Errorf("outcomes counted %v, want %v: each rejection once across the replicas", e.outcomes, want)
	}
}

// Many run-now requests of one job (overlap allow: they run side by side)
// asked for in the same millisecond (a script inserting them with one
// requested_at) and in the same second (ObjectIds) each run once and say
// succeeded: none is given up as not_run while scheduled_at moves past
// the records of the others.
func TestRunNowManyInOneMillisecondAllRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 3)
	e.reg.Register("many", actions.Action{Handler: jobs.HandlerFunc(func(ctx context.Context, f jobs.Run) error {
		e.mu.Lock()
		e.ran[f.JobID] = append(e.ran[f.JobID], f)
		e.mu.Unlock()
		return nil
	}), Policy: jobs.Policy{Overlap: jobs.OverlapAllow}})
	e.schedule(t, bson.D{{Key: "_id", Value: "many"}, {Key: "cron_expr", Value: "0 9 * * *"}})
	at := time.Now().UTC().Truncate(time.Millisecond)
	if at.Nanosecond() == 0 {
		at = at.Add(time.Millisecond)
	}
	const n = 150
	docs := make([]bson.D, 0, n)
	for i := range n {
		d := bson.D{{Key: "_id", Value: bson.NewObjectID()}, {Key: "job_id", Value: "many"}}
		if i%2 == 0 {
			d = append(d, bson.E{Key: "requested_at", Value: at})
		}
		docs = append(docs, d)
	}
	ids := e.insertRaw(t, docs...)
	statuses := map[any]int{}
	for _, id := range ids {
		m := e.final(t, id)
		statuses[m[FieldStatus]]++
		if m[FieldStatus] != record.StatusSucceeded {
			t.Logf("request %v: %v", id, m)
		}
	}
	if statuses[record.StatusSucceeded] != n {
		t.Errorf("statuses %v, want all %d succeeded", statuses, n)
	}
	e.idle(t)
	byRun := map[string]int{}
	for _, f := range e.runs("many") {
		byRun[f.RunID]++
	}
	for _, id := range ids {
		key, _ := KeyOf(id)
		if byRun[RunIDOf(key)] != 1 {
			t.Errorf("request %s ran %d times, want once", key, byRun[RunIDOf(key)])
		}
	}
	if len(byRun) != n {
		t.Errorf("%d distinct runs, want %d", len(byRun), n)
	}
}

// A request another replica gave up on (not_run: its deadline, a claim it
// could not make) and that a replica then runs ends with the run's own
// outcome: not_run only says nothing ran.
func TestNotRunYieldsToTheRunsOutcome(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	ctx := context.Background()
	doc := bson.D{{Key: "_id", Value: "late"}, {Key: "job_id", Value: "report"}}
	raw, _ := bson.Marshal(doc)
	if _, err := e.coll.InsertOne(ctx, doc); err != nil {
		t.Fatal(err)
	}
	id := bson.Raw(raw).Lookup("_id")
	if _, err := e.coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: "late"}},
		bson.D{{Key: "$set", Value: bson.D{{Key: FieldStatus, Value: StatusNotRun}, {Key: FieldError, Value: "given up elsewhere"}}}}); err != nil {
		t.Fatal(err)
	}
	e.replicas[0].Upsert(raw) // as inserted: this replica saw the insert before the other gave up
	e.idle(t)
	if n := len(e.runs("report")); n != 1 {
		t.Fatalf("ran %d times, want once", n)
	}
	m := e.doc(t, id)
	if m[FieldStatus] != record.StatusSucceeded || m[FieldInstance] != "a" || m[FieldRunID] != RunIDOf("late") {
		t.Errorf("request %v: want the run's outcome (succeeded on a), not not_run", m)
	}
}

// A backfill request whose slot's record is its own run (claimed by
// another replica after the request was asked for, its running write not
// landed yet) ends with the run's outcome, never already_ran.
func TestBackfillOwnRunIsNotAlreadyRan(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	ctx := context.Background()
	slot := time.Date(2026, 2, 1, 10, 0, 0, 0, time.UTC)
	asked := time.Now().UTC().Truncate(time.Millisecond)
	runID := record.RunID("every", slot)
	// Another replica claimed and ran the slot for this request.
	if _, err := e.db.Collection(record.RunsCollection).InsertOne(ctx, record.RunDoc{ID: runID, JobID: "every", ScheduledAt: slot,
		Instance: "other", Fence: asked.UnixMilli() + 5, Status: record.StatusSucceeded, StartedAt: asked.Add(5 * time.Millisecond),
		EndedAt: asked.Add(10 * time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	ids := e.insertRaw(t, bson.D{{Key: "_id", Value: BackfillIDPrefix + runID}, {Key: "job_id", Value: "every"},
		{Key: "slot", Value: slot}, {Key: "requested_at", Value: asked}})
	m := e.final(t, ids[0])
	if m[FieldStatus] != record.StatusSucceeded || m[FieldInstance] != "other" {
		t.Errorf("request %v: want its own run's outcome (succeeded on other), not %s", m, StatusAlreadyRan)
	}
	if n := len(e.runs("every")); n != 0 {
		t.Errorf("the slot ran again here (%d)", n)
	}
}
