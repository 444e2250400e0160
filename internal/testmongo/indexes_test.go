package testmongo_test

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/testmongo"
)

// indexCheckQueries are filters whose results must not depend on the
// indexes: equalities the indexes serve, alone and beside other
// conditions, and filters they cannot serve.
func indexCheckQueries(base time.Time) []bson.D {
	return []bson.D{
		{{Key: "job_id", Value: "job-3"}},
		{{Key: "job_id", Value: bson.D{{Key: "$eq", Value: "job-3"}}}},
		{{Key: "job_id", Value: bson.D{{Key: "$in", Value: bson.A{"job-1", "job-2", "nope"}}}}},
		{{Key: "job_id", Value: "job-3"}, {Key: "scheduled_at", Value: bson.D{{Key: "$lt", Value: base.Add(150 * time.Second)}}}},
		{{Key: "job_id", Value: "job-3"}, {Key: "scheduled_at", Value: base.Add(23 * time.Second)}},
		{{Key: "job_id", Value: "job-3"}, {Key: "scheduled_at", Value: base.Add(24 * time.Second)}},
		{{Key: "status", Value: "running"}},
		{{Key: "status", Value: "running"}, {Key: "lease_until", Value: bson.D{{Key: "$lt", Value: base.Add(100 * time.Second)}}}},
		{{Key: "tags", Value: "a"}},
		{{Key: "tags", Value: bson.D{{Key: "$in", Value: bson.A{"b"}}}}},
		{{Key: "tags", Value: bson.A{"a", "b"}}},
		{{Key: "n", Value: int32(2)}},
		{{Key: "n", Value: 2.0}},
		{{Key: "n", Value: int64(2)}},
		{{Key: "$or", Value: bson.A{bson.D{{Key: "job_id", Value: "job-1"}}, bson.D{{Key: "_id", Value: "d007"}}}}},
		{{Key: "$or", Value: bson.A{bson.D{{Key: "job_id", Value: "job-1"}}, bson.D{{Key: "status", Value: "failed"}}}}},
		{{Key: "$or", Value: bson.A{bson.D{{Key: "job_id", Value: "job-1"}}, bson.D{{Key: "nope", Value: 1}}}}},
		{{Key: "$or", Value: bson.A{
			bson.D{{Key: "job_id", Value: "job-2"}, {Key: "scheduled_at", Value: base.Add(22 * time.Second)}},
			bson.D{{Key: "job_id", Value: "job-5"}, {Key: "scheduled_at", Value: base.Add(45 * time.Second)}},
		}}},
		{{Key: "$and", Value: bson.A{bson.D{{Key: "job_id", Value: "job-4"}}, bson.D{{Key: "status", Value: "succeeded"}}}}},
		{{Key: "_id", Value: bson.D{{Key: "$in", Value: bson.A{"d001", "d050", "d299", "zzz"}}}}, {Key: "status", Value: "running"}},
		{{Key: "_id", Value: "d010"}, {Key: "status", Value: bson.D{{Key: "$ne", Value: "x"}}}},
		{{Key: "job_id", Value: nil}},
		{{Key: "job_id", Value: bson.D{{Key: "$exists", Value: false}}}},
		{{Key: "status", Value: bson.D{{Key: "$ne", Value: "running"}}}},
		{{Key: "job_id", Value: "job-99"}},
		{{Key: "status", Value: "odd"}},
	}
}

