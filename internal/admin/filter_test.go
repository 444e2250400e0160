package admin_test

import (
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/admin"
)

// TestScheduleFilterSelects: the rule export, plan and apply select by. A
// category is selected only as exactly that string (not a longer one, not
// an array holding it, which MongoDB's equality would match), an id prefix
// literally from the start of a string _id, Managed only documents apply
// marked; every field set must select; the zero value selects all.
func TestScheduleFilterSelects(t *testing.T) {
	doc := func(elems ...bson.E) bson.Raw {
		raw, err := bson.Marshal(bson.D(elems))
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	id := func(v any) bson.E { return bson.E{Key: "_id", Value: v} }
	cat := func(v any) bson.E { return bson.E{Key: "category", Value: v} }
	managed := bson.E{Key: admin.FieldManagedBy, Value: admin.ManagedByApply}
	billing := admin.ScheduleFilter{Category: "billing"}
	teamA := admin.ScheduleFilter{IDPrefix: "team.a/"}
	for _, c := range []struct {
		name string
		f    admin.ScheduleFilter
		doc  bson.Raw
		want bool
	}{
		{"zero: a job", admin.ScheduleFilter{}, doc(id("x")), true},
		{"zero: not a job", admin.ScheduleFilter{}, doc(id(int32(7))), true},
		{"category", billing, doc(id("x"), cat("billing")), true},
		{"another category", billing, doc(id("x"), cat("ops")), false},
		{"a longer category", billing, doc(id("x"), cat("billing-eu")), false},
		{"another case", billing, doc(id("x"), cat("Billing")), false},
		{"no category", billing, doc(id("x")), false},
		{"null category", billing, doc(id("x"), cat(nil)), false},
		{"an array holding the category", billing, doc(id("x"), cat(bson.A{"billing"})), false},
		{"category of a non-job", billing, doc(id(int32(7)), cat("billing")), true},
		{"prefix", teamA, doc(id("team.a/report")), true},
		{"the prefix itself", teamA, doc(id("team.a/")), true},
		{"the prefix less a byte", teamA, doc(id("team.a")), false},
		{"a dot taken literally", teamA, doc(id("teamXa/report")), false},
		{"the prefix not at the start", teamA, doc(id("x-team.a/report")), false},
		{"another case of the prefix", teamA, doc(id("Team.a/report")), false},
		{"prefix of a non-string id", teamA, doc(id(int32(7))), false},
		{"both", admin.ScheduleFilter{Category: "billing", IDPrefix: "team.a/"}, doc(id("team.a/r"), cat("billing")), true},
		{"both, category differs", admin.ScheduleFilter{Category: "billing", IDPrefix: "team.a/"}, doc(id("team.a/r"), cat("ops")), false},
		{"both, id differs", admin.ScheduleFilter{Category: "billing", IDPrefix: "team.a/"}, doc(id("team.b/r"), cat("billing")), false},
		{"managed", admin.ScheduleFilter{Managed: true}, doc(id("x"), managed), true},
		{"not managed", admin.ScheduleFilter{Managed: true}, doc(id("x")), false},
	} {
		if got := c.f.Selects(c.doc); got != c.want {
			t.Errorf("%s: %+v selects %s: %v, want %v", c.name, c.f, c.doc, got, c.want)
		}
	}
	if !(admin.ScheduleFilter{}).IsZero() || billing.IsZero() || teamA.IsZero() || (admin.ScheduleFilter{Managed: true}).IsZero() {
		t.Error("IsZero")
	}
}
