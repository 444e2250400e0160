package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/internal/admin"
	"github.com/cronswap/cronswap/internal/cli"
	"github.com/cronswap/cronswap/internal/config"
	"github.com/cronswap/cronswap/internal/faultproxy"
	"github.com/cronswap/cronswap/internal/history"
	"github.com/cronswap/cronswap/internal/members"
	"github.com/cronswap/cronswap/internal/notify"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/internal/testmongo"
	"github.com/cronswap/cronswap/resumetoken"
)

func TestMain(m *testing.M) { testmongo.Main(m, nil) }

// env is one test's database and a config file pointing at it.
type env struct {
	t   *testing.T
	uri string
	db  *mongo.Database
	cfg string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	client := testmongo.Client(t)
	db := testmongo.NewDatabase(t, client)
	uri := testmongo.Shared(t).URI
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, cfg, fmt.Sprintf("mongo:\n  uri: %q\n  database: %q\ninstance_id: cli-test\n", uri, db.Name()))
	return &env{t: t, uri: uri, db: db, cfg: cfg}
}

// run runs a command against the env's database (--config appended).
func (e *env) run(args ...string) result {
	e.t.Helper()
	return e.runIn("", args...)
}

// runIn runs a command with stdin.
func (e *env) runIn(stdin string, args ...string) result {
	e.t.Helper()
	return e.runFrom(strings.NewReader(stdin), args...)
}

// runFrom runs a command with stdin read from r.
func (e *env) runFrom(r io.Reader, args ...string) result {
	e.t.Helper()
	e.t.Setenv(config.EnvConfig, "")
	e.t.Setenv(config.EnvMongoURI, "")
	e.t.Setenv(config.EnvInstanceID, "")
	var stdout, stderr bytes.Buffer
	full := append([]string{"cronswap"}, args...)
	full = append(full, "--config", e.cfg, "--timeout", "30s")
	code := cli.Run(full, r, &stdout, &stderr)
	return result{code, stdout.String(), stderr.String()}
}

// ok runs a command and fails the test unless it exits 0.
func (e *env) ok(args ...string) result {
	e.t.Helper()
	r := e.run(args...)
	if r.code != cli.ExitOK {
		e.t.Fatalf("%q: %v", args, r)
	}
	return r
}