// TestSecondaryIndexesDoNotChangeResults: the same documents and writes in
// a collection with the fire path's indexes (and a multikey and a numeric
// one) and in one without: every filter finds the same documents in the
// same order, before and after updates that move documents between index
// keys, deletes, inserts into freed positions, findAndModify, and an index
// built over existing documents.
func TestSecondaryIndexesDoNotChangeResults(t *testing.T) {
	client := testmongo.Client(t)
	db := testmongo.NewDatabase(t, client)
	c := ctx(t, 2*time.Minute)
	plain, indexed := db.Collection("plain"), db.Collection("indexed")
	if _, err := indexed.Indexes().CreateMany(c, []mongo.IndexModel{
		{Keys: bson.D{{Key: "job_id", Value: 1}, {Key: "scheduled_at", Value: 1}}, Options: options.Index().SetUnique(true)},
		{Keys: bson.D{{Key: "status", Value: 1}, {Key: "lease_until", Value: 1}}},
		{Keys: bson.D{{Key: "n", Value: 1}}},
	}); err != nil {
		t.Fatal(err)
	}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var docs []any
	for i := range 300 {
		d := bson.D{{Key: "_id", Value: fmt.Sprintf("d%03d", i)}, {Key: "scheduled_at", Value: base.Add(time.Duration(i) * time.Second)},
			{Key: "lease_until", Value: base.Add(time.Duration(i%200) * time.Second)}}
		switch {
		case i%37 == 0: // no job_id
		case i%41 == 0:
			d = append(d, bson.E{Key: "job_id", Value: nil})
		default:
			d = append(d, bson.E{Key: "job_id", Value: fmt.Sprintf("job-%d", i%10)})
		}
		if i%13 != 0 {
			d = append(d, bson.E{Key: "status", Value: []string{"running", "succeeded", "failed"}[i%3]})
		}
		switch i % 4 {
		case 0:
			d = append(d, bson.E{Key: "tags", Value: bson.A{"a", "b"}})
		case 1:
			d = append(d, bson.E{Key: "tags", Value: "a"})
		case 2:
			d = append(d, bson.E{Key: "tags", Value: bson.A{"b", bson.D{{Key: "x", Value: 1}}}})
		}
		switch i % 3 {
		case 0:
			d = append(d, bson.E{Key: "n", Value: int32(i % 5)})
		case 1:
			d = append(d, bson.E{Key: "n", Value: float64(i % 5)})
		default:
			d = append(d, bson.E{Key: "n", Value: int64(i % 5)})
		}
		docs = append(docs, d)
	}
	for _, coll := range []*mongo.Collection{plain, indexed} {
		if _, err := coll.InsertMany(c, docs); err != nil {
			t.Fatal(err)
		}
	}
	// built over the documents already there
	if _, err := indexed.Indexes().CreateOne(c, mongo.IndexModel{Keys: bson.D{{Key: "tags", Value: 1}}}); err != nil {
		t.Fatal(err)
	}
	compare := func(phase string) {
		t.Helper()
		for _, q := range indexCheckQueries(base) {
			for _, opts := range []*options.FindOptionsBuilder{options.Find(), options.Find().SetSort(bson.D{{Key: "$natural", Value: -1}})} {
				want, got := findIDs(t, plain, q, opts), findIDs(t, indexed, q, opts)
				if !slices.Equal(want, got) {
					t.Errorf("%s: %v: without indexes %v, with %v", phase, extJSON(t, mustRaw(t, q)), want, got)
				}
			}
		}
	}
	compare("loaded")

	for _, coll := range []*mongo.Collection{plain, indexed} {
		steps := []func() error{
			func() error {
				_, err := coll.UpdateMany(c, bson.D{{Key: "job_id", Value: "job-3"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: "failed"}}}})
				return err
			},
			func() error {
				_, err := coll.UpdateOne(c, bson.D{{Key: "_id", Value: "d011"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "job_id", Value: "job-99"}, {Key: "tags", Value: "z"}}}})
				return err
			},
			func() error {
				_, err := coll.UpdateOne(c, bson.D{{Key: "_id", Value: "d012"}}, bson.D{{Key: "$unset", Value: bson.D{{Key: "job_id", Value: ""}, {Key: "n", Value: ""}}}})
				return err
			},
			func() error {
				_, err := coll.DeleteMany(c, bson.D{{Key: "job_id", Value: "job-4"}, {Key: "status", Value: "succeeded"}})
				return err
			},
			func() error {
				_, err := coll.DeleteOne(c, bson.D{{Key: "_id", Value: "d021"}})
				return err
			},
			func() error {
				_, err := coll.InsertMany(c, []any{
					bson.D{{Key: "_id", Value: "new1"}, {Key: "job_id", Value: "job-4"}, {Key: "status", Value: "succeeded"}, {Key: "n", Value: int32(2)}},
					bson.D{{Key: "_id", Value: "new2"}, {Key: "job_id", Value: "job-3"}, {Key: "status", Value: "running"}, {Key: "tags", Value: bson.A{"a"}}},
				})
				return err
			},
			func() error {
				return coll.FindOneAndUpdate(c, bson.D{{Key: "job_id", Value: "job-1"}, {Key: "status", Value: "running"}},
					bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: "succeeded"}, {Key: "n", Value: 2.0}}}}).Err()
			},
			func() error {
				return coll.FindOneAndDelete(c, bson.D{{Key: "job_id", Value: "job-2"}}).Err()
			},
			func() error {
				_, err := coll.UpdateOne(c, bson.D{{Key: "job_id", Value: "job-7"}, {Key: "scheduled_at", Value: base.Add(time.Hour)}},
					bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: "running"}}}, {Key: "$setOnInsert", Value: bson.D{{Key: "_id", Value: "up1"}}}},
					options.UpdateOne().SetUpsert(true))
				return err
			},
		}
		for i, step := range steps {
			if err := step(); err != nil {
				t.Fatalf("%s: step %d: %v", coll.Name(), i, err)
			}
		}
	}
	compare("after writes")

	// documents whose _id is no scalar leave the non-unique indexes too
	for _, coll := range []*mongo.Collection{plain, indexed} {
		for k, id := range []any{bson.D{{Key: "a", Value: 1}}, bson.Binary{Subtype: 0, Data: []byte{1, 2}}} {
			if _, err := coll.InsertOne(c, bson.D{{Key: "_id", Value: id}, {Key: "job_id", Value: "job-8"},
				{Key: "scheduled_at", Value: base.Add(time.Duration(k) * time.Hour * 24)}, {Key: "status", Value: "odd"}}); err != nil {
				t.Fatalf("%s: insert _id %v: %v", coll.Name(), id, err)
			}
		}
		if _, err := coll.DeleteOne(c, bson.D{{Key: "_id", Value: bson.Binary{Subtype: 0, Data: []byte{1, 2}}}}); err != nil {
			t.Fatalf("%s: delete binary _id: %v", coll.Name(), err)
		}
	}
	compare("non-scalar ids")
}

