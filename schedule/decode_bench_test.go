package schedule

import (
	"fmt"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// customerDoc is a per-customer schedule as the scale bench writes it
// (internal/scaledoc): expression, action, args, updated_at and a zone;
// every other field absent, as in most documents.
func customerDoc(tb testing.TB) bson.Raw {
	raw, err := bson.Marshal(bson.D{
		{Key: "_id", Value: "job0012345"},
		{Key: "cron_expr", Value: "45 5 1 1 *"},
		{Key: "job", Value: "noop"},
		{Key: "args", Value: bson.D{{Key: "customer", Value: fmt.Sprintf("c%07d", 12345)}, {Key: "digest", Value: "daily"}}},
		{Key: "updated_at", Value: time.Now()},
		{Key: "timezone", Value: "Europe/Berlin"},
	})
	if err != nil {
		tb.Fatal(err)
	}
	return raw
}

// BenchmarkDecodeFields decodes customerDoc.
func BenchmarkDecodeFields(b *testing.B) {
	raw := customerDoc(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeFields(raw); err != nil {
			b.Fatal(err)
		}
	}
}

// A full read decodes every schedule of the collection, so whatever
// decoding allocates beyond what it returns is garbage the collector works
// through at every start and resync, a million times over at a million
// schedules. Decoding the usual document allocates its four strings (id,
// expression, action, zone) and the args' JSON (built once, then kept as a
// string); the Schedule itself (240 bytes) and the lifetime's dates stay
// off the heap.
func TestDecodeFieldsAllocatesOnlyWhatItReturns(t *testing.T) {
	raw := customerDoc(t)
	s, err := DecodeFields(raw)
	if err != nil || s.Args != `{"customer":"c0012345","digest":"daily"}` || s.Timezone != "Europe/Berlin" {
		t.Fatalf("decoded %+v, %v", s, err)
	}
	const want = 4 + 2
	if got := testing.AllocsPerRun(100, func() { _, _ = DecodeFields(raw) }); got > want {
		t.Errorf("decoding the usual schedule made %v allocations, want at most %d", got, want)
	}
}
