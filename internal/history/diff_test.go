package history

import (
	"fmt"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

func raw(t *testing.T, d bson.D) bson.Raw {
	t.Helper()
	b, err := bson.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// render shows a change as "field: before -> after" with values as
// canonical extended JSON (so types show) and "-" for absent.
func render(c Change) string {
	v := func(rv bson.RawValue) string {
		if rv.IsZero() {
			return "-"
		}
		js, err := bson.MarshalExtJSON(bson.D{{Key: "v", Value: rv}}, true, false)
		if err != nil {
			return "?" + err.Error()
		}
		return strings.TrimSuffix(strings.TrimPrefix(string(js), `{"v":`), "}")
	}
	return fmt.Sprintf("%s: %s -> %s", c.Field, v(c.Before), v(c.After))
}

func renderAll(cs []Change) string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = render(c)
	}
	return strings.Join(out, "; ")
}

func TestDiff(t *testing.T) {
	base := bson.D{{Key: "_id", Value: "a"}, {Key: "cron_expr", Value: "0 9 * * *"},
		{Key: "args", Value: bson.D{{Key: "region", Value: "eu"}, {Key: "opts", Value: bson.D{{Key: "n", Value: int32(1)}}}}},
		{Key: "updated_at", Value: bson.DateTime(1)}}
	with := func(edit func(d bson.D) bson.D) bson.D {
		d := make(bson.D, len(base))
		copy(d, base)
		return edit(d)
	}
	set := func(k string, v any) func(bson.D) bson.D {
		return func(d bson.D) bson.D {
			for i := range d {
				if d[i].Key == k {
					d[i].Value = v
					return d
				}
			}
			return append(d, bson.E{Key: k, Value: v})
		}
	}
	drop := func(k string) func(bson.D) bson.D {
		return func(d bson.D) bson.D {
			out := bson.D{}
			for _, e := range d {
				if e.Key != k {
					out = append(out, e)
				}
			}
			return out
		}
	}
	cases := []struct {
		name          string
		before, after bson.Raw
		want          string
	}{
		{"insert: every field absent before, args whole", nil, raw(t, base),
			`cron_expr: - -> "0 9 * * *"; args: - -> {"region":"eu","opts":{"n":{"$numberInt":"1"}}}`},
		{"delete: every field absent after", raw(t, base), nil,
			`cron_expr: "0 9 * * *" -> -; args: {"region":"eu","opts":{"n":{"$numberInt":"1"}}} -> -`},
		{"one field", raw(t, base), raw(t, with(set("cron_expr", "0 8 * * *"))), `cron_expr: "0 9 * * *" -> "0 8 * * *"`},
		{"absent to present", raw(t, base), raw(t, with(set("timezone", "Europe/Berlin"))), `timezone: - -> "Europe/Berlin"`},
		{"present to absent", raw(t, with(set("timezone", "Europe/Berlin"))), raw(t, base), `timezone: "Europe/Berlin" -> -`},
		{"nested args field, dotted", raw(t, base),
			raw(t, with(set("args", bson.D{{Key: "region", Value: "us"}, {Key: "opts", Value: bson.D{{Key: "n", Value: int32(2)}}}, {Key: "new", Value: true}}))),
			`args.region: "eu" -> "us"; args.opts.n: {"$numberInt":"1"} -> {"$numberInt":"2"}; args.new: - -> true`},
		{"nested key order is not a change", raw(t, base),
			raw(t, with(set("args", bson.D{{Key: "opts", Value: bson.D{{Key: "n", Value: int32(1)}}}, {Key: "region", Value: "eu"}}))), ``},
		{"type change of a number", raw(t, with(set("n", int32(5)))), raw(t, with(set("n", int64(5)))),
			`n: {"$numberInt":"5"} -> {"$numberLong":"5"}`},
		{"document to string is one change", raw(t, base), raw(t, with(set("args", "x"))),
			`args: {"region":"eu","opts":{"n":{"$numberInt":"1"}}} -> "x"`},
		{"null is a value, not absence", raw(t, base), raw(t, with(set("enabled", nil))), `enabled: - -> null`},
		{"arrays compared whole", raw(t, with(set("tags", bson.A{"a", "b"}))), raw(t, with(set("tags", bson.A{"b", "a"}))),
			`tags: ["a","b"] -> ["b","a"]`},
		{"updated_at, updated_by and _id are not changes", raw(t, base),
			raw(t, with(func(d bson.D) bson.D {
				return set("updated_by", "alice")(set("updated_at", bson.DateTime(2))(set("_id", "b")(d)))
			})), ``},
		{"removed field among others", raw(t, base), raw(t, with(drop("args"))),
			`args: {"region":"eu","opts":{"n":{"$numberInt":"1"}}} -> -`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := renderAll(Diff(c.before, c.after)); got != c.want {
				t.Errorf("Diff:\n got %s\nwant %s", got, c.want)
			}
		})
	}
}

func TestApplyUpdate(t *testing.T) {
	doc := raw(t, bson.D{{Key: "_id", Value: "a"}, {Key: "cron_expr", Value: "0 9 * * *"}, {Key: "timezone", Value: "UTC"},
		{Key: "args", Value: bson.D{{Key: "region", Value: "eu"}, {Key: "list", Value: bson.A{int32(1), int32(2), int32(3)}}}}})
	desc := raw(t, bson.D{
		{Key: "updatedFields", Value: bson.D{
			{Key: "cron_expr", Value: "0 8 * * *"},
			{Key: "args.region", Value: "us"},
			{Key: "args.list.1", Value: int32(20)},
			{Key: "args.deep.x", Value: true},
			{Key: "enabled", Value: false},
		}},
		{Key: "removedFields", Value: bson.A{"timezone"}},
		{Key: "truncatedArrays", Value: bson.A{bson.D{{Key: "field", Value: "args.list"}, {Key: "newSize", Value: int32(2)}}}},
	})
	got, err := ApplyUpdate(doc, desc)
	if err != nil {
		t.Fatal(err)
	}
	want := raw(t, bson.D{{Key: "_id", Value: "a"}, {Key: "cron_expr", Value: "0 8 * * *"},
		{Key: "args", Value: bson.D{{Key: "region", Value: "us"}, {Key: "list", Value: bson.A{int32(1), int32(20)}}, {Key: "deep", Value: bson.D{{Key: "x", Value: true}}}}},
		{Key: "enabled", Value: false}})
	if got.String() != want.String() {
		t.Fatalf("ApplyUpdate:\n got %s\nwant %s", got, want)
	}
	// An update of a document the recorder does not hold starts from empty.
	got, err = ApplyUpdate(nil, raw(t, bson.D{{Key: "updatedFields", Value: bson.D{{Key: "enabled", Value: true}}}}))
	if err != nil || got.String() != raw(t, bson.D{{Key: "enabled", Value: true}}).String() {
		t.Fatalf("ApplyUpdate(nil) = %s, %v", got, err)
	}
}
