package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cronswap/cronswap/internal/httpapi"
	"github.com/cronswap/cronswap/internal/members"
	"github.com/cronswap/cronswap/schedule"
	"github.com/cronswap/cronswap/scheduler"
)

// fakeSchedules is a Schedules with a fixed content; it records the ids asked for.
type fakeSchedules struct {
	list []scheduler.Status

	mu    sync.Mutex
	asked []string
	lists int // calls of List
}

func (f *fakeSchedules) List() []scheduler.Status {
	f.mu.Lock()
	f.lists++
	f.mu.Unlock()
	return slices.Clone(f.list)
}

// Version changes with the content of list but for the next runs, as the
// engine's does (tests change list in place).
func (f *fakeSchedules) Version() uint64 {
	h := fnv.New64a()
	for _, st := range f.list {
		st.NextRun = time.Time{}
		fmt.Fprintf(h, "%v\n", st)
	}
	return h.Sum64()
}

// listCalls returns how many times List was called.
func (f *fakeSchedules) listCalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lists
}

func (f *fakeSchedules) Get(id string) (scheduler.Status, bool) {
	f.mu.Lock()
	f.asked = append(f.asked, id)
	f.mu.Unlock()
	for _, s := range f.list {
		if s.ID == id {
			return s, true
		}
	}
	return scheduler.Status{}, false
}

var (
	nextRun = time.Date(2030, 1, 2, 9, 0, 0, 0, time.FixedZone("KST", 9*3600))
	armed   = scheduler.Status{
		Schedule: schedule.Schedule{ID: "daily_report", CronExpr: "0 9 * * *", Timezone: "Asia/Seoul", Enabled: true,
			Job: "report", Category: "reports", Args: `{"x":1}`, UpdatedAt: time.Now(), DST: schedule.DSTPlain},
		NextRun: nextRun, Armed: true,
	}
	noZone = scheduler.Status{
		Schedule: schedule.Schedule{ID: "heartbeat", CronExpr: "*/5 * * * * *", Enabled: true},
		Armed:    true, NextRun: time.Date(2030, 1, 1, 0, 0, 5, 0, time.UTC),
	}
	rejected = scheduler.Status{
		Schedule:  schedule.Schedule{ID: "broken", CronExpr: "61 * * * *", Enabled: true},
		LastError: `cron_expr "61 * * * *": end of range (61) above maximum (59)`,
	}
	paused = scheduler.Status{Schedule: schedule.Schedule{ID: "paused", CronExpr: "@hourly", Timezone: "UTC", Enabled: false}}
	slashy = scheduler.Status{Schedule: schedule.Schedule{ID: "team/job", CronExpr: "@daily", Timezone: "UTC", Enabled: true},
		Armed: true, NextRun: nextRun}
)

type fixture struct {
	srv   *httptest.Server
	sched *fakeSchedules
	ready atomic.Bool
}

func newFixture(t *testing.T, opts func(*httpapi.Options)) *fixture {
	t.Helper()
	f := &fixture{sched: &fakeSchedules{list: []scheduler.Status{armed, noZone, rejected, paused, slashy}}}
	lastEvent := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	o := httpapi.Options{
		Schedules:       f.sched,
		Ready:           f.ready.Load,
		DefaultTimezone: "Europe/Berlin",
		Status: func() httpapi.Status {
			return httpapi.Status{
				InstanceID: "replica-1", WatchMode: "changestream", LastEventAt: &lastEvent,
				FullReloads: 2, SchedulesArmed: 4, Ready: f.ready.Load(), Reconnects: 1,
			}
		},
	}
	if opts != nil {
		opts(&o)
	}
	f.srv = httptest.NewServer(httpapi.New(o)) // 127.0.0.1
	t.Cleanup(f.srv.Close)
	return f
}

type response struct {
	code  int
	ctype string
	allow string
	body  string
}

