package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/faultproxy"
	"github.com/cronswap/cronswap/internal/testmongo"
)

// tickDoc is a schedules document for the "tick" action of tickJobs.
func tickDoc(id, expr string) bson.D {
	return bson.D{{Key: "_id", Value: id}, {Key: "cron_expr", Value: expr}, {Key: "job", Value: "tick"},
		{Key: "updated_at", Value: time.Now()}}
}

// TestConvergenceFollowsLateEdit replays the soak failure seen at 100 jobs
// ("job04: not in the collection" on one replica only, while every
// replica's log had armed it): job04 is deleted, the convergence check
// reads the collection, and only then does an edit the writer had given up
// on (cancelled in flight at the end of the soak, still applied by the
// server) insert job04 again; the replica applies it before it is
// compared. The replica is right — it follows the collection — so the
// check must compare it with the collection as it is now, and pass.
func TestConvergenceFollowsLateEdit(t *testing.T) {
	uri, db := setup(t)
	insert(t, db, tickDoc("job01", "0 9 * * *"), tickDoc("job04", "@daily"))
	d := startDaemon(t, writeConfig(t, daemonConfig{URI: uri, Database: db.Name(), Jobs: tickJobs}))
	d.waitReady()
	waitStateExact(t, d, db, 30*time.Second)
	if _, err := db.Collection("schedules").DeleteOne(testCtx(t), bson.D{{Key: "_id", Value: "job04"}}); err != nil {
		t.Fatal(err)
	}
	waitStateExact(t, d, db, 30*time.Second)

	reads := 0
	collection := func() map[string]jobState {
		st := collectionState(t, db)
		reads++
		if reads == 1 {
			// The late edit lands after this read, and the replica
			// applies it before the comparison.
			insert(t, db, tickDoc("job04", "*/10 * * * * *"))
			waitFor(t, 30*time.Second, "the replica to arm the late job04", func() bool {
				return d.armedExprs()["job04"] == "*/10 * * * * *"
			})
		}
		return st
	}
	if report := waitConverged(t, collection, []*daemon{d}, 10*time.Second); len(report) != 0 {
		t.Fatalf("the check blamed a replica that follows the collection (%d reads):\n%s", reads, strings.Join(report, "\n"))
	}
	if reads < 2 {
		t.Fatalf("the check compared against %d read(s) of the collection, want a fresh one after the late edit", reads)
	}
}

// TestWriterStopLeavesNoEditInFlight: the soak reads the collection as
// soon as its writer has stopped, so the writer's stop must not leave an
// edit on its way to the server. The writer's edit is held by a proxy (a
// server busy behind its write lock) when the writer is stopped; it must
// wait for that edit's answer, and the collection must not change once it
// has returned. Before the fix the stop cancelled the edit: run returned at
// once, and the server applied the edit afterwards.
func TestWriterStopLeavesNoEditInFlight(t *testing.T) {
	uri, db := setup(t)
	p := newProxy(t, uri)
	coll := testmongo.ClientFor(t, p.URI(uri)).Database(db.Name()).Collection("schedules")
	if err := coll.Database().Client().Ping(testCtx(t), nil); err != nil {
		t.Fatal(err)
	}
	// Seed 2: the first edit sets job03's expression, which the collection
	// does not have yet.
	w := newWriter(coll, 2, 5, quietExprs)
	for _, id := range w.ids {
		insert(t, db, tickDoc(id, "1 1 1 1 *"))
	}
	h := p.HoldNext(faultproxy.CommandName("insert", "update", "delete"))
	t.Cleanup(h.Release)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	ran := make(chan struct{})
	go func() { defer close(ran); w.run(ctx, 0, 10*time.Millisecond) }()
	waitClosed(t, h.Held(), 30*time.Second, "the writer's first edit to be held")
	stop()

	// A writer that abandons its edit returns at once (the driver gives up
	// on a cancelled context without waiting for the server): half a
	// second is ample to see it, and a correct one stays in run.
	var early map[string]jobState
	select {
	case <-ran:
		early = collectionState(t, db)
	case <-time.After(500 * time.Millisecond):
	}
	h.Release()
	waitClosed(t, h.Answered(), 30*time.Second, "the server to answer the released edit")
	waitClosed(t, ran, 30*time.Second, "the writer to return")
	final := collectionState(t, db)
	if early != nil {
		t.Fatalf("the writer returned with its edit still on the way (%s); it landed afterwards, changing %v",
			w.summary(), stateDiff(early, final))
	}
	if w.total() != 1 {
		t.Fatalf("the writer made %s, want the held edit made and counted", w.summary())
	}
}

// waitClosed waits for ch to be closed, failing the test after timeout.
func waitClosed(t *testing.T, ch <-chan struct{}, timeout time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(timeout):
		t.Fatalf("timed out after %s waiting for %s", timeout, what)
	}
}
