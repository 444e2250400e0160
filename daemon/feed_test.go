package daemon

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/changestream"
	"github.com/cronswap/cronswap/internal/testmongo"
	"github.com/cronswap/cronswap/schedule"
)

// A long getMore wait costs neither an edit nor a shutdown anything: an
// insert ends the waiting getMore at once, and cancelling the context
// abandons one at once. The wait here is a minute, so returning within the
// deadlines below can only come from the wake-up or the cancel.
func TestLongGetMoreWaitWakesOnEditAndOnCancel(t *testing.T) {
	const wait = time.Minute
	var getMores atomic.Int64
	mon := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if e.CommandName == "getMore" {
			getMores.Add(1)
		}
	}}
	client, err := mongo.Connect(options.Client().ApplyURI(testmongo.Shared(t).URI).SetMonitor(mon))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) }) // after the database is dropped
	db := testmongo.NewDatabase(t, client)
	coll := db.Collection(schedule.CollectionName)
	feed := changestream.NewMongoFeed(coll, wait)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs, err := feed.Open(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cs.Close(context.Background()) }()
	for cs.TryNext(ctx) { // the aggregate's first batch
	}

	// sent waits until n getMores were sent (one is waiting on the server).
	sent := func(n int64) {
		waitFor(t, 10*time.Second, "a getMore sent", func() bool { return getMores.Load() >= n })
	}
	got := make(chan bool, 1)
	go func() {
		for {
			if cs.TryNext(ctx) {
				got <- true
				return
			}
			if cs.Err() != nil || ctx.Err() != nil {
				got <- false
				return
			}
		}
	}()
	sent(1)
	if _, err := coll.InsertOne(context.Background(), bson.D{{Key: "_id", Value: "x"}, {Key: "cron_expr", Value: "@hourly"}}); err != nil {
		t.Fatal(err)
	}
	select {
	case ok := <-got:
		if !ok {
			t.Fatalf("stream ended instead of delivering the insert: %v", cs.Err())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("insert not delivered within 10 s of a %s getMore wait", wait)
	}

	// Now the next getMore waits on the server; cancel it.
	before := getMores.Load()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for cs.TryNext(ctx) {
		}
	}()
	sent(before + 1)
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("a waiting getMore did not return within 10 s of the cancel (wait %s)", wait)
	}
}

// A start's first full read, while the engine holds nothing, counts the
// collection (one command) and makes room for that many before the read;
// later full reads, and any while the engine holds jobs, only read.
func TestFirstFullReadMakesRoomForTheCollection(t *testing.T) {
	var counts atomic.Int64
	mon := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if e.CommandName == "count" || e.CommandName == "aggregate" {
			counts.Add(1)
		}
	}}
	client, err := mongo.Connect(options.Client().ApplyURI(testmongo.Shared(t).URI).SetMonitor(mon))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	coll := testmongo.NewDatabase(t, client).Collection(schedule.CollectionName)
	ctx := context.Background()
	if _, err := coll.InsertMany(ctx, []any{bson.D{{Key: "_id", Value: "a"}}, bson.D{{Key: "_id", Value: "b"}}, bson.D{{Key: "_id", Value: "c"}}}); err != nil {
		t.Fatal(err)
	}
	read := func(f changestream.Feed) int {
		n := 0
		for _, err := range f.Snapshot(ctx) {
			if err != nil {
				t.Fatal(err)
			}
			n++
		}
		return n
	}
	var reserved []int
	empty := true
	f := &reservingFeed{Feed: changestream.NewMongoFeed(coll, 0), coll: coll, empty: func() bool { return empty },
		reserve: func(n int) { reserved = append(reserved, n) }, log: slog.New(slog.DiscardHandler)}
	if n := read(f); n != 3 || len(reserved) != 1 || reserved[0] != 3 || counts.Load() != 1 {
		t.Fatalf("first full read: %d documents, reserved %v, %d count commands; want 3, [3], 1", n, reserved, counts.Load())
	}
	if n := read(f); n != 3 || len(reserved) != 1 || counts.Load() != 1 {
		t.Errorf("second full read: %d documents, reserved %v, %d count commands; want 3 read and no count", n, reserved, counts.Load())
	}
	empty = false
	g := &reservingFeed{Feed: changestream.NewMongoFeed(coll, 0), coll: coll, empty: func() bool { return empty },
		reserve: func(n int) { reserved = append(reserved, n) }, log: slog.New(slog.DiscardHandler)}
	if n := read(g); n != 3 || len(reserved) != 1 || counts.Load() != 1 {
		t.Errorf("first full read with jobs held (after a warm start): %d documents, reserved %v, %d count commands; want 3 read and no count",
			n, reserved, counts.Load())
	}
}

// A count that fails (here: asked of a client already disconnected) is
// skipped: nothing is reserved, and the full read proceeds as without it.
func TestFirstFullReadWithoutItsCountStillReads(t *testing.T) {
	client := testmongo.Client(t)
	coll := testmongo.NewDatabase(t, client).Collection(schedule.CollectionName)
	ctx := context.Background()
	if _, err := coll.InsertMany(ctx, []any{bson.D{{Key: "_id", Value: "a"}}, bson.D{{Key: "_id", Value: "b"}}}); err != nil {
		t.Fatal(err)
	}
	gone, err := mongo.Connect(options.Client().ApplyURI(testmongo.Shared(t).URI))
	if err != nil {
		t.Fatal(err)
	}
	if err := gone.Disconnect(ctx); err != nil {
		t.Fatal(err)
	}
	reserved := 0
	f := &reservingFeed{Feed: changestream.NewMongoFeed(coll, 0), coll: gone.Database(coll.Database().Name()).Collection(coll.Name()),
		empty: func() bool { return true }, reserve: func(n int) { reserved += n }, log: slog.New(slog.DiscardHandler)}
	n := 0
	for _, err := range f.Snapshot(ctx) {
		if err != nil {
			t.Fatalf("the full read failed with its count: %v", err)
		}
		n++
	}
	if n != 2 || reserved != 0 {
		t.Errorf("read %d documents, reserved %d; want both documents read and nothing reserved", n, reserved)
	}
}