// okJSON runs a command with -o json and decodes its output into v.
func (e *env) okJSON(v any, args ...string) {
	e.t.Helper()
	r := e.ok(append(args, "-o", "json")...)
	if err := json.Unmarshal([]byte(r.stdout), v); err != nil {
		e.t.Fatalf("%q: %v in %s", args, err, r.stdout)
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func (e *env) rawSchedule(id string) map[string]any {
	e.t.Helper()
	var m map[string]any
	err := e.db.Collection("schedules").FindOne(ctx(e.t), bson.D{{Key: "_id", Value: id}}).Decode(&m)
	if err == mongo.ErrNoDocuments {
		return nil
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

func (e *env) count(coll string) int64 {
	e.t.Helper()
	n, err := e.db.Collection(coll).CountDocuments(ctx(e.t), bson.D{})
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

// tableRows splits an aligned table into its header and rows, by runs of
// two or more spaces.
func tableRows(t *testing.T, out string) (header []string, rows [][]string) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	split := func(l string) []string {
		var cells []string
		for _, c := range strings.Split(l, "  ") {
			if c = strings.TrimSpace(c); c != "" {
				cells = append(cells, c)
			}
		}
		return cells
	}
	header = split(lines[0])
	for _, l := range lines[1:] {
		rows = append(rows, split(l))
	}
	return header, rows
}

// column returns the column of the aligned table whose header is name,
// for the row whose first cell is key. It relies on tabwriter's alignment:
// every cell starts where its header starts.
func column(t *testing.T, out, key, name string) string {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	start := strings.Index(lines[0], name)
	if start < 0 {
		t.Fatalf("no column %q in\n%s", name, out)
	}
	end := len(lines[0]) + 1000
	// The next header starts after name and its padding.
	rest := lines[0][start+len(name):]
	if i := strings.IndexFunc(rest, func(r rune) bool { return r != ' ' }); i >= 0 {
		end = start + len(name) + i
	}
	for _, l := range lines[1:] {
		if strings.HasPrefix(l, key+" ") {
			if start >= len(l) {
				return ""
			}
			return strings.TrimSpace(l[start:min(end, len(l))])
		}
	}
	t.Fatalf("no row %q in\n%s", key, out)
	return ""
}

func TestSchedulesSetGetListPauseResumeDelete(t *testing.T) {
	e := newEnv(t)
	r := e.ok("schedules", "set", "daily_report", "--cron", "0 9 * * 1-5", "--tz", "Asia/Seoul", "--args", `{"region":"eu","n":3}`)
	if !strings.Contains(r.stdout, "created daily_report") {
		t.Errorf("set printed %q", r.stdout)
	}
	doc := e.rawSchedule("daily_report")
	if doc["cron_expr"] != "0 9 * * 1-5" || doc["timezone"] != "Asia/Seoul" {
		t.Fatalf("stored %v", doc)
	}
	upd, ok := doc["updated_at"].(bson.DateTime)
	if !ok || time.Since(upd.Time()) > time.Minute || time.Since(upd.Time()) < -time.Minute {
		t.Fatalf("updated_at = %#v, want about now", doc["updated_at"])
	}
	if args, _ := doc["args"].(bson.D); len(args) != 2 || args[0] != (bson.E{Key: "region", Value: "eu"}) || args[1] != (bson.E{Key: "n", Value: int32(3)}) {
		t.Fatalf("args stored as %#v", doc["args"])
	}
	var setRes map[string]any
	e.okJSON(&setRes, "schedules", "set", "heartbeat", "--cron", "*/10 * * * * *", "--job", "ping", "--category", "infra")
	if setRes["created"] != true || setRes["id"] != "heartbeat" || setRes["job"] != "ping" || setRes["next_run"] == nil {
		t.Errorf("set -o json: %v", setRes)
	}

	// Retime keeps the zone and the args: set changes only what it names.
	r = e.ok("schedules", "set", "daily_report", "--cron", "0 8 * * 1-5")
	if !strings.Contains(r.stdout, "updated daily_report") || !strings.Contains(r.stdout, "+09:00") {
		t.Errorf("retime printed %q", r.stdout)
	}
	if doc := e.rawSchedule("daily_report"); doc["timezone"] != "Asia/Seoul" || doc["args"] == nil || doc["cron_expr"] != "0 8 * * 1-5" {
		t.Fatalf("after retime: %v", doc)
	}
	if later := e.rawSchedule("daily_report")["updated_at"].(bson.DateTime); later.Time().Before(upd.Time()) {
		t.Errorf("updated_at went back: %v then %v", upd.Time(), later.Time())
	}

	// get, JSON and text.
	var one map[string]any
	e.okJSON(&one, "schedules", "get", "daily_report")
	if one["id"] != "daily_report" || one["cron_expr"] != "0 8 * * 1-5" || one["timezone"] != "Asia/Seoul" || one["enabled"] != true {
		t.Fatalf("get -o json = %v", one)
	}
	next, err := time.Parse(time.RFC3339, one["next_run"].(string))
	if err != nil || !strings.HasSuffix(one["next_run"].(string), "+09:00") || next.In(seoul(t)).Hour() != 8 {
		t.Fatalf("next_run %v (%v)", one["next_run"], err)
	}
	if a, _ := one["args"].(map[string]any); a["region"] != "eu" || a["n"] != float64(3) {
		t.Errorf("args = %#v", one["args"])
	}
	r = e.ok("schedules", "get", "heartbeat")
	for _, w := range []string{"*/10 * * * * *", "ping", "infra", "UTC (default)"} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("get heartbeat does not show %q:\n%s", w, r.stdout)
		}
	}

	// list, text and JSON.
	r = e.ok("schedules", "list")
	header, rows := tableRows(t, r.stdout)
	if strings.Join(header, "|") != "ID|EXPR|TZ|ENABLED|NEXT RUN|LAST RUN|STATUS|ERROR" {
		t.Errorf("header %q", header)
	}
	if len(rows) != 2 || rows[0][0] != "daily_report" || rows[1][0] != "heartbeat" {
		t.Fatalf("rows %q", rows)
	}
	if got := column(t, r.stdout, "daily_report", "EXPR"); got != "0 8 * * 1-5" {
		t.Errorf("EXPR column %q", got)
	}
	if got := column(t, r.stdout, "daily_report", "NEXT RUN"); got != one["next_run"] {
		t.Errorf("NEXT RUN column %q, want %v", got, one["next_run"])
	}
	var list []map[string]any
	e.okJSON(&list, "schedules", "list")
	if len(list) != 2 || list[1]["id"] != "heartbeat" || list[1]["job"] != "ping" || list[1]["timezone"] != "" {
		t.Fatalf("list -o json = %v", list)
	}

	// pause / resume.
	r = e.ok("schedules", "pause", "daily_report")
	if r.stdout != "paused daily_report\n" {
		t.Errorf("pause printed %q", r.stdout)
	}
	if doc := e.rawSchedule("daily_report"); doc["enabled"] != false {
		t.Fatalf("after pause: %v", doc)
	}
	e.okJSON(&one, "schedules", "get", "daily_report")
	if one["enabled"] != false || one["next_run"] != nil {
		t.Errorf("paused job: %v", one)
	}
	if r = e.ok("schedules", "pause", "daily_report"); !strings.Contains(r.stdout, "already paused") {
		t.Errorf("second pause printed %q", r.stdout)
	}
	var res map[string]any
	e.okJSON(&res, "schedules", "resume", "daily_report")
	if res["enabled"] != true || res["changed"] != true {
		t.Errorf("resume -o json = %v", res)
	}
	if doc := e.rawSchedule("daily_report"); doc["enabled"] != true {
		t.Fatalf("after resume: %v", doc)
	}

	if r = e.ok("schedules", "resume", "daily_report"); !strings.Contains(r.stdout, "already enabled") {
		t.Errorf("second resume printed %q", r.stdout)
	}

	// delete.
	e.okJSON(&res, "schedules", "delete", "heartbeat")
	if res["id"] != "heartbeat" || res["deleted"] != true {
		t.Errorf("delete -o json: %v", res)
	}
	if e.rawSchedule("heartbeat") != nil {
		t.Fatal("heartbeat still stored after delete")
	}
	for _, args := range [][]string{
		{"schedules", "delete", "heartbeat"},
		{"schedules", "get", "heartbeat"},
		{"schedules", "pause", "heartbeat"},
		{"schedules", "resume", "heartbeat"},
	} {
		r := e.run(args...)
		if r.code != cli.ExitUserError || !strings.Contains(r.stderr, `"heartbeat"`) {
			t.Errorf("%q on a missing job: %v", args, r)
		}
	}
}

func seoul(t *testing.T) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation("Asia/Seoul")
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func TestSchedulesSetRefusesInvalid(t *testing.T) {
	e := newEnv(t)
	e.ok("schedules", "set", "daily_report", "--cron", "0 9 * * *", "--tz", "Europe/Berlin")
	before := e.rawSchedule("daily_report")
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"schedules", "set", "daily_report", "--cron", "0 25 * * *"}, []string{"25", "--cron"}},
		{[]string{"schedules", "set", "new_job", "--cron", "0 25 * * *"}, []string{"25"}},
		{[]string{"schedules", "set", "daily_report", "--cron", "0 9 * * *", "--tz", "Mars/Base"}, []string{"Mars/Base", "--tz"}},
		{[]string{"schedules", "set", "new_job", "--cron", "0 9 * * *", "--tz", "Mars/Base"}, []string{"Mars/Base"}},
		{[]string{"schedules", "set", "new_job", "--cron", ""}, []string{"empty"}},
		{[]string{"schedules", "set", "new_job", "--cron", "0 0 30 2 *"}, []string{"0 0 30 2 *"}},
		{[]string{"schedules", "set", "daily_report", "--cron", "@every -5s"}, []string{"is negative"}},
		{[]string{"schedules", "set", "new_job", "--cron", "@every 0s"}, []string{"less than 1s"}},
		{[]string{"schedules", "set", "new_job", "--cron", "@every 1ns"}, []string{"shorter than a second"}},
		{[]string{"schedules", "set", "new_job", "--cron", "@every 1.5s"}, []string{"not a whole number of seconds"}},
		{[]string{"schedules", "set", "daily_report", "--cron", "@every 500ms"}, []string{"shorter than a second"}},
		{[]string{"schedules", "set", "new_job", "--cron", "@hourly", "--args", "[1,2]"}, []string{"--args"}},
		{[]string{"schedules", "set", "new_job", "--cron", "@hourly", "--args", "{bad"}, []string{"--args"}},
		{[]string{"schedules", "set", "--cron", "@hourly"}, []string{"ID"}},
		{[]string{"schedules", "set", "new_job"}, []string{"cron"}},
	}
	for _, tt := range tests {
		r := e.run(tt.args...)
		if r.code != cli.ExitUserError {
			t.Errorf("%q: exit %d, want 1\n%v", tt.args, r.code, r)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("%q: stderr does not mention %q:\n%s", tt.args, w, r.stderr)
			}
		}
		if tt.args[2] != "new_job" && tt.args[2] != "daily_report" {
			continue
		}
		if !strings.Contains(r.stderr, "nothing written") || !strings.Contains(r.stderr, "example: cronswap schedules set") {
			t.Errorf("%q: the refusal does not say nothing was written and show an example:\n%s", tt.args, r.stderr)
		}
	}
	if n := e.count("schedules"); n != 1 {
		t.Errorf("%d documents after refusals, want 1", n)
	}
	if after := e.rawSchedule("daily_report"); !reflect.DeepEqual(after, before) {
		t.Errorf("a refused set changed the document:\n%v\n%v", before, after)
	}

	// A stored bad zone makes a retime without --tz invalid: refused, and
	// fixed by naming a zone.
	if _, err := e.db.Collection("schedules").UpdateOne(ctx(t), bson.D{{Key: "_id", Value: "daily_report"}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "timezone", Value: "Mars/Base"}}}}); err != nil {
		t.Fatal(err)
	}
	r := e.run("schedules", "set", "daily_report", "--cron", "0 10 * * *")
	if r.code != cli.ExitUserError || !strings.Contains(r.stderr, "Mars/Base") {
		t.Errorf("retime over a stored bad zone: %v", r)
	}
	if doc := e.rawSchedule("daily_report"); doc["cron_expr"] != "0 9 * * *" {
		t.Errorf("refused retime wrote %v", doc)
	}
	e.ok("schedules", "set", "daily_report", "--cron", "0 10 * * *", "--tz", "UTC")
	e.ok("schedules", "set", "daily_report", "--cron", "0 10 * * *", "--tz", "")
	if doc := e.rawSchedule("daily_report"); doc["cron_expr"] != "0 10 * * *" || doc["timezone"] != nil {
		t.Errorf("--tz \"\" should remove the zone: %v", doc)
	}
}

