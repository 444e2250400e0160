package history

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/scaledoc"
)

// benchJobs is how many documents the docStore benchmarks load.
const benchJobs = 100_000

// benchDoc is document k of the scale bench (internal/scaledoc).
func benchDoc(b *testing.B, k int, now time.Time) bson.Raw {
	raw, err := bson.Marshal(scaledoc.Doc(k, now))
	if err != nil {
		b.Fatal(err)
	}
	return raw
}

func benchDocs(b *testing.B) []bson.Raw {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	ds := make([]bson.Raw, benchJobs)
	for k := range ds {
		ds[k] = benchDoc(b, k, now)
	}
	return ds
}

func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkRecorderLoad loads benchJobs scale-bench documents into a new
// Recorder as a first full read does, then holds the job ids as the first
// sightings do (Sightings.live, filled from the ids Present hands over).
// heap-B/job is the live heap the recorder's copy holds after a GC,
// sightings-B/job what the live set adds; ns/job is the load's CPU.
func BenchmarkRecorderLoad(b *testing.B) {
	ds := benchDocs(b)
	var heap, sighted uint64
	var load time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		base := liveHeap()
		b.StartTimer()
		start := time.Now()
		r := NewRecorder(&nopSink{}, &memQueue{}, RecorderOptions{Retention: time.Hour})
		if _, err := r.ReplaceAll(docs(ds...)); err != nil {
			b.Fatal(err)
		}
		load += time.Since(start)
		b.StopTimer()
		if n := r.docs.len(); n != benchJobs {
			b.Fatalf("%d documents stored, want %d", n, benchJobs)
		}
		heap += liveHeap() - base
		live := map[string]uint32{}
		for _, id := range r.docs.jobIDs() {
			live[id] = 1
		}
		withLive := liveHeap()
		sighted += withLive - base
		runtime.KeepAlive(r)
		runtime.KeepAlive(live)
		b.StartTimer()
	}
	n := float64(b.N) * benchJobs
	b.ReportMetric(float64(heap)/n, "heap-B/job")
	b.ReportMetric(float64(sighted-heap)/n, "sightings-B/job")
	b.ReportMetric(float64(load.Nanoseconds())/n, "ns/job")
}

// BenchmarkRecorderReread is a full read of a recorder that holds the same
// documents already (a resync, a poll): each is compared, not copied.
func BenchmarkRecorderReread(b *testing.B) {
	ds := benchDocs(b)
	r := NewRecorder(&nopSink{}, &memQueue{}, RecorderOptions{Retention: time.Hour})
	if _, err := r.ReplaceAll(docs(ds...)); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := r.ReplaceAll(docs(ds...)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchJobs, "ns/job")
}

// BenchmarkRecorderUpdate is an update event of one job (a new expression
// and updated_at) on a recorder holding benchJobs documents: the
// before-image looked up, the update applied, stored, and diffed.
func BenchmarkRecorderUpdate(b *testing.B) {
	ds := benchDocs(b)
	r := NewRecorder(&nopSink{}, &memQueue{}, RecorderOptions{Retention: time.Hour})
	if _, err := r.ReplaceAll(docs(ds...)); err != nil {
		b.Fatal(err)
	}
	r.CaughtUp()
	// 1,000 jobs, each edited twice over (on the 2nd, then the 3rd of
	// January: no job fires on either), so every event changes a field.
	evs := make([]bson.Raw, 2000)
	at := time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC)
	for i := range evs {
		k := (i % 1000 * 97) % benchJobs
		raw, err := bson.Marshal(bson.D{
			{Key: "_id", Value: bson.D{{Key: "_data", Value: fmt.Sprintf("82%014X", i)}}},
			{Key: "operationType", Value: OpUpdate},
			{Key: "wallTime", Value: bson.NewDateTimeFromTime(at)},
			{Key: "documentKey", Value: bson.D{{Key: "_id", Value: fmt.Sprintf("job-%06d", k)}}},
			{Key: "updateDescription", Value: bson.D{
				{Key: "updatedFields", Value: bson.D{{Key: "cron_expr", Value: fmt.Sprintf("%d 4 %d 1 *", i%60, 2+i/1000)}, {Key: "updated_at", Value: at}}},
				{Key: "removedFields", Value: bson.A{}}}},
		})
		if err != nil {
			b.Fatal(err)
		}
		evs[i] = raw
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, ok := r.observe(evs[i%len(evs)]); !ok {
			b.Fatalf("event %d recorded nothing", i)
		}
	}
}
