package admin_test

import (
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/admin"
	"github.com/cronswap/cronswap/internal/testmongo"
	"github.com/cronswap/cronswap/schedule"
)

// The validator allows dst to be absent, null, "shift" or "plain" and
// nothing else; on a server that enforces validators a write with another
// value is refused, as Decode refuses it.
func TestValidatorDST(t *testing.T) {
	props := admin.SchedulesValidator()[0].Value.(bson.D)
	var dst bson.D
	for _, e := range props {
		if e.Key == "properties" {
			for _, p := range e.Value.(bson.D) {
				if p.Key == schedule.FieldDST {
					dst = p.Value.(bson.D)
				}
			}
		}
	}
	if len(dst) != 1 || dst[0].Key != "enum" {
		t.Fatalf("dst rule %v, want one enum", dst)
	}
	want := bson.A{"shift", "plain", nil}
	if got := dst[0].Value.(bson.A); len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != nil {
		t.Fatalf("dst enum %v, want %v", got, want)
	}

	db := testmongo.NewDatabase(t, testmongo.Client(t))
	rep, err := admin.Init(ctx(t), db)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Validator == admin.ValidatorUnsupported {
		// The rule itself is checked above; only a server that enforces
		// validators (a real MongoDB) can show it refusing writes.
		t.Logf("writes not checked: this server does not enforce validators: %s", rep.Notice)
		return
	}
	coll := db.Collection(schedule.CollectionName)
	for i, v := range []any{"shift", "plain", nil} {
		d := bson.D{{Key: "_id", Value: string(rune('a' + i))}, {Key: "cron_expr", Value: "30 1 * * *"}, {Key: "dst", Value: v}}
		if _, err := coll.InsertOne(ctx(t), d); err != nil {
			t.Errorf("dst %v refused: %v", v, err)
		}
	}
	for _, v := range []any{"summer", "", true, int32(1)} {
		d := bson.D{{Key: "_id", Value: "bad"}, {Key: "cron_expr", Value: "30 1 * * *"}, {Key: "dst", Value: v}}
		if _, err := coll.InsertOne(ctx(t), d); err == nil {
			t.Errorf("dst %#v accepted by the validator", v)
			_, _ = coll.DeleteOne(ctx(t), bson.D{{Key: "_id", Value: "bad"}})
		}
	}
}
