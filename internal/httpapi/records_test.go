package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/cronswap/cronswap/internal/httpapi"
	"github.com/cronswap/cronswap/internal/members"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/internal/testmongo"
)

// seedRecords writes run records, missed ranges and locks for
// daily_report and heartbeat into a fresh database and returns it as
// Records, with now.
func seedRecords(t *testing.T) (*httpapi.MongoRecords, time.Time) {
	t.Helper()
	db := testmongo.NewDatabase(t, testmongo.Client(t))
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Second)
	locks, runs := record.Collections(db)
	run := func(job string, ago time.Duration, status string) record.RunDoc {
		slot := now.Add(-ago)
		d := record.RunDoc{ID: record.RunID(job, slot), JobID: job, ScheduledAt: slot, Instance: "replica-2", Status: status,
			StartedAt: slot.Add(time.Second), ExpireAt: now.Add(time.Hour)}
		if status != record.StatusRunning {
			d.EndedAt = slot.Add(2 * time.Second)
		}
		return d
	}
	missed := func(job string, ago time.Duration, n int64) record.RunDoc {
		slot := now.Add(-ago)
		return record.RunDoc{ID: record.MissedID(job, slot), JobID: job, ScheduledAt: slot, LastScheduledAt: slot.Add(time.Duration(n-1) * time.Minute),
			Count: n, Status: record.StatusMissed, Reason: record.MissedNoReplica, ExpireAt: now.Add(time.Hour)}
	}
	docs := []any{
		run("daily_report", 30*time.Minute, record.StatusSucceeded),
		run("daily_report", 20*time.Minute, record.StatusFailed),
		run("daily_report", 3*time.Hour, record.StatusSucceeded), // outside the hour
		run("heartbeat", 10*time.Minute, record.StatusSucceeded),
		run("heartbeat", 5*time.Second, record.StatusRunning),
		missed("daily_report", 2*time.Hour, 3),
		missed("daily_report", 30*time.Hour, 5), // outside the day
		missed("heartbeat", 40*time.Minute, 1),
	}
	if _, err := runs.InsertMany(ctx, docs); err != nil {
		t.Fatal(err)
	}
	lockDocs := []any{
		record.LockDoc{JobID: "daily_report", State: record.LockFree, Fence: record.FenceOf(now.Add(-20 * time.Minute)),
			LastSlot: now.Add(-20 * time.Minute), UpdatedAt: now},
		record.LockDoc{JobID: "heartbeat", State: record.LockRunning, Holder: "replica-2", RunID: record.RunID("heartbeat", now.Add(-5*time.Second)),
			Fence: record.FenceOf(now.Add(-5 * time.Second)), LastSlot: now.Add(-5 * time.Second), LeaseUntil: now.Add(time.Minute), UpdatedAt: now},
	}
	if _, err := locks.InsertMany(ctx, lockDocs); err != nil {
		t.Fatal(err)
	}
	return httpapi.NewMongoRecords(db), now
}

// The overview counts the last hour's fires by status and the last day's
// missed slots, from the database, and lists the live members with the
// jobs each owns.
func TestOverviewCountsFromRecords(t *testing.T) {
	rec, now := seedRecords(t)
	live := []members.Member{
		{ID: "replica-1", Host: "a", PID: 1, Incarnation: "i1", HeartbeatAt: now.Add(-time.Second), LeaseUntil: now.Add(time.Minute)},
		{ID: "replica-2", Host: "b", PID: 2, Incarnation: "i2", HeartbeatAt: now.Add(-2 * time.Second), LeaseUntil: now.Add(time.Minute)},
	}
	f := newFixture(t, func(o *httpapi.Options) {
		o.Records = rec
		o.Host = "a"
		o.Members = func(context.Context) ([]members.Member, error) { return live, nil }
	})
	r := f.get(t, "/api/overview")
	if r.code != http.StatusOK {
		t.Fatalf("overview = %d %s", r.code, r.body)
	}
	var ov httpapi.Overview
	if err := json.Unmarshal([]byte(r.body), &ov); err != nil {
		t.Fatal(err)
	}
	if ov.FiresLastHour[record.StatusSucceeded] != 2 || ov.FiresLastHour[record.StatusFailed] != 1 || ov.FiresLastHour[record.StatusRunning] != 1 ||
		ov.FiresLastHour[record.StatusMissed] != 1 || len(ov.FiresLastHour) != 4 {
		t.Errorf("fires_last_hour %v", ov.FiresLastHour)
	}
	if ov.MissedLastDay != 4 || ov.CountsAt == nil {
		t.Errorf("missed_last_day %d, counts_at %v; want 4 slots", ov.MissedLastDay, ov.CountsAt)
	}
	want := httpapi.JobCounts{Total: 5, Armed: 3, Disabled: 1, Erroring: 1}
	if ov.Jobs != want || ov.InstanceID != "replica-1" || ov.Host != "a" {
		t.Errorf("jobs %+v instance %q host %q", ov.Jobs, ov.InstanceID, ov.Host)
	}
	if len(ov.Members) != 2 || !ov.Members[0].Self || ov.Members[1].Self || ov.Members[0].OwnedJobs+ov.Members[1].OwnedJobs != 5 {
		t.Errorf("members %+v", ov.Members)
	}
}

