package testmongo_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/testmongo"
)

func TestMain(m *testing.M) {
	testmongo.Main(m, nil)
}

// ctx returns a context for one test step.
func ctx(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return c
}

func extJSON(t *testing.T, raw bson.Raw) string {
	t.Helper()
	b, err := bson.MarshalExtJSON(raw, false, false)
	if err != nil {
		t.Fatalf("extjson: %v", err)
	}
	return string(b)
}

// next waits for the next event. (A deadline inside Next kills a change stream for good; fine in a test.)
func next(t *testing.T, cs *mongo.ChangeStream, timeout time.Duration) bson.Raw {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if !cs.Next(c) {
		t.Fatalf("no change event within %s: err=%v", timeout, cs.Err())
	}
	ev := append(bson.Raw(nil), cs.Current...)
	t.Logf("event: %s", extJSON(t, ev))
	return ev
}

func opType(ev bson.Raw) string { return ev.Lookup("operationType").StringValue() }

func managed(t *testing.T) {
	t.Helper()
	if testmongo.ExternalURI() != "" {
		t.Skip("external server: this test needs a launched mongo-server.jar")
	}
}

func TestPingInsertFind(t *testing.T) {
	client := testmongo.Client(t)
	db := testmongo.NewDatabase(t, client)
	coll := db.Collection("schedules")

	var hello bson.M
	if err := client.Database("admin").RunCommand(ctx(t, 10*time.Second), bson.D{{Key: "isMaster", Value: 1}}).Decode(&hello); err != nil {
		t.Fatal(err)
	}
	t.Logf("isMaster: %v", hello)
	var build bson.M
	if err := client.Database("admin").RunCommand(ctx(t, 10*time.Second), bson.D{{Key: "buildInfo", Value: 1}}).Decode(&build); err != nil {
		t.Fatal(err)
	}
	t.Logf("buildInfo.version: %v", build["version"])

	now := time.Now().UTC().Truncate(time.Millisecond)
	if _, err := coll.InsertOne(ctx(t, 10*time.Second), bson.D{
		{Key: "_id", Value: "daily_report"}, {Key: "cron_expr", Value: "0 9 * * *"}, {Key: "updated_at", Value: now},
		{Key: "args", Value: bson.D{{Key: "to", Value: "ops@example.com"}}},
	}); err != nil {
		t.Fatal(err)
	}
	var got struct {
		ID        string    `bson:"_id"`
		CronExpr  string    `bson:"cron_expr"`
		UpdatedAt time.Time `bson:"updated_at"`
		Args      bson.M    `bson:"args"`
	}
	if err := coll.FindOne(ctx(t, 10*time.Second), bson.D{{Key: "_id", Value: "daily_report"}}).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if got.CronExpr != "0 9 * * *" || !got.UpdatedAt.Equal(now) || got.Args["to"] != "ops@example.com" {
		t.Fatalf("round trip: %+v", got)
	}
	res, err := coll.UpdateOne(ctx(t, 10*time.Second), bson.D{{Key: "_id", Value: "daily_report"}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "cron_expr", Value: "0 8 * * *"}}}})
	if err != nil || res.MatchedCount != 1 || res.ModifiedCount != 1 {
		t.Fatalf("update: %+v %v", res, err)
	}
	n, err := coll.CountDocuments(ctx(t, 10*time.Second), bson.D{})
	if err != nil || n != 1 {
		t.Fatalf("count: %d %v", n, err)
	}
}

