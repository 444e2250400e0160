package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/cronswap/cronswap/internal/httpapi"
	"github.com/cronswap/cronswap/internal/members"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/internal/testmongo"
	"github.com/cronswap/cronswap/schedule"
	"github.com/cronswap/cronswap/scheduler"
)

// A job's last run is its newest record that ran (record.LastRun), whatever
// started it: a run-now after the last cron slot is the last run, a
// newer skipped, missed or buffered record is not, and a retrying record
// is. The rows and the job page show the same one.
func TestLastRunIsTheNewestRecordThatRan(t *testing.T) {
	db := testmongo.NewDatabase(t, testmongo.Client(t))
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Second)
	locks, runs := record.Collections(db)
	slot := now.Add(-20 * time.Minute)
	runNowAt := now.Add(-5 * time.Minute).Add(123 * time.Millisecond)
	docs := []any{
		// daily_report: a cron slot, then a run-now, then records that did not run.
		record.RunDoc{ID: record.RunID("daily_report", slot), JobID: "daily_report", ScheduledAt: slot, Instance: "replica-1",
			Status: record.StatusSucceeded, StartedAt: slot, EndedAt: slot.Add(time.Second)},
		record.RunDoc{ID: "trigger/abc", JobID: "daily_report", ScheduledAt: runNowAt, Instance: "replica-2",
			Status: record.StatusSucceeded, StartedAt: runNowAt.Add(10 * time.Millisecond), EndedAt: runNowAt.Add(time.Second)},
		record.RunDoc{ID: record.RunID("daily_report", now.Add(-2*time.Minute)), JobID: "daily_report", ScheduledAt: now.Add(-2 * time.Minute),
			Status: record.StatusSkipped, Reason: "overlap"},
		record.RunDoc{ID: record.MissedID("daily_report", now.Add(-time.Minute)), JobID: "daily_report", ScheduledAt: now.Add(-time.Minute),
			Status: record.StatusMissed, Count: 1, Reason: record.MissedNoReplica},
		record.RunDoc{ID: "trigger/def", JobID: "daily_report", ScheduledAt: now.Add(-30 * time.Second).Add(7 * time.Millisecond),
			Status: record.StatusBuffered},
		// heartbeat: a succeeded slot, then one between two attempts.
		record.RunDoc{ID: record.RunID("heartbeat", now.Add(-20*time.Second)), JobID: "heartbeat", ScheduledAt: now.Add(-20 * time.Second),
			Status: record.StatusSucceeded, StartedAt: now.Add(-20 * time.Second), EndedAt: now.Add(-19 * time.Second)},
		record.RunDoc{ID: record.RunID("heartbeat", now.Add(-10*time.Second)), JobID: "heartbeat", ScheduledAt: now.Add(-10 * time.Second),
			Status: record.StatusRetrying, Attempt: 1, StartedAt: now.Add(-10 * time.Second)},
		// broken: only a missed slot.
		record.RunDoc{ID: record.MissedID("broken", now.Add(-time.Hour)), JobID: "broken", ScheduledAt: now.Add(-time.Hour),
			Status: record.StatusMissed, Count: 1, Reason: record.MissedNoReplica},
	}
	if _, err := runs.InsertMany(ctx, docs); err != nil {
		t.Fatal(err)
	}
	// The lock's last slot is the cron slot: run-now never moves it.
	if _, err := locks.InsertOne(ctx, record.LockDoc{JobID: "daily_report", State: record.LockFree, Fence: runNowAt.UnixMilli(),
		LastSlot: slot, UpdatedAt: now}); err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, func(o *httpapi.Options) { o.Records = httpapi.NewMongoRecords(db) })

	want := map[string]string{"daily_report": "trigger/abc", "heartbeat": record.RunID("heartbeat", now.Add(-10*time.Second)), "broken": ""}
	rows := map[string]httpapi.Row{}
	for _, r := range getRows(t, f, "").Items {
		rows[r.ID] = r
	}
	for id, runID := range want {
		var d httpapi.Detail
		r := f.get(t, "/api/schedules/"+id+"/detail")
		if err := json.Unmarshal([]byte(r.body), &d); err != nil {
			t.Fatalf("detail of %s: %v: %s", id, err, r.body)
		}
		for view, lr := range map[string]*httpapi.LastRun{"row": rows[id].LastRun, "detail": d.LastRun} {
			got := ""
			if lr != nil {
				got = lr.RunID
			}
			if got != runID {
				t.Errorf("%s of %s: last run %q, want %q", view, id, got, runID)
			}
		}
	}
	lr := rows["daily_report"].LastRun
	if lr == nil || lr.Status != record.StatusSucceeded || !lr.ScheduledAt.Equal(runNowAt) || lr.InstanceID != "replica-2" ||
		lr.StartedAt == nil || lr.EndedAt == nil {
		t.Errorf("daily_report last run %+v, want the run-now's record", lr)
	}
	if lr := rows["heartbeat"].LastRun; lr == nil || lr.Status != record.StatusRetrying || lr.EndedAt != nil {
		t.Errorf("heartbeat last run %+v, want the retrying slot", lr)
	}
}

