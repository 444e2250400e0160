package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/record"
)

// TestCatchUpAfterDowntime stops the daemon across a slot and restarts two
// replicas 3 s after it: the job whose catch-up window (25 s) covers the
// missed slot runs it exactly once; the job whose window (1 s) does not,
// never runs it, and it is recorded missed (outside_catchup_window).
func TestCatchUpAfterDowntime(t *testing.T) {
	uri, db := setup(t)
	ledger := filepath.Join(t.TempDir(), "ledger")
	line := `printf '%s %s %s\n' "$CRONSWAP_JOB_ID" "$CRONSWAP_SCHEDULED_AT" "$CRONSWAP_INSTANCE_ID" >> ` + ledger
	jobsYAML := fmt.Sprintf(`
  inside:
    exec: ["sh", "-c", %q]
    catchup: 25s
  outside:
    exec: ["sh", "-c", %q]
    catchup: 1s
`, line, line)
	insert(t, db, sched("inside", "*/10 * * * * *"), sched("outside", "*/10 * * * * *"))

	d := startDaemon(t, writeConfig(t, daemonConfig{URI: uri, Database: db.Name(), InstanceID: "r1", Jobs: jobsYAML}))
	d.waitReady()
	d.signal(syscall.SIGTERM)
	if err := d.wait(30 * time.Second); err != nil {
		t.Fatalf("daemon did not stop cleanly: %v", err)
	}
	stopped := time.Now()

	// The first 10 s slot at least a second after the stop is missed.
	missed := stopped.Add(time.Second).Truncate(10 * time.Second).Add(10 * time.Second)
	waitFor(t, 30*time.Second, "3 s past the missed slot (downtime)", func() bool { return time.Now().After(missed.Add(3 * time.Second)) })
	ds := startReplicas(t, uri, db.Name(), 2, "", jobsYAML)
	slot := missed.UTC().Format(time.RFC3339)

	// The next slot runs normally for both jobs: by then catch-up is over.
	next := missed.Add(10 * time.Second)
	waitFor(t, 60*time.Second, "the slot after the missed one ran for both jobs", func() bool {
		return len(allRuns(t, db, bson.D{{Key: "scheduled_at", Value: bson.D{{Key: "$gte", Value: next}}},
			{Key: "status", Value: record.StatusSucceeded}})) >= 2
	})
	for _, dm := range ds {
		dm.waitLog("catch-up finished", func(l logLine) bool { return l.str("msg") == "catch-up: claiming a slot from before start-up" })
	}

	inside := allRuns(t, db, bson.D{{Key: "job_id", Value: "inside"}, {Key: "scheduled_at", Value: missed}})
	if len(inside) != 1 || inside[0].Status != record.StatusSucceeded {
		t.Fatalf("inside: runs of the missed slot %s = %+v, want one succeeded", slot, inside)
	}
	outside := allRuns(t, db, bson.D{{Key: "job_id", Value: "outside"}, {Key: "scheduled_at", Value: missed},
		{Key: "status", Value: bson.D{{Key: "$ne", Value: record.StatusMissed}}}})
	if len(outside) != 0 {
		t.Fatalf("outside: the missed slot %s ran though its window is 1 s: %+v", slot, outside)
	}
	// It is on record instead: missed, older than the catch-up window.
	var onRecord []record.RunDoc
	waitFor(t, 30*time.Second, "outside: the missed slot on record", func() bool {
		onRecord = allRuns(t, db, bson.D{{Key: "job_id", Value: "outside"}, {Key: "status", Value: record.StatusMissed},
			{Key: "scheduled_at", Value: bson.D{{Key: "$lte", Value: missed}}},
			{Key: "last_scheduled_at", Value: bson.D{{Key: "$gte", Value: missed}}}})
		return len(onRecord) > 0
	})
	if len(onRecord) != 1 || onRecord[0].Reason != record.MissedOutsideCatchup {
		t.Fatalf("outside: records of the missed slot %s: %+v, want one missed (%s)", slot, onRecord, record.MissedOutsideCatchup)
	}
	data, err := os.ReadFile(ledger)
	if err != nil {
		t.Fatal(err)
	}
	ran := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(l)
		if len(f) == 3 {
			ran[f[0]+" "+f[1]]++
		}
	}
	if n := ran["inside "+slot]; n != 1 {
		t.Errorf("inside ran the missed slot %s %d times, want exactly once\n%s", slot, n, data)
	}
	if n := ran["outside "+slot]; n != 0 {
		t.Errorf("outside ran the missed slot %s %d times, want none\n%s", slot, n, data)
	}
	for k, n := range ran {
		if n != 1 {
			t.Errorf("%s ran %d times", k, n)
		}
	}
}
