package httpapi_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cronswap/cronswap/internal/httpapi"
	"github.com/cronswap/cronswap/schedule"
	"github.com/cronswap/cronswap/scheduler"
)

func getRows(t *testing.T, f *fixture, query string) httpapi.Rows {
	t.Helper()
	r := f.get(t, "/api/schedule-rows"+query)
	if r.code != http.StatusOK {
		t.Fatalf("rows%s = %d %s", query, r.code, r.body)
	}
	var rows httpapi.Rows
	if err := json.Unmarshal([]byte(r.body), &rows); err != nil {
		t.Fatalf("%v\n%s", err, r.body)
	}
	return rows
}

func rowIDs(rows httpapi.Rows) string {
	ids := []string{}
	for _, r := range rows.Items {
		ids = append(ids, r.ID)
	}
	return strings.Join(ids, ",")
}

// The table filters by text, category and status, sorts by each key both
// ways (ties and the default by id, unarmed last by next run) and pages.
func TestScheduleRowsFilterSortPage(t *testing.T) {
	f := newFixture(t, nil)
	cases := []struct{ query, want string }{
		{"", "broken,daily_report,heartbeat,paused,team/job"},
		{"?q=REPORT", "daily_report"}, // id and job, any case
		{"?q=%2A%2F5", "heartbeat"},   // the expression
		{"?category=reports", "daily_report"},
		{"?status=error", "broken"},
		{"?status=disabled", "paused"},
		{"?status=armed", "daily_report,heartbeat,team/job"},
		{"?sort=id&order=desc", "team/job,paused,heartbeat,daily_report,broken"},
		{"?sort=next_run", "heartbeat,daily_report,team/job,broken,paused"},
		{"?sort=cron_expr", "heartbeat,daily_report,broken,team/job,paused"},
		{"?sort=status", "daily_report,heartbeat,team/job,paused,broken"},
		{"?offset=1&limit=2", "daily_report,heartbeat"},
		{"?offset=9", ""},
	}
	for _, c := range cases {
		rows := getRows(t, f, c.query)
		if got := rowIDs(rows); got != c.want {
			t.Errorf("rows%s = %s, want %s", c.query, got, c.want)
		}
	}
	rows := getRows(t, f, "?offset=1&limit=2")
	if rows.Total != 5 || rows.Offset != 1 || rows.Limit != 2 || strings.Join(rows.Categories, ",") != "reports" {
		t.Errorf("page: total %d offset %d limit %d categories %q", rows.Total, rows.Offset, rows.Limit, rows.Categories)
	}
	if rows := getRows(t, f, ""); rows.Limit != httpapi.DefaultRowLimit {
		t.Errorf("default limit %d", rows.Limit)
	}
}

// A row carries its status and its next run in the job's own zone.
func TestScheduleRowsFields(t *testing.T) {
	f := newFixture(t, nil)
	rows := getRows(t, f, "?q=daily_")
	if len(rows.Items) != 1 {
		t.Fatalf("items %+v", rows.Items)
	}
	r := rows.Items[0]
	if r.Status != httpapi.StatusArmed || r.NextRunLocal == nil || *r.NextRunLocal != "2030-01-02T09:00:00+09:00" ||
		r.LastRun != nil || r.MissedLastDay != 0 || r.CronExpr != "0 9 * * *" {
		t.Errorf("row %+v (next_run_local %v)", r, r.NextRunLocal)
	}
	if rows := getRows(t, f, "?q=broken"); rows.Items[0].NextRunLocal != nil {
		t.Errorf("an unarmed row has a next_run_local: %v", *rows.Items[0].NextRunLocal)
	}
}

// A bad or unknown parameter is 400 with a JSON error naming it.
func TestScheduleRowsParamErrors(t *testing.T) {
	f := newFixture(t, nil)
	for query, name := range map[string]string{
		"?limit=0": "limit", "?limit=501": "limit", "?limit=x": "limit", "?offset=-1": "offset",
		"?sort=owner": "sort", "?order=up": "order", "?status=sleepy": "status", "?colour=red": "colour",
		"?q=a&q=b": "q",
	} {
		r := f.get(t, "/api/schedule-rows"+query)
		var body struct{ Error string }
		_ = json.Unmarshal([]byte(r.body), &body)
		if r.code != http.StatusBadRequest || !strings.Contains(body.Error, "parameter "+name) {
			t.Errorf("%s = %d %s, want 400 naming %s", query, r.code, r.body, name)
		}
	}
	if r := f.get(t, "/api/schedule-rows?limit=500"); r.code != http.StatusOK {
		t.Errorf("limit=500 = %d %s", r.code, r.body)
	}
}

