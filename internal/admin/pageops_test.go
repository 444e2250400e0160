package admin_test

import (
	"errors"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/admin"
	"github.com/cronswap/cronswap/internal/testmongo"
	"github.com/cronswap/cronswap/internal/triggers"
	"github.com/cronswap/cronswap/schedule"
)

// What the status page's actions write: who did it (updated_by,
// requested_by), nothing for a job without a document (an edit of a
// retime never creates one), and a preview that writes nothing.
func TestPageActionsNameTheActorAndCreateNothing(t *testing.T) {
	db := testmongo.NewDatabase(t, testmongo.Client(t))
	store := admin.NewStore(db)
	coll := db.Collection(schedule.CollectionName)
	if _, err := coll.InsertOne(ctx(t), bson.D{{Key: "_id", Value: "a"}, {Key: "cron_expr", Value: "0 9 * * *"}, {Key: "updated_by", Value: "old"}}); err != nil {
		t.Fatal(err)
	}
	doc := func(id string) bson.M {
		var m bson.M
		if err := coll.FindOne(ctx(t), bson.D{{Key: "_id", Value: id}}).Decode(&m); err != nil {
			return nil
		}
		return m
	}
	if changed, err := store.SetEnabled(ctx(t), "a", false, "alice"); err != nil || !changed || doc("a")["updated_by"] != "alice" {
		t.Fatalf("disable by alice: %v %v %v", changed, err, doc("a"))
	}
	if _, err := store.SetEnabled(ctx(t), "a", true, ""); err != nil || doc("a")["updated_by"] != "alice" {
		t.Fatalf("enable by no one keeps updated_by: %v %v", err, doc("a"))
	}

	expr, tz := "*/10 * * * * *", "Asia/Seoul"
	c, err := store.CheckEdit(ctx(t), "a", admin.ScheduleEdit{CronExpr: &expr, Timezone: &tz, MustExist: true})
	if err != nil || c.Schedule.CronExpr != expr || c.Schedule.Timezone != tz || doc("a")["cron_expr"] != "0 9 * * *" {
		t.Fatalf("CheckEdit: %+v %v (stored %v)", c, err, doc("a"))
	}
	bad := "0 25 * * *"
	if _, err := store.CheckEdit(ctx(t), "a", admin.ScheduleEdit{CronExpr: &bad, MustExist: true}); !errors.Is(err, schedule.ErrInvalid) {
		t.Fatalf("CheckEdit of a bad expression: %v", err)
	}
	res, err := store.SetSchedule(ctx(t), "a", admin.ScheduleEdit{CronExpr: &expr, By: "bob", MustExist: true})
	if err != nil || res.Schedule.CronExpr != expr || doc("a")["updated_by"] != "bob" || doc("a")["cron_expr"] != expr {
		t.Fatalf("SetSchedule by bob: %+v %v %v", res, err, doc("a"))
	}
	if _, err := store.SetSchedule(ctx(t), "ghost", admin.ScheduleEdit{CronExpr: &expr, MustExist: true}); !errors.Is(err, admin.ErrNotFound) || doc("ghost") != nil {
		t.Fatalf("SetSchedule of a job with no document, MustExist: %v %v", err, doc("ghost"))
	}

	tid, err := store.RunNow(ctx(t), "a", nil, "carol")
	if err != nil {
		t.Fatal(err)
	}
	req, err := triggers.Get(ctx(t), triggers.Collection(db), tid.Hex())
	if err != nil || req[triggers.FieldRequestedBy] != "carol" || req["job_id"] != "a" {
		t.Fatalf("run-now request %v %v", req, err)
	}
	if _, err := store.RunNow(ctx(t), "ghost", nil, "carol"); !errors.Is(err, admin.ErrNotFound) {
		t.Fatalf("run-now of a job with no document: %v", err)
	}
}

// Every write that names its author carries no message but its own: the
// page's and the command line's edits (SetEnabled, SetSchedule,
// SetEnabledByCategory) remove the update_message an apply left, so that
// the edit history does not give an old reason to a new edit; apply
// writes its own, or removes it.
func TestEditsNameTheirAuthorAndDropAnOldMessage(t *testing.T) {
	db := testmongo.NewDatabase(t, testmongo.Client(t))
	store := admin.NewStore(db)
	coll := db.Collection(schedule.CollectionName)
	withMessage := func(id string) {
		t.Helper()
		if _, err := coll.UpdateOne(ctx(t), bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$set", Value: bson.D{
			{Key: "cron_expr", Value: "0 9 * * *"}, {Key: "category", Value: "c"}, {Key: "enabled", Value: true},
			{Key: "updated_by", Value: "ci"}, {Key: "update_message", Value: "from the repository"}}}},
			options.UpdateOne().SetUpsert(true)); err != nil {
			t.Fatal(err)
		}
	}
	doc := func(id string) bson.M {
		t.Helper()
		var m bson.M
		if err := coll.FindOne(ctx(t), bson.D{{Key: "_id", Value: id}}).Decode(&m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	expr := "0 7 * * *"
	for name, edit := range map[string]func() error{
		"SetEnabled": func() error { _, err := store.SetEnabled(ctx(t), "a", false, "alice"); return err },
		"SetSchedule": func() error {
			_, err := store.SetSchedule(ctx(t), "a", admin.ScheduleEdit{CronExpr: &expr, By: "alice", MustExist: true})
			return err
		},
		"SetEnabledByCategory": func() error { _, err := store.SetEnabledByCategory(ctx(t), "c", false, "alice"); return err },
	} {
		withMessage("a")
		if err := edit(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if d := doc("a"); d["updated_by"] != "alice" || d["update_message"] != nil {
			t.Errorf("%s: updated_by %v, update_message %v; want alice and none", name, d["updated_by"], d["update_message"])
		}
	}
}
