package daemon

import (
	"context"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/blackout"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/internal/testmongo"
	"github.com/cronswap/cronswap/schedule"
)

// runsOf reads the records of job with a slot after after, oldest first.
func runsOf(t *testing.T, db *mongo.Database, job string, after time.Time) []record.RunDoc {
	t.Helper()
	cur, err := db.Collection(record.RunsCollection).Find(context.Background(),
		bson.D{{Key: "job_id", Value: job}, {Key: "scheduled_at", Value: bson.D{{Key: "$gt", Value: after}}}},
		options.Find().SetSort(bson.D{{Key: "scheduled_at", Value: 1}}))
	if err != nil {
		t.Fatal(err)
	}
	var out []record.RunDoc
	if err := cur.All(context.Background(), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// A window inserted while the daemon runs takes effect at once: the
// billing job's next fires are recorded skipped with its id and reason
// while the reports job keeps running; a bad window document is refused
// with its _id in the log and changes nothing; deleting the window
// restores firing at once.
func TestBlackoutWindowTakesEffectLive(t *testing.T) {
	client := testmongo.Client(t)
	db := testmongo.NewDatabase(t, client)
	ctx := context.Background()
	for _, s := range []struct{ id, category string }{{"bill", "billing"}, {"report", "reports"}} {
		if _, err := db.Collection(schedule.CollectionName).InsertOne(ctx, bson.D{{Key: "_id", Value: s.id},
			{Key: "cron_expr", Value: "@every 1s"}, {Key: "job", Value: "tick"}, {Key: "category", Value: s.category}}); err != nil {
			t.Fatal(err)
		}
	}
	d := startDaemon(t, db, testOptions())
	start := time.Now().Add(-time.Second)
	waitFor(t, 20*time.Second, "bill to run", func() bool { return len(runsOf(t, db, "bill", start)) > 0 })

	inserted := time.Now()
	if _, err := db.Collection(blackout.CollectionName).InsertOne(ctx, bson.D{{Key: "_id", Value: "freeze"},
		{Key: "from", Value: inserted.Add(-time.Hour)}, {Key: "to", Value: inserted.Add(time.Hour)},
		{Key: "categories", Value: bson.A{"billing"}}, {Key: "reason", Value: "year-end freeze"}}); err != nil {
		t.Fatal(err)
	}
	var firstSkip record.RunDoc
	waitFor(t, 10*time.Second, "a fire of bill skipped by the window", func() bool {
		for _, r := range runsOf(t, db, "bill", inserted.Add(-time.Second)) {
			if r.Status == record.StatusSkipped && r.BlackoutID == "freeze" {
				firstSkip = r
				return true
			}
		}
		return false
	})
	if firstSkip.Reason != "year-end freeze" {
		t.Errorf("skipped record %+v, want the window's reason", firstSkip)
	}
	if late := firstSkip.ScheduledAt.Sub(inserted); late > 2*time.Second {
		t.Errorf("first skipped slot %s is %s after the insert, want within 2 s", firstSkip.ScheduledAt, late)
	}
	// A bad document: refused, logged with its _id; the good window stays.
	if _, err := db.Collection(blackout.CollectionName).InsertOne(ctx, bson.D{{Key: "_id", Value: "typo"},
		{Key: "from", Value: inserted}, {Key: "to", Value: inserted.Add(time.Hour)}, {Key: "categoies", Value: bson.A{"reports"}},
		{Key: "reason", Value: "x"}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the bad window refused in the log", func() bool {
		_, ok := d.logs.find(func(l map[string]any) bool {
			return l["msg"] == "blackout window refused" && l["blackout_id"] == "typo"
		})
		return ok
	})
	// A few more slots, after the bad window, skipped under the good one.
	refused := time.Now()
	waitFor(t, 10*time.Second, "three more fires of bill skipped by the window", func() bool {
		n := 0
		for _, r := range runsOf(t, db, "bill", refused) {
			if r.Status == record.StatusSkipped && r.BlackoutID == "freeze" {
				n++
			}
		}
		return n >= 3
	})
	deleted := time.Now()
	if _, err := db.Collection(blackout.CollectionName).DeleteOne(ctx, bson.D{{Key: "_id", Value: "freeze"}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "bill to run again after the delete", func() bool {
		for _, r := range runsOf(t, db, "bill", deleted) {
			if r.Status == record.StatusSucceeded {
				return true
			}
		}
		return false
	})
	// Every bill slot from the first skip until the delete was skipped by
	// the window; report ran throughout.
	for _, r := range runsOf(t, db, "bill", firstSkip.ScheduledAt.Add(-time.Nanosecond)) {
		if r.ScheduledAt.Before(deleted.Add(-time.Second)) && r.Status != record.StatusMissed &&
			(r.Status != record.StatusSkipped || r.BlackoutID != "freeze") {
			t.Errorf("bill slot %s under the window: %s %q, want skipped by freeze", r.ScheduledAt, r.Status, r.BlackoutID)
		}
	}
	for _, r := range runsOf(t, db, "report", inserted) {
		// The newest slot may still be in its claim (claiming) or running.
		if r.BlackoutID != "" || (r.Status != record.StatusSucceeded && r.Status != record.StatusRunning &&
			r.Status != record.StatusClaiming) {
			t.Errorf("report slot %s: %s %q, want it run (another category)", r.ScheduledAt, r.Status, r.BlackoutID)
		}
	}
}

// A recurring window (the first 5 s of every 10 s) skips exactly the slots
// inside it.
func TestBlackoutRecurringWindow(t *testing.T) {
	client := testmongo.Client(t)
	db := testmongo.NewDatabase(t, client)
	ctx := context.Background()
	if _, err := db.Collection(blackout.CollectionName).InsertOne(ctx, bson.D{{Key: "_id", Value: "every10"},
		{Key: "cron_expr", Value: "*/10 * * * * *"}, {Key: "duration", Value: "5s"}, {Key: "reason", Value: "flush"}}); err != nil {
		t.Fatal(err)
	}
	startDaemon(t, db, testOptions())
	start := time.Now()
	if _, err := db.Collection(schedule.CollectionName).InsertOne(ctx, bson.D{{Key: "_id", Value: "tick"},
		{Key: "cron_expr", Value: "@every 1s"}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "12 slots recorded", func() bool { return len(runsOf(t, db, "tick", start)) >= 12 })
	for _, r := range runsOf(t, db, "tick", start) {
		inside := r.ScheduledAt.Second()%10 < 5
		switch {
		case inside && r.Status == record.StatusMissed:
			// not recorded within its starting deadline (a loaded machine)
		case inside && (r.Status != record.StatusSkipped || r.BlackoutID != "every10" || r.Reason != "flush"):
			t.Errorf("slot %s inside the window: %s %q", r.ScheduledAt, r.Status, r.BlackoutID)
		case !inside && r.BlackoutID != "":
			t.Errorf("slot %s outside the window skipped by %q", r.ScheduledAt, r.BlackoutID)
		}
	}
}