func (f *fixture) do(t *testing.T, method, path string) response {
	t.Helper()
	req, err := http.NewRequest(method, f.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{res.StatusCode, res.Header.Get("Content-Type"), res.Header.Get("Allow"), string(body)}
}

func (f *fixture) get(t *testing.T, path string) response {
	t.Helper()
	return f.do(t, http.MethodGet, path)
}

func keys(m map[string]json.RawMessage) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func sortedCopy(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func TestHealthz(t *testing.T) {
	f := newFixture(t, nil)
	r := f.get(t, "/healthz")
	if r.code != http.StatusOK || r.body != "ok\n" {
		t.Errorf("/healthz = %d %q", r.code, r.body)
	}
	// Health does not depend on readiness.
	if f.ready.Load() {
		t.Fatal("fixture starts ready")
	}
}

func TestReadyz(t *testing.T) {
	f := newFixture(t, nil)
	if r := f.get(t, "/readyz"); r.code != http.StatusServiceUnavailable {
		t.Errorf("/readyz before ready = %d %q, want 503", r.code, r.body)
	}
	f.ready.Store(true)
	if r := f.get(t, "/readyz"); r.code != http.StatusOK {
		t.Errorf("/readyz when ready = %d %q, want 200", r.code, r.body)
	}
	f.ready.Store(false) // e.g. the watcher lost its stream
	if r := f.get(t, "/readyz"); r.code != http.StatusServiceUnavailable {
		t.Errorf("/readyz after losing readiness = %d, want 503", r.code)
	}
}

// Not ready, /readyz says why, as /api/status and /api/overview do.
func TestReadyzSaysWhy(t *testing.T) {
	since := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	why := httpapi.Readiness{NotReady: "the watcher has been failing since 2030-01-01T12:00:00Z: read schedules: boom",
		LastError: "read schedules: boom", ErrorSince: &since, ErrorRepeats: true,
		Reload: &httpapi.Reload{Reason: "startup", StartedAt: since, Documents: 4096, Bytes: 409600, DocumentsPerSecond: 100}}
	f := newFixture(t, func(o *httpapi.Options) {
		o.Status = func() httpapi.Status { return httpapi.Status{InstanceID: "replica-1", Readiness: why} }
	})
	r := f.get(t, "/readyz")
	if r.code != http.StatusServiceUnavailable || r.body != "not ready: "+why.NotReady+"\n" {
		t.Errorf("/readyz = %d %q, want 503 with the reason", r.code, r.body)
	}
	var st map[string]json.RawMessage
	if err := json.Unmarshal([]byte(f.get(t, "/api/status").body), &st); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"not_ready", "reload", "last_error", "error_since", "error_repeats"} {
		if _, ok := st[k]; !ok {
			t.Errorf("/api/status lacks %s: %v", k, keys(st))
		}
	}
}

func TestReadyzWithoutReadyFunc(t *testing.T) {
	f := newFixture(t, func(o *httpapi.Options) { o.Ready = nil })
	if r := f.get(t, "/readyz"); r.code != http.StatusServiceUnavailable {
		t.Errorf("/readyz with no Ready func = %d, want 503", r.code)
	}
}

var scheduleFields = []string{"id", "cron_expr", "timezone", "enabled", "armed", "next_run", "last_error", "owner"}

func TestSchedulesList(t *testing.T) {
	f := newFixture(t, nil)
	r := f.get(t, "/api/schedules")
	if r.code != http.StatusOK {
		t.Fatalf("/api/schedules = %d %q", r.code, r.body)
	}
	if !strings.HasPrefix(r.ctype, "application/json") {
		t.Errorf("Content-Type = %q, want application/json", r.ctype)
	}
	var raw []map[string]json.RawMessage
	if err := json.Unmarshal([]byte(r.body), &raw); err != nil {
		t.Fatalf("body is not a JSON array of objects: %v\n%s", err, r.body)
	}
	if len(raw) != 5 {
		t.Fatalf("got %d schedules, want 5:\n%s", len(raw), r.body)
	}
	// Exactly the documented fields; job, category and dst only when set.
	wantKeys := [][]string{
		append(slices.Clone(scheduleFields), "job", "category", "dst"), // armed: has all three
		scheduleFields, scheduleFields, scheduleFields, scheduleFields,
	}
	for i, obj := range raw {
		if got, want := keys(obj), sortedCopy(wantKeys[i]); !slices.Equal(got, want) {
			t.Errorf("schedule %d fields = %q, want %q", i, got, want)
		}
	}

	var list []httpapi.Schedule
	if err := json.Unmarshal([]byte(r.body), &list); err != nil {
		t.Fatal(err)
	}
	str := func(s string) *string { return &s }
	want := []httpapi.Schedule{
		{ID: "daily_report", CronExpr: "0 9 * * *", Timezone: "Asia/Seoul", Enabled: true, Armed: true,
			NextRun: str("2030-01-02T00:00:00Z"), Job: "report", Category: "reports", DST: "plain"},
		{ID: "heartbeat", CronExpr: "*/5 * * * * *", Timezone: "Europe/Berlin", Enabled: true, Armed: true,
			NextRun: str("2030-01-01T00:00:05Z")},
		{ID: "broken", CronExpr: "61 * * * *", Timezone: "Europe/Berlin", Enabled: true, LastError: rejected.LastError},
		{ID: "paused", CronExpr: "@hourly", Timezone: "UTC"},
		{ID: "team/job", CronExpr: "@daily", Timezone: "UTC", Enabled: true, Armed: true, NextRun: str("2030-01-02T00:00:00Z")},
	}
	for i := range want {
		if !equalSchedule(list[i], want[i]) {
			t.Errorf("schedule %d = %s, want %s", i, show(list[i]), show(want[i]))
		}
	}

	// Raw JSON spellings: null next_run, "" last_error, RFC 3339 strings.
	if got := string(raw[2]["next_run"]); got != "null" {
		t.Errorf("rejected schedule next_run = %s, want null", got)
	}
	if got := string(raw[0]["last_error"]); got != `""` {
		t.Errorf("healthy schedule last_error = %s, want \"\"", got)
	}
	if got := string(raw[3]["enabled"]); got != "false" {
		t.Errorf("paused schedule enabled = %s, want false", got)
	}
	var nr string
	if err := json.Unmarshal(raw[0]["next_run"], &nr); err != nil {
		t.Fatal(err)
	}
	if ts, err := time.Parse(time.RFC3339, nr); err != nil || !ts.Equal(nextRun) {
		t.Errorf("next_run %q: parse %v, want the instant %v", nr, err, nextRun)
	}
}

func TestSchedulesListEmpty(t *testing.T) {
	f := newFixture(t, func(o *httpapi.Options) { o.Schedules = &fakeSchedules{} })
	r := f.get(t, "/api/schedules")
	if r.code != http.StatusOK || strings.TrimSpace(r.body) != "[]" {
		t.Errorf("empty list = %d %q, want 200 []", r.code, r.body)
	}
}

func TestDefaultTimezoneEmpty(t *testing.T) {
	// With no default configured the schedule's own (empty) zone is shown as is.
	f := newFixture(t, func(o *httpapi.Options) { o.DefaultTimezone = "" })
	var s httpapi.Schedule
	r := f.get(t, "/api/schedules/heartbeat")
	if err := json.Unmarshal([]byte(r.body), &s); err != nil {
		t.Fatal(err)
	}
	if s.Timezone != "" {
		t.Errorf("timezone = %q", s.Timezone)
	}
}

func TestScheduleGet(t *testing.T) {
	f := newFixture(t, nil)
	for _, tc := range []struct {
		path string
		want httpapi.Schedule
	}{
		{"/api/schedules/daily_report", httpapi.FromStatus(armed, "Europe/Berlin")},
		{"/api/schedules/heartbeat", httpapi.FromStatus(noZone, "Europe/Berlin")},
		{"/api/schedules/broken", httpapi.FromStatus(rejected, "Europe/Berlin")},
		{"/api/schedules/team%2Fjob", httpapi.FromStatus(slashy, "Europe/Berlin")},
	} {
		r := f.get(t, tc.path)
		if r.code != http.StatusOK {
			t.Errorf("GET %s = %d %q", tc.path, r.code, r.body)
			continue
		}
		if !strings.HasPrefix(r.ctype, "application/json") {
			t.Errorf("GET %s Content-Type = %q", tc.path, r.ctype)
		}
		var raw map[string]json.RawMessage
		if err := json.Unmarshal([]byte(r.body), &raw); err != nil {
			t.Fatalf("GET %s: %v\n%s", tc.path, err, r.body)
		}
		for _, k := range scheduleFields {
			if _, ok := raw[k]; !ok {
				t.Errorf("GET %s: field %q missing", tc.path, k)
			}
		}
		var got httpapi.Schedule
		if err := json.Unmarshal([]byte(r.body), &got); err != nil {
			t.Fatal(err)
		}
		if !equalSchedule(got, tc.want) {
			t.Errorf("GET %s = %s, want %s", tc.path, show(got), show(tc.want))
		}
	}
	if got := f.get(t, "/api/schedules/heartbeat"); !strings.Contains(got.body, `"Europe/Berlin"`) {
		t.Errorf("the default timezone is not shown for a schedule without one: %s", got.body)
	}
}

func TestScheduleGetNotFound(t *testing.T) {
	f := newFixture(t, nil)
	r := f.get(t, "/api/schedules/nosuch")
	if r.code != http.StatusNotFound {
		t.Fatalf("GET unknown id = %d %q, want 404", r.code, r.body)
	}
	if !strings.HasPrefix(r.ctype, "application/json") {
		t.Errorf("404 Content-Type = %q, want JSON", r.ctype)
	}
	var body map[string]string
	if err := json.Unmarshal([]byte(r.body), &body); err != nil {
		t.Fatalf("404 body is not a JSON object: %v\n%s", err, r.body)
	}
	if !strings.Contains(body["error"], "nosuch") {
		t.Errorf("404 error %q does not name the id", body["error"])
	}
	f.sched.mu.Lock()
	asked := slices.Clone(f.sched.asked)
	f.sched.mu.Unlock()
	if !slices.Equal(asked, []string{"nosuch"}) {
		t.Errorf("Get was asked for %q, want [nosuch]", asked)
	}
}

func TestStatus(t *testing.T) {
	f := newFixture(t, nil)
	r := f.get(t, "/api/status")
	if r.code != http.StatusOK || !strings.HasPrefix(r.ctype, "application/json") {
		t.Fatalf("/api/status = %d %q %q", r.code, r.ctype, r.body)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(r.body), &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"instance_id", "watch_mode", "last_event_at", "token_saved_at", "full_reloads", "schedules_armed"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("/api/status lacks %q: %s", k, r.body)
		}
	}
	checks := map[string]string{
		"instance_id":     `"replica-1"`,
		"watch_mode":      `"changestream"`,
		"last_event_at":   `"2030-01-01T12:00:00Z"`,
		"token_saved_at":  `null`,
		"full_reloads":    `2`,
		"schedules_armed": `4`,
		"ready":           `false`,
		"reconnects":      `1`,
	}
	for k, want := range checks {
		if got := string(raw[k]); got != want {
			t.Errorf("/api/status %s = %s, want %s", k, got, want)
		}
	}
	f.ready.Store(true)
	r = f.get(t, "/api/status")
	var st httpapi.Status
	if err := json.Unmarshal([]byte(r.body), &st); err != nil {
		t.Fatal(err)
	}
	if !st.Ready {
		t.Errorf("/api/status ready = false after becoming ready")
	}
}

