package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// A password in the connection string never reaches the log (start-up,
// connection and authentication errors included) or the HTTP endpoints.
func TestPasswordNeverLoggedOrServed(t *testing.T) {
	uri, db := setup(t)
	host := hostOf(t, uri)
	const (
		plain   = "Pl41nS3cretPassw0rd"
		encoded = "p%40ss%3Aw0rd%2FS3cr3t" // p@ss:w0rd/S3cr3t
		decoded = "p@ss:w0rd/S3cr3t"
	)
	for i, cred := range []string{"cronswap:" + plain, "ops:" + encoded} {
		secretURI := "mongodb://" + cred + "@" + host + "/?authSource=admin&serverSelectionTimeoutMS=1000"
		d := startDaemon(t, writeConfig(t, daemonConfig{URI: secretURI, Database: db.Name(), InstanceID: "e2e-secret-" + string(rune('a'+i))}))
		// The test server has no users: authentication fails and the error
		// path is logged, over and over.
		waitFor(t, 30*time.Second, "failed connection attempts logged", func() bool { return countLogs(d, isReconnectLog) >= 2 })
		if l, ok := d.findLog(isReconnectLog); ok {
			t.Logf("connection error as logged: %s", l.str("error"))
		}
		started, _ := d.findLog(func(l logLine) bool { return l.str("msg") == "cronswap started" })
		if u := started.str("mongo_uri"); !strings.Contains(u, ":xxxxx@"+host) {
			t.Errorf("start-up log shows mongo_uri=%q, want the URI with its password masked", u)
		}
		var bodies [][]byte
		for _, path := range []string{"/api/status", "/api/schedules", "/metrics", "/readyz", "/healthz"} {
			resp, err := http.Get(d.url(path))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			bodies = append(bodies, b)
		}
		d.signal(syscall.SIGTERM)
		if err := d.wait(30 * time.Second); err != nil {
			t.Fatalf("exit after SIGINT: %v", err)
		}
		logs := d.rawLog()
		for _, secret := range []string{plain, encoded, decoded, "S3cr3t"} {
			if strings.Contains(logs, secret) {
				t.Errorf("the log holds the password %q:\n%s", secret, logs)
			}
			for _, b := range bodies {
				if bytes.Contains(b, []byte(secret)) {
					t.Errorf("an HTTP answer holds the password %q: %s", secret, b)
				}
			}
		}
	}
}