// Every job's owner on /api/schedules, the rows and the job page is
// members.Owner among the live members, and the overview's owned_jobs
// counts exactly those owners: every job, enabled or not, valid or not,
// and no refused document whose _id is not a job id.
func TestOwnersAgreeWithOverview(t *testing.T) {
	now := time.Now()
	live := []members.Member{
		{ID: "replica-1", Host: "a", HeartbeatAt: now, LeaseUntil: now.Add(time.Minute)},
		{ID: "replica-2", Host: "b", HeartbeatAt: now, LeaseUntil: now.Add(time.Minute)},
	}
	f := newFixture(t, func(o *httpapi.Options) {
		o.Members = func(context.Context) ([]members.Member, error) { return live, nil }
	})
	for i := range 40 {
		f.sched.list = append(f.sched.list, scheduler.Status{Schedule: schedule.Schedule{ID: fmt.Sprintf("job-%02d", i),
			CronExpr: "@daily", Enabled: i%3 != 0}, Armed: i%3 != 0, NextRun: nextRun})
	}
	f.sched.list = append(f.sched.list, scheduler.Status{Schedule: schedule.Schedule{ID: schedule.RefusedKey("7")},
		LastError: "field _id: must be a string job id, not an int32"})
	jobCount := len(f.sched.list) - 1

	var list []httpapi.Schedule
	if r := f.get(t, "/api/schedules"); json.Unmarshal([]byte(r.body), &list) != nil {
		t.Fatalf("/api/schedules: %s", r.body)
	}
	counted := map[string]int{}
	for _, s := range list {
		want := members.Owner(s.ID, live).ID
		if s.InvalidID {
			want = ""
		}
		if s.Owner != want {
			t.Errorf("/api/schedules: %s owned by %q, want %q", s.ID, s.Owner, want)
		}
		if s.Owner != "" {
			counted[s.Owner]++
		}
	}
	var ov httpapi.Overview
	if r := f.get(t, "/api/overview"); r.code != http.StatusOK || json.Unmarshal([]byte(r.body), &ov) != nil {
		t.Fatalf("/api/overview: %d %s", r.code, r.body)
	}
	sum := 0
	for _, m := range ov.Members {
		sum += m.OwnedJobs
		if m.OwnedJobs != counted[m.InstanceID] || m.OwnedJobs == 0 {
			t.Errorf("overview: %s owns %d, /api/schedules names it owner of %d", m.InstanceID, m.OwnedJobs, counted[m.InstanceID])
		}
	}
	if sum != jobCount || len(ov.Members) != 2 {
		t.Errorf("overview: owned jobs sum to %d over %d members, want the %d jobs", sum, len(ov.Members), jobCount)
	}
	rows := getRows(t, f, "?limit=500")
	for _, r := range rows.Items {
		if want := members.Owner(r.ID, live).ID; !r.InvalidID && r.Owner != want {
			t.Errorf("row %s owned by %q, want %q", r.ID, r.Owner, want)
		}
	}
	var d httpapi.Detail
	if r := f.get(t, "/api/schedules/job-07/detail"); json.Unmarshal([]byte(r.body), &d) != nil || d.Schedule.Owner != members.Owner("job-07", live).ID {
		t.Errorf("detail of job-07: %s", r.body)
	}
}
