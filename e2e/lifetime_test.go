package e2e

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/httpapi"
	"github.com/cronswap/cronswap/internal/lifetime"
	"github.com/cronswap/cronswap/internal/record"
)

// Two replicas run a job every second; end_at set in the past with mongosh
// stops it live: both show it ended ("after end_at", not armed, no next
// run), and no slot after the edit is run or recorded (no missed record
// per slot), while another job keeps running. Moving end_at into the
// future arms it again.
func TestEndAtInThePastStopsFiringLive(t *testing.T) {
	uri, db := setup(t)
	ledger := filepath.Join(t.TempDir(), "ledger")
	jobsYAML := fmt.Sprintf(`
  tick:
    exec: ["sh", "-c", "echo \"$CRONSWAP_RUN_ID\" >> %s"]
`, ledger)
	insert(t, db,
		bson.D{{Key: "_id", Value: "ending"}, {Key: "cron_expr", Value: "@every 1s"}, {Key: "job", Value: "tick"}},
		bson.D{{Key: "_id", Value: "going"}, {Key: "cron_expr", Value: "@every 1s"}, {Key: "job", Value: "tick"}})
	var replicas []*daemon
	for i := 1; i <= 2; i++ {
		cfg := writeConfig(t, daemonConfig{URI: uri, Database: db.Name(), InstanceID: fmt.Sprintf("life-%d", i), Jobs: jobsYAML})
		replicas = append(replicas, startDaemon(t, cfg))
	}
	for _, d := range replicas {
		d.waitReady()
	}
	started := time.Now()
	waitFor(t, 30*time.Second, "ending to run", func() bool { return len(boRuns(t, db, "ending", started)) > 0 })

	mongosh(t, uri, db.Name(), `db.schedules.updateOne({_id: "ending"}, {$set: {end_at: new Date(Date.now() - 1000)}})`)
	written := time.Now() // end_at was written before this
	for _, d := range replicas {
		waitFor(t, 10*time.Second, d.addr+" shows ending ended", func() bool {
			s := d.schedules()["ending"]
			return s.Ended == lifetime.ReasonAfterEnd && !s.Armed && s.NextRun == nil && s.LastError == ""
		})
		// The page's table says so too, and filters on it.
		var rows httpapi.Rows
		if code := d.get("/api/schedule-rows?status=ended", &rows); code != http.StatusOK || len(rows.Items) != 1 ||
			rows.Items[0].ID != "ending" || rows.Items[0].Status != httpapi.StatusEnded {
			t.Errorf("%s: rows with status ended: %d %+v, want ending alone", d.addr, code, rows.Items)
		}
	}
	// Condition, not a sleep: going runs 4 more slots meanwhile.
	waitFor(t, 20*time.Second, "going to run 4 slots after the edit", func() bool {
		n := 0
		for _, r := range boRuns(t, db, "going", written) {
			if r.Status == record.StatusSucceeded {
				n++
			}
		}
		return n >= 4
	})
	// A slot claimed before a replica applied the edit may still run.
	late := boRuns(t, db, "ending", written.Add(time.Second))
	if len(late) != 0 {
		t.Errorf("ending has %d records of slots after end_at was set: %+v", len(late), late)
	}
	ran := boLedger(t, ledger)
	for id := range ran {
		if strings.HasPrefix(id, "ending@") {
			at, err := time.Parse(time.RFC3339, strings.TrimPrefix(id, "ending@"))
			if err == nil && at.After(written.Add(time.Second)) {
				t.Errorf("ending ran slot %s after end_at was set", at)
			}
		}
	}

	// end_at moved into the future: the job fires again.
	mongosh(t, uri, db.Name(), `db.schedules.updateOne({_id: "ending"}, {$set: {end_at: new Date(Date.now() + 3600000)}})`)
	again := time.Now()
	waitFor(t, 10*time.Second, "ending to run again", func() bool {
		for _, r := range boRuns(t, db, "ending", again) {
			if r.Status == record.StatusSucceeded {
				return true
			}
		}
		return false
	})
	if s := replicas[0].schedules()["ending"]; s.Ended != "" || !s.Armed {
		t.Errorf("ending after end_at moved on: %+v, want armed, not ended", s)
	}
}

