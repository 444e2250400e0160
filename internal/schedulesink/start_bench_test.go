package schedulesink_test

import (
	"fmt"
	"io"
	"iter"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/history"
	"github.com/cronswap/cronswap/internal/scaledoc"
	"github.com/cronswap/cronswap/internal/schedulesink"
	"github.com/cronswap/cronswap/schedule"
	"github.com/cronswap/cronswap/scheduler"
)

// startDoc is schedule k of the scale bench (internal/scaledoc).
func startDoc(k int, now time.Time) bson.Raw {
	b, err := bson.Marshal(scaledoc.Doc(k, now))
	if err != nil {
		panic(err)
	}
	return b
}

// startDocs is schedules 0…n-1 of the scale bench, marshalled.
func startDocs(n int) []bson.Raw {
	now := time.Now()
	docs := make([]bson.Raw, n)
	for k := range docs {
		docs[k] = startDoc(k, now)
	}
	return docs
}

// newStart is what a start applies the documents to: a fresh engine (not
// started, as at start-up) behind the schedules sink, with the recovery
// of refused jobs the daemon gives it (none are refused here: what is
// measured is the sink looking for them), and the edit history's
// recorder.
func newStart() (*scheduler.Engine, *history.Recorder) {
	engine := scheduler.New(scheduler.Options{Logger: infoLogger(), Fire: func(schedule.Due) {}, Policy: actionPolicy{}})
	sink := schedulesink.New(engine, infoLogger(), nil).WithRecovery(func([]string) map[string]schedulesink.Recovered { return nil })
	rec := history.NewRecorder(sink, nopQueue{},
		history.RecorderOptions{Instance: "b", Retention: time.Hour, Logger: quietLogger()})
	return engine, rec
}

// streamed yields docs one at a time from one reused buffer, as a full
// read hands them over.
func streamed(docs []bson.Raw) iter.Seq2[bson.Raw, error] {
	return func(yield func(bson.Raw, error) bool) {
		var buf []byte
		for _, d := range docs {
			buf = append(buf[:0], d...)
			if !yield(buf, nil) {
				return
			}
		}
	}
}

// nopQueue drops the edit history's entries (a start records none).
type nopQueue struct{}

func (nopQueue) Enqueue(history.Entry) bool { return true }

// actionPolicy is the daemon's policy for the bench's schedules: the
// action must be configured (only "noop" is), no jitter.
type actionPolicy struct{}

func (actionPolicy) Check(s schedule.Schedule) error {
	if s.Job != "noop" {
		return fmt.Errorf("no action %q", s.Job)
	}
	return nil
}
func (actionPolicy) Jitter(schedule.Schedule) time.Duration { return 0 }

// BenchmarkStartApply200k is the daemon's side of a start with 200,000
// scale-bench schedules, without the server: the documents stream through
// the edit history's recorder and the schedules sink into a fresh engine
// (not started, as at start-up): what a start does before it is ready
// (the engine's timers start after). cpu-ns/job is the process's CPU time
// per job: on a shared machine it varies less than the wall time, which
// the other processes stretch.
func BenchmarkStartApply200k(b *testing.B) {
	const n = 200000
	docs := startDocs(n)
	var cpu time.Duration
	for b.Loop() {
		b.StopTimer()
		engine, rec := newStart()
		b.StartTimer()
		cpu0 := cpuTime()
		if _, err := rec.ReplaceAll(streamed(docs)); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		cpu += cpuTime() - cpu0
		engine.Start()
		if engine.Len() != n {
			b.Fatalf("armed %d, want %d", engine.Len(), n)
		}
		<-engine.Stop().Done()
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/job")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/n, "cpu-ns/job")
}

// BenchmarkStartReserve1M measures what a warm start gains by making room
// for the jobs before they are read (the state file's count: the engine's
// index and the edit history's copy reserved, as the daemon does): the
// start path of BenchmarkStartApply200k at 1,000,000 schedules, once
// grown as it goes and once reserved, side by side in every iteration
// (the order alternating), so that the machine's noise falls on both.
// It reports each one's CPU and wall time per job and their ratios
// (reserved / grown).
func BenchmarkStartReserve1M(b *testing.B) {
	const n = 1_000_000
	docs := startDocs(n)
	var cpu, wall [2]time.Duration // [grown, reserved]
	var heap [2]uint64             // live heap after the start, summed
	start := func(reserve bool) {
		engine, rec := newStart()
		i := 0
		if reserve {
			i = 1
		}
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		base := ms.HeapAlloc
		cpu0, wall0 := cpuTime(), time.Now()
		if reserve {
			engine.Reserve(n)
			rec.Reserve(n)
		}
		if _, err := rec.ReplaceAll(streamed(docs)); err != nil {
			b.Fatal(err)
		}
		cpu[i] += cpuTime() - cpu0
		wall[i] += time.Since(wall0)
		runtime.GC()
		runtime.ReadMemStats(&ms)
		heap[i] += ms.HeapAlloc - base
		runtime.KeepAlive(rec) // the edit history's copy, measured above
		if engine.Known() != n {
			b.Fatalf("known %d, want %d", engine.Known(), n)
		}
	}
	iter := 0
	for b.Loop() {
		first := iter%2 == 1
		start(first)
		start(!first)
		iter++
	}
	sideBySide{names: [2]string{"grown", "reserved"}, cpu: cpu, wall: wall, bytes: heap, bytesUnit: "heap-B/job"}.
		report(b, iter, n, false)
}

// BenchmarkStartWarm1M is a warm start's path at 1,000,000 schedules as
// the daemon takes it: the documents in the order a state file holds
// them (no id order: the file is written from the edit history's copy, a
// hash table; here a fixed shuffle), room reserved for them, then through
// the edit history's recorder and the schedules sink into a fresh engine.
// It reports the CPU and wall time per job; compare two builds by running
// it from each, alternated.
func BenchmarkStartWarm1M(b *testing.B) {
	const n = 1_000_000
	docs := startDocs(n)
	rand.New(rand.NewPCG(1, 2)).Shuffle(n, func(i, j int) { docs[i], docs[j] = docs[j], docs[i] })
	var cpu time.Duration
	for b.Loop() {
		b.StopTimer()
		engine, rec := newStart()
		runtime.GC()
		b.StartTimer()
		cpu0 := cpuTime()
		engine.Reserve(n)
		rec.Reserve(n)
		if _, err := rec.ReplaceAll(streamed(docs)); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		cpu += cpuTime() - cpu0
		if engine.Known() != n {
			b.Fatalf("known %d, want %d", engine.Known(), n)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/job")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/n, "cpu-ns/job")
}

// cpuTime is the CPU time the process used so far (user and system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func infoLogger() *slog.Logger { return slog.New(slog.NewJSONHandler(io.Discard, nil)) }

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelError}))
}

