package blackout

import (
	"errors"
	"io"
	"iter"
	"log/slog"
	"testing"
	"time"

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

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestDecodeOneOffWindowCoversFromUntilTo(t *testing.T) {
	w, err := Decode(raw(t, bson.D{{Key: "_id", Value: "freeze"}, {Key: "from", Value: at("2026-12-24T00:00:00Z")},
		{Key: "to", Value: at("2026-12-27T00:00:00Z")}, {Key: "categories", Value: bson.A{"billing"}},
		{Key: "reason", Value: "year-end freeze"}}), nil)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		cat  string
		slot string
		want bool
	}{
		{"billing", "2026-12-24T00:00:00Z", true},
		{"billing", "2026-12-26T23:59:59Z", true},
		{"billing", "2026-12-27T00:00:00Z", false},
		{"billing", "2026-12-23T23:59:59Z", false},
		{"reports", "2026-12-25T00:00:00Z", false},
		{"", "2026-12-25T00:00:00Z", false},
	}
	for _, c := range cases {
		if got := w.Matches(c.cat, at(c.slot)); got != c.want {
			t.Errorf("Matches(%q, %s) = %v, want %v", c.cat, c.slot, got, c.want)
		}
	}
}

func TestDecodeRecurringWindowCoversDurationAfterEachFire(t *testing.T) {
	// Every day 02:00–03:00 in Berlin (UTC+1 in winter).
	w, err := Decode(raw(t, bson.D{{Key: "_id", Value: "nightly"}, {Key: "cron_expr", Value: "0 2 * * *"},
		{Key: "duration", Value: "1h"}, {Key: "timezone", Value: "Europe/Berlin"}, {Key: "reason", Value: "backups"}}), nil)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		slot string
		want bool
	}{
		{"2026-12-02T01:00:00Z", true}, // 02:00 Berlin
		{"2026-12-02T01:59:59Z", true},
		{"2026-12-02T02:00:00Z", false}, // 03:00 Berlin: closed
		{"2026-12-02T00:59:59Z", false},
		{"2026-12-03T01:30:00Z", true},
	}
	for _, c := range cases {
		if got := w.Matches("any", at(c.slot)); got != c.want {
			t.Errorf("Matches(%s) = %v, want %v", c.slot, got, c.want)
		}
	}
	open, closeAt, ok := w.Next(at("2026-12-02T01:30:00Z"))
	if !ok || !open.Equal(at("2026-12-02T01:00:00Z")) || !closeAt.Equal(at("2026-12-02T02:00:00Z")) {
		t.Errorf("Next = %s, %s, %v; want the current opening", open, closeAt, ok)
	}
}

