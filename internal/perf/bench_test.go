package perf

import (
	"context"
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/changestream"
	"github.com/cronswap/cronswap/internal/statefile"
	"github.com/cronswap/cronswap/internal/testmongo"
	"github.com/cronswap/cronswap/resumetoken"
)

func benchCtx(b *testing.B) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	b.Cleanup(cancel)
	return ctx
}

func token(n int) bson.Raw {
	t, err := bson.Marshal(bson.D{{Key: "_data", Value: fmt.Sprintf("82%030d", n)}})
	if err != nil {
		panic(err)
	}
	return t
}

// BenchmarkTokenSave measures one MongoStore.Save (an upsert) on the
// server: what a save per event costs.
func BenchmarkTokenSave(b *testing.B) {
	ctx := benchCtx(b)
	db := testmongo.NewDatabase(b, testmongo.Client(b))
	store := resumetoken.NewMongoStore(db.Collection(resumetoken.CollectionName))
	toks := make([]bson.Raw, 64)
	for i := range toks {
		toks[i] = token(i)
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if err := store.Save(ctx, "w1", toks[i%len(toks)]); err != nil {
			b.Fatal(err)
		}
	}
}

// ---- apply rate through the feed seam ----

// seamFeed hands the watcher pre-built events as fast as it asks: the
// server side costs nothing, so the watcher, the engine and the token
// saves are what is measured.
type seamFeed struct {
	docs []bson.Raw

	mu     sync.Mutex
	stream *seamStream
	opened chan struct{}
}

func (f *seamFeed) Open(context.Context, bson.Raw) (changestream.Stream, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stream = &seamStream{tok: token(0), wake: make(chan struct{}, 1)}
	select {
	case f.opened <- struct{}{}:
	default:
	}
	return f.stream, nil
}

func (f *seamFeed) Snapshot(context.Context) iter.Seq2[bson.Raw, error] {
	return func(yield func(bson.Raw, error) bool) {
		for _, d := range f.docs {
			if !yield(d, nil) {
				return
			}
		}
	}
}

func (f *seamFeed) Lookup(context.Context, bson.RawValue) (bson.Raw, error) { return nil, nil }

type seamStream struct {
	mu     sync.Mutex
	events []bson.Raw
	toks   []bson.Raw
	next   int
	cur    bson.Raw
	tok    bson.Raw
	err    error
	wake   chan struct{}
}

func (s *seamStream) push(events, toks []bson.Raw) {
	s.mu.Lock()
	s.events = append(s.events, events...)
	s.toks = append(s.toks, toks...)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *seamStream) TryNext(ctx context.Context) bool {
	s.mu.Lock()
	if s.next < len(s.events) {
		s.cur, s.tok = s.events[s.next], s.toks[s.next]
		s.next++
		s.mu.Unlock()
		return true
	}
	s.mu.Unlock()
	t := time.NewTimer(50 * time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
		s.mu.Lock()
		s.err = ctx.Err()
		s.mu.Unlock()
	case <-s.wake:
	case <-t.C:
	}
	return false
}

func (s *seamStream) Current() bson.Raw           { return s.cur }
func (s *seamStream) ResumeToken() bson.Raw       { s.mu.Lock(); defer s.mu.Unlock(); return s.tok }
func (s *seamStream) Err() error                  { s.mu.Lock(); defer s.mu.Unlock(); return s.err }
func (s *seamStream) ID() int64                   { return 1 }
func (s *seamStream) Close(context.Context) error { return nil }

// updateEvent is an update event as the server sends it (full document
// looked up), re-timing job id.
func updateEvent(id string, n int) bson.Raw {
	b, err := bson.Marshal(bson.D{{Key: "_id", Value: token(n)}, {Key: "operationType", Value: "update"},
		{Key: "wallTime", Value: time.Now()},
		{Key: "ns", Value: bson.D{{Key: "db", Value: "cronswap"}, {Key: "coll", Value: "schedules"}}},
		{Key: "documentKey", Value: bson.D{{Key: "_id", Value: id}}},
		{Key: "fullDocument", Value: scheduleDoc(id, n)}})
	if err != nil {
		panic(err)
	}
	return b
}