// A schedule that excludes a calendar not there yet is refused with the
// error visible; once a calendar holding today (and tomorrow, for a test
// across midnight UTC) is inserted with mongosh, the job is armed and each
// of its slots is recorded skipped with reason calendar:<name>, never run.
// Deleting the calendar shows the problem on the schedule, and its last
// dates stay in force: the slots stay skipped.
func TestExcludedCalendarSkipsTodayLive(t *testing.T) {
	uri, db := setup(t)
	ledger := filepath.Join(t.TempDir(), "ledger")
	jobsYAML := fmt.Sprintf(`
  tick:
    exec: ["sh", "-c", "echo \"$CRONSWAP_RUN_ID\" >> %s"]
`, ledger)
	insert(t, db, bson.D{{Key: "_id", Value: "holiday"}, {Key: "cron_expr", Value: "@every 1s"}, {Key: "job", Value: "tick"},
		{Key: "timezone", Value: "UTC"}, {Key: "exclude", Value: bson.A{"today"}}})
	var replicas []*daemon
	for i := 1; i <= 2; i++ {
		cfg := writeConfig(t, daemonConfig{URI: uri, Database: db.Name(), InstanceID: fmt.Sprintf("cal-%d", i), Jobs: jobsYAML})
		replicas = append(replicas, startDaemon(t, cfg))
	}
	for _, d := range replicas {
		d.waitReady()
		waitFor(t, 10*time.Second, d.addr+" shows the unknown calendar", func() bool {
			s := d.schedules()["holiday"]
			return !s.Armed && strings.Contains(s.LastError, `calendar "today": no such calendar`)
		})
	}

	now := time.Now().UTC()
	mongosh(t, uri, db.Name(), fmt.Sprintf(`db.calendars.insertOne({_id: "today", dates: [%q, %q]})`,
		now.Format(time.DateOnly), now.AddDate(0, 0, 1).Format(time.DateOnly)))
	inserted := time.Now()
	for _, d := range replicas {
		waitFor(t, 10*time.Second, d.addr+" arms holiday", func() bool {
			s := d.schedules()["holiday"]
			return s.Armed && s.LastError == ""
		})
	}
	waitFor(t, 20*time.Second, "4 holiday slots recorded", func() bool { return len(boRuns(t, db, "holiday", inserted)) >= 4 })

	mongosh(t, uri, db.Name(), `db.calendars.deleteOne({_id: "today"})`)
	deleted := time.Now()
	for _, d := range replicas {
		waitFor(t, 10*time.Second, d.addr+" shows the calendar deleted", func() bool {
			s := d.schedules()["holiday"]
			return s.Armed && strings.Contains(s.LastError, "deleted from the calendars collection")
		})
	}
	waitFor(t, 20*time.Second, "4 holiday slots after the delete", func() bool { return len(boRuns(t, db, "holiday", deleted)) >= 4 })

	recs := boRuns(t, db, "holiday", inserted)
	skipped := 0
	for _, r := range recs {
		if r.Status == record.StatusMissed {
			continue // not decided within its starting deadline (a loaded machine): not run either
		}
		if r.Status != record.StatusSkipped || r.Reason != "calendar:today" || r.Calendar != "today" {
			t.Errorf("holiday slot %s: %+v, want skipped with reason calendar:today", r.ScheduledAt, r)
			continue
		}
		skipped++
	}
	if skipped < 8 {
		t.Errorf("%d holiday slots skipped, want at least 8", skipped)
	}
	if ran := boLedger(t, ledger); len(ran) != 0 {
		t.Errorf("holiday ran on a date of the calendar it excludes: %v", ran)
	}
}

// Three replicas race on a job that fires every second with max_runs 5:
// the action's ledger holds exactly 5 runs, never 6; the slots after are
// recorded skipped as max_runs reached (one per replica at most, as each
// learns of it), and every replica shows the job ended.
func TestMaxRunsAcrossThreeReplicas(t *testing.T) {
	uri, db := setup(t)
	ledger := filepath.Join(t.TempDir(), "ledger")
	jobsYAML := fmt.Sprintf(`
  tick:
    exec: ["sh", "-c", "echo \"$CRONSWAP_RUN_ID\" >> %s"]
    overlap: allow
`, ledger)
	insert(t, db, bson.D{{Key: "_id", Value: "five"}, {Key: "cron_expr", Value: "@every 1s"}, {Key: "job", Value: "tick"},
		{Key: "max_runs", Value: int32(5)}})
	var replicas []*daemon
	for i := 1; i <= 3; i++ {
		cfg := writeConfig(t, daemonConfig{URI: uri, Database: db.Name(), InstanceID: fmt.Sprintf("max-%d", i), Jobs: jobsYAML})
		replicas = append(replicas, startDaemon(t, cfg))
	}
	for _, d := range replicas {
		d.waitReady()
	}
	for _, d := range replicas {
		waitFor(t, 30*time.Second, d.addr+" shows five ended", func() bool {
			s := d.schedules()["five"]
			return s.Ended == lifetime.ReasonMaxRuns && !s.Armed && s.NextRun == nil
		})
	}
	ran := boLedger(t, ledger)
	if len(ran) != 5 {
		t.Fatalf("the action ran %d slots, want exactly 5: %v", len(ran), ran)
	}
	for id, n := range ran {
		if n != 1 {
			t.Errorf("%s ran %d times", id, n)
		}
	}
	capped := 0
	for _, r := range boRuns(t, db, "five", time.Time{}) {
		switch {
		case r.Status == record.StatusSucceeded:
		case r.Status == record.StatusSkipped && r.Reason == lifetime.ReasonMaxRuns:
			capped++
		case r.Status == record.StatusMissed:
			// not decided within its starting deadline (a loaded machine): not run
		default:
			t.Errorf("five: %+v, want succeeded or skipped as max_runs reached", r)
		}
	}
	if capped < 1 || capped > 3 {
		t.Errorf("%d slots skipped as max_runs reached, want 1 to 3 (one per replica at most)", capped)
	}
}