// TestChangeStreamEventShapes checks the events a watcher of schedules relies on; it holds for MongoDB 6.0+
// replica sets as well.
func TestChangeStreamEventShapes(t *testing.T) {
	client := testmongo.Client(t)
	db := testmongo.NewDatabase(t, client)
	coll := db.Collection("schedules")
	if err := db.CreateCollection(ctx(t, 10*time.Second), "schedules"); err != nil {
		t.Fatal(err)
	}

	cs, err := coll.Watch(ctx(t, 10*time.Second), mongo.Pipeline{},
		options.ChangeStream().SetFullDocument(options.UpdateLookup).SetMaxAwaitTime(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close(context.Background())
	t.Logf("resume token right after Watch (no event yet): %v", cs.ResumeToken())

	c := ctx(t, 20*time.Second)
	id := "daily_report"
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(coll.InsertOne(c, bson.D{{Key: "_id", Value: id}, {Key: "cron_expr", Value: "0 9 * * *"}}))
	must(coll.UpdateOne(c, bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$set", Value: bson.D{
		{Key: "cron_expr", Value: "0 8 * * *"}, {Key: "updated_at", Value: time.Now()}}},
		{Key: "$unset", Value: bson.D{{Key: "category", Value: ""}}}}))
	must(coll.ReplaceOne(c, bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "cron_expr", Value: "*/5 * * * * *"}, {Key: "enabled", Value: false}}))
	must(coll.DeleteOne(c, bson.D{{Key: "_id", Value: id}}))

	want := []string{"insert", "update", "replace", "delete"}
	var tokens []bson.Raw
	for i, op := range want {
		ev := next(t, cs, 10*time.Second)
		if got := opType(ev); got != op {
			t.Fatalf("event %d: operationType %q, want %q", i, got, op)
		}
		tokens = append(tokens, cs.ResumeToken())
		if key, ok := ev.Lookup("documentKey").DocumentOK(); !ok || key.Lookup("_id").StringValue() != id {
			t.Errorf("%s: documentKey = %v, want {_id: %q}", op, ev.Lookup("documentKey"), id)
		}
		if ns := ev.Lookup("ns").Document(); ns.Lookup("db").StringValue() != db.Name() || ns.Lookup("coll").StringValue() != "schedules" {
			t.Errorf("%s: ns = %v", op, ns)
		}
		if _, _, ok := ev.Lookup("clusterTime").TimestampOK(); !ok {
			t.Errorf("%s: clusterTime is not a timestamp: %v", op, ev.Lookup("clusterTime"))
		}
		if _, ok := ev.Lookup("wallTime").DateTimeOK(); !ok {
			t.Errorf("%s: wallTime is not a date: %v", op, ev.Lookup("wallTime"))
		}
		if _, ok := ev.Lookup("_id").DocumentOK(); !ok {
			t.Errorf("%s: _id (resume token) is not a document", op)
		}
		full, hasFull := ev.Lookup("fullDocument").DocumentOK()
		switch op {
		case "insert":
			if !hasFull || full.Lookup("cron_expr").StringValue() != "0 9 * * *" {
				t.Errorf("insert fullDocument = %v", ev.Lookup("fullDocument"))
			}
		case "update":
			// updateLookup returns the document as it is *now*: it may already be the replaced or deleted one.
			if hasFull && full.Lookup("_id").StringValue() != id {
				t.Errorf("update fullDocument = %v", full)
			}
			ud := ev.Lookup("updateDescription").Document()
			if ud.Lookup("updatedFields", "cron_expr").StringValue() != "0 8 * * *" {
				t.Errorf("updateDescription = %v", ud)
			}
			removed, _ := ud.Lookup("removedFields").Array().Values()
			if len(removed) != 1 || removed[0].StringValue() != "category" {
				t.Errorf("removedFields = %v", ud.Lookup("removedFields"))
			}
		case "replace":
			if !hasFull || full.Lookup("cron_expr").StringValue() != "*/5 * * * * *" || full.Lookup("_id").StringValue() != id {
				t.Errorf("replace fullDocument = %v", ev.Lookup("fullDocument"))
			}
		case "delete":
			if hasFull {
				t.Errorf("delete has fullDocument %v", full)
			}
		}
	}
	for i := 1; i < len(tokens); i++ {
		if bytesEqual(tokens[i], tokens[i-1]) {
			t.Errorf("tokens %d and %d are equal", i-1, i)
		}
	}
}

func bytesEqual(a, b bson.Raw) bool { return string(a) == string(b) }

