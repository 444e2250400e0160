package triggers

import (
	"context"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/internal/runstore"
)

// A replica that copies a run record's outcome onto a request names the
// replica that ran it, not itself: its copy can land before the runner's
// own end write, which then finds the request ended and writes nothing.
func TestFromRecordKeepsTheRunnersInstance(t *testing.T) {
	e := newEnv(t, 0)
	ctx := context.Background()
	if _, err := e.coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "m1"}, {Key: FieldJobID, Value: "job"}}); err != nil {
		t.Fatal(err)
	}
	locks, runs := record.Collections(e.db)
	copier := NewStore(e.coll, runs, runstore.New(locks, runs, runstore.Options{}), time.Hour, "r2")
	now := time.Now()
	rec := record.RunDoc{ID: RunIDPrefix + "m1", Status: record.StatusSucceeded, Instance: "r1", Fence: 7, EndedAt: now}
	id := bson.RawValue{Type: bson.TypeString, Value: bsonString("m1")}
	if err := copier.FromRecord(ctx, id, rec, true, now); err != nil {
		t.Fatal(err)
	}
	d := e.doc(t, id)
	if d[FieldStatus] != record.StatusSucceeded || d[FieldInstance] != "r1" {
		t.Fatalf("request after the copy: status %v instance %v, want succeeded by r1", d[FieldStatus], d[FieldInstance])
	}
}