func TestSchedulesListStatusAndErrors(t *testing.T) {
	e := newEnv(t)
	now := time.Now().UTC().Truncate(time.Second)
	slot1, slot2 := now.Add(-2*time.Hour), now.Add(-time.Hour)
	insertDocs(t, e.db.Collection("schedules"),
		bson.D{{Key: "_id", Value: "a_ok"}, {Key: "cron_expr", Value: "@hourly"}},
		bson.D{{Key: "_id", Value: "b_running"}, {Key: "cron_expr", Value: "@hourly"}},
		bson.D{{Key: "_id", Value: "c_typo"}, {Key: "cron_expr", Value: int32(800)}},
		bson.D{{Key: "_id", Value: "d_badzone"}, {Key: "cron_expr", Value: "0 9 * * *"}, {Key: "timezone", Value: "Mars/Base"}},
		bson.D{{Key: "_id", Value: "e_never"}, {Key: "cron_expr", Value: "@daily"}, {Key: "enabled", Value: false}},
		bson.D{{Key: "_id", Value: "f_lockonly"}, {Key: "cron_expr", Value: "@daily"}},
	)
	insertDocs(t, e.db.Collection(record.RunsCollection),
		record.RunDoc{ID: "r1", JobID: "a_ok", ScheduledAt: slot1, Status: record.StatusSucceeded, StartedAt: slot1, EndedAt: slot1.Add(time.Second)},
		record.RunDoc{ID: "r2", JobID: "a_ok", ScheduledAt: slot2, Status: record.StatusFailed, Error: "exit status 3", StartedAt: slot2, EndedAt: slot2.Add(time.Second)},
		// Newer records that did not run are no last run.
		record.RunDoc{ID: "r3", JobID: "a_ok", ScheduledAt: slot2.Add(30 * time.Minute), Status: record.StatusSkipped, Reason: "overlap"},
		record.RunDoc{ID: record.MissedID("a_ok", now.Add(-10*time.Minute)), JobID: "a_ok", ScheduledAt: now.Add(-10 * time.Minute), Status: record.StatusMissed, Count: 1},
		record.RunDoc{ID: record.RunID("b_running", slot2), JobID: "b_running", ScheduledAt: slot2, Status: record.StatusRunning, StartedAt: slot2},
	)
	insertDocs(t, e.db.Collection(record.LocksCollection),
		record.LockDoc{JobID: "b_running", State: record.LockRunning, Holder: "host-a", RunID: "r9", Fence: 4, LastSlot: slot2, LeaseUntil: now.Add(time.Minute)},
		record.LockDoc{JobID: "f_lockonly", State: record.LockFree, Fence: 2, LastSlot: slot1, LastOutcome: record.StatusAbandoned},
	)
	var list []map[string]any
	e.okJSON(&list, "schedules", "list")
	byID := map[string]map[string]any{}
	for _, v := range list {
		byID[v["id"].(string)] = v
	}
	if len(byID) != 6 {
		t.Fatalf("list: %v", list)
	}
	// The records are the truth (record.LastRun): a lock whose run records
	// have expired shows no last run, as the status page does.
	if v := byID["f_lockonly"]; v["last_status"] != "" || v["last_run"] != nil {
		t.Errorf("f_lockonly (lock, no run records): %v", v)
	}
	if v := byID["a_ok"]; v["last_run"] != slot2.Format(time.RFC3339) || v["last_status"] != "failed" || v["last_run_error"] != "exit status 3" || v["error"] != "" || v["next_run"] == nil {
		t.Errorf("a_ok: %v", v)
	}
	if v := byID["b_running"]; v["last_status"] != "running" || v["last_run"] != slot2.Format(time.RFC3339) {
		t.Errorf("b_running: %v", v)
	}
	if v := byID["c_typo"]; !strings.Contains(v["error"].(string), "cron_expr") || !strings.Contains(v["error"].(string), "string") || v["next_run"] != nil {
		t.Errorf("c_typo: %v", v)
	}
	if v := byID["d_badzone"]; !strings.Contains(v["error"].(string), "Mars/Base") || v["timezone"] != "Mars/Base" {
		t.Errorf("d_badzone: %v", v)
	}
	if v := byID["e_never"]; v["enabled"] != false || v["next_run"] != nil || v["last_run"] != nil {
		t.Errorf("e_never: %v", v)
	}
	r := e.ok("schedules", "list")
	if got := column(t, r.stdout, "a_ok", "STATUS"); got != "failed" {
		t.Errorf("a_ok STATUS %q\n%s", got, r.stdout)
	}
	if got := column(t, r.stdout, "a_ok", "ERROR"); got != "last run: exit status 3" {
		t.Errorf("a_ok ERROR %q\n%s", got, r.stdout)
	}
	if got := column(t, r.stdout, "c_typo", "EXPR"); got != "800" {
		t.Errorf("c_typo EXPR %q\n%s", got, r.stdout)
	}
	if got := column(t, r.stdout, "c_typo", "ERROR"); !strings.Contains(got, "must be a string") {
		t.Errorf("c_typo ERROR %q\n%s", got, r.stdout)
	}
	if got := column(t, r.stdout, "e_never", "ENABLED"); got != "false" {
		t.Errorf("e_never ENABLED %q\n%s", got, r.stdout)
	}
	if got := column(t, r.stdout, "e_never", "NEXT RUN"); got != "-" {
		t.Errorf("e_never NEXT RUN %q\n%s", got, r.stdout)
	}
}

