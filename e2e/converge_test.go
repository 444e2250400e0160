package e2e

import (
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
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
