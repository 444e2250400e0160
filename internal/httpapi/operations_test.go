package httpapi_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/admin"
	"github.com/cronswap/cronswap/internal/httpapi"
	"github.com/cronswap/cronswap/schedule"
)

// fakeOperator records the page's actions.
type fakeOperator struct {
	mu    sync.Mutex
	calls []string
}

func (f *fakeOperator) record(format string, a ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf(format, a...))
}

func (f *fakeOperator) done() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func known(id string) error {
	if id == "daily_report" || id == "team/job" {
		return nil
	}
	return fmt.Errorf("schedule %q: %w", id, admin.ErrNotFound)
}

func (f *fakeOperator) RunNow(_ context.Context, id string, _ bson.Raw, by string) (bson.ObjectID, error) {
	if err := known(id); err != nil {
		return bson.ObjectID{}, err
	}
	f.record("run-now %s by %s", id, by)
	return bson.NewObjectID(), nil
}

func (f *fakeOperator) SetEnabled(_ context.Context, id string, enabled bool, by string) (bool, error) {
	if err := known(id); err != nil {
		return false, err
	}
	f.record("enabled=%t %s by %s", enabled, id, by)
	return true, nil
}

func (f *fakeOperator) ResumeFailurePause(_ context.Context, id, by string) (bool, error) {
	f.record("resume %s by %s", id, by)
	return true, nil
}

func (f *fakeOperator) SetSchedule(ctx context.Context, id string, e admin.ScheduleEdit) (admin.SetResult, error) {
	c, err := fakeChecker{}.CheckEdit(ctx, id, e)
	if err != nil {
		return admin.SetResult{}, err
	}
	f.record("set %s cron=%v tz=%v by %s must-exist=%t", id, deref(e.CronExpr), deref(e.Timezone), e.By, e.MustExist)
	return admin.SetResult{Schedule: c.Schedule}, nil
}

func deref(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}

// fakeChecker checks an edit of daily_report ("0 9 * * *" in
// Asia/Seoul) with the schedule package's own parse.
type fakeChecker struct{}

func (fakeChecker) CheckEdit(_ context.Context, id string, e admin.ScheduleEdit) (admin.CheckedEdit, error) {
	if err := known(id); err != nil {
		return admin.CheckedEdit{}, err
	}
	s := schedule.Schedule{ID: id, CronExpr: "0 9 * * *", Timezone: "Asia/Seoul", Enabled: true}
	if e.CronExpr != nil {
		s.CronExpr = *e.CronExpr
	}
	if e.Timezone != nil {
		s.Timezone = *e.Timezone
	}
	if err := s.Validate(); err != nil {
		return admin.CheckedEdit{}, err
	}
	return admin.CheckedEdit{Schedule: s}, nil
}

// writeFixture is a listener with an operator's and a viewer's token.
func writeFixture(t *testing.T, withOperator bool) (*fixture, *fakeOperator) {
	t.Helper()
	op := &fakeOperator{}
	f := newFixture(t, func(o *httpapi.Options) {
		o.Token = "env-secret"
		o.Tokens = []httpapi.Credential{httpapi.NewCredential("alice", httpapi.RoleOperator, "alice-secret"),
			httpapi.NewCredential("grafana", httpapi.RoleViewer, "viewer-secret")}
		o.EditChecker = fakeChecker{}
		if withOperator {
			o.Operator = op
		}
	})
	return f, op
}

type writeReq struct {
	method, path, token, ctype, body string
	headers                          map[string]string
}

func (f *fixture) send(t *testing.T, w writeReq) response {
	t.Helper()
	if w.method == "" {
		w.method = http.MethodPost
	}
	req, err := http.NewRequest(w.method, f.srv.URL+w.path, strings.NewReader(w.body))
	if err != nil {
		t.Fatal(err)
	}
	if w.token != "" {
		req.SetBasicAuth("whoever", w.token)
	}
	if w.ctype != "" {
		req.Header.Set("Content-Type", w.ctype)
	}
	for k, v := range w.headers {
		req.Header.Set(k, v)
	}
	res, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return response{code: res.StatusCode, ctype: res.Header.Get("Content-Type"), body: string(body)}
}