func insertDocs(t *testing.T, coll *mongo.Collection, docs ...any) {
	t.Helper()
	if _, err := coll.InsertMany(ctx(t), docs); err != nil {
		t.Fatal(err)
	}
}

func TestLocksListAndRelease(t *testing.T) {
	e := newEnv(t)
	now := time.Now().UTC().Truncate(time.Second)
	locks := e.db.Collection(record.LocksCollection)
	insertDocs(t, locks,
		record.LockDoc{JobID: "held", State: record.LockRunning, Holder: "host-a", RunID: "run-7", Fence: 7, LeaseUntil: now.Add(10 * time.Minute), LastSlot: now},
		record.LockDoc{JobID: "free", State: record.LockFree, Fence: 2, LastOutcome: record.StatusSucceeded},
		record.LockDoc{JobID: "stale", State: record.LockRunning, Holder: "host-dead", RunID: "run-1", Fence: 1, LeaseUntil: now.Add(-time.Hour)},
	)
	r := e.ok("locks", "list")
	if got := column(t, r.stdout, "held", "HOLDER"); got != "host-a" {
		t.Errorf("held HOLDER %q\n%s", got, r.stdout)
	}
	if got := column(t, r.stdout, "stale", "STATE"); got != "running (lease expired)" {
		t.Errorf("stale STATE %q\n%s", got, r.stdout)
	}
	if got := column(t, r.stdout, "free", "LAST OUTCOME"); got != "succeeded" {
		t.Errorf("free LAST OUTCOME %q\n%s", got, r.stdout)
	}
	var list []map[string]any
	e.okJSON(&list, "locks", "list")
	if len(list) != 3 || list[1]["job_id"] != "held" || list[1]["fence"] != float64(7) || list[1]["expired"] != false || list[2]["expired"] != true {
		t.Fatalf("locks list -o json: %v", list)
	}
	if list[1]["lease_until"] != now.Add(10*time.Minute).Format(time.RFC3339) || list[0]["lease_until"] != nil || list[0]["last_outcome"] != "succeeded" {
		t.Errorf("locks list -o json times: %v", list)
	}

	stateOf := func(id string) record.LockDoc {
		var l record.LockDoc
		if err := locks.FindOne(ctx(t), bson.D{{Key: "_id", Value: id}}).Decode(&l); err != nil {
			t.Fatal(err)
		}
		return l
	}
	// Declining (or no answer) leaves it held.
	for _, answer := range []string{"n\n", "", "nope\n"} {
		r = e.runIn(answer, "locks", "release", "held")
		if r.code != cli.ExitUserError || !strings.Contains(r.stderr, "host-a") || !strings.Contains(r.stderr, "[y/N]") {
			t.Errorf("release answered %q: %v", answer, r)
		}
		if l := stateOf("held"); l.State != record.LockRunning || l.Holder != "host-a" {
			t.Fatalf("declined release changed the lock: %+v", l)
		}
	}
	before := time.Now()
	r = e.runIn("y\n", "locks", "release", "held")
	if r.code != cli.ExitOK || !strings.Contains(r.stdout, "released") {
		t.Fatalf("confirmed release: %v", r)
	}
	l := stateOf("held")
	if l.State != record.LockFree || l.Holder != "" || l.RunID != "" || l.Fence != 7 {
		t.Fatalf("after release: %+v", l)
	}
	if l.LeaseUntil.Before(before.Add(-time.Second)) || l.LeaseUntil.After(time.Now().Add(time.Second)) || !l.UpdatedAt.Equal(l.LeaseUntil) {
		t.Errorf("lease_until %v / updated_at %v, want now", l.LeaseUntil, l.UpdatedAt)
	}
	// Not held any more: says so, exit 0, no question.
	r = e.runIn("", "locks", "release", "held")
	if r.code != cli.ExitOK || !strings.Contains(r.stdout, "not held") || strings.Contains(r.stderr, "[y/N]") {
		t.Errorf("release of a free lock: %v", r)
	}
	// --yes skips the question; JSON says what happened.
	var res map[string]any
	e.okJSON(&res, "locks", "release", "stale", "--yes")
	if res["released"] != true || stateOf("stale").State != record.LockFree {
		t.Errorf("release --yes -o json: %v", res)
	}
	if r = e.run("locks", "release", "missing", "--yes"); r.code != cli.ExitUserError || !strings.Contains(r.stderr, "missing") {
		t.Errorf("release of a missing lock: %v", r)
	}
}

func TestRunsList(t *testing.T) {
	e := newEnv(t)
	base := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	long := "heartbeat " + strings.Repeat("x", 100) + " TAIL"
	// The STDOUT column shows the last line, the newest cut to its end.
	stdouts := []string{"", "", long, "", "starting\nheartbeat a at 13:00 ok"}
	var docs []any
	for i := range 5 {
		job := "a"
		if i%2 == 1 {
			job = "b"
		}
		at := base.Add(time.Duration(i) * time.Hour)
		docs = append(docs, record.RunDoc{ID: fmt.Sprintf("run-%d", i), JobID: job, ScheduledAt: at, Instance: "host-a",
			Status: record.StatusSucceeded, StartedAt: at, EndedAt: at.Add(1500 * time.Millisecond), Fence: int64(i + 1),
			Stdout: stdouts[i]})
	}
	insertDocs(t, e.db.Collection(record.RunsCollection), docs...)
	var runs []map[string]any
	e.okJSON(&runs, "runs", "list")
	if len(runs) != 5 || runs[0]["run_id"] != "run-4" || runs[4]["run_id"] != "run-0" {
		t.Fatalf("runs list -o json (newest first): %v", runs)
	}
	if runs[0]["scheduled_at"] != base.Add(4*time.Hour).Format(time.RFC3339) || runs[0]["ended_at"] != base.Add(4*time.Hour+1500*time.Millisecond).Format(time.RFC3339) ||
		runs[0]["instance"] != "host-a" || runs[0]["status"] != "succeeded" || runs[0]["fence"] != float64(5) || runs[0]["exit_code"] != nil {
		t.Errorf("runs list -o json: %v", runs[0])
	}
	e.okJSON(&runs, "runs", "list", "--job", "b", "--limit", "1")
	if len(runs) != 1 || runs[0]["run_id"] != "run-3" {
		t.Fatalf("--job b --limit 1: %v", runs)
	}
	r := e.ok("runs", "list", "--job", "a")
	_, rows := tableRows(t, r.stdout)
	if len(rows) != 3 || rows[0][0] != "a" || rows[0][1] != "2026-03-01T13:00:00Z" {
		t.Fatalf("runs list --job a:\n%s", r.stdout)
	}
	if got := column(t, r.stdout, "a", "TOOK"); got != "1.5s" {
		t.Errorf("TOOK %q\n%s", got, r.stdout)
	}
	if got := column(t, r.stdout, "a", "STDOUT"); got != "heartbeat a at 13:00 ok" {
		t.Errorf("STDOUT of the newest run of a = %q, want its last line\n%s", got, r.stdout)
	}
	header, _ := tableRows(t, r.stdout)
	if want := []string{"JOB", "SCHEDULED AT", "STATUS", "INSTANCE", "STARTED", "TOOK", "FENCE", "RUN ID", "STDOUT", "ERROR"}; !slices.Equal(header, want) {
		t.Errorf("runs list header %q, want %q", header, want)
	}
	if got := rows[1][8]; got != "..."+long[len(long)-37:] || len(got) != 40 {
		t.Errorf("STDOUT of a long line = %q, want its last 37 characters after ...", got)
	}
	e.okJSON(&runs, "runs", "list", "--job", "a")
	if runs[0]["stdout"] != "starting\nheartbeat a at 13:00 ok" || runs[1]["stdout"] != long || runs[2]["stdout"] != "" {
		t.Errorf("runs list -o json stdout: %q, %q, %q; want the whole tails", runs[0]["stdout"], runs[1]["stdout"], runs[2]["stdout"])
	}
	if r = e.run("runs", "list", "--limit", "0"); r.code != cli.ExitUserError {
		t.Errorf("--limit 0: %v", r)
	}
}