// TestUpdateLookupOfDeletedDocument: an update whose document is gone when the event is read has
// fullDocument: null (not the update delta).
func TestUpdateLookupOfDeletedDocument(t *testing.T) {
	client := testmongo.Client(t)
	coll := testmongo.NewDatabase(t, client).Collection("schedules")
	c := ctx(t, 20*time.Second)
	cs, err := coll.Watch(c, mongo.Pipeline{}, options.ChangeStream().SetFullDocument(options.UpdateLookup))
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close(context.Background())
	if _, err := coll.InsertOne(c, bson.D{{Key: "_id", Value: "j"}, {Key: "cron_expr", Value: "@hourly"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := coll.UpdateOne(c, bson.D{{Key: "_id", Value: "j"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "cron_expr", Value: "@daily"}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := coll.DeleteOne(c, bson.D{{Key: "_id", Value: "j"}}); err != nil {
		t.Fatal(err)
	}
	next(t, cs, 10*time.Second)
	ev := next(t, cs, 10*time.Second)
	if opType(ev) != "update" {
		t.Fatalf("want update, got %s", opType(ev))
	}
	if v := ev.Lookup("fullDocument"); v.Type != bson.TypeNull {
		t.Errorf("fullDocument of an update of a since-deleted document = %v, want null", v)
	}
	if ev.Lookup("documentKey", "_id").StringValue() != "j" {
		t.Errorf("documentKey = %v", ev.Lookup("documentKey"))
	}
}

func TestResumeAfterAndStartAfter(t *testing.T) {
	client := testmongo.Client(t)
	coll := testmongo.NewDatabase(t, client).Collection("schedules")
	c := ctx(t, 30*time.Second)

	_, token := insertAndWatch(t, c, coll, "a")
	t.Logf("token after first event: %s", extJSON(t, token))
	for _, id := range []string{"b", "c"} {
		if _, err := coll.InsertOne(c, bson.D{{Key: "_id", Value: id}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, opt := range []struct {
		name string
		opts *options.ChangeStreamOptionsBuilder
	}{
		{"resumeAfter", options.ChangeStream().SetResumeAfter(token)},
		{"startAfter", options.ChangeStream().SetStartAfter(token)},
	} {
		cs, err := coll.Watch(c, mongo.Pipeline{}, opt.opts)
		if err != nil {
			t.Fatalf("%s: %v", opt.name, err)
		}
		for _, id := range []string{"b", "c"} {
			ev := next(t, cs, 10*time.Second)
			if got := ev.Lookup("documentKey", "_id").StringValue(); got != id {
				t.Fatalf("%s: replayed %q, want %q", opt.name, got, id)
			}
		}
		_ = cs.Close(c)
	}
}

// TestIdleStreamKeepsTokenFresh: an idle TryNext waits about MaxAwaitTime (no busy loop) and leaves a
// postBatchResumeToken in ResumeToken(), from which a later resume sees the next write.
func TestIdleStreamKeepsTokenFresh(t *testing.T) {
	client := testmongo.Client(t)
	coll := testmongo.NewDatabase(t, client).Collection("schedules")
	c := ctx(t, 30*time.Second)
	if _, err := coll.InsertOne(c, bson.D{{Key: "_id", Value: "before"}}); err != nil {
		t.Fatal(err)
	}
	cs, err := coll.Watch(c, mongo.Pipeline{}, options.ChangeStream().SetMaxAwaitTime(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	initial := cs.ResumeToken()
	if initial == nil {
		t.Errorf("ResumeToken() is nil right after Watch: no postBatchResumeToken in the aggregate reply")
	} else {
		t.Logf("initial token (postBatchResumeToken of the aggregate): %s", extJSON(t, initial))
	}
	// The first TryNext only consumes the (empty) first batch of the aggregate; the second one runs a getMore.
	if cs.TryNext(c) {
		t.Fatalf("TryNext on an idle stream returned an event: %s", extJSON(t, cs.Current))
	}
	start := time.Now()
	if cs.TryNext(c) {
		t.Fatalf("TryNext on an idle stream returned an event: %s", extJSON(t, cs.Current))
	}
	waited := time.Since(start)
	if cs.Err() != nil {
		t.Fatal(cs.Err())
	}
	t.Logf("idle TryNext returned after %s; token %v", waited, cs.ResumeToken())
	if waited < 150*time.Millisecond {
		t.Errorf("idle TryNext returned after %s: the server does not await data (MaxAwaitTime 300ms)", waited)
	}
	idle := cs.ResumeToken()
	if idle == nil {
		t.Fatal("ResumeToken() is nil after an idle TryNext")
	}
	_ = cs.Close(c)

	if _, err := coll.InsertOne(c, bson.D{{Key: "_id", Value: "after"}}); err != nil {
		t.Fatal(err)
	}
	cs, err = coll.Watch(c, mongo.Pipeline{}, options.ChangeStream().SetResumeAfter(idle))
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close(context.Background())
	ev := next(t, cs, 10*time.Second)
	if got := ev.Lookup("documentKey", "_id").StringValue(); got != "after" {
		t.Fatalf("resumed from the idle token and got %q, want \"after\"", got)
	}
}

// TestNextWakesUpOnWrite: a blocked Next returns promptly when another connection writes.
func TestNextWakesUpOnWrite(t *testing.T) {
	client := testmongo.Client(t)
	other := testmongo.Client(t)
	coll := testmongo.NewDatabase(t, client).Collection("schedules")
	c := ctx(t, 30*time.Second)
	cs, err := coll.Watch(c, mongo.Pipeline{}, options.ChangeStream().SetMaxAwaitTime(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close(context.Background())
	go func() {
		time.Sleep(200 * time.Millisecond)
		_, _ = other.Database(coll.Database().Name()).Collection("schedules").InsertOne(context.Background(), bson.D{{Key: "_id", Value: "x"}})
	}()
	start := time.Now()
	next(t, cs, 10*time.Second)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("event arrived after %s; want well under MaxAwaitTime (5s)", d)
	}
}

func serverError(t *testing.T, err error) mongo.ServerError {
	t.Helper()
	var se mongo.ServerError
	if !errors.As(err, &se) {
		t.Fatalf("error %v (%T) is not a mongo.ServerError", err, err)
	}
	return se
}

func TestBadResumeTokens(t *testing.T) {
	client := testmongo.Client(t)
	coll := testmongo.NewDatabase(t, client).Collection("schedules")
	c := ctx(t, 30*time.Second)
	cases := []struct {
		name  string
		token any
		code  int32 // expected on the launched server
	}{
		{"not hex", bson.D{{Key: "_data", Value: "zz-not-hex"}}, 9},
		{"wrong type", bson.D{{Key: "_data", Value: 42}}, 40647},
		{"no _data", bson.D{{Key: "foo", Value: "bar"}}, 40647},
		{"hex, but not a token of this server", bson.D{{Key: "_data", Value: "8200000001000000010000"}}, 50811},
	}
	for _, tc := range cases {
		cs, err := coll.Watch(c, mongo.Pipeline{}, options.ChangeStream().SetResumeAfter(tc.token))
		if err == nil {
			// some servers only fail on the first getMore
			if !cs.TryNext(c) {
				err = cs.Err()
			}
			_ = cs.Close(c)
		}
		if err == nil {
			t.Errorf("%s: resumeAfter %v accepted", tc.name, tc.token)
			continue
		}
		var ce mongo.CommandError
		if errors.As(err, &ce) {
			t.Logf("%s: code=%d name=%s labels=%v msg=%q", tc.name, ce.Code, ce.Name, ce.Labels, ce.Message)
		} else {
			t.Logf("%s: %T %v", tc.name, err, err)
		}
		se := serverError(t, err)
		if testmongo.ExternalURI() == "" && !se.HasErrorCode(int(tc.code)) {
			t.Errorf("%s: want code %d, got %v", tc.name, tc.code, err)
		}
	}
}

func TestStartAtOperationTime(t *testing.T) {
	client := testmongo.Client(t)
	coll := testmongo.NewDatabase(t, client).Collection("schedules")
	c := ctx(t, 30*time.Second)
	ev, _ := insertAndWatch(t, c, coll, "x")
	tsT, tsI := ev.Lookup("clusterTime").Timestamp()
	if _, err := coll.InsertOne(c, bson.D{{Key: "_id", Value: "y"}}); err != nil {
		t.Fatal(err)
	}
	cs, err := coll.Watch(c, mongo.Pipeline{}, options.ChangeStream().SetStartAtOperationTime(&bson.Timestamp{T: tsT, I: tsI}))
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close(context.Background())
	for _, id := range []string{"x", "y"} { // inclusive of the given time
		ev := next(t, cs, 10*time.Second)
		if got := ev.Lookup("documentKey", "_id").StringValue(); got != id {
			t.Fatalf("startAtOperationTime: got %q, want %q", got, id)
		}
	}
}

func TestDropInvalidates(t *testing.T) {
	client := testmongo.Client(t)
	coll := testmongo.NewDatabase(t, client).Collection("schedules")
	c := ctx(t, 30*time.Second)
	cs, err := coll.Watch(c, mongo.Pipeline{})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close(context.Background())
	if _, err := coll.InsertOne(c, bson.D{{Key: "_id", Value: "x"}}); err != nil {
		t.Fatal(err)
	}
	if err := coll.Drop(c); err != nil {
		t.Fatal(err)
	}
	var ops []string
	var invalidate bson.Raw
	for len(ops) < 3 {
		ev := next(t, cs, 10*time.Second)
		ops = append(ops, opType(ev))
		if opType(ev) == "invalidate" {
			invalidate = cs.ResumeToken()
			break
		}
	}
	if strings.Join(ops, ",") != "insert,drop,invalidate" {
		t.Fatalf("events %v, want insert,drop,invalidate", ops)
	}
	if cs.Next(ctx(t, 5*time.Second)) || cs.Err() != nil || cs.ID() != 0 {
		t.Fatalf("after invalidate: Next should be false with Err()==nil and ID()==0; err=%v id=%d", cs.Err(), cs.ID())
	}
	_, err = coll.Watch(c, mongo.Pipeline{}, options.ChangeStream().SetResumeAfter(invalidate))
	if err == nil {
		t.Fatal("resumeAfter an invalidate token was accepted")
	}
	t.Logf("resumeAfter(invalidate): %v", err)
	if se := serverError(t, err); !se.HasErrorCode(260) {
		t.Errorf("want 260 InvalidResumeToken, got %v", err)
	}
	cs2, err := coll.Watch(c, mongo.Pipeline{}, options.ChangeStream().SetStartAfter(invalidate))
	if err != nil {
		t.Fatalf("startAfter(invalidate): %v", err)
	}
	defer cs2.Close(context.Background())
	if _, err := coll.InsertOne(c, bson.D{{Key: "_id", Value: "new"}}); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, cs2, 10*time.Second); ev.Lookup("documentKey", "_id").StringValue() != "new" {
		t.Fatalf("startAfter(invalidate) got %s", extJSON(t, ev))
	}
}

func TestFindOneAndUpdateUpsertIsSeen(t *testing.T) {
	client := testmongo.Client(t)
	coll := testmongo.NewDatabase(t, client).Collection("job_locks")
	c := ctx(t, 30*time.Second)
	cs, err := coll.Watch(c, mongo.Pipeline{}, options.ChangeStream().SetFullDocument(options.UpdateLookup))
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close(context.Background())
	opts := options.FindOneAndUpdate().SetUpsert(true).SetReturnDocument(options.After)
	var doc bson.M
	err = coll.FindOneAndUpdate(c, bson.D{{Key: "_id", Value: "daily_report"}, {Key: "locked", Value: bson.D{{Key: "$ne", Value: true}}}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "locked", Value: true}, {Key: "owner", Value: "a"}}}, {Key: "$inc", Value: bson.D{{Key: "fence", Value: 1}}}}, opts).Decode(&doc)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("upserted: %v", doc)
	if doc["locked"] != true || doc["owner"] != "a" || doc["fence"] != int32(1) {
		t.Fatalf("upsert returned %v", doc)
	}
	// the lock is taken: the same conditional upsert now collides on _id
	err = coll.FindOneAndUpdate(c, bson.D{{Key: "_id", Value: "daily_report"}, {Key: "locked", Value: bson.D{{Key: "$ne", Value: true}}}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "locked", Value: true}, {Key: "owner", Value: "b"}}}}, opts).Decode(&doc)
	t.Logf("second conditional upsert: %v", err)
	if !mongo.IsDuplicateKeyError(err) {
		t.Errorf("second conditional upsert: want duplicate key error, got %v", err)
	}
	if err := coll.FindOneAndUpdate(c, bson.D{{Key: "_id", Value: "daily_report"}, {Key: "owner", Value: "a"}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "locked", Value: false}}}}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := coll.FindOneAndDelete(c, bson.D{{Key: "_id", Value: "daily_report"}}).Err(); err != nil {
		t.Fatal(err)
	}
	for _, op := range []string{"insert", "update", "delete"} {
		if ev := next(t, cs, 10*time.Second); opType(ev) != op {
			t.Fatalf("findAndModify events: got %s, want %s", opType(ev), op)
		}
	}
}

func TestIndexesAndValidators(t *testing.T) {
	client := testmongo.Client(t)
	db := testmongo.NewDatabase(t, client)
	c := ctx(t, 30*time.Second)
	runs := db.Collection("job_runs")

	names, err := runs.Indexes().CreateMany(c, []mongo.IndexModel{
		{Keys: bson.D{{Key: "job_id", Value: 1}, {Key: "scheduled_at", Value: 1}}, Options: options.Index().SetUnique(true).SetName("job_slot")},
		{Keys: bson.D{{Key: "ended_at", Value: 1}}, Options: options.Index().SetExpireAfterSeconds(1).SetName("ttl")},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("created indexes %v", names)
	cur, err := runs.Indexes().List(c)
	if err != nil {
		t.Fatal(err)
	}
	var specs []bson.M
	if err := cur.All(c, &specs); err != nil {
		t.Fatal(err)
	}
	t.Logf("listIndexes: %v", specs)

	slot := time.Date(2025, 1, 1, 9, 0, 0, 0, time.UTC)
	if _, err := runs.InsertOne(c, bson.D{{Key: "job_id", Value: "r"}, {Key: "scheduled_at", Value: slot}}); err != nil {
		t.Fatal(err)
	}
	_, err = runs.InsertOne(c, bson.D{{Key: "job_id", Value: "r"}, {Key: "scheduled_at", Value: slot}})
	if !mongo.IsDuplicateKeyError(err) {
		t.Fatalf("unique (job_id, scheduled_at) not enforced: %v", err)
	}
	var we mongo.WriteException
	if errors.As(err, &we) && len(we.WriteErrors) > 0 {
		t.Logf("duplicate: code=%d msg=%q", we.WriteErrors[0].Code, we.WriteErrors[0].Message)
	}
	// upsert racing on a unique key: the second one must fail, not create a duplicate
	_, err = runs.UpdateOne(c, bson.D{{Key: "job_id", Value: "r"}, {Key: "scheduled_at", Value: slot}, {Key: "status", Value: "none"}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: "running"}}}}, options.UpdateOne().SetUpsert(true))
	t.Logf("upsert onto an existing unique key: %v", err)
	if !mongo.IsDuplicateKeyError(err) {
		t.Errorf("upsert onto an existing unique key: want duplicate key error, got %v", err)
	}

	// TTL deletion: TestTTLMonitorDeletesExpiredDocuments.

	// Validators: create with a validator, then collMod.
	validator := bson.D{{Key: "$jsonSchema", Value: bson.D{{Key: "bsonType", Value: "object"}, {Key: "required", Value: bson.A{"cron_expr"}}}}}
	err = db.CreateCollection(c, "schedules", options.CreateCollection().SetValidator(validator))
	t.Logf("create with validator: %v", err)
	if err == nil {
		_, err = db.Collection("schedules").InsertOne(c, bson.D{{Key: "_id", Value: "no_cron"}})
		t.Logf("insert violating the validator: %v (nil = validator not enforced)", err)
	}
	err = db.RunCommand(c, bson.D{{Key: "collMod", Value: "schedules"}, {Key: "validator", Value: validator}}).Err()
	t.Logf("collMod validator: %v", err)
}

// TestRestartWithH2ResumesStream: a server restarted on the same port with its H2 file keeps data and oplog;
// an open change stream resumes by itself.
func TestRestartWithH2ResumesStream(t *testing.T) {
	managed(t)
	c := ctx(t, 120*time.Second)
	srv, err := testmongo.Start(c, testmongo.Options{H2File: filepath.Join(t.TempDir(), "mongo.h2")})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	client := testmongo.ClientFor(t, srv.URI)
	coll := client.Database("cronswap").Collection("schedules")
	cs, err := coll.Watch(c, mongo.Pipeline{}, options.ChangeStream().SetFullDocument(options.UpdateLookup))
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close(context.Background())
	if _, err := coll.InsertOne(c, bson.D{{Key: "_id", Value: "a"}}); err != nil {
		t.Fatal(err)
	}
	next(t, cs, 10*time.Second)
	port := srv.Port()
	if err := srv.Restart(c); err != nil {
		t.Fatal(err)
	}
	if srv.Port() != port {
		t.Fatalf("port changed across restart: %d -> %d", port, srv.Port())
	}
	// the client reconnects; the insert may need a retry while the pool notices the restart
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := coll.InsertOne(c, bson.D{{Key: "_id", Value: "b"}})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("insert after restart: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	ev := next(t, cs, 20*time.Second)
	if got := ev.Lookup("documentKey", "_id").StringValue(); got != "b" {
		t.Fatalf("after restart got %q, want b", got)
	}
	if n, err := coll.CountDocuments(c, bson.D{}); err != nil || n != 2 {
		t.Fatalf("documents after restart: %d %v", n, err)
	}
}

// TestInMemoryRestartLosesHistory: without H2 a restart starts a new oplog; resuming from an old token gets
// ChangeStreamHistoryLost (286), the code a real replica set gives when the oplog has rolled over.
func TestInMemoryRestartLosesHistory(t *testing.T) {
	managed(t)
	c := ctx(t, 120*time.Second)
	srv, err := testmongo.Start(c, testmongo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	coll, token := tokenAfterInsert(t, c, srv.URI)
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := srv.StartAgain(c); err != nil {
		t.Fatal(err)
	}
	_, werr := resumeWhenBack(c, coll, token)
	t.Logf("resume after in-memory restart: %v", werr)
	if se := serverError(t, werr); !se.HasErrorCode(286) {
		t.Fatalf("want 286 ChangeStreamHistoryLost, got %v", werr)
	}
}

// TestBoundedOplogLosesOldHistory: with --oplog-max-entries the in-memory oplog keeps only its newest entries, as a
// real server's capped oplog: a stream that fell behind them, and a token from before them, get 286
// (ChangeStreamHistoryLost); a stream that keeps up goes on.
func TestBoundedOplogLosesOldHistory(t *testing.T) {
	managed(t)
	c := ctx(t, 120*time.Second)
	srv, err := testmongo.Start(c, testmongo.Options{ExtraArgs: []string{"--oplog-max-entries", "50"}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	coll, token := tokenAfterInsert(t, c, srv.URI)
	behind, err := coll.Watch(c, mongo.Pipeline{})
	if err != nil {
		t.Fatal(err)
	}
	defer behind.Close(context.Background())
	for i := range 100 {
		if _, err := coll.InsertOne(c, bson.D{{Key: "_id", Value: fmt.Sprintf("w%03d", i)}}); err != nil {
			t.Fatal(err)
		}
	}
	if behind.Next(c) {
		t.Fatalf("a stream 100 writes behind a 50-entry oplog read %v, want ChangeStreamHistoryLost", behind.Current)
	}
	if se := serverError(t, behind.Err()); !se.HasErrorCode(286) {
		t.Fatalf("stream behind the oplog: want 286 ChangeStreamHistoryLost, got %v", behind.Err())
	}
	_, werr := coll.Watch(c, mongo.Pipeline{}, options.ChangeStream().SetResumeAfter(token))
	if se := serverError(t, werr); !se.HasErrorCode(286) {
		t.Fatalf("resume from before the oplog: want 286 ChangeStreamHistoryLost, got %v", werr)
	}
	fresh, err := coll.Watch(c, mongo.Pipeline{})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close(context.Background())
	for i := range 100 {
		if _, err := coll.InsertOne(c, bson.D{{Key: "_id", Value: fmt.Sprintf("k%03d", i)}}); err != nil {
			t.Fatal(err)
		}
		if got := next(t, fresh, 10*time.Second).Lookup("documentKey", "_id").StringValue(); got != fmt.Sprintf("k%03d", i) {
			t.Fatalf("a stream keeping up read %q, want k%03d", got, i)
		}
	}
}

// TestRawLibraryShapes documents what mongo-java-server 1.47.0 does on its own (Options.Raw), i.e. what the
// launcher's compatibility layer fixes. Logged, and asserted where the quirk matters.
func TestRawLibraryShapes(t *testing.T) {
	managed(t)
	c := ctx(t, 60*time.Second)
	srv, err := testmongo.Start(c, testmongo.Options{Raw: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	client := testmongo.ClientFor(t, srv.URI)
	coll := client.Database("cronswap").Collection("schedules")
	cs, err := coll.Watch(c, mongo.Pipeline{}, options.ChangeStream().SetFullDocument(options.UpdateLookup))
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close(context.Background())
	t.Logf("raw: token right after Watch: %v", cs.ResumeToken())
	cs.TryNext(c) // consumes the empty first batch
	start := time.Now()
	idle := cs.TryNext(c)
	t.Logf("raw: idle TryNext (a getMore)=%v after %s, token %v", idle, time.Since(start), cs.ResumeToken())

	if _, err := coll.InsertOne(c, bson.D{{Key: "_id", Value: "daily_report"}, {Key: "cron_expr", Value: "0 9 * * *"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := coll.UpdateOne(c, bson.D{{Key: "_id", Value: "daily_report"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "cron_expr", Value: "0 8 * * *"}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := coll.ReplaceOne(c, bson.D{{Key: "_id", Value: "daily_report"}}, bson.D{{Key: "cron_expr", Value: "@hourly"}}); err != nil {
		t.Fatal(err)
	}
	if err := coll.FindOneAndUpdate(c, bson.D{{Key: "_id", Value: "daily_report"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "x", Value: 1}}}}).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := coll.DeleteOne(c, bson.D{{Key: "_id", Value: "daily_report"}}); err != nil {
		t.Fatal(err)
	}
	var ops []string
	for i := 0; i < 4; i++ {
		ev := next(t, cs, 10*time.Second)
		ops = append(ops, opType(ev))
		if opType(ev) == "update" && ev.Lookup("documentKey", "$set").Type == 0 && i == 1 {
			t.Logf("raw: update documentKey is %v", ev.Lookup("documentKey"))
		}
	}
	t.Logf("raw: operation types %v (findOneAndUpdate produced none)", ops)
	if got := strings.Join(ops, ","); got != "insert,update,update,delete" {
		t.Errorf("raw library behaviour changed: %s", got)
	}
	for _, token := range []bson.D{{{Key: "_data", Value: "zz"}}, {{Key: "_data", Value: 42}}, {{Key: "_data", Value: "0000000100000001"}}} {
		rs, err := coll.Watch(c, mongo.Pipeline{}, options.ChangeStream().SetResumeAfter(token))
		var ce mongo.CommandError
		if errors.As(err, &ce) {
			t.Logf("raw: resumeAfter %v: code=%d name=%q msg=%q", token, ce.Code, ce.Name, ce.Message)
		} else {
			t.Logf("raw: resumeAfter %v: err=%v", token, err)
		}
		if rs != nil {
			_ = rs.Close(c)
		}
	}
}

// withDatabase puts db as the path of a mongodb:// URI, keeping hosts and options.
func withDatabase(uri, db string) string {
	scheme, rest, _ := strings.Cut(uri, "://")
	rest, query, hasQuery := strings.Cut(rest, "?")
	hosts, _, _ := strings.Cut(rest, "/")
	out := scheme + "://" + hosts + "/" + db
	if hasQuery {
		out += "?" + query
	}
	return out
}

// TestMongoshOneLiner runs the operator's one-liner through mongosh when scripts/node_modules has it
// (npm ci --prefix scripts).
func TestMongoshOneLiner(t *testing.T) {
	root, err := testmongo.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	mongosh := filepath.Join(root, "scripts", "node_modules", ".bin", "mongosh")
	if _, err := os.Stat(mongosh); err != nil {
		t.Skip("mongosh not installed: run `npm ci --prefix scripts`")
	}
	client := testmongo.Client(t)
	db := testmongo.NewDatabase(t, client)
	c := ctx(t, 60*time.Second)
	coll := db.Collection("schedules")
	cs, err := coll.Watch(c, mongo.Pipeline{}, options.ChangeStream().SetFullDocument(options.UpdateLookup))
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close(context.Background())
	if _, err := coll.InsertOne(c, bson.D{{Key: "_id", Value: "daily_report"}, {Key: "cron_expr", Value: "0 9 * * *"}}); err != nil {
		t.Fatal(err)
	}
	next(t, cs, 10*time.Second)

	uri := withDatabase(testmongo.Shared(t).URI, db.Name())
	oneLiner := `db.schedules.updateOne({ _id: "daily_report" }, { $set: { cron_expr: "0 8 * * *", updated_at: new Date() } })`
	cmd := exec.CommandContext(c, mongosh, uri, "--quiet", "--eval", oneLiner)
	cmd.Env = append(os.Environ(), "MONGOSH_NO_UPDATE_CHECK=1", "DO_NOT_TRACK=1")
	out, err := cmd.CombinedOutput()
	t.Logf("mongosh output:\n%s", out)
	if err != nil {
		t.Fatalf("mongosh: %v", err)
	}
	ev := next(t, cs, 10*time.Second)
	if opType(ev) != "update" || ev.Lookup("fullDocument", "cron_expr").StringValue() != "0 8 * * *" {
		t.Fatalf("event from mongosh one-liner: %s", extJSON(t, ev))
	}
	if _, ok := ev.Lookup("fullDocument", "updated_at").DateTimeOK(); !ok {
		t.Errorf("updated_at is not a date: %v", ev.Lookup("fullDocument", "updated_at"))
	}
}

// TestConcurrentWritersNoLostEvents: writes from several connections all reach one watcher, each document's
// events in write order, and a stream resumed from any token replays exactly what followed it.
func TestConcurrentWritersNoLostEvents(t *testing.T) {
	client := testmongo.Client(t)
	db := testmongo.NewDatabase(t, client)
	coll := db.Collection("schedules")
	c := ctx(t, 60*time.Second)
	cs, err := coll.Watch(c, mongo.Pipeline{}, options.ChangeStream().SetMaxAwaitTime(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close(context.Background())

	const writers, perWriter = 4, 30
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		wc := testmongo.Client(t)
		go func(w int) {
			wcoll := wc.Database(db.Name()).Collection("schedules")
			id := string(rune('a' + w))
			for i := 0; i < perWriter; i++ {
				_, err := wcoll.UpdateOne(context.Background(), bson.D{{Key: "_id", Value: id}},
					bson.D{{Key: "$set", Value: bson.D{{Key: "n", Value: i}}}}, options.UpdateOne().SetUpsert(true))
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}(w)
	}
	for w := 0; w < writers; w++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	last := map[string]int{}
	var tokens []bson.Raw
	for got := 0; got < writers*perWriter; got++ {
		nc, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ok := cs.Next(nc)
		cancel()
		if !ok {
			t.Fatalf("after %d events: %v", got, cs.Err())
		}
		id := cs.Current.Lookup("documentKey", "_id").StringValue()
		switch op := opType(cs.Current); op {
		case "insert": // the upsert of n=0
		case "update":
			n := int(cs.Current.Lookup("updateDescription", "updatedFields", "n").Int32())
			if n != last[id]+1 {
				t.Fatalf("%s: n=%d after %d", id, n, last[id])
			}
			last[id] = n
		default:
			t.Fatalf("unexpected %s", op)
		}
		tokens = append(tokens, append(bson.Raw(nil), cs.Current.Lookup("_id").Document()...))
	}
	for id, n := range last {
		if n != perWriter-1 {
			t.Errorf("%s: last n=%d", id, n)
		}
	}
	// resume from the middle: exactly the rest comes back
	mid := len(tokens) / 2
	rs, err := coll.Watch(c, mongo.Pipeline{}, options.ChangeStream().SetResumeAfter(tokens[mid]))
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close(context.Background())
	for i := mid + 1; i < len(tokens); i++ {
		nc, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ok := rs.Next(nc)
		cancel()
		if !ok {
			t.Fatalf("resumed stream ended at %d: %v", i, rs.Err())
		}
		if id, _ := rs.Current.Lookup("_id").DocumentOK(); string(id) != string(tokens[i]) {
			t.Fatalf("resumed event %d has token %v, want %v", i, id, tokens[i])
		}
	}
}

// TestKillWithH2KeepsAcknowledgedWrites: SIGKILL (a crash) loses no acknowledged write of an H2-backed server,
// and a stream resumes from a token taken before the crash.
func TestKillWithH2KeepsAcknowledgedWrites(t *testing.T) {
	managed(t)
	c := ctx(t, 120*time.Second)
	srv, err := testmongo.Start(c, testmongo.Options{H2File: filepath.Join(t.TempDir(), "mongo.h2")})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	coll, token := tokenAfterInsert(t, c, srv.URI)
	if _, err := coll.InsertOne(c, bson.D{{Key: "_id", Value: "b"}}); err != nil {
		t.Fatal(err)
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := srv.StartAgain(c); err != nil {
		t.Fatal(err)
	}
	rs, err := resumeWhenBack(c, coll, token)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close(context.Background())
	if ev := next(t, rs, 10*time.Second); ev.Lookup("documentKey", "_id").StringValue() != "b" {
		t.Fatalf("after crash, resumed stream gave %s", extJSON(t, ev))
	}
	if n, err := coll.CountDocuments(c, bson.D{}); err != nil || n != 2 {
		t.Fatalf("documents after crash: %d %v", n, err)
	}
}

// tokenAfterInsert inserts {_id: "a"} into cronswap.schedules of the server
// at uri and returns the collection and the resume token after that event.
func tokenAfterInsert(t *testing.T, c context.Context, uri string) (*mongo.Collection, bson.Raw) {
	t.Helper()
	coll := testmongo.ClientFor(t, uri).Database("cronswap").Collection("schedules")
	_, token := insertAndWatch(t, c, coll, "a")
	return coll, token
}

// insertAndWatch opens a change stream on coll, inserts {_id: id}, and
// returns that insert's event and the stream's resume token after it; the
// stream is closed.
func insertAndWatch(t *testing.T, c context.Context, coll *mongo.Collection, id string) (ev, token bson.Raw) {
	t.Helper()
	cs, err := coll.Watch(c, mongo.Pipeline{})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close(context.Background())
	if _, err := coll.InsertOne(c, bson.D{{Key: "_id", Value: id}}); err != nil {
		t.Fatal(err)
	}
	ev = next(t, cs, 10*time.Second)
	return ev, cs.ResumeToken()
}

// resumeWhenBack resumes a change stream after token, retrying network
// errors for up to 5 s while a restarted server comes back.
func resumeWhenBack(c context.Context, coll *mongo.Collection, token bson.Raw) (*mongo.ChangeStream, error) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		cs, err := coll.Watch(c, mongo.Pipeline{}, options.ChangeStream().SetResumeAfter(token))
		if err == nil || !mongo.IsNetworkError(err) || time.Now().After(deadline) {
			return cs, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}
