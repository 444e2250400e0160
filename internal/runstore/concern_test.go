package runstore

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

	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/internal/testmongo"
	"github.com/cronswap/cronswap/jobs"
)

// The fire path's collections from Collections carry write concern
// majority on every write and read concern majority on every read, as sent
// on the wire, whatever the connection string says: a claim acknowledged by
// a primary alone could be rolled back by a failover and its slot run again.
// Every method of the batch store is driven through its usual and its
// contended paths (read-backs, repair, skip, abandoned end, sweep, index
// recreation).
func TestCollectionsUseMajority(t *testing.T) {
	var mu sync.Mutex
	var seen []bson.Raw
	mon := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		mu.Lock()
		seen = append(seen, append(bson.Raw(nil), e.Command...))
		mu.Unlock()
	}}
	client, err := mongo.Connect(options.Client().ApplyURI(testmongo.Shared(t).URI).SetMonitor(mon))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) }) // after the database is dropped
	db := testmongo.NewDatabase(t, client)
	locks, runs := record.Collections(db)
	opts := Options{Instance: "a", Logger: slog.New(slog.DiscardHandler)}
	s := New(locks, runs, opts)
	ctx := testCtx(t)
	t0 := base
	const ttl = 3 * time.Second
	claim := func(inst string, now time.Time, fires ...record.FireClaim) []record.ClaimOutcome {
		return s.ClaimBatch(ctx, record.BatchClaim{Fires: fires, Instance: inst, Incarnation: inst + "1", Now: now, TTL: ttl})
	}

	if _, err := s.VerifyIndexes(ctx); err != nil { // creates them: none there yet
		t.Fatal(err)
	}
	// A damaged lock (repaired on the way), a free one, an allow job.
	if _, err := locks.InsertOne(ctx, bson.D{{Key: "_id", Value: "d"}, {Key: "state", Value: "editing"},
		{Key: "fence", Value: int64(1)}, {Key: "last_slot", Value: t0.Add(-time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	outs := claim("a", t0, forbid("j", t0), forbid("d", t0), allow("p", t0))
	for _, o := range outs {
		if o.Result != record.Acquired {
			t.Fatalf("claim: %+v", o)
		}
	}
	// Check fires (a find), a skip while held (lock read-back and the
	// skipped record), already fired.
	t1 := t0.Add(time.Second)
	claim("b", t1, record.FireClaim{JobID: "j", Slot: t0, Overlap: jobs.OverlapSkip, Check: true}, forbid("j", t1))
	// Renewals, one lost (a find names it).
	if _, err := runs.UpdateOne(ctx, bson.D{{Key: "_id", Value: outs[1].Lease.RunID}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: record.StatusAbandoned}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RenewBatch(ctx, []record.Lease{outs[0].Lease, outs[1].Lease, outs[2].Lease}, t1, ttl); err != nil {
		t.Fatal(err)
	}
	// The ends, one of an abandoned record (read back, true end written).
	end := record.RunEnd{Status: record.StatusSucceeded, EndedAt: t1}
	s.EndBatch(ctx, []record.LeaseEnd{{Lease: outs[0].Lease, End: end}, {Lease: outs[1].Lease, End: end}, {Lease: outs[2].Lease, End: end}})
	// A record disowned, expired ones swept, a dropped index recreated.
	o := claim("a", t1.Add(time.Second), forbid("k", t1))[0]
	if err := s.Disown(ctx, []record.Lease{o.Lease}, record.MissedUnreachable, t1); err != nil {
		t.Fatal(err)
	}
	claim("a", t1, allow("q", t1))
	if _, err := s.SweepExpired(ctx, t1.Add(time.Minute), 10); err != nil {
		t.Fatal(err)
	}
	if err := runs.Indexes().DropOne(ctx, record.RunsUniqueIndex); err != nil {
		t.Fatal(err)
	}
	if re, err := s.VerifyIndexes(ctx); err != nil || !re {
		t.Fatalf("verify indexes: %v %v", re, err)
	}

	mu.Lock()
	defer mu.Unlock()
	kinds := map[string]int{}
	for _, cmd := range seen {
		name := cmd.Index(0).Key()
		coll, _ := cmd.Index(0).Value().StringValueOK()
		if coll != record.LocksCollection && coll != record.RunsCollection {
			continue
		}
		kinds[name]++
		switch name {
		case "find", "aggregate", "count", "distinct":
			if lvl, _ := cmd.Lookup("readConcern", "level").StringValueOK(); lvl != "majority" {
				t.Errorf("%s on %s without read concern majority: %s", name, coll, cmd)
			}
		case "listIndexes", "dropIndexes", "getMore", "killCursors":
			// No concern applies (dropIndexes is the test's own).
		default:
			if w, ok := cmd.Lookup("writeConcern", "w").StringValueOK(); !ok || w != "majority" {
				t.Errorf("%s on %s without write concern majority: %s", name, coll, cmd)
			}
		}
	}
	for _, want := range []string{"insert", "update", "find", "createIndexes"} {
		if kinds[want] == 0 {
			t.Errorf("no %s command on the fire path's collections seen (saw %v)", want, kinds)
		}
	}
	t.Logf("commands seen: %v", kinds)
}