func TestSessionSaysWhoAndWhy(t *testing.T) {
	open := newFixture(t, nil)
	var s httpapi.Session
	r := open.get(t, "/api/session")
	if err := json.Unmarshal([]byte(r.body), &s); err != nil || s.CanWrite || !strings.Contains(s.ReadOnly, "no token is configured") {
		t.Fatalf("open listener: %d %s", r.code, r.body)
	}
	session := func(f *fixture, token string) httpapi.Session {
		t.Helper()
		var s httpapi.Session
		r := f.send(t, writeReq{method: http.MethodGet, path: "/api/session", token: token})
		if err := json.Unmarshal([]byte(r.body), &s); err != nil || r.code != http.StatusOK {
			t.Fatalf("session of %s: %d %s", token, r.code, r.body)
		}
		return s
	}
	f, _ := writeFixture(t, false)
	if s := session(f, "alice-secret"); s.User != "alice" || s.Role != httpapi.RoleOperator || s.CanWrite ||
		!strings.Contains(s.ReadOnly, "no write connection") {
		t.Errorf("operator without a write connection: %+v", s)
	}
	if s := session(f, "viewer-secret"); s.User != "grafana" || s.Role != httpapi.RoleViewer || s.CanWrite ||
		!strings.Contains(s.ReadOnly, "the token of grafana has the role viewer") {
		t.Errorf("viewer: %+v", s)
	}
	f, _ = writeFixture(t, true)
	if s := session(f, "alice-secret"); s.User != "alice" || !s.CanWrite || s.ReadOnly != "" {
		t.Errorf("operator: %+v", s)
	}
	if s := session(f, "env-secret"); s.User != httpapi.EnvToken || s.Role != httpapi.RoleOperator || !s.CanWrite {
		t.Errorf("CRONSWAP_HTTP_TOKEN: %+v", s)
	}
}