// BenchmarkApply feeds update events (each re-times one of 1,000 jobs, so
// every event re-arms a robfig entry) through the watcher into a real
// engine, with the real token store on the test server, saving after every
// event or coalesced (the default). It reports the sustained events/s and
// the received→armed latency of each event.
func BenchmarkApply(b *testing.B) {
	for _, mode := range []struct {
		name  string
		delay time.Duration
	}{{"save=each", -1}, {"save=coalesced", 0}} {
		b.Run(mode.name, func(b *testing.B) { benchApply(b, mode.delay) })
	}
}

func benchApply(b *testing.B, saveDelay time.Duration) {
	const jobs = 1000
	ctx := benchCtx(b)
	db := testmongo.NewDatabase(b, testmongo.Client(b))
	store := resumetoken.NewMongoStore(db.Collection(resumetoken.CollectionName))
	feed := &seamFeed{opened: make(chan struct{}, 1)}
	for i := range jobs {
		feed.docs = append(feed.docs, scheduleDoc(fmt.Sprintf("job%04d", i), i))
	}
	engine := newEngine(infoLogger())
	engine.Start()
	defer engine.Stop()
	lat := &latencies{}
	saves := &countingStore{Store: store}
	w := changestream.New(changestream.Options{
		ID: "w1", Feed: feed, Tokens: saves, Sink: engineSink(engine),
		Logger: infoLogger(), Mode: changestream.ModeChangeStream, SaveDelay: saveDelay,
		Hooks: changestream.Hooks{Event: lat.hook},
	})
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	defer func() { cancel(); <-done }()
	waitUntil(b, "ready", time.Minute, func() bool { return w.Status().Ready })

	events := make([]bson.Raw, b.N)
	toks := make([]bson.Raw, b.N)
	for i := range b.N {
		n := jobs + i + 1
		events[i] = updateEvent(fmt.Sprintf("job%04d", i%jobs), n)
		toks[i] = token(n)
	}
	savesBefore := saves.n()
	b.ResetTimer()
	start := time.Now()
	feed.stream.push(events, toks)
	for lat.n.Load() < int64(b.N) {
		time.Sleep(100 * time.Microsecond)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	ds := lat.take()
	p50, p99 := percentiles(ds)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(p50.Nanoseconds())/1e3, "apply_p50_us")
	b.ReportMetric(float64(p99.Nanoseconds())/1e3, "apply_p99_us")
	b.ReportMetric(float64(saves.n()-savesBefore)/float64(b.N), "saves/event")
}

type countingStore struct {
	resumetoken.Store
	mu    sync.Mutex
	saves int
}

func (c *countingStore) Save(ctx context.Context, id string, t bson.Raw) error {
	c.mu.Lock()
	c.saves++
	c.mu.Unlock()
	return c.Store.Save(ctx, id, t)
}

func (c *countingStore) n() int { c.mu.Lock(); defer c.mu.Unlock(); return c.saves }

// ---- 100,000 documents ----

const bigN = 100_000

// bigCollection returns the benchmark database holding bigN schedules,
// loading them (insertMany, batches of 1000) unless already there.
func bigCollection(b *testing.B) (*mongo.Database, *mongo.Collection) {
	b.Helper()
	ctx := benchCtx(b)
	db := testmongo.Client(b).Database("cronswap_perf_bench")
	coll := db.Collection("schedules")
	n, err := coll.CountDocuments(ctx, bson.D{})
	if err != nil {
		b.Fatal(err)
	}
	if n != bigN {
		if err := coll.Drop(ctx); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		docs := make([]bson.Raw, bigN)
		for i := range docs {
			docs[i] = scheduleDoc(fmt.Sprintf("job%06d", i), i)
		}
		insertMany(ctx, b, coll, docs)
		b.Logf("loaded %d documents in %s", bigN, time.Since(start))
	}
	return db, coll
}