// runs get prints one whole record, the output tails verbatim; -o json
// gives the same fields as runs list -o json; an unknown id exits 1.
func TestRunsGet(t *testing.T) {
	e := newEnv(t)
	at := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	code := 3
	insertDocs(t, e.db.Collection(record.RunsCollection),
		record.RunDoc{ID: "run-x", JobID: "heartbeat", ScheduledAt: at, Instance: "host-a", Fence: 7, Status: record.StatusFailed,
			StartedAt: at, EndedAt: at.Add(2 * time.Second), Error: "exit status 3 (exit 3): boom", ExitCode: &code,
			Stdout: "heartbeat heartbeat at 09:00\nsecond line", Stderr: "boom"},
		record.RunDoc{ID: "run-quiet", JobID: "q", ScheduledAt: at, Status: record.StatusSucceeded, StartedAt: at, EndedAt: at},
		record.RunDoc{ID: "run-ok", JobID: "q", ScheduledAt: at.Add(time.Minute), Status: record.StatusSucceeded, StartedAt: at, EndedAt: at, ExitCode: new(int)},
		record.RunDoc{ID: "run-http", JobID: "hook", ScheduledAt: at, Status: record.StatusFailed, StartedAt: at, EndedAt: at,
			Error: "http action hook: POST https://h/ answered 503 Service Unavailable: busy", AnswerStatus: 503, Answer: "{\"error\": \"busy\",\n \"retry\": true}"})

	r := e.ok("runs", "get", "run-x")
	for _, want := range []string{
		"RUN ID        run-x\n", "JOB           heartbeat\n", "SCHEDULED AT  2026-03-01T09:00:00Z\n", "STATUS        failed\n",
		"INSTANCE      host-a\n", "FENCE         7\n", "TOOK          2s\n", "EXIT CODE     3\n", "ERROR         exit status 3 (exit 3): boom\n",
		"STDOUT:\n  heartbeat heartbeat at 09:00\n  second line\n", "STDERR:\n  boom\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("runs get run-x lacks %q:\n%s", want, r.stdout)
		}
	}
	// An action without an exit code (http, a Go function) shows no exit
	// code row; a succeeded exec run shows its 0.
	if r := e.ok("runs", "get", "run-quiet"); !strings.Contains(r.stdout, "STDOUT: -\n") || strings.Contains(r.stdout, "EXIT CODE") {
		t.Errorf("runs get of a run without output or exit code:\n%s", r.stdout)
	}
	if r := e.ok("runs", "get", "run-ok"); !strings.Contains(r.stdout, "STATUS        succeeded\n") || !strings.Contains(r.stdout, "EXIT CODE     0\n") {
		t.Errorf("runs get of a succeeded exec run:\n%s", r.stdout)
	}

	// An http action's answer: its status among the fields, its body
	// after the output tails; none for the others.
	if r := e.ok("runs", "get", "run-http"); !strings.Contains(r.stdout, "ANSWER STATUS  503\n") ||
		!strings.Contains(r.stdout, "ANSWER:\n  {\"error\": \"busy\",\n   \"retry\": true}\n") {
		t.Errorf("runs get of an http run:\n%s", r.stdout)
	}
	if strings.Contains(r.stdout, "ANSWER") {
		t.Errorf("runs get of an exec run shows an answer:\n%s", r.stdout)
	}
	var answered map[string]any
	e.okJSON(&answered, "runs", "get", "run-http")
	if answered["answer_status"] != float64(503) || answered["answer"] != "{\"error\": \"busy\",\n \"retry\": true}" {
		t.Errorf("runs get -o json of an http run: %v", answered)
	}

	var got, listed map[string]any
	e.okJSON(&got, "runs", "get", "run-x")
	var list []map[string]any
	e.okJSON(&list, "runs", "list", "--job", "heartbeat")
	if len(list) != 1 {
		t.Fatalf("runs list --job heartbeat: %v", list)
	}
	listed = list[0]
	if !reflect.DeepEqual(got, listed) {
		t.Errorf("runs get -o json = %v, want what runs list -o json shows %v", got, listed)
	}
	if got["stdout"] != "heartbeat heartbeat at 09:00\nsecond line" || got["stderr"] != "boom" || got["exit_code"] != float64(3) ||
		got["ended_at"] != "2026-03-01T09:00:02Z" || got["lease_until"] != nil {
		t.Errorf("runs get -o json: %v", got)
	}

	r = e.run("runs", "get", "nope")
	if r.code != cli.ExitUserError || !strings.Contains(r.stderr, `no run "nope"`) || r.stdout != "" {
		t.Errorf("runs get nope: %v", r)
	}
	for _, args := range [][]string{{"runs", "get"}, {"runs", "get", "a", "b"}} {
		if r := e.run(args...); r.code != cli.ExitUserError || !strings.Contains(r.stderr, "run ID") {
			t.Errorf("%q: %v", args, r)
		}
	}
}

