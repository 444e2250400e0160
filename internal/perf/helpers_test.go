package perf

import (
	"context"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/changestream"
	"github.com/cronswap/cronswap/internal/history"
	"github.com/cronswap/cronswap/internal/schedulesink"
	"github.com/cronswap/cronswap/internal/testmongo"
	"github.com/cronswap/cronswap/schedule"
	"github.com/cronswap/cronswap/scheduler"
)

func TestMain(m *testing.M) { testmongo.Main(m, nil) }

// decodeAll decodes like the daemon's sink, dropping documents without a
// usable id.
func decodeAll(docs []bson.Raw) []scheduler.Item {
	items := schedulesink.DecodeAll(docs)
	kept := items[:0]
	for _, it := range items {
		if it.Err == nil || it.Schedule.ID != "" {
			kept = append(kept, it)
		}
	}
	return kept
}

// engineSink is the daemon's own sink, without metrics, as the watcher
// takes it.
func engineSink(engine *scheduler.Engine) changestream.Sink {
	return schedulesink.New(engine, quietLogger(), nil)
}

// infoLogger is what the daemon logs with: info level, JSON, here discarded
// (per-event log records are part of the apply cost).
func infoLogger() *slog.Logger { return slog.New(slog.NewJSONHandler(io.Discard, nil)) }

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelError}))
}

func newEngine(log *slog.Logger) *scheduler.Engine {
	return scheduler.New(scheduler.Options{Logger: log, Fire: func(schedule.Due) {}})
}

// scheduleDoc is a realistic schedules document; n varies its timing.
func scheduleDoc(id string, n int) bson.Raw {
	b, err := bson.Marshal(bson.D{{Key: "_id", Value: id},
		{Key: "cron_expr", Value: fmt.Sprintf("%d %d * * *", n%60, (n/60)%24)},
		{Key: "updated_at", Value: time.Now()},
		{Key: "job", Value: "report"},
		{Key: "args", Value: bson.D{{Key: "to", Value: "ops"}, {Key: "n", Value: n}}}})
	if err != nil {
		panic(err)
	}
	return b
}

// countingFeed counts full reads of the collection.
type countingFeed struct {
	changestream.Feed
	snapshots atomic.Int64
}

func (f *countingFeed) Snapshot(ctx context.Context) iter.Seq2[bson.Raw, error] {
	f.snapshots.Add(1)
	return f.Feed.Snapshot(ctx)
}

// readAll copies every document of a full read.
func readAll(tb testing.TB, docs iter.Seq2[bson.Raw, error]) []bson.Raw {
	tb.Helper()
	var out []bson.Raw
	for d, err := range docs {
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, append(bson.Raw(nil), d...))
	}
	return out
}

// items yields its, as a full read would.
func items(its []scheduler.Item) iter.Seq2[scheduler.Item, error] {
	return func(yield func(scheduler.Item, error) bool) {
		for _, it := range its {
			if !yield(it, nil) {
				return
			}
		}
	}
}

// discardQueue drops the edit history's entries.
type discardQueue struct{}

func (discardQueue) Enqueue(history.Entry) bool { return true }

// engineState renders what the engine holds as id -> cron_expr (with a
// disabled marker), or the error of a job whose document was refused (its
// timer is whatever was last good, which a fresh engine cannot know).
func engineState(e *scheduler.Engine) map[string]string {
	out := map[string]string{}
	for _, st := range e.List() {
		v := st.CronExpr
		if !st.Enabled {
			v += " (disabled)"
		}
		if st.LastError != "" {
			v = "error: " + st.LastError
		}
		out[st.ID] = v
	}
	return out
}

// diff lists the ids on which two states differ.
func diff(got, want map[string]string) []string {
	var out []string
	for id, w := range want {
		if g, ok := got[id]; !ok || g != w {
			out = append(out, fmt.Sprintf("%s: got %q, want %q", id, g, w))
		}
	}
	for id, g := range got {
		if _, ok := want[id]; !ok {
			out = append(out, fmt.Sprintf("%s: got %q, want nothing", id, g))
		}
	}
	slices.Sort(out)
	return out
}

// collectionState renders the collection as engineState would after a
// full reload of it.
func collectionState(ctx context.Context, tb testing.TB, coll *mongo.Collection) map[string]string {
	tb.Helper()
	docs := readAll(tb, changestream.NewMongoFeed(coll, 0).Snapshot(ctx))
	e := newEngine(quietLogger())
	if _, err := e.Sync(items(decodeAll(docs))); err != nil {
		tb.Fatal(err)
	}
	return engineState(e)
}

// insertMany loads docs in batches of 1000.
func insertMany(ctx context.Context, tb testing.TB, coll *mongo.Collection, docs []bson.Raw) {
	tb.Helper()
	for i := 0; i < len(docs); i += 1000 {
		batch := make([]any, 0, 1000)
		for _, d := range docs[i:min(i+1000, len(docs))] {
			batch = append(batch, d)
		}
		if _, err := coll.InsertMany(ctx, batch); err != nil {
			tb.Fatal(err)
		}
	}
}

// percentiles returns the p50 and p99 of ds.
func percentiles(ds []time.Duration) (p50, p99 time.Duration) {
	if len(ds) == 0 {
		return 0, 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2], s[min(len(s)-1, len(s)*99/100)]
}

// latencies collects received→applied durations from the watcher's hook.
type latencies struct {
	mu sync.Mutex
	ds []time.Duration
	n  atomic.Int64
}

func (l *latencies) hook(ev changestream.EventInfo) {
	l.mu.Lock()
	l.ds = append(l.ds, ev.Applied.Sub(ev.Received))
	l.mu.Unlock()
	l.n.Add(1)
}

func (l *latencies) take() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.ds
	l.ds = nil
	return out
}

func waitUntil(tb testing.TB, what string, d time.Duration, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(time.Millisecond)
	}
}
