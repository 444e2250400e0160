package jobs

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/testmongo"
)

// The fire path's collections from Collections carry write concern
// majority on every write and read concern majority on every read, as sent
// on the wire, whatever the connection string says: a claim acknowledged by
// a primary alone could be rolled back by a failover and its slot run again.
func TestCollectionsUseMajority(t *testing.T) {
	var mu sync.Mutex
	var seen []bson.Raw
	mon := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		switch e.CommandName {
		case "insert", "update", "delete", "findAndModify", "find":
			mu.Lock()
			seen = append(seen, append(bson.Raw(nil), e.Command...))
			mu.Unlock()
		}
	}}
	client, err := mongo.Connect(options.Client().ApplyURI(testmongo.Shared(t).URI).SetMonitor(mon))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) }) // after the database is dropped
	db := testmongo.NewDatabase(t, client)
	locks, runs := Collections(db)
	s := NewMongoStore(locks, runs, MongoStoreOptions{Instance: "a", Logger: slog.New(slog.DiscardHandler)})
	ctx := testCtx(t)
	t0 := time.Now().Truncate(time.Second)

	c, err := s.Claim(ctx, req("j", t0, "a", t0, OverlapForbid))
	if err != nil || c.Result != Acquired {
		t.Fatalf("claim: %+v, %v", c, err)
	}
	if err := s.StartRun(ctx, c.Lease, t0, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Renew(ctx, c.Lease, t0.Add(time.Second), time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, c.Lease, StatusSucceeded, t0.Add(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := s.FinishRun(ctx, c.Lease, RunEnd{Status: StatusSucceeded, EndedAt: t0.Add(2 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	// A second slot claimed while nothing holds the lock, and a miss that
	// reads the lock back (already fired).
	if _, err := s.Claim(ctx, req("j", t0, "a", t0.Add(3*time.Second), OverlapForbid)); err != nil {
		t.Fatal(err)
	}

	mu.Lock()
	defer mu.Unlock()
	kinds := map[string]int{}
	for _, cmd := range seen {
		name := cmd.Index(0).Key()
		coll, _ := cmd.Index(0).Value().StringValueOK()
		if coll != LocksCollection && coll != RunsCollection {
			continue
		}
		kinds[name]++
		if name == "find" {
			if lvl, _ := cmd.Lookup("readConcern", "level").StringValueOK(); lvl != "majority" {
				t.Errorf("find on %s without read concern majority: %s", coll, cmd)
			}
			continue
		}
		if w, ok := cmd.Lookup("writeConcern", "w").StringValueOK(); !ok || w != "majority" {
			t.Errorf("%s on %s without write concern majority: %s", name, coll, cmd)
		}
	}
	for _, want := range []string{"findAndModify", "insert", "update", "find"} {
		if kinds[want] == 0 {
			t.Errorf("no %s command on the fire path's collections seen (saw %v)", want, kinds)
		}
	}
}