func TestMethodNotAllowed(t *testing.T) {
	f := newFixture(t, nil)
	for _, path := range []string{"/healthz", "/readyz", "/api/schedules", "/api/schedules/daily_report", "/api/status"} {
		for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
			r := f.do(t, m, path)
			if r.code != http.StatusMethodNotAllowed {
				t.Errorf("%s %s = %d, want 405", m, path, r.code)
			}
			if !strings.Contains(r.allow, http.MethodGet) {
				t.Errorf("%s %s: Allow = %q, want it to list GET", m, path, r.allow)
			}
		}
	}
	// A POST never reaches the engine.
	f.sched.mu.Lock()
	if len(f.sched.asked) != 0 {
		t.Errorf("Get called by non-GET requests: %q", f.sched.asked)
	}
	f.sched.mu.Unlock()
	for _, path := range []string{"/healthz", "/readyz", "/api/schedules", "/api/schedules/daily_report", "/api/status"} {
		if r := f.do(t, http.MethodHead, path); r.code == http.StatusMethodNotAllowed {
			t.Errorf("HEAD %s = 405, want it allowed like GET", path)
		}
	}
}

func TestUnknownPaths(t *testing.T) {
	f := newFixture(t, nil)
	for _, path := range []string{"/api", "/api/schedule", "/api/schedules/a/b", "/metrics", "/ui/nope.js"} {
		if r := f.get(t, path); r.code != http.StatusNotFound {
			t.Errorf("GET %s = %d, want 404", path, r.code)
		}
	}
}