func TestTokenShowAndReset(t *testing.T) {
	e := newEnv(t)
	now := time.Now().UTC().Truncate(time.Second)
	insertDocs(t, e.db.Collection(resumetoken.CollectionName),
		bson.D{{Key: "_id", Value: "cli-test"}, {Key: "token", Value: bson.D{{Key: "_data", Value: "8263A1"}}}, {Key: "updated_at", Value: now}},
		bson.D{{Key: "_id", Value: "other-1"}, {Key: "token", Value: bson.D{{Key: "_data", Value: "8263B2"}}}, {Key: "updated_at", Value: now}},
		bson.D{{Key: "_id", Value: "other-2"}, {Key: "token", Value: bson.D{{Key: "_data", Value: "8263C3"}}}, {Key: "updated_at", Value: now}},
	)
	r := e.ok("token", "show")
	if got := column(t, r.stdout, "other-1", "TOKEN"); got != `{"_data":"8263B2"}` {
		t.Errorf("TOKEN column %q\n%s", got, r.stdout)
	}
	var toks []map[string]any
	e.okJSON(&toks, "token", "show", "--id", "other-2")
	if len(toks) != 1 || toks[0]["id"] != "other-2" || toks[0]["updated_at"] != now.Format(time.RFC3339) {
		t.Fatalf("token show --id other-2: %v", toks)
	}
	if tok, _ := toks[0]["token"].(map[string]any); tok["_data"] != "8263C3" {
		t.Errorf("token %v", toks[0]["token"])
	}

	// Default: this config's instance id.
	r = e.ok("token", "reset")
	if !strings.Contains(r.stdout, "cli-test") || e.count(resumetoken.CollectionName) != 2 {
		t.Fatalf("token reset: %v (left %d)", r, e.count(resumetoken.CollectionName))
	}
	if r = e.ok("token", "reset"); !strings.Contains(r.stdout, "nothing to reset") {
		t.Errorf("second reset: %v", r)
	}
	var res map[string]any
	e.okJSON(&res, "token", "reset", "--id", "other-1")
	if res["deleted"] != float64(1) || e.count(resumetoken.CollectionName) != 1 {
		t.Errorf("reset --id other-1: %v", res)
	}
	e.ok("token", "reset", "--all")
	if n := e.count(resumetoken.CollectionName); n != 0 {
		t.Errorf("%d tokens after --all", n)
	}
	if r = e.run("token", "reset", "--all", "--id", "x"); r.code != cli.ExitUserError {
		t.Errorf("--all with --id: %v", r)
	}
}

func TestInitTwice(t *testing.T) {
	e := newEnv(t)
	var rep admin.InitReport
	e.okJSON(&rep, "init")
	if len(rep.CreatedCollections) != len(admin.Collections()) || len(rep.CreatedIndexes) != len(admin.Indexes()) || !rep.Changed() {
		t.Fatalf("first init: %+v", rep)
	}
	// The indexes are there with their options.
	got := map[string]string{}
	for _, coll := range []string{record.RunsCollection, history.CollectionName, members.CollectionName, notify.CollectionName, record.PausesCollection} {
		cur, err := e.db.Collection(coll).Indexes().List(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		var specs []struct {
			Name   string `bson:"name"`
			Key    bson.D `bson:"key"`
			Unique *bool  `bson:"unique"`
			TTL    *int32 `bson:"expireAfterSeconds"`
		}
		if err := cur.All(ctx(t), &specs); err != nil {
			t.Fatal(err)
		}
		for _, s := range specs {
			ttl := "none"
			if s.TTL != nil {
				ttl = fmt.Sprint(*s.TTL)
			}
			got[coll+"."+s.Name] = fmt.Sprintf("key=%v unique=%v ttl=%s", s.Key, s.Unique != nil && *s.Unique, ttl)
		}
	}
	want := map[string]string{
		"job_runs.job_id_1_scheduled_at_1":            `key={"job_id":{"$numberInt":"1"},"scheduled_at":{"$numberInt":"1"}} unique=true ttl=none`,
		"job_runs.expire_at_1":                        `key={"expire_at":{"$numberInt":"1"}} unique=false ttl=0`,
		"job_runs.status_1_lease_until_1":             `key={"status":{"$numberInt":"1"},"lease_until":{"$numberInt":"1"}} unique=false ttl=none`,
		"schedule_history.schedule_history_job_at":    `key={"job_id":{"$numberInt":"1"},"at":{"$numberInt":"-1"}} unique=false ttl=none`,
		"schedule_history.schedule_history_expire_at": `key={"expire_at":{"$numberInt":"1"}} unique=false ttl=0`,
		"members.members_expire_at":                   `key={"expire_at":{"$numberInt":"1"}} unique=false ttl=0`,
		"notifications.status_1_next_attempt_at_1":    `key={"status":{"$numberInt":"1"},"next_attempt_at":{"$numberInt":"1"}} unique=false ttl=none`,
		"notifications.expire_at_1":                   `key={"expire_at":{"$numberInt":"1"}} unique=false ttl=0`,
		"notifications.job_id_1_at_1":                 `key={"job_id":{"$numberInt":"1"},"at":{"$numberInt":"1"}} unique=false ttl=none`,
		"job_runs.notice_kind_1":                      `key={"notice.kind":{"$numberInt":"1"}} unique=false ttl=none`,
		"job_pauses.notice_kind_1":                    `key={"notice.kind":{"$numberInt":"1"}} unique=false ttl=none`,
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("index %s: %q, want %q", name, got[name], w)
		}
	}

	// Second run: a no-op.
	r := e.ok("init")
	if !strings.Contains(r.stdout, "nothing to do") || strings.Contains(r.stdout, "created") {
		t.Errorf("second init:\n%s", r.stdout)
	}
	var rep2 admin.InitReport
	e.okJSON(&rep2, "init")
	if rep2.Changed() || len(rep2.CreatedCollections) != 0 || len(rep2.CreatedIndexes) != 0 {
		t.Errorf("second init changed something: %+v", rep2)
	}

	// The validator: where the server has it, mongosh's typo is refused by
	// the server; where it has not, init said so (and the typo goes in:
	// the notice is true).
	typo := `db.schedules.insertOne({ _id: "typo", cron_expr: 0800, updated_at: new Date() })`
	out, err := mongosh(t, e.uri, e.db.Name(), typo)
	switch rep.Validator {
	case admin.ValidatorCreated:
		if rep2.Validator != admin.ValidatorUnchanged {
			t.Errorf("second init validator %q, want unchanged", rep2.Validator)
		}
		if err == nil || !strings.Contains(out, "Document failed validation") {
			t.Fatalf("mongosh typo with the validator in place: err %v, output:\n%s", err, out)
		}
		if e.rawSchedule("typo") != nil {
			t.Fatal("the refused typo is stored")
		}
	case admin.ValidatorUnsupported:
		t.Logf("server without validators: checking the notice path")
		if rep2.Validator != admin.ValidatorUnsupported || !strings.Contains(rep.Notice, "does not support document validation") {
			t.Errorf("reports %+v / %+v", rep, rep2)
		}
		if !strings.Contains(r.stderr, "notice: this server does not support document validation") ||
			!regexp.MustCompile(`(?m)^validator +schedules +unsupported$`).MatchString(r.stdout) {
			t.Errorf("text init does not print the notice: %v", r)
		}
		if err != nil {
			t.Fatalf("mongosh typo: %v\n%s", err, out)
		}
		if doc := e.rawSchedule("typo"); doc == nil {
			t.Fatalf("the server refused the typo although init said it has no validator:\n%s", out)
		}
	default:
		t.Fatalf("first init validator %q", rep.Validator)
	}
}