// Every write needs an operator's token, a write connection, a
// same-origin request and a JSON body; each refusal writes nothing.
func TestWritesRefusedUnlessOperatorSameOriginJSON(t *testing.T) {
	f, op := writeFixture(t, true)
	noWrites, _ := writeFixture(t, false)
	open := newFixture(t, func(o *httpapi.Options) { o.Operator = &fakeOperator{} })
	const path = "/api/schedules/daily_report/disable"
	json := "application/json"
	cases := []struct {
		name string
		f    *fixture
		req  writeReq
		want int
	}{
		{"no token on a listener with tokens", f, writeReq{path: path, ctype: json, body: "{}"}, http.StatusUnauthorized},
		{"listener without tokens", open, writeReq{path: path, ctype: json, body: "{}"}, http.StatusForbidden},
		{"viewer", f, writeReq{path: path, token: "viewer-secret", ctype: json, body: "{}"}, http.StatusForbidden},
		{"no write connection", noWrites, writeReq{path: path, token: "alice-secret", ctype: json, body: "{}"}, http.StatusForbidden},
		{"another origin", f, writeReq{path: path, token: "alice-secret", ctype: json, body: "{}",
			headers: map[string]string{"Origin": "http://evil.example"}}, http.StatusForbidden},
		{"another site", f, writeReq{path: path, token: "alice-secret", ctype: json, body: "{}",
			headers: map[string]string{"Sec-Fetch-Site": "cross-site"}}, http.StatusForbidden},
		{"same site, other origin", f, writeReq{path: path, token: "alice-secret", ctype: json, body: "{}",
			headers: map[string]string{"Sec-Fetch-Site": "same-site"}}, http.StatusForbidden},
		{"a form's body", f, writeReq{path: path, token: "alice-secret", ctype: "application/x-www-form-urlencoded", body: "a=1"}, http.StatusUnsupportedMediaType},
		{"a text/plain form", f, writeReq{path: path, token: "alice-secret", ctype: "text/plain", body: "{}"}, http.StatusUnsupportedMediaType},
		{"not one object", f, writeReq{path: path, token: "alice-secret", ctype: json, body: "{} {}"}, http.StatusBadRequest},
		{"unknown field", f, writeReq{path: path, token: "alice-secret", ctype: json, body: `{"enabled": true}`}, http.StatusBadRequest},
		{"GET changes nothing", f, writeReq{method: http.MethodGet, path: path, token: "alice-secret"}, http.StatusMethodNotAllowed},
		{"unknown job", f, writeReq{path: "/api/schedules/nope/disable", token: "alice-secret", ctype: json, body: "{}"}, http.StatusNotFound},
	}
	for _, c := range cases {
		if r := c.f.send(t, c.req); r.code != c.want {
			t.Errorf("%s: %d %s, want %d", c.name, r.code, r.body, c.want)
		}
	}
	if calls := op.done(); len(calls) != 0 {
		t.Fatalf("refused writes reached the operator: %v", calls)
	}
	// Same origin (as the page's fetch sends it), and a client that is no
	// browser (no Origin): written, by the token's name.
	self := strings.TrimPrefix(f.srv.URL, "http://")
	ok := []writeReq{
		{path: path, token: "alice-secret", ctype: "application/json; charset=utf-8", body: "{}",
			headers: map[string]string{"Origin": "http://" + self, "Sec-Fetch-Site": "same-origin"}},
		{path: "/api/schedules/team%2Fjob/enable", token: "env-secret", ctype: json, body: "{}"},
		{path: "/api/schedules/daily_report/run-now", token: "alice-secret", ctype: json, body: "{}"},
		{path: "/api/schedules/daily_report/resume", token: "alice-secret", ctype: json, body: "{}"},
		{path: "/api/schedules/daily_report/retime", token: "alice-secret", ctype: json, body: `{"cron_expr": " */10 * * * * * ", "timezone": ""}`},
	}
	for _, w := range ok {
		if r := f.send(t, w); r.code/100 != 2 {
			t.Errorf("%s: %d %s", w.path, r.code, r.body)
		}
	}
	want := []string{"enabled=false daily_report by alice", "enabled=true team/job by CRONSWAP_HTTP_TOKEN", "run-now daily_report by alice",
		"resume daily_report by alice", "set daily_report cron=*/10 * * * * * tz= by alice must-exist=true"}
	if got := op.done(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("operator calls\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A retime the daemons would refuse is 400 with the reason; the preview
// says the same without writing, and lists the next runs of a valid one.
func TestRetimeAndPreviewCheckWithTheDaemonsRules(t *testing.T) {
	f, op := writeFixture(t, true)
	r := f.send(t, writeReq{path: "/api/schedules/daily_report/retime", token: "alice-secret", ctype: "application/json", body: `{"cron_expr": "0 25 * * *"}`})
	if r.code != http.StatusBadRequest || !strings.Contains(r.body, "refused, nothing written") || !strings.Contains(r.body, "cron_expr") {
		t.Fatalf("bad retime: %d %s", r.code, r.body)
	}
	if r := f.send(t, writeReq{path: "/api/schedules/daily_report/retime", token: "alice-secret", ctype: "application/json", body: `{}`}); r.code != http.StatusBadRequest {
		t.Fatalf("empty retime: %d %s", r.code, r.body)
	}
	if len(op.done()) != 0 {
		t.Fatal("a refused retime was written")
	}
	var p httpapi.Preview
	r = f.send(t, writeReq{method: http.MethodGet, path: "/api/schedules/daily_report/preview?cron_expr=0+25+*+*+*", token: "viewer-secret"})
	if err := json.Unmarshal([]byte(r.body), &p); err != nil || r.code != http.StatusOK || p.Valid || !strings.Contains(p.Error, "cron_expr") {
		t.Fatalf("preview of a bad expression: %d %s", r.code, r.body)
	}
	r = f.send(t, writeReq{method: http.MethodGet, path: "/api/schedules/daily_report/preview?cron_expr=30+2+*+*+*&timezone=Europe/Berlin", token: "viewer-secret"})
	if err := json.Unmarshal([]byte(r.body), &p); err != nil || !p.Valid || p.Timezone != "Europe/Berlin" || len(p.NextRuns) != 10 ||
		!strings.HasSuffix(p.NextRuns[0].AtLocal, "02:30:00+01:00") && !strings.HasSuffix(p.NextRuns[0].AtLocal, "02:30:00+02:00") && !p.NextRuns[0].Shifted {
		t.Fatalf("preview: %d %s", r.code, r.body)
	}
	for path, want := range map[string]int{
		"/api/schedules/nope/preview?cron_expr=@daily":                  http.StatusNotFound,
		"/api/schedules/daily_report/preview":                           http.StatusBadRequest,
		"/api/schedules/daily_report/preview?cron=@daily":               http.StatusBadRequest,
		"/api/schedules/daily_report/preview?timezone=UTC&timezone=UTC": http.StatusBadRequest,
	} {
		if r := f.send(t, writeReq{method: http.MethodGet, path: path, token: "viewer-secret"}); r.code != want {
			t.Errorf("%s: %d %s, want %d", path, r.code, r.body, want)
		}
	}
}

func TestLoadTokens(t *testing.T) {
	sum := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	dir := t.TempDir()
	file := func(text string) string {
		p := filepath.Join(dir, fmt.Sprintf("tokens-%d.yaml", len(text)))
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := fmt.Sprintf("- name: alice\n  role: operator\n  sha256: %s\n- name: grafana\n  role: viewer\n  sha256: %s\n", sum("a"), sum("g"))
	creds, err := httpapi.LoadTokens(file(good))
	if err != nil || len(creds) != 2 || creds[0].Name != "alice" || creds[1].Role != httpapi.RoleViewer {
		t.Fatalf("LoadTokens: %+v, %v", creds, err)
	}
	f := newFixture(t, func(o *httpapi.Options) { o.Tokens = creds })
	var s httpapi.Session
	r := f.send(t, writeReq{method: http.MethodGet, path: "/api/session", token: "g"})
	if err := json.Unmarshal([]byte(r.body), &s); err != nil || s.User != "grafana" {
		t.Fatalf("the file's viewer token: %d %s", r.code, r.body)
	}
	for text, want := range map[string]string{
		fmt.Sprintf("- name: a\n  role: admin\n  sha256: %s\n", sum("a")):                                                     `role "admin"`,
		"- name: a\n  role: viewer\n  sha256: abc\n":                                                                          "64 hex digits",
		fmt.Sprintf("- name: a\n  role: viewer\n  sha256: %s\n- name: a\n  role: viewer\n  sha256: %s\n", sum("x"), sum("y")): "given twice",
		fmt.Sprintf("- name: a\n  role: viewer\n  sha256: %s\n- name: b\n  role: viewer\n  sha256: %s\n", sum("x"), sum("x")): `the same token as "a"`,
		fmt.Sprintf("- name: a\n  role: viewer\n  token: x\n  sha256: %s\n", sum("x")):                                        "field token not found",
	} {
		if _, err := httpapi.LoadTokens(file(text)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("LoadTokens(%q): %v, want %q", text, err, want)
		}
	}
}

// The page's retime preview reads the dialect as the daemons do: "H H * *
// *" lists the concrete times daily_report's id hashes to (15:14 every
// day, docs/time.md), "0 9 L * *" the last days of the months.
func TestPreviewShowsConcreteTimesOfTheDialect(t *testing.T) {
	f, _ := writeFixture(t, true)
	for q, check := range map[string]func(at time.Time) bool{
		"cron_expr=H+H+*+*+*":  func(at time.Time) bool { return at.Hour() == 15 && at.Minute() == 14 },
		"cron_expr=0+9+L+*+*":  func(at time.Time) bool { return at.Hour() == 9 && at.AddDate(0, 0, 1).Day() == 1 },
		"cron_expr=0+9+?+*+5L": func(at time.Time) bool { return at.Weekday() == time.Friday && at.AddDate(0, 0, 7).Day() <= 7 },
		"cron_expr=0+9+15W+*+*": func(at time.Time) bool {
			return at.Weekday() != time.Saturday && at.Weekday() != time.Sunday && at.Day() >= 14 && at.Day() <= 16
		},
	} {
		var p httpapi.Preview
		r := f.send(t, writeReq{method: http.MethodGet, path: "/api/schedules/daily_report/preview?" + q, token: "viewer-secret"})
		if err := json.Unmarshal([]byte(r.body), &p); err != nil || r.code != http.StatusOK || !p.Valid || len(p.NextRuns) == 0 {
			t.Fatalf("preview %s: %d %s", q, r.code, r.body)
		}
		for _, n := range p.NextRuns {
			at, err := time.Parse(time.RFC3339, n.AtLocal) // in the job's zone
			if err != nil || !check(at) {
				t.Fatalf("preview %s: next run %s is not one of its slots", q, n.AtLocal)
			}
		}
	}
}
