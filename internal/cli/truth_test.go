package cli_test

import (
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cronswap/cronswap/internal/actions"
	"github.com/cronswap/cronswap/internal/cli"
	"github.com/cronswap/cronswap/internal/httpapi"
	"github.com/cronswap/cronswap/internal/members"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/jobs"
	"github.com/cronswap/cronswap/schedule"
	"github.com/cronswap/cronswap/scheduler"
)

// The daemons' actions in the tests below.
const daemonJobs = `jobs:
  daily_report:
    exec: ["true"]
  heartbeat:
    exec: ["true"]
`

// withActions returns a copy of e whose config file also defines
// daemonJobs, as the daemons' own config file does.
func (e *env) withActions() *env {
	e.t.Helper()
	data, err := os.ReadFile(e.cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	c := *e
	c.cfg = filepath.Join(e.t.TempDir(), "daemon.yaml")
	writeFile(e.t, c.cfg, string(data)+daemonJobs)
	return &c
}

const unknownAction = `unknown action "nosuchaction": not in the config's jobs (known: [daily_report heartbeat])`

// Given the daemons' config file, `schedules set` checks the job against
// its actions with the daemons' own check: an unknown action is written (a
// Go program embedding cronswap may register it) with a warning, exit 0,
// and no next run is promised. Without the actions the next run is
// promised only if the daemons have the action, which was not checked.
func TestSetChecksTheJobAgainstTheConfigsActions(t *testing.T) {
	e := newEnv(t)
	d := e.withActions()
	r := d.ok("schedules", "set", "x", "--cron", "0 2 * * *", "--job", "nosuchaction")
	if !strings.Contains(r.stderr, "warning: ") || !strings.Contains(r.stderr, unknownAction) || !strings.Contains(r.stderr, "written anyway") {
		t.Errorf("set with an unknown action: stderr %q, want a warning naming the action and the known ones", r.stderr)
	}
	if !strings.Contains(r.stdout, "created x") || !strings.Contains(r.stdout, "next run none (its action is not in the config)") {
		t.Errorf("set with an unknown action printed %q", r.stdout)
	}
	if doc := e.rawSchedule("x"); doc == nil || doc["job"] != "nosuchaction" {
		t.Fatalf("stored %v, want the document written", doc)
	}
	var res map[string]any
	d.okJSON(&res, "schedules", "set", "x", "--cron", "0 3 * * *")
	if w, _ := res["warning"].(string); !strings.Contains(w, unknownAction) || res["next_run"] != nil || res["actions_checked"] != true {
		t.Errorf("set -o json: %v, want the warning, no next run, actions checked", res)
	}
	// A known action: no warning.
	r = d.ok("schedules", "set", "x", "--job", "heartbeat")
	if r.stderr != "" || !strings.Contains(r.stdout, "updated x") || strings.Contains(r.stdout, "none") {
		t.Errorf("set with a known action: %v", r)
	}
	// Without the actions (a config file for the command line alone) the
	// action is not checked, and the output says so.
	r = e.ok("schedules", "set", "y", "--cron", "0 2 * * *", "--job", "nosuchaction")
	if want := ` if the daemons have action "nosuchaction" (not checked: ` + e.cfg + ` defines no jobs)`; r.stderr != "" ||
		!regexp.MustCompile(`^created y: "0 2 \* \* \*", next run \S+`+regexp.QuoteMeta(want)+`\n$`).MatchString(r.stdout) {
		t.Errorf("set without the config's actions: %v, want the next run %s", r, want)
	}
	if r := e.ok("schedules", "set", "y", "--job", ""); !strings.Contains(r.stdout, `if the daemons have action "y" (not checked`) {
		t.Errorf("set without the config's actions, the id as the action: %v", r)
	}
}

// `schedules set` changes only the fields it is given: --tz alone on an
// existing schedule works; --cron is required only to create one.
func TestSetChangesOnlyTheFieldsGiven(t *testing.T) {
	e := newEnv(t)
	e.ok("schedules", "set", "daily_report", "--cron", "0 9 * * *", "--job", "heartbeat", "--args", `{"to":"ops"}`)
	r := e.ok("schedules", "set", "daily_report", "--tz", "Asia/Seoul")
	if !strings.Contains(r.stdout, `updated daily_report: "0 9 * * *"`) || !strings.Contains(r.stdout, "+09:00") {
		t.Errorf("--tz alone printed %q", r.stdout)
	}
	doc := e.rawSchedule("daily_report")
	if doc["cron_expr"] != "0 9 * * *" || doc["timezone"] != "Asia/Seoul" || doc["job"] != "heartbeat" || doc["args"] == nil {
		t.Fatalf("after --tz alone: %v", doc)
	}
	e.ok("schedules", "set", "daily_report", "--dst", "plain")
	if doc := e.rawSchedule("daily_report"); doc["dst"] != "plain" || doc["timezone"] != "Asia/Seoul" || doc["cron_expr"] != "0 9 * * *" {
		t.Fatalf("after --dst alone: %v", doc)
	}
	// The merged document is checked: a stored zone with a new expression.
	if r := e.run("schedules", "set", "daily_report", "--tz", "Mars/Base"); r.code != cli.ExitUserError || !strings.Contains(r.stderr, "Mars/Base") {
		t.Errorf("--tz Mars/Base: %v", r)
	}
	// Creating needs an expression; nothing is written without one.
	r = e.run("schedules", "set", "new_job", "--tz", "Asia/Seoul")
	if r.code != cli.ExitUserError || !strings.Contains(r.stderr, `no schedule "new_job" yet, and --cron is required to create one`) {
		t.Errorf("--tz on a missing schedule: %v", r)
	}
	if e.rawSchedule("new_job") != nil {
		t.Fatal("a schedule without an expression was created")
	}
	// No field at all: nothing to change.
	if r := e.run("schedules", "set", "daily_report"); r.code != cli.ExitUserError || !strings.Contains(r.stderr, "nothing to change") {
		t.Errorf("set without fields: %v", r)
	}
}

// The expression's limit counts the white space around it, in the command
// line as in the daemons: padded past 256 bytes, or white space only, is
// refused and nothing is written.
func TestSetRefusesAnExpressionPaddedPastTheLimit(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct{ expr, want string }{
		{strings.Repeat(" ", 60000) + "0 2 * * *", "60009 bytes, more than 256"},
		{strings.Repeat(" ", 60000), "60000 bytes, more than 256"},
		{"   ", "3 bytes of white space only"},
	} {
		r := e.run("schedules", "set", "pad", "--cron", c.expr)
		if r.code != cli.ExitUserError || !strings.Contains(r.stderr, c.want) || len(r.stderr) > 1000 {
			t.Errorf("--cron of %d bytes: exit %d, stderr %.300q; want %q", len(c.expr), r.code, r.stderr, c.want)
		}
	}
	if e.rawSchedule("pad") != nil {
		t.Fatal("a refused expression was written")
	}
}

// fakeDaemon serves the daemon's own HTTP API over a real engine whose
// policy is the daemons' action registry, and registers it as a live
// member with its address, as a running daemon does. It requires token.
func fakeDaemon(t *testing.T, e *env, id, token string, docs ...schedule.Schedule) {
	t.Helper()
	reg := actions.NewRegistry()
	reg.Register("daily_report", actions.Action{Handler: jobs.HandlerFunc(nil)})
	reg.Register("heartbeat", actions.Action{Handler: jobs.HandlerFunc(nil)})
	engine := scheduler.New(scheduler.Options{Policy: reg, Shards: 1})
	for _, s := range docs {
		engine.Reload(s)
	}
	srv := httptest.NewServer(httpapi.New(httpapi.Options{Schedules: engine, DefaultTimezone: "UTC", Token: token}))
	t.Cleanup(srv.Close)
	host, _ := os.Hostname()
	now := time.Now()
	insertDocs(t, e.db.Collection(members.CollectionName), members.Member{ID: id, Host: host, PID: os.Getpid(),
		Incarnation: "fake", StartedAt: now, HeartbeatAt: now, LeaseUntil: now.Add(time.Minute), ExpireAt: now.Add(time.Hour),
		HTTP: srv.Listener.Addr().String()})
}

// `schedules list` and `get` show the error the daemons see: with a live
// daemon, its engine's (asked over HTTP with CRONSWAP_HTTP_TOKEN), even
// when this command's config knows no actions; the view is named.
func TestListAndGetShowTheErrorALiveDaemonSees(t *testing.T) {
	e := newEnv(t)
	e.ok("schedules", "set", "x", "--cron", "0 2 * * *", "--job", "nosuchaction")
	e.ok("schedules", "set", "daily_report", "--cron", "0 9 * * *")
	t.Setenv(httpapi.EnvToken, "s3cret")
	fakeDaemon(t, e, "node-a", "s3cret",
		schedule.Schedule{ID: "x", CronExpr: "0 2 * * *", Job: "nosuchaction", Enabled: true},
		schedule.Schedule{ID: "daily_report", CronExpr: "0 9 * * *", Enabled: true})
	// A live member on another host's loopback is not asked.
	now := time.Now()
	insertDocs(t, e.db.Collection(members.CollectionName), members.Member{ID: "node-z", Host: "elsewhere.example", Incarnation: "z",
		HeartbeatAt: now, LeaseUntil: now.Add(time.Minute), ExpireAt: now.Add(time.Hour), HTTP: "127.0.0.1:9"})

	r := e.ok("schedules", "list")
	if got := column(t, r.stdout, "x", "ERROR"); !strings.Contains(got, unknownAction) {
		t.Errorf("list ERROR of x = %q, want the daemon's %q\n%s", got, unknownAction, r.stdout)
	}
	if got := column(t, r.stdout, "x", "NEXT RUN"); got != "-" {
		t.Errorf("list NEXT RUN of x = %q, want none: the daemon has not armed it", got)
	}
	if got := column(t, r.stdout, "daily_report", "ERROR"); got != "-" {
		t.Errorf("list ERROR of daily_report = %q", got)
	}
	if !strings.Contains(r.stderr, "as the live daemons see them: node-a") || !strings.Contains(r.stderr, `node-z: its HTTP listener 127.0.0.1:9 is on loopback of host "elsewhere.example"`) {
		t.Errorf("list does not say which view it shows: %q", r.stderr)
	}

	var list []map[string]any
	e.okJSON(&list, "schedules", "list")
	for _, v := range list {
		by, _ := v["checked_by"].([]any)
		if len(by) != 1 || by[0] != "node-a" || v["actions_checked"] != true {
			t.Errorf("list -o json %v: want checked_by [node-a], actions_checked", v)
		}
		if v["id"] == "x" && (!strings.Contains(v["error"].(string), unknownAction) || v["next_run"] != nil) {
			t.Errorf("list -o json x: %v", v)
		}
	}

	r = e.ok("schedules", "get", "x")
	if !strings.Contains(r.stdout, unknownAction) || !regexp.MustCompile(`(?m)^checked by: +daemons node-a$`).MatchString(r.stdout) {
		t.Errorf("get x:\n%s", r.stdout)
	}
	var one map[string]any
	e.okJSON(&one, "schedules", "get", "x")
	if !strings.Contains(one["error"].(string), unknownAction) {
		t.Errorf("get -o json x: %v", one)
	}

	// The wrong token: the daemon is named as not answering, and the
	// command checks the documents itself.
	t.Setenv(httpapi.EnvToken, "wrong")
	r = e.ok("schedules", "list")
	if !strings.Contains(r.stderr, "no live daemon answered") || !strings.Contains(r.stderr, "401") || !strings.Contains(r.stderr, httpapi.EnvToken) {
		t.Errorf("list with a wrong token: stderr %q", r.stderr)
	}
}

// Without a live daemon, `schedules list` and `get` check each document
// themselves with the daemons' rules and, given the daemons' config file,
// their actions; they say so.
func TestListAndGetWithoutADaemonCheckWithTheConfigsActions(t *testing.T) {
	e := newEnv(t)
	d := e.withActions()
	d.ok("schedules", "set", "x", "--cron", "0 2 * * *", "--job", "nosuchaction")

	r := d.ok("schedules", "list")
	if got := column(t, r.stdout, "x", "ERROR"); !strings.Contains(got, unknownAction) {
		t.Errorf("list ERROR of x = %q\n%s", got, r.stdout)
	}
	if got := column(t, r.stdout, "x", "NEXT RUN"); got != "-" {
		t.Errorf("list NEXT RUN of x = %q, want none", got)
	}
	if !strings.Contains(r.stderr, "no live daemon answered (no live daemon in members)") || !strings.Contains(r.stderr, "and the actions of "+d.cfg) {
		t.Errorf("list does not say which view it shows: %q", r.stderr)
	}
	var list []map[string]any
	d.okJSON(&list, "schedules", "list")
	if len(list) != 1 || !strings.Contains(list[0]["error"].(string), unknownAction) || list[0]["actions_checked"] != true ||
		len(list[0]["checked_by"].([]any)) != 0 || list[0]["job"] != "nosuchaction" {
		t.Errorf("list -o json: %v", list)
	}
	r = d.ok("schedules", "get", "x")
	if !regexp.MustCompile(`(?m)^error: +.*`+regexp.QuoteMeta(unknownAction)).MatchString(r.stdout) ||
		!strings.Contains(r.stdout, "checked here with the daemons' rules and the actions of "+d.cfg) {
		t.Errorf("get x:\n%s", r.stdout)
	}
	var one map[string]any
	d.okJSON(&one, "schedules", "get", "x")
	if !strings.Contains(one["error"].(string), unknownAction) {
		t.Errorf("get -o json x: %v", one)
	}
	// Without the actions the command cannot know, and says so.
	r = e.ok("schedules", "list")
	if got := column(t, r.stdout, "x", "ERROR"); got != "-" || !strings.Contains(r.stderr, "actions not checked") {
		t.Errorf("list without the actions: ERROR %q, stderr %q", got, r.stderr)
	}
}

// `runs list --job` of a job that has neither a schedule nor records says
// so and exits 1; a job with a schedule and no runs yet is an empty list.
func TestRunsListUnknownJob(t *testing.T) {
	e := newEnv(t)
	r := e.run("runs", "list", "--job", "nosuch")
	if r.code != cli.ExitUserError || !strings.Contains(r.stderr, `no job "nosuch": no schedule and no run records`) {
		t.Errorf("runs list --job nosuch: %v", r)
	}
	e.ok("schedules", "set", "fresh", "--cron", "@hourly")
	if r := e.ok("runs", "list", "--job", "fresh"); strings.Count(r.stdout, "\n") != 1 {
		t.Errorf("runs list of a job without runs: %q, want the header alone", r.stdout)
	}
	// Records of a job whose schedule is gone are still listed.
	at := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	insertDocs(t, e.db.Collection(record.RunsCollection), record.RunDoc{ID: "old", JobID: "gone", ScheduledAt: at, Status: record.StatusSucceeded})
	if r := e.ok("runs", "list", "--job", "gone"); !strings.Contains(r.stdout, "old") {
		t.Errorf("runs list of a deleted job's records: %q", r.stdout)
	}
}

// `init` prints one aligned table: every state starts in one column.
func TestInitTableIsAligned(t *testing.T) {
	e := newEnv(t)
	for range 2 { // created, then exists
		r := e.ok("init")
		lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
		col := -1
		for _, l := range lines {
			m := regexp.MustCompile(`\s(created|exists|updated|unchanged|unsupported)$`).FindStringIndex(l)
			if m == nil {
				continue
			}
			if col < 0 {
				col = m[0]
			}
			if m[0] != col {
				t.Fatalf("init's states are not in one column:\n%s", r.stdout)
			}
		}
		if col < 0 {
			t.Fatalf("init printed no state:\n%s", r.stdout)
		}
	}
}

// The members document carries the daemon's HTTP address; members list
// shows it.
func TestMembersListShowsTheHTTPAddress(t *testing.T) {
	e := newEnv(t)
	now := time.Now()
	insertDocs(t, e.db.Collection(members.CollectionName), members.Member{ID: "node-a", Host: "h", Incarnation: "i",
		HeartbeatAt: now, LeaseUntil: now.Add(time.Minute), ExpireAt: now.Add(time.Hour), HTTP: "127.0.0.1:9090"})
	if got := column(t, e.ok("members", "list").stdout, "node-a", "HTTP"); got != "127.0.0.1:9090" {
		t.Errorf("members list HTTP = %q", got)
	}
	var list []map[string]any
	e.okJSON(&list, "members", "list")
	if b, _ := json.Marshal(list); len(list) != 1 || list[0]["http"] != "127.0.0.1:9090" {
		t.Errorf("members list -o json: %s", b)
	}
}
