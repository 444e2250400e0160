package docfields

import (
	"slices"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

func TestMisspellingsPointsOutLookalikesOnly(t *testing.T) {
	doc, err := bson.Marshal(bson.D{
		{Key: "_id", Value: "daily_report"},
		{Key: "cron_expr", Value: "0 9 * * *"},
		{Key: "enabeld", Value: false},         // a swap
		{Key: "cronExpr", Value: "0 8 * * *"},  // case and underscore
		{Key: "time_zone", Value: "UTC"},       // an underscore more
		{Key: "categroy", Value: "billing"},    // a swap in a long name
		{Key: "pased_until", Value: "x"},       // a letter dropped
		{Key: "Updated_By", Value: "alice"},    // case
		{Key: "owner", Value: "team-a"},        // a note of the user's own
		{Key: "jobs", Value: "x"},              // one letter from job: a name of 3 letters takes one edit
		{Key: "disabled", Value: true},         // a word for enabled, inverted
		{Key: "TZ", Value: "Asia/Seoul"},       // a word for timezone
		{Key: "notes", Value: "runs at nine"},  // far from every field
		{Key: "enabled", Value: true},          // known
		{Key: "managed_by", Value: "cronswap"}, // known
		{Key: "update_message", Value: "why"},  // known
	})
	if err != nil {
		t.Fatal(err)
	}
	got := Misspellings(doc)
	want := []Misspelling{{"enabeld", "enabled"}, {"cronExpr", "cron_expr"}, {"time_zone", "timezone"},
		{"categroy", "category"}, {"pased_until", "paused_until"}, {"Updated_By", "updated_by"}, {"jobs", "job"}, {"disabled", "enabled"}, {"TZ", "timezone"}}
	if !slices.Equal(got, want) {
		t.Fatalf("Misspellings:\n got %v\nwant %v", got, want)
	}
}

func TestMisspellingsOfKnownOnlyOrMalformed(t *testing.T) {
	fields := bson.D{}
	for _, k := range Known() {
		fields = append(fields, bson.E{Key: k, Value: "x"})
	}
	doc, err := bson.Marshal(fields)
	if err != nil {
		t.Fatal(err)
	}
	if got := Misspellings(doc); got != nil {
		t.Fatalf("every known field: %v", got)
	}
	for _, k := range Known() {
		if !isKnown(k) {
			t.Errorf("Known lists %q, isKnown does not", k)
		}
	}
	if got := Misspellings(bson.Raw{1, 2}); got != nil {
		t.Fatalf("malformed: %v", got)
	}
}

func TestDistance(t *testing.T) {
	for _, c := range []struct {
		a, b  string
		limit int
		want  int
	}{
		{"enabled", "enabled", 2, 0},
		{"enabeld", "enabled", 2, 1},
		{"enbled", "enabled", 2, 1},
		{"enabledd", "enabled", 2, 1},
		{"emabld", "enabled", 2, 2},
		{"xyz", "enabled", 2, 3},
		{"timezome", "timezone", 2, 1},
	} {
		if got := distance(c.a, c.b, c.limit); got != c.want {
			t.Errorf("distance(%q, %q, %d) = %d, want %d", c.a, c.b, c.limit, got, c.want)
		}
	}
}

func BenchmarkMisspellingsKnownFields(b *testing.B) {
	doc, err := bson.Marshal(bson.D{{Key: "_id", Value: "p123456"}, {Key: "cron_expr", Value: "0 9 * * *"},
		{Key: "job", Value: "digest"}, {Key: "args", Value: bson.D{{Key: "customer", Value: "c1"}}},
		{Key: "updated_at", Value: bson.DateTime(0)}, {Key: "timezone", Value: "Europe/Berlin"}})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if Misspellings(doc) != nil {
			b.Fatal("known fields only")
		}
	}
}
