package schedulesink_test

import (
	"fmt"
	"io"
	"iter"
	"log/slog"
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
	now := time.Now()
	docs := make([]bson.Raw, n)
	for k := range docs {
		docs[k] = startDoc(k, now)
	}
	var cpu time.Duration
	for b.Loop() {
		b.StopTimer()
		engine := scheduler.New(scheduler.Options{Logger: infoLogger(), Fire: func(schedule.Due) {}, Policy: actionPolicy{}})
		rec := history.NewRecorder(schedulesink.New(engine, infoLogger(), nil), nopQueue{},
			history.RecorderOptions{Instance: "b", Retention: time.Hour, Logger: quietLogger()})
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