// An error wins over every other state, a disabled job over a paused one,
// a failure pause over armed.
func TestRowStatusPrecedence(t *testing.T) {
	pause := &httpapi.FailurePause{PausedAt: time.Now(), Failures: 3}
	cases := []struct {
		s    httpapi.Schedule
		want string
	}{
		{httpapi.Schedule{Enabled: true, Armed: true, LastError: "bad"}, httpapi.StatusError},
		{httpapi.Schedule{Enabled: false, LastError: "bad", FailurePause: pause}, httpapi.StatusError},
		{httpapi.Schedule{Enabled: false, FailurePause: pause}, httpapi.StatusDisabled},
		{httpapi.Schedule{Enabled: true, Armed: true, FailurePause: pause}, httpapi.StatusPaused},
		{httpapi.Schedule{Enabled: true, Armed: true}, httpapi.StatusArmed},
		{httpapi.Schedule{Enabled: true}, httpapi.StatusUnarmed},
		{httpapi.Schedule{Enabled: true, Ended: "max_runs reached"}, httpapi.StatusEnded},
		{httpapi.Schedule{Enabled: true, Ended: "after end_at", LastError: "bad"}, httpapi.StatusError},
		{httpapi.Schedule{Enabled: false, Ended: "after end_at"}, httpapi.StatusDisabled},
	}
	for _, c := range cases {
		if got := httpapi.RowStatus(c.s); got != c.want {
			t.Errorf("RowStatus(%+v) = %s, want %s", c.s, got, c.want)
		}
	}
}

// The job page shows the schedule, its status and its next runs (marked
// where daylight saving shifts them); unknown jobs are 404.
func TestScheduleDetail(t *testing.T) {
	dstJob := scheduler.Status{Schedule: schedule.Schedule{ID: "dst", CronExpr: "30 2 * * *", Timezone: "America/New_York", Enabled: true},
		Armed: true, NextRun: time.Date(2027, 3, 13, 7, 30, 0, 0, time.UTC)}
	f := newFixture(t, func(o *httpapi.Options) {
		o.Now = func() time.Time { return time.Date(2027, 3, 12, 12, 0, 0, 0, time.UTC) }
	})
	f.sched.list = append(f.sched.list, dstJob)
	r := f.get(t, "/api/schedules/dst/detail")
	if r.code != http.StatusOK {
		t.Fatalf("detail = %d %s", r.code, r.body)
	}
	var d httpapi.Detail
	if err := json.Unmarshal([]byte(r.body), &d); err != nil {
		t.Fatal(err)
	}
	if d.Schedule.ID != "dst" || d.Status != httpapi.StatusArmed || len(d.NextRuns) != 10 || d.Lock != nil || d.LastRun != nil {
		t.Fatalf("detail %s", r.body)
	}
	// 2027-03-14 02:30 does not exist in New York: that fire is shifted.
	if nr := d.NextRuns[1]; !nr.Shifted || nr.Note == "" || nr.AtLocal != "2027-03-14T03:00:00-04:00" {
		t.Errorf("second next run %+v, want the shifted 03:00", nr)
	}
	if r := f.get(t, "/api/schedules/nope/detail"); r.code != http.StatusNotFound {
		t.Errorf("unknown detail = %d", r.code)
	}
}

// The table and the overview read the engine's jobs (List) once per change
// of the engine, not once per request: with 100,000 jobs a List is most of
// a request's time. A change shows at the next request.
func TestScheduleRowsReadTheEngineOncePerChange(t *testing.T) {
	f := newFixture(t, nil)
	getRows(t, f, "")
	getRows(t, f, "?q=daily")
	getRows(t, f, "?status=armed&sort=status&offset=1")
	if r := f.get(t, "/api/overview"); r.code != http.StatusOK {
		t.Fatalf("/api/overview = %d %s", r.code, r.body)
	}
	if n := f.sched.listCalls(); n != 1 {
		t.Errorf("4 requests called List %d times, want 1", n)
	}
	f.sched.list = append(f.sched.list, scheduler.Status{Schedule: schedule.Schedule{ID: "added", CronExpr: "@daily", Enabled: true}})
	if rows := getRows(t, f, "?q=added"); rows.Total != 1 || rowIDs(rows) != "added" {
		t.Errorf("after a change: rows %s (total %d), want added", rowIDs(rows), rows.Total)
	}
	if n := f.sched.listCalls(); n != 2 {
		t.Errorf("after a change List was called %d times in all, want 2", n)
	}
}

// A page's rows show the engine's next run of now, though the table is
// kept while the engine does not change: the clock moves next runs
// without a change. The sort by next run reads them all anew.
func TestScheduleRowsNextRunFollowsTheClock(t *testing.T) {
	f := newFixture(t, nil)
	if rows := getRows(t, f, "?sort=next_run"); rowIDs(rows) != "heartbeat,daily_report,team/job,broken,paused" {
		t.Fatalf("sort by next run: %s", rowIDs(rows))
	}
	later := time.Date(2031, 6, 1, 0, 0, 0, 0, time.UTC) // heartbeat's next run moves past the others'
	for i := range f.sched.list {
		if f.sched.list[i].ID == "heartbeat" {
			f.sched.list[i].NextRun = later
		}
	}
	rows := getRows(t, f, "?q=heartbeat")
	if len(rows.Items) != 1 || rows.Items[0].NextRun == nil || *rows.Items[0].NextRun != "2031-06-01T00:00:00Z" {
		t.Errorf("heartbeat's row after its next run moved: %+v", rows.Items)
	}
	if rows := getRows(t, f, "?sort=next_run"); rowIDs(rows) != "daily_report,team/job,heartbeat,broken,paused" {
		t.Errorf("sort by next run after heartbeat's moved: %s", rowIDs(rows))
	}
}
