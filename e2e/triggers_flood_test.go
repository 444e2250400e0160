package e2e

// A flood of run-now and backfill requests inserted at once across three
// replicas whose connection pools are small (the operator's 5,000
// requests against pools of 100, scaled down): every valid request runs
// exactly once and carries its final status within a minute, the status
// agrees with the action's ledger, every malformed request is rejected
// once, no claim is recorded database_unreachable and no run abandoned.

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/internal/triggers"
)

// floodPool is each replica's connection pool in the flood test: 1,000
// requests against 20 connections, as 5,000 against the driver's 100.
const floodPool = 20

// floodDeadline is how long after the insert every request must carry its
// final status.
const floodDeadline = time.Minute

// idKey renders a request's _id as its raw value prints.
func idKey(id any) string {
	typ, v, err := bson.MarshalValue(id)
	if err != nil {
		panic(err)
	}
	return bson.RawValue{Type: typ, Value: v}.String()
}

// trigStatuses counts the requests with ids by status ("" pending) and
// returns the documents by idKey.
func trigStatuses(t *testing.T, db *mongo.Database, ids []any) (map[string]int, map[string]triggers.Doc) {
	t.Helper()
	cur, err := db.Collection(triggers.CollectionName).Find(testCtx(t), bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}})
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	docs := map[string]triggers.Doc{}
	for cur.Next(testCtx(t)) {
		var d triggers.Doc
		if err := bson.Unmarshal(cur.Current, &d); err != nil {
			// A malformed request: only what the daemon wrote.
			d.Status, _ = cur.Current.Lookup(triggers.FieldStatus).StringValueOK()
		}
		counts[d.Status]++
		docs[cur.Current.Lookup("_id").String()] = d
	}
	if err := cur.Err(); err != nil {
		t.Fatal(err)
	}
	return counts, docs
}

