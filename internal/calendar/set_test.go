package calendar

import (
	"io"
	"iter"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestSetKeepsLastGood: a calendar edited into an invalid document, or
// deleted, keeps its last valid dates in force, with the problem to show;
// a valid edit clears it; ReplaceAll treats a calendar missing from the
// collection as deleted.
func TestSetKeepsLastGood(t *testing.T) {
	s := NewSet(slog.New(slog.NewTextHandler(io.Discard, nil)))
	xmas := time.Date(2027, 12, 25, 9, 0, 0, 0, time.UTC)
	holds := func(name string) (bool, string) {
		c, found, problem := s.Lookup(name)
		if !found {
			return false, problem
		}
		_, ok := c.Holds(xmas, nil)
		return ok, problem
	}
	good := raw(t, bson.D{{Key: "_id", Value: "us"}, {Key: "yearly", Value: bson.A{"12-25"}}})
	s.Upsert(good)
	if ok, p := holds("us"); !ok || p != "" {
		t.Fatalf("after insert: %v %q", ok, p)
	}
	s.Upsert(raw(t, bson.D{{Key: "_id", Value: "us"}, {Key: "yearly", Value: bson.A{"12-32"}}}))
	if ok, p := holds("us"); !ok || !strings.Contains(p, "is not a month and day") {
		t.Fatalf("after a bad edit: %v %q, want the last dates and the error", ok, p)
	}
	s.Upsert(good)
	if ok, p := holds("us"); !ok || p != "" {
		t.Fatalf("after a good edit: %v %q", ok, p)
	}
	id, _ := bson.Marshal(bson.D{{Key: "_id", Value: "us"}})
	s.Delete(bson.Raw(id).Lookup("_id"))
	if ok, p := holds("us"); !ok || p != ProblemDeleted {
		t.Fatalf("after delete: %v %q, want the last dates kept", ok, p)
	}
	if ok, p := holds("eu"); ok || p != "no such calendar" {
		t.Fatalf("unknown calendar: %v %q", ok, p)
	}
	// A full reload: "us" is back, "eu" arrives, then "us" is missing.
	eu := raw(t, bson.D{{Key: "_id", Value: "eu"}, {Key: "dates", Value: bson.A{"2027-12-25"}}})
	if changed, _ := s.ReplaceAll(rawDocs(good, eu)); strings.Join(changed, ",") != "us,eu" {
		t.Fatalf("ReplaceAll changed %v", changed)
	}
	if changed, _ := s.ReplaceAll(rawDocs(eu)); strings.Join(changed, ",") != "us" {
		t.Fatalf("ReplaceAll changed %v", changed)
	}
	if ok, p := holds("us"); !ok || p != ProblemDeleted {
		t.Fatalf("missing from a reload: %v %q", ok, p)
	}
	if got := strings.Join(s.Names(), ","); got != "eu,us" {
		t.Fatalf("Names %s", got)
	}
}

// rawDocs yields docs one at a time, as a full read does.
func rawDocs(docs ...bson.Raw) iter.Seq2[bson.Raw, error] {
	return func(yield func(bson.Raw, error) bool) {
		for _, d := range docs {
			if !yield(d, nil) {
				return
			}
		}
	}
}