func TestDecodeRefusesBadWindows(t *testing.T) {
	from, to := at("2026-12-24T00:00:00Z"), at("2026-12-27T00:00:00Z")
	cases := map[string]bson.D{
		"no reason":        {{Key: "_id", Value: "a"}, {Key: "from", Value: from}, {Key: "to", Value: to}},
		"empty reason":     {{Key: "_id", Value: "a"}, {Key: "from", Value: from}, {Key: "to", Value: to}, {Key: "reason", Value: " "}},
		"to before from":   {{Key: "_id", Value: "a"}, {Key: "from", Value: to}, {Key: "to", Value: from}, {Key: "reason", Value: "r"}},
		"from not a date":  {{Key: "_id", Value: "a"}, {Key: "from", Value: "2026-12-24"}, {Key: "to", Value: to}, {Key: "reason", Value: "r"}},
		"missing to":       {{Key: "_id", Value: "a"}, {Key: "from", Value: from}, {Key: "reason", Value: "r"}},
		"both kinds":       {{Key: "_id", Value: "a"}, {Key: "from", Value: from}, {Key: "to", Value: to}, {Key: "cron_expr", Value: "@daily"}, {Key: "duration", Value: "1h"}, {Key: "reason", Value: "r"}},
		"neither kind":     {{Key: "_id", Value: "a"}, {Key: "reason", Value: "r"}},
		"bad cron":         {{Key: "_id", Value: "a"}, {Key: "cron_expr", Value: "61 * * * *"}, {Key: "duration", Value: "1h"}, {Key: "reason", Value: "r"}},
		"bad duration":     {{Key: "_id", Value: "a"}, {Key: "cron_expr", Value: "@daily"}, {Key: "duration", Value: "soon"}, {Key: "reason", Value: "r"}},
		"zero duration":    {{Key: "_id", Value: "a"}, {Key: "cron_expr", Value: "@daily"}, {Key: "duration", Value: "0s"}, {Key: "reason", Value: "r"}},
		"duration number":  {{Key: "_id", Value: "a"}, {Key: "cron_expr", Value: "@daily"}, {Key: "duration", Value: 3600}, {Key: "reason", Value: "r"}},
		"no duration":      {{Key: "_id", Value: "a"}, {Key: "cron_expr", Value: "@daily"}, {Key: "reason", Value: "r"}},
		"bad zone":         {{Key: "_id", Value: "a"}, {Key: "cron_expr", Value: "@daily"}, {Key: "duration", Value: "1h"}, {Key: "timezone", Value: "Mars/Base"}, {Key: "reason", Value: "r"}},
		"categories str":   {{Key: "_id", Value: "a"}, {Key: "from", Value: from}, {Key: "to", Value: to}, {Key: "categories", Value: "billing"}, {Key: "reason", Value: "r"}},
		"categories empty": {{Key: "_id", Value: "a"}, {Key: "from", Value: from}, {Key: "to", Value: to}, {Key: "categories", Value: bson.A{}}, {Key: "reason", Value: "r"}},
		"category number":  {{Key: "_id", Value: "a"}, {Key: "from", Value: from}, {Key: "to", Value: to}, {Key: "categories", Value: bson.A{1}}, {Key: "reason", Value: "r"}},
		"misspelt field":   {{Key: "_id", Value: "a"}, {Key: "from", Value: from}, {Key: "to", Value: to}, {Key: "categoies", Value: bson.A{"billing"}}, {Key: "reason", Value: "r"}},
		"number id":        {{Key: "_id", Value: 7}, {Key: "from", Value: from}, {Key: "to", Value: to}, {Key: "reason", Value: "r"}},
		"no id":            {{Key: "from", Value: from}, {Key: "to", Value: to}, {Key: "reason", Value: "r"}},
	}
	for name, d := range cases {
		_, err := Decode(raw(t, d), nil)
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
}

func oneOff(t *testing.T, id, reason string, cats ...string) bson.Raw {
	d := bson.D{{Key: "_id", Value: id}, {Key: "from", Value: at("2026-12-24T00:00:00Z")},
		{Key: "to", Value: at("2026-12-27T00:00:00Z")}, {Key: "reason", Value: reason}}
	if len(cats) > 0 {
		a := bson.A{}
		for _, c := range cats {
			a = append(a, c)
		}
		d = append(d, bson.E{Key: "categories", Value: a})
	}
	return raw(t, d)
}

func TestSetKeepsLastValidWindowOnABadEdit(t *testing.T) {
	s := NewSet(nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	s.Upsert(oneOff(t, "freeze", "year-end", "billing"))
	slot := at("2026-12-25T00:00:00Z")
	if w, ok := s.Match("billing", slot); !ok || w.Reason != "year-end" {
		t.Fatalf("Match = %+v, %v; want the freeze", w, ok)
	}
	// A bad edit: the window stays in force, the error is kept.
	s.Upsert(raw(t, bson.D{{Key: "_id", Value: "freeze"}, {Key: "from", Value: "tomorrow"}, {Key: "reason", Value: "x"}}))
	if _, ok := s.Match("billing", slot); !ok {
		t.Fatal("a bad edit removed the window")
	}
	if rej := s.Rejected(); rej["freeze"] == "" {
		t.Fatalf("Rejected = %v, want the error of freeze", rej)
	}
	// A new bad window is not in force.
	s.Upsert(raw(t, bson.D{{Key: "_id", Value: "bad"}, {Key: "reason", Value: "x"}}))
	if len(s.Windows()) != 1 || s.Rejected()["bad"] == "" {
		t.Fatalf("windows %v rejected %v", s.Windows(), s.Rejected())
	}
	// Fixing it clears the error.
	s.Upsert(oneOff(t, "freeze", "fixed", "billing"))
	if w, _ := s.Match("billing", slot); w.Reason != "fixed" || s.Rejected()["freeze"] != "" {
		t.Fatalf("after the fix: %+v %v", w, s.Rejected())
	}
	s.Delete(bson.RawValue{Type: bson.TypeString, Value: bsonString("freeze")})
	if _, ok := s.Match("billing", slot); ok {
		t.Fatal("deleted window still matches")
	}
}

func bsonString(s string) []byte {
	_, b, _ := bson.MarshalValue(s)
	return b
}

func TestSetReplaceAllAndFirstMatchByID(t *testing.T) {
	s := NewSet(nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	changed, _ := s.ReplaceAll(rawSeq(oneOff(t, "b", "second"), oneOff(t, "a", "first", "billing")))
	if len(changed) != 2 {
		t.Fatalf("changed = %v", changed)
	}
	slot := at("2026-12-25T00:00:00Z")
	if w, _ := s.Match("billing", slot); w.ID != "a" {
		t.Errorf("billing matched %q, want a (first by id)", w.ID)
	}
	if w, _ := s.Match("reports", slot); w.ID != "b" {
		t.Errorf("reports matched %q, want b", w.ID)
	}
	if again, _ := s.ReplaceAll(rawSeq(oneOff(t, "b", "second"), oneOff(t, "a", "first", "billing"))); len(again) != 0 {
		t.Errorf("same contents changed %v", again)
	}
	if gone, _ := s.ReplaceAll(rawSeq(oneOff(t, "b", "second"))); len(gone) != 1 || gone[0] != "a" {
		t.Errorf("removal changed %v, want [a]", gone)
	}
	if w, _ := s.Match("billing", slot); w.ID != "b" {
		t.Errorf("after removal billing matched %q, want b", w.ID)
	}
}

// rawSeq reads docs as a full read does, one at a time.
func rawSeq(docs ...bson.Raw) iter.Seq2[bson.Raw, error] {
	return func(yield func(bson.Raw, error) bool) {
		for _, d := range docs {
			if !yield(d, nil) {
				return
			}
		}
	}
}