// mongosh runs one --eval against db and returns its combined output.
func mongosh(t *testing.T, uri, db, eval string) (string, error) {
	t.Helper()
	root, err := testmongo.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(root, "scripts", "node_modules", ".bin", "mongosh")
	if _, err := os.Stat(bin); err != nil {
		if bin, err = exec.LookPath("mongosh"); err != nil {
			t.Fatal("mongosh not found: run `npm ci --prefix scripts`")
		}
	}
	c, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	base, query, _ := strings.Cut(uri, "?")
	scheme, rest, _ := strings.Cut(base, "://")
	host, _, _ := strings.Cut(rest, "/")
	target := scheme + "://" + host + "/" + db
	if query != "" {
		target += "?" + query
	}
	cmd := exec.CommandContext(c, bin, target, "--quiet", "--norc", "--eval", eval)
	cmd.Env = append(os.Environ(), "MONGOSH_SKIP_NODE_VERSION_CHECK=1")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestUnreachableServerIsExit2(t *testing.T) {
	uri := "mongodb://" + closedPort(t) + "/?directConnection=true"
	for _, args := range [][]string{
		{"init"},
		{"schedules", "list"},
		{"schedules", "get", "x"},
		{"schedules", "set", "x", "--cron", "@hourly"},
		{"schedules", "delete", "x"},
		{"schedules", "pause", "x"},
		{"schedules", "resume", "x", "-o", "json"},
		{"token", "show"},
		{"token", "reset"},
		{"locks", "list"},
		{"locks", "release", "x", "--yes"},
		{"runs", "list"},
		{"runs", "get", "x"},
		{"members", "list"},
		{"notifications", "list"},
		{"explain", "x", "--from", "-2h"},
		{"run-now", "x"},
		{"backfill", "x", "--from", "-2h", "--to", "now"},
	} {
		r := run(t, append(args, "--mongo-uri", uri, "--timeout", "300ms")...)
		if r.code != cli.ExitUnreachable || !strings.Contains(r.stderr, "cannot reach MongoDB") || r.stdout != "" {
			t.Errorf("%q: %v", args, r)
		}
	}
	// Input errors are found before the server is asked for.
	r := run(t, "schedules", "set", "x", "--cron", "0 25 * * *", "--mongo-uri", uri, "--timeout", "300ms")
	if r.code != cli.ExitUserError {
		t.Errorf("bad --cron with the server down: %v", r)
	}
}

func TestUnreachablePasswordNotPrinted(t *testing.T) {
	uri := "mongodb://op:s3cret@" + closedPort(t) + "/?directConnection=true"
	r := run(t, "schedules", "list", "--mongo-uri", uri, "--timeout", "300ms")
	if r.code != cli.ExitUnreachable || strings.Contains(r.stderr, "s3cret") {
		t.Errorf("%v", r)
	}
}

func TestOutputFlag(t *testing.T) {
	var times []map[string]string
	before := time.Now()
	r := run(t, "next", "0 9 * * 1-5", "--tz", "Asia/Seoul", "-n", "3", "-o", "json")
	if r.code != cli.ExitOK {
		t.Fatal(r)
	}
	if err := json.Unmarshal([]byte(r.stdout), &times); err != nil || len(times) != 3 {
		t.Fatalf("next -o json: %v %s", err, r.stdout)
	}
	// The command read the clock after before: a 09:00 may have passed.
	want := weekdayNinesSeoul(t, before, 4)
	if (times[0]["at"] != want[0] || times[2]["at"] != want[2]) && (times[0]["at"] != want[1] || times[2]["at"] != want[3]) {
		t.Errorf("next -o json first %v, want %v", times[0], want[:2])
	}
	var v map[string]any
	r = run(t, "validate", "@hourly", "--output", "json")
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || r.code != 0 || v["valid"] != true || v["next_run"] == nil {
		t.Errorf("validate -o json: %v", r)
	}
	r = run(t, "validate", "0 25 * * *", "-o", "json")
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || r.code != cli.ExitUserError || v["valid"] != false || !strings.Contains(v["error"].(string), "25") {
		t.Errorf("validate invalid -o json: %v", r)
	}
	r = run(t, "version", "-o", "json")
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || v["version"] != "dev" {
		t.Errorf("version -o json: %v", r)
	}
	for _, args := range [][]string{{"next", "@hourly", "-o", "yaml"}, {"schedules", "list", "-o", "xml"}} {
		if r := run(t, args...); r.code != cli.ExitUserError || !strings.Contains(r.stderr, "--output") {
			t.Errorf("%q: %v", args, r)
		}
	}
}

func TestBashCompletion(t *testing.T) {
	r := run(t, "--generate-bash-completion")
	for _, cmd := range []string{"run", "init", "schedules", "next", "validate", "token", "locks", "runs", "version", "completion"} {
		if !strings.Contains("\n"+r.stdout, "\n"+cmd+"\n") {
			t.Errorf("completion of commands lacks %q:\n%s", cmd, r.stdout)
		}
	}
	r = run(t, "schedules", "--generate-bash-completion")
	for _, cmd := range []string{"list", "get", "set", "delete", "pause", "resume"} {
		if !strings.Contains("\n"+r.stdout, "\n"+cmd+"\n") {
			t.Errorf("completion of schedules lacks %q:\n%s", cmd, r.stdout)
		}
	}
	r = run(t, "schedules", "set", "--c", "--generate-bash-completion")
	if !strings.Contains(r.stdout, "--cron\n") || !strings.Contains(r.stdout, "--category\n") || strings.Contains(r.stdout, "--tz") {
		t.Errorf("completion of schedules set --c: %q", r.stdout)
	}
	// next reads the calendars --exclude names from the configured server,
	// so it offers --config; validate needs neither and does not.
	if r = run(t, "next", "--c", "--generate-bash-completion"); !strings.Contains(r.stdout, "--config\n") {
		t.Errorf("completion of next --c lacks --config: %q", r.stdout)
	}
	if r = run(t, "validate", "--c", "--generate-bash-completion"); strings.Contains(r.stdout, "--config") {
		t.Errorf("completion of validate --c offers --config: %q", r.stdout)
	}
	if r = run(t, "schedules", "list", "--c", "--generate-bash-completion"); !strings.Contains(r.stdout, "--config\n") {
		t.Errorf("completion of schedules list --c: %q", r.stdout)
	}
	// export, plan and apply select with the same flags.
	for _, cmd := range []string{"export", "plan", "apply"} {
		r = run(t, cmd, "--", "--generate-bash-completion")
		if !strings.Contains(r.stdout, "--category\n") || !strings.Contains(r.stdout, "--id-prefix\n") {
			t.Errorf("completion of %s -- lacks --category or --id-prefix: %q", cmd, r.stdout)
		}
	}
	r = run(t, "completion", "bash")
	if r.code != 0 || !strings.Contains(r.stdout, "--generate-bash-completion") || !strings.Contains(r.stdout, "complete -o bashdefault") {
		t.Errorf("completion bash: %v", r)
	}
	if r = run(t, "completion", "fish"); r.code != cli.ExitUserError {
		t.Errorf("completion fish: %v", r)
	}
}

// Every command lists the flags it uses and no other: --config and
// --mongo-uri on every command that reads the configuration or the server
// (next too: --exclude reads calendars from the server), the log flags on
// run alone (the only one that logs), --output on every command but run
// and completion. validate, version and completion list none of the four;
// every command accepts them all (TestEveryCommandTakesConfigAndMongoURI).
func TestEveryCommandHasCommonFlags(t *testing.T) {
	source := []string{"--config", "--mongo-uri"}
	logs := []string{"--log-format", "--log-level"}
	for _, cmd := range [][]string{
		{"run"}, {"init"}, {"next"}, {"validate"}, {"version"}, {"completion"},
		{"schedules", "list"}, {"schedules", "get"}, {"schedules", "set"}, {"schedules", "delete"}, {"schedules", "pause"}, {"schedules", "resume"},
		{"token", "show"}, {"token", "reset"}, {"locks", "list"}, {"locks", "release"}, {"runs", "list"}, {"runs", "get"}, {"explain"},
		{"blackouts", "list"}, {"blackouts", "add"}, {"blackouts", "delete"},
		{"run-now"}, {"backfill"}, {"export"}, {"plan"}, {"apply"},
	} {
		r := run(t, append(cmd, "--help")...)
		if r.code != cli.ExitOK {
			t.Errorf("%q --help: %v", cmd, r)
			continue
		}
		var want, unwanted []string
		switch cmd[0] {
		case "validate", "version", "completion":
			unwanted = slices.Concat(source, logs)
		case "run":
			want = slices.Concat(source, logs)
		default:
			want, unwanted = slices.Clone(source), logs
		}
		switch cmd[0] {
		case "validate", "next":
			want = append(want, "--tz")
		}
		if cmd[0] == "next" {
			want = append(want, "--exclude")
		}
		if cmd[0] != "run" && cmd[0] != "completion" {
			want = append(want, "--output")
		}
		for _, f := range want {
			if !strings.Contains(r.stdout, f) {
				t.Errorf("%q has no %s:\n%s", cmd, f, r.stdout)
			}
		}
		for _, f := range unwanted {
			if strings.Contains(r.stdout, f) {
				t.Errorf("%q lists %s, which it does not use:\n%s", cmd, f, r.stdout)
			}
		}
	}
}

// A server that refuses the credentials is answering, not unreachable: the
// CLI exits 1 and says why, without printing the password. The refusal is
// injected in mongod's shape (AuthenticationFailed, code 18) by the fault
// proxy, as the test server has no authentication.
func TestAuthenticationFailureIsExit1(t *testing.T) {
	_, rest, _ := strings.Cut(testmongo.Shared(t).URI, "://")
	hosts, _, _ := strings.Cut(rest, "/")
	if _, h, ok := strings.Cut(hosts, "@"); ok {
		hosts = h
	}
	upstream, _, _ := strings.Cut(hosts, ",")
	px, err := faultproxy.New(context.Background(), upstream)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	px.FailAlways(faultproxy.CommandName("saslStart"),
		faultproxy.ErrorReply{Code: 18, CodeName: "AuthenticationFailed", Errmsg: "Authentication failed."})
	uri := "mongodb://op:s3cret@" + px.Addr() + "/?directConnection=true"
	for _, args := range [][]string{{"schedules", "list"}, {"init"}, {"token", "show", "-o", "json"}} {
		r := run(t, append(args, "--mongo-uri", uri, "--timeout", "5s")...)
		if r.code != cli.ExitUserError || !strings.Contains(r.stderr, "AuthenticationFailed") ||
			strings.Contains(r.stderr, "s3cret") || r.stdout != "" {
			t.Errorf("%q: %v", args, r)
		}
	}
}

// locks list shows the fires waiting on a lock (how many, the next) and
// a pending cancel_other request; a damaged buffer does not fail it.
func TestLocksListShowsWaitingFiresAndCancel(t *testing.T) {
	e := newEnv(t)
	now := time.Now().UTC().Truncate(time.Second)
	insertDocs(t, e.db.Collection(record.LocksCollection),
		bson.D{{Key: "_id", Value: "buf"}, {Key: "state", Value: record.LockRunning}, {Key: "holder", Value: "host-a"},
			{Key: "run_id", Value: "buf@1"}, {Key: "fence", Value: int64(1)}, {Key: "lease_until", Value: now.Add(time.Minute)},
			{Key: record.LockBufferField, Value: bson.A{
				bson.D{{Key: "run_id", Value: "trigger/r1"}, {Key: "slot", Value: now.Add(5 * time.Millisecond)}, {Key: "at", Value: now},
					{Key: "by", Value: "host-b"}, {Key: "off_schedule", Value: true}},
				bson.D{{Key: "run_id", Value: "buf@2"}, {Key: "slot", Value: now.Add(time.Second)}, {Key: "at", Value: now}, {Key: "by", Value: "host-a"}},
			}},
			{Key: record.LockCancelField, Value: bson.D{{Key: "run_id", Value: "buf@1"}, {Key: "by", Value: "trigger/r1"}, {Key: "at", Value: now}}}},
		bson.D{{Key: "_id", Value: "damaged"}, {Key: "state", Value: record.LockFree}, {Key: "fence", Value: int64(0)},
			{Key: record.LockBufferField, Value: "not an array"}},
	)
	r := e.ok("locks", "list")
	if got := column(t, r.stdout, "buf", "WAITING"); got != "2, next trigger/r1" {
		t.Errorf("buf WAITING %q\n%s", got, r.stdout)
	}
	if got := column(t, r.stdout, "buf", "CANCEL"); got != "buf@1 by trigger/r1" {
		t.Errorf("buf CANCEL %q\n%s", got, r.stdout)
	}
	if got := column(t, r.stdout, "damaged", "WAITING"); got != "-" {
		t.Errorf("damaged WAITING %q\n%s", got, r.stdout)
	}
	var list []map[string]any
	e.okJSON(&list, "locks", "list")
	next, _ := list[0]["next_waiting"].(map[string]any)
	if len(list) != 2 || list[0]["waiting"] != float64(2) || next["run_id"] != "trigger/r1" || next["off_schedule"] != true ||
		list[0]["cancel"].(map[string]any)["by"] != "trigger/r1" || list[1]["waiting"] != float64(0) {
		t.Fatalf("locks list -o json: %v", list)
	}
}