func TestMetrics(t *testing.T) {
	f := newFixture(t, func(o *httpapi.Options) {
		o.Metrics = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			_, _ = io.WriteString(w, "cronswap_up 1\n")
		})
	})
	r := f.get(t, "/metrics")
	if r.code != http.StatusOK || r.body != "cronswap_up 1\n" {
		t.Errorf("/metrics = %d %q", r.code, r.body)
	}
	if r := f.do(t, http.MethodPost, "/metrics"); r.code != http.StatusMethodNotAllowed {
		t.Errorf("POST /metrics = %d, want 405", r.code)
	}
}

func TestNilOptions(t *testing.T) {
	f := newFixture(t, func(o *httpapi.Options) { *o = httpapi.Options{} })
	for path, want := range map[string]int{
		"/healthz": 200, "/readyz": 503, "/api/schedules": 200, "/api/schedules/x": 404, "/api/status": 200,
	} {
		if r := f.get(t, path); r.code != want {
			t.Errorf("GET %s with zero Options = %d %q, want %d", path, r.code, r.body, want)
		}
	}
	if r := f.get(t, "/api/schedules"); strings.TrimSpace(r.body) != "[]" {
		t.Errorf("/api/schedules with no Schedules = %q, want []", r.body)
	}
}

func TestFromStatus(t *testing.T) {
	s := httpapi.FromStatus(scheduler.Status{Schedule: schedule.Schedule{ID: "x", CronExpr: "@hourly"}}, "UTC")
	if s.NextRun != nil {
		t.Errorf("zero NextRun gave next_run %q, want null", *s.NextRun)
	}
	if s.Timezone != "UTC" {
		t.Errorf("timezone = %q, want the default", s.Timezone)
	}
	s = httpapi.FromStatus(scheduler.Status{Schedule: schedule.Schedule{ID: "x", Timezone: "Asia/Seoul"}, NextRun: nextRun}, "UTC")
	if s.Timezone != "Asia/Seoul" || s.NextRun == nil || *s.NextRun != "2030-01-02T00:00:00Z" {
		t.Errorf("FromStatus = %s", show(s))
	}
}