// BenchmarkResync1M is a periodic resync at 1,000,000 schedules that finds
// nothing changed, the daemon's side of it (no server): the collection read
// again through the edit history's recorder and the schedules sink into a
// running engine that holds every job. Two replicas side by side in every
// iteration, the order alternating: one whose sink lists as it is every
// document the recorder holds unchanged (WithUnchanged, as the daemon
// wires it), one that decodes every document. The collector's target is
// 30, as cronswap run sets it for a heap this large. It reports each one's
// CPU, wall time and bytes allocated per job, and the ratios (listed as
// they are / decoded).
func BenchmarkResync1M(b *testing.B) {
	const n = 1_000_000
	defer debug.SetGCPercent(debug.SetGCPercent(30))
	docs := startDocs(n)
	type replica struct {
		engine *scheduler.Engine
		rec    *history.Recorder
	}
	load := func(unchanged bool) replica {
		engine := scheduler.New(scheduler.Options{Logger: infoLogger(), Fire: func(schedule.Due) {}, Policy: actionPolicy{}})
		var rec *history.Recorder
		sink := schedulesink.New(engine, infoLogger(), nil)
		if unchanged {
			sink = sink.WithUnchanged(func(d bson.Raw) bool { return rec.Unchanged(d) })
		}
		rec = history.NewRecorder(sink, nopQueue{}, history.RecorderOptions{Instance: "b", Retention: time.Hour, Logger: quietLogger()})
		engine.Reserve(n)
		rec.Reserve(n)
		if _, err := rec.ReplaceAll(streamed(docs)); err != nil {
			b.Fatal(err)
		}
		engine.Start()
		b.Cleanup(func() { <-engine.Stop().Done() })
		return replica{engine, rec}
	}
	replicas := [2]replica{load(false), load(true)} // [decoded, listed as they are]
	var cpu, wall [2]time.Duration
	var alloc [2]uint64
	resync := func(i int) {
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		alloc0, cpu0, wall0 := ms.TotalAlloc, cpuTime(), time.Now()
		changed, err := replicas[i].rec.ReplaceAll(streamed(docs))
		if err != nil || len(changed) != 0 {
			b.Fatalf("resync: %d changed, %v", len(changed), err)
		}
		cpu[i] += cpuTime() - cpu0
		wall[i] += time.Since(wall0)
		runtime.ReadMemStats(&ms)
		alloc[i] += ms.TotalAlloc - alloc0
		if replicas[i].engine.Known() != n {
			b.Fatalf("known %d, want %d", replicas[i].engine.Known(), n)
		}
	}
	iter := 0
	b.ResetTimer()
	for b.Loop() {
		first := iter % 2
		resync(first)
		resync(1 - first)
		iter++
	}
	sideBySide{names: [2]string{"decoded", "same"}, cpu: cpu, wall: wall, bytes: alloc, bytesUnit: "alloc-B/job"}.
		report(b, iter, n, true)
}

// sideBySide is what a benchmark measured of two variants run alternately
// in each of its iterations, summed: CPU, wall time, and a byte count
// (bytesUnit names it, per job).
type sideBySide struct {
	names     [2]string
	cpu, wall [2]time.Duration
	bytes     [2]uint64
	bytesUnit string
}

// report reports each variant's figures per job (over iters iterations of
// jobs jobs) and the ratios of the second to the first: CPU, wall time,
// and the bytes' too when bytesRatio is set.
func (m sideBySide) report(b *testing.B, iters, jobs int, bytesRatio bool) {
	per := func(v float64) float64 { return v / float64(iters) / float64(jobs) }
	for i, name := range m.names {
		b.ReportMetric(per(float64(m.cpu[i].Nanoseconds())), name+"-cpu-ns/job")
		b.ReportMetric(per(float64(m.wall[i].Nanoseconds())), name+"-ns/job")
		b.ReportMetric(per(float64(m.bytes[i])), name+"-"+m.bytesUnit)
	}
	b.ReportMetric(float64(m.cpu[1])/float64(m.cpu[0]), "cpu-ratio")
	b.ReportMetric(float64(m.wall[1])/float64(m.wall[0]), "wall-ratio")
	if bytesRatio {
		b.ReportMetric(float64(m.bytes[1])/float64(m.bytes[0]), strings.TrimSuffix(m.bytesUnit, "-B/job")+"-ratio")
	}
}