func mustRaw(t *testing.T, d bson.D) bson.Raw {
	t.Helper()
	raw, err := bson.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func findIDs(t *testing.T, coll *mongo.Collection, filter bson.D, opts *options.FindOptionsBuilder) []string {
	t.Helper()
	c := ctx(t, 30*time.Second)
	cur, err := coll.Find(c, filter, opts)
	if err != nil {
		t.Fatalf("%s: find %v: %v", coll.Name(), filter, err)
	}
	var docs []struct {
		ID bson.RawValue `bson:"_id"`
	}
	if err := cur.All(c, &docs); err != nil {
		t.Fatalf("%s: find %v: %v", coll.Name(), filter, err)
	}
	ids := []string{}
	for _, d := range docs {
		ids = append(ids, d.ID.String())
	}
	return ids
}

// queryStats are the launcher's counters of one collection
// (cronswapQueryStats).
type queryStats struct {
	Scans    int64 `bson:"scans"`
	Indexed  int64 `bson:"indexed"`
	Examined int64 `bson:"examined"`
	Built    int64 `bson:"built"`
}

func readQueryStats(t *testing.T, db *mongo.Database, coll string) queryStats {
	t.Helper()
	var s queryStats
	if err := db.RunCommand(ctx(t, 10*time.Second), bson.D{{Key: "cronswapQueryStats", Value: coll}}).Decode(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// The run records seedJobRuns writes: jobs jobs (job-000, ...) of perJob
// slots each, a minute apart from seedStart.
const jobs, perJob = 200, 20

// seedStart is the first slot of seedJobRuns's records.
func seedStart() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }

// seedJobRuns creates job_runs in a new database of a launched server,
// with the fire path's indexes, and writes its records (one in a hundred
// running, the others succeeded, each with its lease_until at its slot); it
// returns the database, the collection and the documents in the order
// written.
func seedJobRuns(t *testing.T) (*mongo.Database, *mongo.Collection, []any) {
	t.Helper()
	managed(t)
	db := testmongo.NewDatabase(t, testmongo.Client(t))
	c := ctx(t, 2*time.Minute)
	runs := db.Collection("job_runs")
	if _, err := runs.Indexes().CreateMany(c, []mongo.IndexModel{
		{Keys: bson.D{{Key: "job_id", Value: 1}, {Key: "scheduled_at", Value: 1}}, Options: options.Index().SetUnique(true)},
		{Keys: bson.D{{Key: "status", Value: 1}, {Key: "lease_until", Value: 1}}},
	}); err != nil {
		t.Fatal(err)
	}
	var docs []any
	for i := range jobs * perJob {
		job, slot := fmt.Sprintf("job-%03d", i%jobs), seedStart().Add(time.Duration(i/jobs)*time.Minute)
		status := "succeeded"
		if i%100 == 0 {
			status = "running"
		}
		docs = append(docs, bson.D{{Key: "_id", Value: fmt.Sprintf("%s/%d", job, slot.Unix())}, {Key: "job_id", Value: job},
			{Key: "scheduled_at", Value: slot}, {Key: "status", Value: status}, {Key: "lease_until", Value: slot}})
	}
	if _, err := runs.InsertMany(c, docs); err != nil {
		t.Fatal(err)
	}
	return db, runs, docs
}

// TestFirePathQueriesUseIndexes: the daemon's reads and conditional writes
// on job_runs (a job's records by job_id, by (job_id, scheduled_at range)
// sorted, by (job_id, slot) pairs in an $or, by _id with a status, the
// expired leases by status) examine only the documents of their index key,
// never the whole collection.
func TestFirePathQueriesUseIndexes(t *testing.T) {
	db, runs, docs := seedJobRuns(t)
	c, base := ctx(t, 2*time.Minute), seedStart()
	before := readQueryStats(t, db, "job_runs")

	if got := findIDs(t, runs, bson.D{{Key: "job_id", Value: "job-007"}}, options.Find()); len(got) != perJob {
		t.Fatalf("by job_id: %d records, want %d", len(got), perJob)
	}
	var last struct {
		ScheduledAt time.Time `bson:"scheduled_at"`
	}
	if err := runs.FindOne(c, bson.D{{Key: "job_id", Value: "job-007"}, {Key: "scheduled_at", Value: bson.D{{Key: "$lt", Value: base.Add(10 * time.Minute)}}}},
		options.FindOne().SetSort(bson.D{{Key: "scheduled_at", Value: -1}})).Decode(&last); err != nil {
		t.Fatal(err)
	}
	if !last.ScheduledAt.Equal(base.Add(9 * time.Minute)) {
		t.Fatalf("latest slot before 10 min: %v", last.ScheduledAt)
	}
	pairs := bson.A{}
	for k := range 5 {
		pairs = append(pairs, bson.D{{Key: "job_id", Value: fmt.Sprintf("job-%03d", k)}, {Key: "scheduled_at", Value: base.Add(time.Duration(k) * time.Minute)}})
	}
	if got := findIDs(t, runs, bson.D{{Key: "$or", Value: pairs}}, options.Find()); len(got) != 5 {
		t.Fatalf("$or of (job, slot): %v", got)
	}
	res, err := runs.UpdateOne(c, bson.D{{Key: "_id", Value: fmt.Sprintf("job-000/%d", base.Unix())}, {Key: "status", Value: "running"}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: "succeeded"}}}})
	if err != nil || res.ModifiedCount != 1 {
		t.Fatalf("conditional update by _id: %+v %v", res, err)
	}
	if got := findIDs(t, runs, bson.D{{Key: "status", Value: "running"}, {Key: "lease_until", Value: bson.D{{Key: "$lt", Value: base.Add(time.Hour)}}}}, options.Find()); len(got) != jobs*perJob/100-1 {
		t.Fatalf("expired leases: %d, want %d", len(got), jobs*perJob/100-1)
	}

	// An end's conditional update names the _id beside a status $in that
	// matches thousands: the planner takes the _id and builds no union of
	// the statuses' positions.
	mid := readQueryStats(t, db, "job_runs")
	for i := range 50 {
		id := docs[i].(bson.D)[0].Value
		if _, err := runs.UpdateOne(c, bson.D{{Key: "status", Value: bson.D{{Key: "$in", Value: bson.A{"running", "succeeded"}}}}, {Key: "_id", Value: id}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "note", Value: i}}}}); err != nil {
			t.Fatal(err)
		}
	}
	if end := readQueryStats(t, db, "job_runs"); end.Built != mid.Built || end.Examined-mid.Examined > 2*50 {
		t.Errorf("50 updates by _id with a status $in: %d positions copied into candidate sets, %d documents examined",
			end.Built-mid.Built, end.Examined-mid.Examined)
	}

	after := readQueryStats(t, db, "job_runs")
	t.Logf("query stats before %+v, after %+v", before, after)
	if after.Scans != before.Scans {
		t.Errorf("%d queries scanned job_runs", after.Scans-before.Scans)
	}
	if after.Indexed-before.Indexed < 55 {
		t.Errorf("%d queries served by an index, want at least 55", after.Indexed-before.Indexed)
	}
	// by job_id 20, range 20, $or 5, update 2, status running 40, 50 updates 100
	if ex := after.Examined - before.Examined; ex > 2*perJob+5+2+jobs*perJob/100+100 {
		t.Errorf("the five queries examined %d documents of %d", ex, jobs*perJob)
	}
}

