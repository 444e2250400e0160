package triggers

import (
	"context"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/testmongo"
)

// A full read of the requests reads the pending and running ones only,
// backfilled slots oldest first: ended requests, kept for the runs'
// retention, cost nothing at a start or a resync.
func TestFeedSnapshotReadsOpenRequestsOldestSlotFirst(t *testing.T) {
	db := testmongo.NewDatabase(t, testmongo.Client(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	coll := Collection(db)
	slot := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	docs := []any{
		bson.D{{Key: "_id", Value: "late"}, {Key: "job_id", Value: "j"}, {Key: FieldSlot, Value: slot.Add(time.Hour)}},
		bson.D{{Key: "_id", Value: "done"}, {Key: "job_id", Value: "j"}, {Key: FieldStatus, Value: "succeeded"}},
		bson.D{{Key: "_id", Value: "early"}, {Key: "job_id", Value: "j"}, {Key: FieldSlot, Value: slot}, {Key: FieldStatus, Value: StatusRunning}},
		bson.D{{Key: "_id", Value: "refused"}, {Key: "job_id", Value: "j"}, {Key: FieldStatus, Value: "rejected"}},
	}
	if _, err := coll.InsertMany(ctx, docs); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for d, err := range NewFeed(coll, time.Second).Snapshot(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, d.Lookup("_id").StringValue())
	}
	if len(ids) != 2 || ids[0] != "early" || ids[1] != "late" {
		t.Fatalf("snapshot read %v, want [early late]", ids)
	}
}
