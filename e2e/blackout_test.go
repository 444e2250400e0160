package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/record"
)

// boRuns reads job's run records with a slot at or after from, oldest first.
func boRuns(t *testing.T, db *mongo.Database, job string, from time.Time) []record.RunDoc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cur, err := db.Collection(record.RunsCollection).Find(ctx,
		bson.D{{Key: "job_id", Value: job}, {Key: "scheduled_at", Value: bson.D{{Key: "$gte", Value: from}}}},
		options.Find().SetSort(bson.D{{Key: "scheduled_at", Value: 1}}))
	if err != nil {
		t.Fatal(err)
	}
	var out []record.RunDoc
	if err := cur.All(ctx, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// boLedger reads the run ids the actions wrote, counting each.
func boLedger(t *testing.T, path string) map[string]int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, l := range strings.Fields(string(b)) {
		out[l]++
	}
	return out
}

// Three replicas run a billing and a reports job every second. A window
// for billing inserted with mongosh takes effect live: the billing fires
// inside it are recorded skipped once each, with the window's id and
// reason, and their action never runs, while reports keeps running; a bad
// window document is refused in every replica's log; deleting the window
// with the CLI restores firing at once. Then the billing category is
// paused and resumed in bulk with the CLI.
func TestBlackoutWindowLiveAcrossReplicas(t *testing.T) {
	uri, db := setup(t)
	ledger := filepath.Join(t.TempDir(), "ledger")
	jobsYAML := fmt.Sprintf(`
  tick:
    exec: ["sh", "-c", "echo \"$CRONSWAP_RUN_ID\" >> %s"]
`, ledger)
	insert(t, db,
		bson.D{{Key: "_id", Value: "bill"}, {Key: "cron_expr", Value: "@every 1s"}, {Key: "job", Value: "tick"}, {Key: "category", Value: "billing"}},
		bson.D{{Key: "_id", Value: "report"}, {Key: "cron_expr", Value: "@every 1s"}, {Key: "job", Value: "tick"}, {Key: "category", Value: "reports"}})
	var replicas []*daemon
	var cfgPath string
	for i := 1; i <= 3; i++ {
		cfgPath = writeConfig(t, daemonConfig{URI: uri, Database: db.Name(), InstanceID: fmt.Sprintf("bo-%d", i), Jobs: jobsYAML})
		replicas = append(replicas, startDaemon(t, cfgPath))
	}
	for _, d := range replicas {
		d.waitReady()
	}
	started := time.Now()
	waitFor(t, 30*time.Second, "bill to run", func() bool { return len(boRuns(t, db, "bill", started)) > 0 })

	inserted := time.Now()
	mongosh(t, uri, db.Name(), `db.blackouts.insertOne({_id: "freeze", from: new Date(Date.now() - 60000), `+
		`to: new Date(Date.now() + 3600000), categories: ["billing"], reason: "year-end freeze"})`)
	written := time.Now() // the window was written before this
	var first record.RunDoc
	waitFor(t, 10*time.Second, "a bill fire skipped by the window", func() bool {
		for _, r := range boRuns(t, db, "bill", inserted.Add(-time.Second)) {
			if r.BlackoutID == "freeze" {
				first = r
				return true
			}
		}
		return false
	})
	if lag := first.ScheduledAt.Sub(written); lag > 2*time.Second {
		t.Errorf("first skipped slot %s came %s after mongosh returned, want within 2 s", first.ScheduledAt, lag)
	}
	mongosh(t, uri, db.Name(), `db.blackouts.insertOne({_id: "typo", from: new Date(), to: new Date(Date.now() + 3600000), `+
		`categoies: ["reports"], reason: "misspelt"})`)
	for _, d := range replicas {
		d.waitLog("the bad window refused", func(l logLine) bool {
			return l.str("msg") == "blackout window refused" && l.str("blackout_id") == "typo"
		})
	}
	// A few slots under the window, then the CLI deletes it.
	waitFor(t, 15*time.Second, "4 bill slots under the window", func() bool {
		return len(boRuns(t, db, "bill", first.ScheduledAt)) >= 4
	})
	deleted := time.Now()
	cliOK(t, cfgPath, "blackouts", "delete", "freeze")
	gone := time.Now() // the window was deleted before this
	var resumedAt time.Time
	waitFor(t, 10*time.Second, "bill to run again", func() bool {
		for _, r := range boRuns(t, db, "bill", deleted) {
			if r.Status == record.StatusSucceeded {
				resumedAt = r.ScheduledAt
				return true
			}
		}
		return false
	})
	if lag := resumedAt.Sub(gone); lag > 2*time.Second {
		t.Errorf("first run after the delete at slot %s, %s after the CLI returned, want within 2 s", resumedAt, lag)
	}

	ran := boLedger(t, ledger)
	skipped := 0
	for _, r := range boRuns(t, db, "bill", first.ScheduledAt) {
		if !r.ScheduledAt.Before(resumedAt) {
			break
		}
		if ran[r.ID] != 0 {
			t.Errorf("bill slot %s under the window ran %d times", r.ScheduledAt, ran[r.ID])
		}
		if r.Status == record.StatusMissed {
			continue // not recorded within its starting deadline (a loaded machine): not run either
		}
		if r.Status != record.StatusSkipped || r.BlackoutID != "freeze" || r.Reason != "year-end freeze" ||
			!strings.Contains(r.Error, "blackout freeze") {
			t.Errorf("bill slot %s under the window: %+v, want skipped by freeze with its reason", r.ScheduledAt, r)
		}
		skipped++
	}
	if skipped < 4 {
		t.Errorf("%d bill slots skipped, want at least 4", skipped)
	}
	for id, n := range ran {
		if n != 1 {
			t.Errorf("%s ran %d times across the replicas, want once", id, n)
		}
	}
	for _, r := range boRuns(t, db, "report", inserted) {
		if r.BlackoutID != "" {
			t.Errorf("report slot %s skipped by %q (another category)", r.ScheduledAt, r.BlackoutID)
		}
	}

	// Bulk pause of the billing category: every replica disarms bill only.
	cliOK(t, cfgPath, "schedules", "pause", "--category", "billing")
	for _, d := range replicas {
		waitFor(t, 10*time.Second, "bill disarmed on "+d.cfgPath, func() bool {
			s := d.schedules()
			return !s["bill"].Armed && s["report"].Armed
		})
	}
	cliOK(t, cfgPath, "schedules", "resume", "--category", "billing")
	for _, d := range replicas {
		waitFor(t, 10*time.Second, "bill re-armed on "+d.cfgPath, func() bool { return d.schedules()["bill"].Armed })
	}
}