// TestCollStatsSizeFollowsWrites: the data size (computed when asked, not
// on every write) is the documents' BSON size after inserts, an update
// that grows a document and a delete.
func TestCollStatsSizeFollowsWrites(t *testing.T) {
	client := testmongo.Client(t)
	db := testmongo.NewDatabase(t, client)
	c := ctx(t, 30*time.Second)
	coll := db.Collection("sized")
	docs := map[string]bson.D{}
	for i := range 10 {
		id := fmt.Sprintf("s%d", i)
		docs[id] = bson.D{{Key: "_id", Value: id}, {Key: "job_id", Value: "j"}, {Key: "n", Value: int32(i)}}
		if _, err := coll.InsertOne(c, docs[id]); err != nil {
			t.Fatal(err)
		}
	}
	check := func(phase string) {
		t.Helper()
		want := 0
		for _, d := range docs {
			want += len(mustRaw(t, d))
		}
		var stats struct {
			Size  int64 `bson:"size"`
			Count int64 `bson:"count"`
		}
		if err := db.RunCommand(c, bson.D{{Key: "collStats", Value: "sized"}}).Decode(&stats); err != nil {
			t.Fatal(err)
		}
		if stats.Size != int64(want) || stats.Count != int64(len(docs)) {
			t.Errorf("%s: collStats size %d count %d, want %d and %d", phase, stats.Size, stats.Count, want, len(docs))
		}
	}
	check("inserted")
	if _, err := coll.UpdateOne(c, bson.D{{Key: "_id", Value: "s3"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "note", Value: "a longer field"}}}}); err != nil {
		t.Fatal(err)
	}
	docs["s3"] = append(docs["s3"], bson.E{Key: "note", Value: "a longer field"})
	if _, err := coll.DeleteOne(c, bson.D{{Key: "_id", Value: "s5"}}); err != nil {
		t.Fatal(err)
	}
	delete(docs, "s5")
	check("updated and deleted")
}