// TestConcurrentRequests exercises the handler under -race.
func TestConcurrentRequests(t *testing.T) {
	f := newFixture(t, nil)
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%2 == 0 {
				f.ready.Store(i%4 == 0)
			}
			for _, p := range []string{"/api/schedules", "/api/schedules/broken", "/api/status", "/readyz", "/healthz"} {
				req, _ := http.NewRequest(http.MethodGet, f.srv.URL+p, nil)
				res, err := f.srv.Client().Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
			}
		}()
	}
	wg.Wait()
}

func equalSchedule(a, b httpapi.Schedule) bool {
	if (a.NextRun == nil) != (b.NextRun == nil) || (a.NextRun != nil && *a.NextRun != *b.NextRun) {
		return false
	}
	a.NextRun, b.NextRun = nil, nil
	return reflect.DeepEqual(a, b)
}

func show(s httpapi.Schedule) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// A refused document whose _id is not a job id is shown under its _id's
// rendering, flagged invalid_id, next to the job whose id is that text.
func TestSchedulesListFlagsInvalidIDs(t *testing.T) {
	rendering := `{"tenant": "x","n": {"$numberInt":"1"}}`
	job := scheduler.Status{Schedule: schedule.Schedule{ID: rendering, CronExpr: "0 9 * * *", Enabled: true}, Armed: true,
		NextRun: time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC)}
	refused := scheduler.Status{Schedule: schedule.Schedule{ID: schedule.RefusedKey(rendering)},
		LastError: `schedule "{...}": field _id: must be a string job id, not an object`}
	h := httpapi.New(httpapi.Options{Schedules: &fakeSchedules{list: []scheduler.Status{job, refused}}})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/api/schedules", nil))
	var raw []map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &raw); err != nil {
		t.Fatalf("%v\n%s", err, rec.Body)
	}
	if len(raw) != 2 {
		t.Fatalf("list %s", rec.Body)
	}
	if raw[0]["id"] != rendering || raw[0]["armed"] != true {
		t.Errorf("job: %v", raw[0])
	}
	if _, ok := raw[0]["invalid_id"]; ok {
		t.Errorf("job carries invalid_id: %v", raw[0])
	}
	if raw[1]["id"] != rendering || raw[1]["invalid_id"] != true || raw[1]["armed"] != false {
		t.Errorf("invalid _id: %v", raw[1])
	}
	if strings.ContainsRune(rec.Body.String(), '\uFFFD') {
		t.Errorf("the internal key leaked into the JSON: %s", rec.Body)
	}
}

