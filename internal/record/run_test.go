package record

import (
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestRunDocWithoutExpiryHasNoExpireAt: a record written without an expiry
// carries no expire_at (the TTL monitor leaves it), not a zero date (which
// it would delete at its next pass); one with an expiry carries it.
func TestRunDocWithoutExpiryHasNoExpireAt(t *testing.T) {
	doc := RunDoc{ID: RunID("j", base), JobID: "j", ScheduledAt: base, Status: StatusRunning}
	raw, err := bson.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := bson.Raw(raw).LookupErr("expire_at"); err == nil {
		t.Fatalf("a record without an expiry has expire_at %v, which a TTL index expires at once", v)
	}
	doc.ExpireAt = base.Add(24 * time.Hour)
	if raw, err = bson.Marshal(doc); err != nil {
		t.Fatal(err)
	}
	if got := bson.Raw(raw).Lookup("expire_at").Time(); !got.Equal(doc.ExpireAt) {
		t.Fatalf("expire_at %v, want %v", got, doc.ExpireAt)
	}
}