// TestAggregateLeadingMatchUsesIndexes: an aggregate whose pipeline begins
// with a $match an index serves (the hand-over's read of the decided
// slots: a list of job ids and a slot bound, then the newest slot of each)
// examines only that index's candidates, as a server's does, and answers
// as the same pipeline read from a scan (a $sort first).
func TestAggregateLeadingMatchUsesIndexes(t *testing.T) {
	db, runs, _ := seedJobRuns(t)
	c, base := ctx(t, 2*time.Minute), seedStart()
	match := bson.D{{Key: "$match", Value: bson.D{{Key: "job_id", Value: bson.D{{Key: "$in", Value: bson.A{"job-001", "job-150", "nope"}}}},
		{Key: "scheduled_at", Value: bson.D{{Key: "$lte", Value: base.Add(10 * time.Minute)}}}}}}
	group := bson.D{{Key: "$group", Value: bson.D{{Key: "_id", Value: "$job_id"}, {Key: "slot", Value: bson.D{{Key: "$max", Value: "$scheduled_at"}}}}}}
	newest := func(pipeline mongo.Pipeline) map[string]time.Time {
		t.Helper()
		cur, err := runs.Aggregate(c, pipeline)
		if err != nil {
			t.Fatal(err)
		}
		var rows []struct {
			ID   string    `bson:"_id"`
			Slot time.Time `bson:"slot"`
		}
		if err := cur.All(c, &rows); err != nil {
			t.Fatal(err)
		}
		out := map[string]time.Time{}
		for _, r := range rows {
			out[r.ID] = r.Slot
		}
		return out
	}
	before := readQueryStats(t, db, "job_runs")
	indexed := newest(mongo.Pipeline{match, group})
	mid := readQueryStats(t, db, "job_runs")
	scanned := newest(mongo.Pipeline{{{Key: "$sort", Value: bson.D{{Key: "_id", Value: 1}}}}, match, group})
	after := readQueryStats(t, db, "job_runs")

	want := map[string]time.Time{"job-001": base.Add(10 * time.Minute), "job-150": base.Add(10 * time.Minute)}
	if !maps.Equal(indexed, want) || !maps.Equal(scanned, want) {
		t.Errorf("newest slots: with the leading $match %v, read from a scan %v; want %v", indexed, scanned, want)
	}
	if mid.Scans != before.Scans || mid.Indexed-before.Indexed != 1 || mid.Examined-before.Examined > 2*perJob {
		t.Errorf("the leading $match: %d scans, %d indexed, %d documents examined; want none, one, at most %d",
			mid.Scans-before.Scans, mid.Indexed-before.Indexed, mid.Examined-before.Examined, 2*perJob)
	}
	if after.Scans-mid.Scans != 1 {
		t.Errorf("a $sort first: %d scans, want one (the collection read whole)", after.Scans-mid.Scans)
	}
}
