package schedule

import (
	"fmt"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// BenchmarkDecodeFields decodes a per-customer schedule as the scale bench
// writes it (scripts/bench/scale.go): expression, action, args, updated_at
// and a zone; every other field absent, as in most documents.
func BenchmarkDecodeFields(b *testing.B) {
	raw, err := bson.Marshal(bson.D{
		{Key: "_id", Value: "job0012345"},
		{Key: "cron_expr", Value: "45 5 1 1 *"},
		{Key: "job", Value: "noop"},
		{Key: "args", Value: bson.D{{Key: "customer", Value: fmt.Sprintf("c%07d", 12345)}, {Key: "digest", Value: "daily"}}},
		{Key: "updated_at", Value: time.Now()},
		{Key: "timezone", Value: "Europe/Berlin"},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeFields(raw); err != nil {
			b.Fatal(err)
		}
	}
}