// The runtime profiles are served only when asked for (config http.pprof).
func TestPprofOnlyWhenEnabled(t *testing.T) {
	for _, on := range []bool{false, true} {
		srv := httptest.NewServer(httpapi.New(httpapi.Options{Pprof: on}))
		resp, err := http.Get(srv.URL + "/debug/pprof/goroutine?debug=1")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		srv.Close()
		served := resp.StatusCode == http.StatusOK && strings.Contains(string(body), "goroutine profile")
		if served != on {
			t.Errorf("pprof %v: /debug/pprof/goroutine answered %d (profile served: %v)", on, resp.StatusCode, served)
		}
	}
}

// With members that divide the schedules, each job shows the two that arm
// it (its owner first); with members that arm every job, none.
func TestSchedulesShowWhoArmsThem(t *testing.T) {
	for _, divide := range []bool{true, false} {
		live := []members.Member{{ID: "r1", Divides: divide}, {ID: "r2", Divides: divide}, {ID: "r3", Divides: divide}}
		f := newFixture(t, func(o *httpapi.Options) {
			o.Members = func(context.Context) ([]members.Member, error) { return live, nil }
		})
		var got httpapi.Schedule
		if err := json.Unmarshal([]byte(f.get(t, "/api/schedules/daily_report").body), &got); err != nil {
			t.Fatal(err)
		}
		first, second := members.Armers("daily_report", live)
		switch {
		case divide && !slices.Equal(got.ArmedBy, []string{first.ID, second.ID}):
			t.Errorf("dividing: armed_by %v, want %v", got.ArmedBy, []string{first.ID, second.ID})
		case !divide && got.ArmedBy != nil:
			t.Errorf("not dividing: armed_by %v, want none", got.ArmedBy)
		}
		if got.Owner != first.ID {
			t.Errorf("owner %s, want %s", got.Owner, first.ID)
		}
	}
}