// BenchmarkFullReload100k times a start-up full reload of 100,000
// documents from the test server into a fresh engine, split into the server
// read (find + copying each document), decoding, and the engine (Sync, then
// starting its timers, as the daemon does).
func BenchmarkFullReload100k(b *testing.B) {
	ctx := benchCtx(b)
	_, coll := bigCollection(b)
	feed := changestream.NewMongoFeed(coll, 0)
	var read, decode, sync time.Duration
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		engine := newEngine(quietLogger())
		b.StartTimer()
		t0 := time.Now()
		docs := readAll(b, feed.Snapshot(ctx))
		t1 := time.Now()
		its := decodeAll(docs)
		t2 := time.Now()
		if _, err := engine.Sync(items(its)); err != nil {
			b.Fatal(err)
		}
		engine.Start()
		t3 := time.Now()
		b.StopTimer()
		if len(docs) != bigN || engine.Len() != bigN {
			b.Fatalf("read %d, armed %d; want %d", len(docs), engine.Len(), bigN)
		}
		<-engine.Stop().Done()
		b.StartTimer()
		read += t1.Sub(t0)
		decode += t2.Sub(t1)
		sync += t3.Sub(t2)
	}
	n := float64(b.N)
	b.ReportMetric(read.Seconds()*1e3/n, "read_ms")
	b.ReportMetric(decode.Seconds()*1e3/n, "decode_ms")
	b.ReportMetric(sync.Seconds()*1e3/n, "engine_ms")
	b.ReportMetric((read+decode+sync).Seconds()*1e3/n, "total_ms")
}

// BenchmarkRestart100k starts the watcher (real feed, token store and state
// file; fresh running engine) with 100,000 schedules, first with no state
// file (a full reload from the server), then again from the state file the
// first run left (warm start), and reports the time from Run to having
// all 100,000 jobs armed and the stream open, both ways, and their ratio.
// It also reports what writing the 100,000-document state file costs.
func BenchmarkRestart100k(b *testing.B) {
	ctx := benchCtx(b)
	db, _ := bigCollection(b)
	stateFile := filepath.Join(b.TempDir(), "cronswap.state")
	var full, warm, save time.Duration
	run := func(wantReads int64) time.Duration {
		b.StopTimer()
		runtime.GC() // neither run pays for the garbage of the one before
		b.StartTimer()
		start := time.Now()
		d := startDaemonish(b, db, stateFile, true)
		waitUntil(b, "armed", 5*time.Minute, func() bool { return d.w.Status().Ready && d.engine.Len() == bigN })
		took := time.Since(start)
		if n := d.feed.snapshots.Load(); n != wantReads {
			b.Fatalf("collection read %d times, want %d", n, wantReads)
		}
		d.stop() // flushes the state file and the token
		return took
	}
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		if err := os.Remove(stateFile); err != nil && !os.IsNotExist(err) {
			b.Fatal(err)
		}
		b.StartTimer()
		full += run(1)
		warm += run(0)

		b.StopTimer()
		f := statefile.New(stateFile, statefile.Options{WatcherID: "w1", Source: db.Name() + ".schedules"})
		st, err := f.Load(ctx)
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		if err := f.Save(ctx, st); err != nil {
			b.Fatal(err)
		}
		save += time.Since(t0)
		b.StartTimer()
	}
	n := float64(b.N)
	b.ReportMetric(full.Seconds()*1e3/n, "full_start_ms")
	b.ReportMetric(warm.Seconds()*1e3/n, "warm_start_ms")
	b.ReportMetric(float64(full)/float64(warm), "full/warm")
	b.ReportMetric(save.Seconds()*1e3/n, "state_save_ms")
}

// BenchmarkEngineSync100k isolates the engine's share of arming 100,000
// decoded schedules: into a running engine (robfig re-sorts a shard's
// entries on every add while running) and into one started afterwards.
func BenchmarkEngineSync100k(b *testing.B) {
	docs := make([]bson.Raw, bigN)
	for i := range docs {
		docs[i] = scheduleDoc(fmt.Sprintf("job%06d", i), i)
	}
	its := decodeAll(docs)
	for _, started := range []bool{true, false} {
		b.Run(fmt.Sprintf("running=%v", started), func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				engine := newEngine(quietLogger())
				if started {
					engine.Start()
				}
				b.StartTimer()
				if _, err := engine.Sync(items(its)); err != nil {
					b.Fatal(err)
				}
				if !started {
					engine.Start()
				}
				b.StopTimer()
				if engine.Len() != bigN {
					b.Fatalf("armed %d", engine.Len())
				}
				<-engine.Stop().Done()
				b.StartTimer()
			}
		})
	}
}
