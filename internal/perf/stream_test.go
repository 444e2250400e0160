package perf

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/changestream"
	"github.com/cronswap/cronswap/internal/testmongo"
	"github.com/cronswap/cronswap/resumetoken"
)

// liveHeap is the live heap after a collection.
func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// heapProbe is a sink that keeps nothing: it counts the documents of each
// full read and measures the live heap halfway through it.
type heapProbe struct {
	n      int // documents in the collection
	mid    atomic.Uint64
	seen   atomic.Int64
	reload atomic.Int64
}

func (p *heapProbe) Upsert(bson.Raw)      {}
func (p *heapProbe) Delete(bson.RawValue) {}
func (p *heapProbe) ReplaceAll(docs iter.Seq2[bson.Raw, error]) ([]string, error) {
	i := 0
	for d, err := range docs {
		if err != nil {
			return nil, err
		}
		if !strings.HasPrefix(d.Lookup("_id").StringValue(), "big") {
			return nil, fmt.Errorf("document %d is %s", i, d)
		}
		if i++; i == p.n/2 {
			p.mid.Store(liveHeap())
		}
	}
	p.seen.Store(int64(i))
	p.reload.Add(1)
	return nil, nil
}

// holdingFeed reads the whole collection before handing out its first
// document, as the full read did before it was streamed: the control that
// shows the measurement below can fail.
type holdingFeed struct{ changestream.Feed }

func (f holdingFeed) Snapshot(ctx context.Context) iter.Seq2[bson.Raw, error] {
	var all []bson.Raw
	var failed error
	for d, err := range f.Feed.Snapshot(ctx) {
		if err != nil {
			failed = err
			break
		}
		all = append(all, append(bson.Raw(nil), d...))
	}
	return func(yield func(bson.Raw, error) bool) {
		for _, d := range all {
			if !yield(d, nil) {
				return
			}
		}
		if failed != nil {
			yield(nil, failed)
		}
	}
}

// TestFullReloadHoldsOneBatchAtATime runs the watcher's start-up full
// reload of 24 MB of schedules (24,000 documents of 1 KB) from the test
// server into a sink that keeps nothing, and measures the live heap
// halfway through: the read holds a few batches (changestream.
// SnapshotBatchSize documents each), so the heap grows by far less than
// the collection. The same measurement with a feed that holds the whole
// collection, as the full read did before, must exceed the bound — else
// the test could not tell the two apart.
func TestFullReloadHoldsOneBatchAtATime(t *testing.T) {
	const n, size = 24_000, 1000
	const bound = 8 << 20 // three batches of 1 MB, the driver's buffers and slack
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	db := testmongo.NewDatabase(t, testmongo.Client(t))
	coll := db.Collection("schedules")
	pad := strings.Repeat("p", size-80)
	for lo := 0; lo < n; lo += 1000 {
		docs := make([]any, 0, 1000)
		for i := lo; i < lo+1000; i++ {
			docs = append(docs, bson.D{{Key: "_id", Value: fmt.Sprintf("big%06d", i)},
				{Key: "cron_expr", Value: "0 9 * * *"}, {Key: "pad", Value: pad}})
		}
		if _, err := coll.InsertMany(ctx, docs); err != nil {
			t.Fatal(err)
		}
	}

	grow := func(t *testing.T, feed changestream.Feed) uint64 {
		t.Helper()
		probe := &heapProbe{n: n}
		base := liveHeap()
		w := changestream.New(changestream.Options{ID: "w1", Feed: feed, Sink: probe,
			Tokens: resumetoken.NewMemStore(), Logger: quietLogger(), Mode: changestream.ModeChangeStream})
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- w.Run(runCtx) }()
		waitUntil(t, "full reload", 2*time.Minute, func() bool { return probe.reload.Load() > 0 })
		stop()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if got := probe.seen.Load(); got != n {
			t.Fatalf("the full reload read %d documents, want %d", got, n)
		}
		mid := probe.mid.Load()
		if mid < base {
			return 0
		}
		return mid - base
	}
	feed := changestream.NewMongoFeed(coll, 100*time.Millisecond)
	streamed := grow(t, feed)
	t.Logf("live heap halfway through %d bytes of documents: +%d bytes streamed", n*size, streamed)
	if streamed > bound {
		t.Errorf("the heap grew by %d bytes halfway through the full reload, more than %d: the collection is held", streamed, bound)
	}
	held := grow(t, holdingFeed{feed})
	t.Logf("and +%d bytes with the whole collection held", held)
	if held <= bound {
		t.Errorf("holding the whole collection grew the heap by only %d bytes: the measurement cannot tell", held)
	}
}

// A full read whose context ends part-way (a shutdown during a resync)
// ends with the context's error, never as if the collection ended there: a
// sink given a short read without an error takes every job it did not see
// as deleted (a resync cut this way once disarmed 734,000 of a million
// schedules, and the state file saved at the shutdown then held the rest
// only). The context is cancelled after 1,500 of 5,000 documents; the
// batches already read may still be handed out, but the read must end with
// the error.
func TestFullReadCutByItsContextEndsWithAnError(t *testing.T) {
	const n, cutAt = 5000, 1500
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := testmongo.NewDatabase(t, testmongo.Client(t))
	coll := db.Collection("schedules")
	docs := make([]bson.Raw, n)
	for i := range docs {
		docs[i] = scheduleDoc(fmt.Sprintf("cut%05d", i), i)
	}
	insertMany(ctx, t, coll, docs)
	feed := changestream.NewMongoFeed(coll, 100*time.Millisecond)
	readCtx, cut := context.WithCancel(ctx)
	defer cut()
	read := 0
	var ended error
	for _, err := range feed.Snapshot(readCtx) {
		if err != nil {
			ended = err
			break
		}
		if read++; read == cutAt {
			cut()
		}
	}
	switch {
	case ended == nil && read < n:
		t.Fatalf("the read cut after %d documents ended after %d of %d without an error: a sink takes the rest as deleted", cutAt, read, n)
	case ended == nil:
		t.Fatalf("the read handed out all %d documents though cut after %d: the cut came too late to test", n, cutAt)
	case !errors.Is(ended, context.Canceled):
		t.Fatalf("the cut read ended with %v, want the context's error", ended)
	}
	t.Logf("cut after %d documents: %d handed out, then %v", cutAt, read, ended)
}
