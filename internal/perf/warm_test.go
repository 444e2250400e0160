package perf

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/changestream"
	"github.com/cronswap/cronswap/internal/history"
	"github.com/cronswap/cronswap/internal/statefile"
	"github.com/cronswap/cronswap/internal/testmongo"
	"github.com/cronswap/cronswap/resumetoken"
	"github.com/cronswap/cronswap/scheduler"
)

// daemonish is the daemon's data path without HTTP and jobs: watcher (with
// the real feed, token store and state file) feeding a fresh engine.
type daemonish struct {
	engine *scheduler.Engine
	feed   *countingFeed
	w      *changestream.Watcher
	cancel context.CancelFunc
	done   chan error

	startOnce sync.Once
}

func startDaemonish(tb testing.TB, db *mongo.Database, stateFile string, log bool) *daemonish {
	tb.Helper()
	lg := quietLogger()
	if log {
		lg = infoLogger()
	}
	d := &daemonish{
		engine: newEngine(lg),
		feed:   &countingFeed{Feed: changestream.NewMongoFeed(db.Collection("schedules"), 100*time.Millisecond)},
		done:   make(chan error, 1),
	}
	// As the daemon does: the edit history's recorder keeps the documents
	// the state file is written from.
	rec := history.NewRecorder(engineSink(d.engine), discardQueue{}, history.RecorderOptions{Instance: "w1",
		Retention: time.Hour, Logger: quietLogger()})
	d.w = changestream.New(changestream.Options{
		ID:        "w1",
		Feed:      d.feed,
		Tokens:    resumetoken.NewMongoStore(db.Collection(resumetoken.CollectionName)),
		Sink:      rec,
		State:     statefile.New(stateFile, statefile.Options{WatcherID: "w1", Source: db.Name() + ".schedules"}),
		StateDocs: rec.Documents,
		Logger:    lg, Mode: changestream.ModeChangeStream,
		BackoffMin: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond,
		// As the daemon does: timers start once the engine holds the
		// schedules, and the recorder follows the applied events.
		Hooks: changestream.Hooks{Synced: func() { d.startOnce.Do(d.engine.Start) },
			Event: rec.Observe, Idle: rec.CaughtUp},
	})
	ctx, cancel := context.WithCancel(context.Background())
	d.cancel = cancel
	go func() { d.done <- d.w.Run(ctx) }()
	tb.Cleanup(d.stop)
	return d
}

func (d *daemonish) stop() {
	if d.cancel == nil {
		return
	}
	d.cancel()
	<-d.done
	d.cancel = nil
	<-d.engine.Stop().Done()
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// waitEqual waits until the engine holds what the collection says.
func waitEqual(t *testing.T, ctx context.Context, d *daemonish, coll *mongo.Collection) {
	t.Helper()
	want := collectionState(ctx, t, coll)
	deadline := time.Now().Add(time.Minute)
	for {
		got := engineState(d.engine)
		if maps.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("engine never matched the collection: %v", diff(got, want))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestWarmRestartAppliesEditsMadeWhileDown(t *testing.T) {
	ctx := ctxFor(t)
	db := testmongo.NewDatabase(t, testmongo.Client(t))
	coll := db.Collection("schedules")
	var docs []bson.Raw
	for i := range 200 {
		docs = append(docs, scheduleDoc(fmt.Sprintf("job%03d", i), i))
	}
	insertMany(ctx, t, coll, docs)
	stateFile := filepath.Join(t.TempDir(), "cronswap.state")

	// First run: no state file yet, so a full reload; one live edit.
	d := startDaemonish(t, db, stateFile, false)
	waitUntil(t, "first run ready", time.Minute, func() bool { return d.w.Status().Ready })
	if n := d.feed.snapshots.Load(); n != 1 {
		t.Fatalf("first run read the collection %d times, want 1", n)
	}
	if _, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: "job000"}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "cron_expr", Value: "*/5 * * * *"}}}}); err != nil {
		t.Fatal(err)
	}
	waitEqual(t, ctx, d, coll)
	d.stop()
	if _, err := os.Stat(stateFile); err != nil {
		t.Fatalf("no state file after shutdown: %v", err)
	}

	// While down: an update, a delete, an insert, a disable, a bad document.
	edits := []func() error{
		func() error {
			_, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: "job001"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "cron_expr", Value: "0 8 * * *"}}}})
			return err
		},
		func() error { _, err := coll.DeleteOne(ctx, bson.D{{Key: "_id", Value: "job002"}}); return err },
		func() error { _, err := coll.InsertOne(ctx, scheduleDoc("job_new", 7)); return err },
		func() error {
			_, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: "job003"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "enabled", Value: false}}}})
			return err
		},
		func() error {
			_, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: "job004"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "cron_expr", Value: "not cron"}}}})
			return err
		},
	}
	for _, edit := range edits {
		if err := edit(); err != nil {
			t.Fatal(err)
		}
	}

	// Second run: armed from the file (no collection read), then the
	// resumed stream brings the edits made while down.
	d2 := startDaemonish(t, db, stateFile, false)
	waitEqual(t, ctx, d2, coll)
	if n := d2.feed.snapshots.Load(); n != 0 {
		t.Fatalf("warm restart read the collection %d times, want 0", n)
	}
	// Armed from the file, the job whose document went bad while down keeps
	// its last good timer (a full reload into an empty engine could not).
	if st, ok := d2.engine.Get("job004"); !ok || !st.Armed || st.CronExpr != "4 0 * * *" || st.LastError == "" {
		t.Fatalf("job004 after the warm restart: %+v, want armed on its last good timer with the error", st)
	}
	// A live edit still arrives.
	if _, err := coll.DeleteOne(ctx, bson.D{{Key: "_id", Value: "job005"}}); err != nil {
		t.Fatal(err)
	}
	waitEqual(t, ctx, d2, coll)
	d2.stop()

	// Third run after a token reset (what `cronswap token reset` does):
	// the file no longer matches the stored token, so a full reload.
	if _, err := db.Collection(resumetoken.CollectionName).DeleteOne(ctx, bson.D{{Key: "_id", Value: "w1"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: "job006"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "cron_expr", Value: "0 7 * * *"}}}}); err != nil {
		t.Fatal(err)
	}
	d3 := startDaemonish(t, db, stateFile, false)
	waitUntil(t, "third run ready", time.Minute, func() bool { return d3.w.Status().Ready })
	if n := d3.feed.snapshots.Load(); n != 1 {
		t.Fatalf("after a token reset the collection was read %d times, want 1", n)
	}
	waitEqual(t, ctx, d3, coll)
	d3.stop()

	// Fourth run with a damaged file: refused, full reload.
	b, err := os.ReadFile(stateFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stateFile, b[:len(b)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	d4 := startDaemonish(t, db, stateFile, false)
	waitUntil(t, "fourth run ready", time.Minute, func() bool { return d4.w.Status().Ready })
	if n := d4.feed.snapshots.Load(); n != 1 {
		t.Fatalf("with a torn state file the collection was read %d times, want 1", n)
	}
	waitEqual(t, ctx, d4, coll)
}