// args from a schedules document reach an exec action only as data, in
// CRONSWAP_ARGS: shell metacharacters in them never run anything. The action
// here is `cp /proc/self/environ OUT`, so the test sees the exact environment
// the program got.
func TestHostileArgsReachExecOnlyAsData(t *testing.T) {
	uri, db := setup(t)
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.Mkdir(victim, 0o755); err != nil {
		t.Fatal(err)
	}
	marker := func(name string) string { return filepath.Join(dir, name) }
	args := bson.D{
		{Key: "subst", Value: "$(touch " + marker("subst") + ")"},
		{Key: "semi", Value: "; touch " + marker("semi") + "; rm -rf " + victim},
		{Key: "backtick", Value: "`touch " + marker("backtick") + "`"},
		{Key: "quotes", Value: `'"; touch ` + marker("quotes") + `; echo "'`},
		{Key: "pipe", Value: "| touch " + marker("pipe") + " &"},
		{Key: "nested", Value: bson.D{{Key: "x", Value: bson.A{"$(touch " + marker("nested") + ")"}}}},
	}
	out := filepath.Join(dir, "environ")
	jobs := "\n  capture:\n    exec: [\"cp\", \"/proc/self/environ\", " + jsonString(out) + "]\n"
	insert(t, db, bson.D{{Key: "_id", Value: "hostile"}, {Key: "cron_expr", Value: "@every 1s"},
		{Key: "job", Value: "capture"}, {Key: "args", Value: args}})
	d := startDaemon(t, writeConfig(t, daemonConfig{URI: uri, Database: db.Name(), Jobs: jobs}))
	d.waitReady()

	var env map[string]string
	waitFor(t, 30*time.Second, "the action ran", func() bool {
		b, err := os.ReadFile(out)
		if err != nil {
			return false
		}
		env = map[string]string{}
		for _, kv := range strings.Split(string(b), "\x00") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				env[k] = v
			}
		}
		return env["CRONSWAP_ARGS"] != ""
	})
	var got, want any
	if err := json.Unmarshal([]byte(env["CRONSWAP_ARGS"]), &got); err != nil {
		t.Fatalf("CRONSWAP_ARGS is not JSON: %q", env["CRONSWAP_ARGS"])
	}
	wantJSON, err := bson.MarshalExtJSON(args, false, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(wantJSON, &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("CRONSWAP_ARGS = %v, want %v", got, want)
	}
	if env["CRONSWAP_JOB_ID"] != "hostile" {
		t.Fatalf("CRONSWAP_JOB_ID = %q", env["CRONSWAP_JOB_ID"])
	}
	for _, name := range []string{"subst", "semi", "backtick", "quotes", "pipe", "nested"} {
		if _, err := os.Stat(marker(name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("marker %s exists: an argument was run as a command", name)
		}
	}
	if _, err := os.Stat(victim); err != nil {
		t.Errorf("the victim directory is gone: %v", err)
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// Hostile documents arrive while the daemon streams and again in a full
// reload: each is accepted or listed with a clear error, and the daemon
// keeps running.
func TestHostileDocuments(t *testing.T) {
	uri, db := setup(t)
	insert(t, db, sched("daily_report", "0 9 * * *"))
	cfg := writeConfig(t, daemonConfig{URI: uri, Database: db.Name()})
	d := startDaemon(t, cfg)
	d.waitReady()
	oid := bson.NewObjectID()
	docs := []bson.D{
		{{Key: "_id", Value: "huge"}, {Key: "cron_expr", Value: "@hourly"}, {Key: "job", Value: "heartbeat"},
			{Key: "pad", Value: strings.Repeat("x", 100<<10)}},
		{{Key: "_id", Value: "extra_fields"}, {Key: "cron_expr", Value: "@hourly"}, {Key: "job", Value: "heartbeat"},
			{Key: "owner", Value: "ops"}, {Key: "retries", Value: int32(3)}, {Key: "notes", Value: bson.D{{Key: "a", Value: bson.A{1, "b"}}}}},
		{{Key: "_id", Value: oid}, {Key: "cron_expr", Value: "@hourly"}, {Key: "job", Value: "heartbeat"}},
		{{Key: "_id", Value: int32(42)}, {Key: "cron_expr", Value: "@hourly"}, {Key: "job", Value: "heartbeat"}},
		{{Key: "_id", Value: "일일_보고서 ✓"}, {Key: "cron_expr", Value: "CRON_TZ=Asia/Seoul 0 9 * * *"}, {Key: "job", Value: "heartbeat"}},
	}
	insert(t, db, docs...)
	check := func(d *daemon) {
		t.Helper()
		waitFor(t, 10*time.Second, "hostile documents listed", func() bool { return len(d.schedules()) == 6 })
		list := d.schedules()
		if s := list["huge"]; s.Armed || !strings.Contains(s.LastError, "bytes, more than") {
			t.Errorf("huge: %+v", s)
		}
		if s := list["extra_fields"]; !s.Armed || s.LastError != "" {
			t.Errorf("extra_fields: %+v", s)
		}
		if s := list["일일_보고서 ✓"]; !s.Armed || s.LastError != "" {
			t.Errorf("unicode id: %+v", s)
		}
		nonString := 0
		for id, s := range list {
			if strings.Contains(s.LastError, "must be a string job id") {
				nonString++
				if s.Armed {
					t.Errorf("non-string id %s armed", id)
				}
			}
		}
		if nonString != 2 {
			t.Errorf("%d documents listed as non-string ids, want 2 (ObjectId, int): %+v", nonString, list)
		}
		var one apiSchedule
		if code := d.get("/api/schedules/"+url.PathEscape("일일_보고서 ✓"), &one); code != http.StatusOK || !one.Armed {
			t.Errorf("GET unicode id = %d %+v", code, one)
		}
	}
	check(d)
	// The same documents through a full reload (restart).
	d.signal(syscall.SIGTERM)
	if err := d.wait(30 * time.Second); err != nil {
		t.Fatalf("exit: %v", err)
	}
	d2 := startDaemon(t, cfg)
	d2.waitReady()
	check(d2)
	mongosh(t, uri, db.Name(), seedOneLiner)
	waitFor(t, 10*time.Second, "still streaming", func() bool { return d2.schedules()["daily_report"].CronExpr == "0 8 * * *" })
}
