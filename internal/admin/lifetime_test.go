package admin_test

import (
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/admin"
	"github.com/cronswap/cronswap/internal/lifetime"
	"github.com/cronswap/cronswap/internal/testmongo"
	"github.com/cronswap/cronswap/schedule"
)

// The validator covers the lifetime fields and exclude: a document the
// decoder accepts is accepted, and on a server that enforces validators a
// lifetime date that is not a date, a max_runs below 1 or an exclude that
// is not an array of names is refused at write time.
func TestValidatorLifetimeAndExclude(t *testing.T) {
	props := admin.SchedulesValidator()[0].Value.(bson.D)
	covered := map[string]bool{}
	for _, e := range props {
		if e.Key == "properties" {
			for _, p := range e.Value.(bson.D) {
				covered[p.Key] = true
			}
		}
	}
	for _, f := range []string{lifetime.FieldStartAt, lifetime.FieldEndAt, lifetime.FieldPausedUntil, lifetime.FieldMaxRuns, schedule.FieldExclude} {
		if !covered[f] {
			t.Errorf("the validator has no rule for %s", f)
		}
	}

	db := testmongo.NewDatabase(t, testmongo.Client(t))
	rep, err := admin.Init(ctx(t), db)
	if err != nil {
		t.Fatal(err)
	}
	coll := db.Collection(schedule.CollectionName)
	now := time.Now().UTC().Truncate(time.Millisecond)
	good := bson.D{{Key: "_id", Value: "good"}, {Key: "cron_expr", Value: "0 9 * * *"},
		{Key: lifetime.FieldStartAt, Value: now}, {Key: lifetime.FieldEndAt, Value: now.Add(time.Hour)},
		{Key: lifetime.FieldPausedUntil, Value: nil}, {Key: lifetime.FieldMaxRuns, Value: 10.0},
		{Key: schedule.FieldExclude, Value: bson.A{"us-holidays"}}}
	if _, err := coll.InsertOne(ctx(t), good); err != nil {
		t.Fatalf("a valid document refused: %v", err)
	}
	raw, err := bson.Marshal(good)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := schedule.DecodeFields(raw); err != nil {
		t.Fatalf("the decoder refuses the document the validator accepts: %v", err)
	}
	if rep.Validator == admin.ValidatorUnsupported {
		t.Logf("refusals not checked: this server does not enforce validators: %s", rep.Notice)
		return
	}
	for _, bad := range []bson.E{
		{Key: lifetime.FieldEndAt, Value: "2030-01-01"},
		{Key: lifetime.FieldStartAt, Value: int32(5)},
		{Key: lifetime.FieldMaxRuns, Value: int32(0)},
		{Key: lifetime.FieldMaxRuns, Value: "10"},
		{Key: schedule.FieldExclude, Value: "us-holidays"},
		{Key: schedule.FieldExclude, Value: bson.A{int32(1)}},
	} {
		d := bson.D{{Key: "_id", Value: "bad"}, {Key: "cron_expr", Value: "0 9 * * *"}, bad}
		if _, err := coll.InsertOne(ctx(t), d); err == nil {
			t.Errorf("%s: %#v accepted by the validator", bad.Key, bad.Value)
			_, _ = coll.DeleteOne(ctx(t), bson.D{{Key: "_id", Value: "bad"}})
		}
	}
}
