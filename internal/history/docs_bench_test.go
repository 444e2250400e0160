package history

import (
	"fmt"
	"runtime"
	"strings"
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

func benchDocs(b *testing.B) []bson.Raw { return benchDocsN(b, benchJobs) }

// benchDocsN is documents 0 to n-1 of the scale bench.
func benchDocsN(b *testing.B, n int) []bson.Raw {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	ds := make([]bson.Raw, n)
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
// sightings do (Sightings.live). heap-B/job is the live heap the
// recorder's copy holds after a GC, ns/job is the load's CPU, and the
// other figures what the live set adds a job:
//
//   - sightings-B/job: filled from the ids a full read hands over (a
//     deployment's first start, which writes every job's sighting);
//   - sightings-read-B/job: filled from the server (readLive: a copy of
//     each id), then renewed by a full read, as on every later start
//     (sightings-renew-ns/job: the CPU of that full read's lookups, as
//     Sightings.present makes them);
//   - map-sightings-B/job and map-sightings-read-B/job: the same in a Go
//     map of ids to passes, which the sightings kept before the liveSet
//     (an assignment replaces a map's key too), for comparison.
//
// It runs at benchJobs and at a million jobs.
func BenchmarkRecorderLoad(b *testing.B) {
	for _, n := range []int{benchJobs, 1_000_000} {
		b.Run(fmt.Sprintf("jobs=%d", n), func(b *testing.B) { benchmarkRecorderLoad(b, n) })
	}
}

func benchmarkRecorderLoad(b *testing.B, jobs int) {
	ds := benchDocsN(b, jobs)
	var heap uint64
	var load time.Duration
	sets := map[string]uint64{}
	renew := map[string]time.Duration{}
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
		if n := r.docs.len(); n != jobs {
			b.Fatalf("%d documents stored, want %d", n, jobs)
		}
		heap += liveHeap() - base
		ids := r.docs.jobIDs()
		withIDs := liveHeap()
		weigh := func(name string, fill func() any) {
			set := fill()
			sets[name] += liveHeap() - withIDs
			runtime.KeepAlive(set)
		}
		weigh("sightings", func() any {
			live := newLiveSet()
			for _, id := range ids {
				live.set(id, 1)
			}
			if live.Len() != jobs {
				b.Fatalf("live set of %d, want %d", live.Len(), jobs)
			}
			return live
		})
		weigh("sightings-read", func() any {
			live := newLiveSet()
			for _, id := range ids {
				live.set(strings.Clone(id), 0)
			}
			start := time.Now()
			for _, id := range ids {
				if !live.renew(id, 1) {
					b.Fatalf("%s not in the live set", id)
				}
			}
			renew["sightings"] += time.Since(start)
			return live
		})
		weigh("map-sightings", func() any {
			live := map[string]uint32{}
			for _, id := range ids {
				live[id] = 1
			}
			return live
		})
		weigh("map-sightings-read", func() any {
			live := map[string]uint32{}
			for _, id := range ids {
				live[strings.Clone(id)] = 0
			}
			start := time.Now()
			for _, id := range ids {
				if _, ok := live[id]; ok {
					live[id] = 1
				}
			}
			renew["map-sightings"] += time.Since(start)
			return live
		})
		runtime.KeepAlive(r)
		runtime.KeepAlive(ids)
		b.StartTimer()
	}
	n := float64(b.N) * float64(jobs)
	b.ReportMetric(float64(heap)/n, "heap-B/job")
	for name, bytes := range sets {
		b.ReportMetric(float64(bytes)/n, name+"-B/job")
	}
	for name, took := range renew {
		b.ReportMetric(float64(took.Nanoseconds())/n, name+"-renew-ns/job")
	}
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
