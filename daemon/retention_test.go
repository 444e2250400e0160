package daemon

import (
	"context"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/internal/testmongo"
	"github.com/cronswap/cronswap/internal/triggers"
)

// With Retention unset, every record the daemon writes expires after the
// default retention: an ended run-now request and its run record alike.
// (A request once got an expire_at of its end, so the server's TTL
// monitor deleted it, and the run now with it from the job's history,
// within a minute.)
func TestUnsetRetentionKeepsRequestsAndRunsForTheDefault(t *testing.T) {
	db := testmongo.NewDatabase(t, testmongo.Client(t))
	insertSchedules(t, db, "job")
	d := startDaemon(t, db, testOptions())
	waitFor(t, 20*time.Second, "job armed", func() bool { return armed(d.engine, "job") })
	waitFor(t, 20*time.Second, "the requests' stream open", func() bool {
		_, ok := d.logs.find(func(l map[string]any) bool {
			return l["collection"] == triggers.CollectionName && l["msg"] == "change stream opened at the current position"
		})
		return ok
	})

	ctx := context.Background()
	if _, err := triggers.Collection(db).InsertOne(ctx, bson.D{{Key: "_id", Value: "now"}, {Key: triggers.FieldJobID, Value: "job"}}); err != nil {
		t.Fatal(err)
	}
	var req struct {
		Status   string    `bson:"status"`
		RunID    string    `bson:"run_id"`
		EndedAt  time.Time `bson:"ended_at"`
		ExpireAt time.Time `bson:"expire_at"`
	}
	waitFor(t, 20*time.Second, "the request to end", func() bool {
		err := triggers.Collection(db).FindOne(ctx, bson.D{{Key: "_id", Value: "now"}}).Decode(&req)
		return err == nil && req.Status == record.StatusSucceeded && !req.ExpireAt.IsZero()
	})
	if kept := req.ExpireAt.Sub(req.EndedAt); kept < record.DefaultRetention-time.Minute {
		t.Errorf("the ended request expires %s after it ended, want the default retention %s", kept, record.DefaultRetention)
	}
	var run record.RunDoc
	if err := db.Collection(record.RunsCollection).FindOne(ctx, bson.D{{Key: "_id", Value: req.RunID}}).Decode(&run); err != nil {
		t.Fatalf("the request's run %s: %v", req.RunID, err)
	}
	if kept := run.ExpireAt.Sub(run.EndedAt); kept < record.DefaultRetention-time.Minute {
		t.Errorf("the run record expires %s after it ended, want the default retention %s", kept, record.DefaultRetention)
	}
}