// The rows of a page carry their last run (from the lock's last slot) and
// their missed slots of the last day; the missed filter keeps the jobs
// with one.
func TestScheduleRowsRecords(t *testing.T) {
	rec, now := seedRecords(t)
	f := newFixture(t, func(o *httpapi.Options) { o.Records = rec })
	rows := getRows(t, f, "?q=e")
	byID := map[string]httpapi.Row{}
	for _, r := range rows.Items {
		byID[r.ID] = r
	}
	dr := byID["daily_report"]
	if dr.LastRun == nil || dr.LastRun.Status != record.StatusFailed || !dr.LastRun.ScheduledAt.Equal(now.Add(-20*time.Minute)) ||
		dr.LastRun.InstanceID != "replica-2" || dr.LastRun.EndedAt == nil || dr.MissedLastDay != 3 {
		t.Errorf("daily_report row: last_run %+v missed %d", dr.LastRun, dr.MissedLastDay)
	}
	hb := byID["heartbeat"]
	if hb.LastRun == nil || hb.LastRun.Status != record.StatusRunning || hb.LastRun.EndedAt != nil || hb.MissedLastDay != 1 {
		t.Errorf("heartbeat row: last_run %+v missed %d", hb.LastRun, hb.MissedLastDay)
	}
	if b := byID["broken"]; b.LastRun != nil || b.MissedLastDay != 0 {
		t.Errorf("broken row: %+v", b)
	}
	if got := rowIDs(getRows(t, f, "?status=missed")); got != "daily_report,heartbeat" {
		t.Errorf("status=missed rows %s", got)
	}
}

// The job page shows the lock as held (holder, fence, lease) or free, and
// the last run.
func TestScheduleDetailLock(t *testing.T) {
	rec, now := seedRecords(t)
	f := newFixture(t, func(o *httpapi.Options) { o.Records = rec })
	var d httpapi.Detail
	r := f.get(t, "/api/schedules/heartbeat/detail")
	if err := json.Unmarshal([]byte(r.body), &d); err != nil {
		t.Fatalf("%v: %s", err, r.body)
	}
	if d.Lock == nil || d.Lock.Holder != "replica-2" || d.Lock.Fence != record.FenceOf(now.Add(-5*time.Second)) ||
		d.Lock.LeaseUntil == nil || d.Lock.RunID == "" || d.LastRun == nil || d.LastRun.Status != record.StatusRunning {
		t.Errorf("heartbeat detail %s", r.body)
	}
	r = f.get(t, "/api/schedules/daily_report/detail")
	d = httpapi.Detail{}
	_ = json.Unmarshal([]byte(r.body), &d)
	if d.Lock == nil || d.Lock.Holder != "" || d.Lock.LeaseUntil != nil {
		t.Errorf("daily_report detail (free lock) %s", r.body)
	}
	r = f.get(t, "/api/schedules/broken/detail")
	d = httpapi.Detail{}
	_ = json.Unmarshal([]byte(r.body), &d)
	if d.Lock != nil || d.LastRun != nil || d.Status != httpapi.StatusError {
		t.Errorf("broken detail %s", r.body)
	}
}