// floodWait waits until every request of ids has a final status, at most
// floodDeadline from start, and returns how long it took.
func floodWait(t *testing.T, db *mongo.Database, ids []any, start time.Time, what string) time.Duration {
	t.Helper()
	var counts map[string]int
	for {
		counts, _ = trigStatuses(t, db, ids)
		open := counts[""] + counts[triggers.StatusRunning] + counts[triggers.StatusBuffered]
		if open == 0 {
			return time.Since(start)
		}
		if time.Since(start) > floodDeadline {
			t.Fatalf("%s: %v after %s: want every request ended within %s", what, counts, time.Since(start).Round(time.Millisecond), floodDeadline)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// floodRecordsClean fails the test for run records that say the database
// was unreachable or a run was abandoned.
func floodRecordsClean(t *testing.T, db *mongo.Database) {
	t.Helper()
	for _, bad := range []bson.D{
		{{Key: "reason", Value: record.MissedUnreachable}},
		{{Key: "status", Value: record.StatusAbandoned}},
		{{Key: "status", Value: record.StatusMissed}},
	} {
		n, err := db.Collection(record.RunsCollection).CountDocuments(testCtx(t), bad)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			t.Errorf("%d run records match %v, want none while the database is up", n, bad)
		}
	}
}

func TestTriggersFloodAcrossReplicas(t *testing.T) {
	uri, db := setup(t)
	rec := fpNewRecorder(t)
	sep := "?"
	if strings.Contains(uri, "?") {
		sep = "&"
	}
	ds := startReplicas(t, uri+sep+fmt.Sprintf("maxPoolSize=%d", floodPool), db.Name(), 3, "", rec.jobsYAML("allow"))
	const runJobs, perJob = 10, 100
	const fillJobs, slotsPerJob = 20, 10
	var ids []string
	for j := range runJobs {
		id := fmt.Sprintf("flood_%02d", j)
		ids = append(ids, id)
		insert(t, db, bson.D{{Key: "_id", Value: id}, {Key: "cron_expr", Value: "0 0 3 1 1 *"}, {Key: "job", Value: "hit"}})
	}
	// Backfilled jobs: paused, so that the daemons fire none of their
	// slots themselves.
	for j := range fillJobs {
		id := fmt.Sprintf("fill_%02d", j)
		ids = append(ids, id)
		insert(t, db, bson.D{{Key: "_id", Value: id}, {Key: "cron_expr", Value: "0 * * * * *"}, {Key: "job", Value: "hit"}, {Key: "enabled", Value: false}})
	}
	waitArmed(t, ds, ids[:runJobs])
	trigStreamOpen(t, ds)

	// Run now: 1,000 requests for 10 jobs, half with one requested_at (a
	// script's), in one insertMany, with malformed ones among them.
	asked := time.Now().UTC()
	var docs []any
	var valid, bad []any
	for k := range runJobs * perJob {
		oid := bson.NewObjectID()
		d := bson.D{{Key: "_id", Value: oid}, {Key: "job_id", Value: ids[k%runJobs]}}
		if k%2 == 0 {
			d = append(d, bson.E{Key: "requested_at", Value: asked})
		}
		if k%7 == 0 {
			d = append(d, bson.E{Key: "args", Value: bson.D{{Key: "k", Value: k}}})
		}
		docs = append(docs, d)
		valid = append(valid, oid)
	}
	malformed := []bson.D{
		{{Key: "_id", Value: 1}, {Key: "job_id", Value: ids[0]}},
		{{Key: "_id", Value: 2}, {Key: "job_id", Value: ids[1]}},
		{{Key: "_id", Value: "bad_status"}, {Key: "job_id", Value: ids[2]}, {Key: "status", Value: 7}},
		{{Key: "_id", Value: "no_job"}},
		{{Key: "_id", Value: "no_schedule"}, {Key: "job_id", Value: "nope"}},
		{{Key: "_id", Value: "bad_args"}, {Key: "job_id", Value: ids[3]}, {Key: "args", Value: "x"}},
	}
	for i, d := range malformed {
		at := 1 + i*(len(docs)/len(malformed))
		docs = append(docs[:at], append([]any{d}, docs[at:]...)...)
		bad = append(bad, d[0].Value)
	}
	start := time.Now()
	if _, err := db.Collection(triggers.CollectionName).InsertMany(testCtx(t), docs, options.InsertMany().SetOrdered(false)); err != nil {
		t.Fatal(err)
	}
	took := floodWait(t, db, append(append([]any{}, valid...), bad...), start, "run-now flood")
	counts, got := trigStatuses(t, db, valid)
	t.Logf("run-now flood: %d requests (+%d malformed) ended in %s: %v", len(valid), len(bad), took.Round(time.Millisecond), counts)
	if counts[record.StatusSucceeded] != len(valid) {
		t.Errorf("run-now statuses %v: want all %d succeeded", counts, len(valid))
	}
	_, gotBad := trigStatuses(t, db, bad)
	for _, id := range bad {
		if d := gotBad[idKey(id)]; d.Status != triggers.StatusRejected {
			t.Errorf("malformed request %v: %+v, want rejected", id, d)
		}
	}
	// The ledger: each valid request's run exactly once, where the
	// request says.
	byRun := map[string][]fpHit{}
	for _, h := range rec.snapshot() {
		byRun[h.RunID] = append(byRun[h.RunID], h)
	}
	for _, id := range valid {
		oid := id.(bson.ObjectID)
		runID := triggers.RunIDOf(oid.Hex())
		hits, d := byRun[runID], got[idKey(oid)]
		if len(hits) != 1 {
			t.Errorf("request %s ran %d times, want once (its status %q)", oid.Hex(), len(hits), d.Status)
			continue
		}
		if d.RunID != runID || d.Instance != hits[0].Instance {
			t.Errorf("request %s: run %q on %q, the ledger says %s on %s", oid.Hex(), d.RunID, d.Instance, runID, hits[0].Instance)
		}
	}

	// Backfill: 10 past slots of each of 20 jobs at once, oldest first in
	// the insert.
	var fill []any
	docs = docs[:0]
	end := time.Now().UTC().Truncate(time.Minute).Add(-time.Minute)
	for s := range slotsPerJob {
		slot := end.Add(time.Duration(s-slotsPerJob+1) * time.Minute)
		for j := range fillJobs {
			job := ids[runJobs+j]
			id := triggers.BackfillIDPrefix + record.RunID(job, slot)
			// The jobs were created just now: their slots are before
			// their first sighting, which a request must say it means.
			docs = append(docs, bson.D{{Key: "_id", Value: id}, {Key: "job_id", Value: job}, {Key: "slot", Value: slot},
				{Key: "requested_at", Value: time.Now()}, {Key: triggers.FieldBeforeFirstSeen, Value: true}})
			fill = append(fill, id)
		}
	}
	start = time.Now()
	if _, err := db.Collection(triggers.CollectionName).InsertMany(testCtx(t), docs, options.InsertMany().SetOrdered(true)); err != nil {
		t.Fatal(err)
	}
	took = floodWait(t, db, fill, start, "backfill flood")
	counts, got = trigStatuses(t, db, fill)
	t.Logf("backfill flood: %d slots of %d jobs ended in %s: %v", len(fill), fillJobs, took.Round(time.Millisecond), counts)
	if counts[record.StatusSucceeded] != len(fill) {
		t.Errorf("backfill statuses %v: want all %d succeeded", counts, len(fill))
	}
	for _, id := range fill {
		runID := strings.TrimPrefix(id.(string), triggers.BackfillIDPrefix)
		if hits := hitsOf(rec, runID); len(hits) != 1 {
			t.Errorf("backfilled slot %s ran %d times, want once (its status %q)", runID, len(hits), got[idKey(id)].Status)
		}
	}
	if n := len(rec.snapshot()); n != len(valid)+len(fill) {
		t.Errorf("the ledger has %d runs, want %d", n, len(valid)+len(fill))
	}
	floodRecordsClean(t, db)
	// Each outcome written once across the replicas.
	rejected, succeeded := 0.0, 0.0
	for _, d := range ds {
		m := d.scrapeMetrics()
		rejected += m["cronswap_triggers_total,outcome=rejected"]
		succeeded += m["cronswap_triggers_total,outcome=succeeded"]
	}
	if int(rejected) != len(bad) || int(succeeded) != len(valid)+len(fill) {
		t.Errorf("cronswap_triggers_total over the replicas: rejected %v, succeeded %v; want %d and %d (each request's outcome once)",
			rejected, succeeded, len(bad), len(valid)+len(fill))
	}
}
