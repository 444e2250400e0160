package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/schedule"
)

// Configuration that would make every run fail stops `cronswap run` at
// start with the job and the key named, while the commands that only read
// the configuration keep working where the jobs' programs are not
// installed.
func TestBadInputConfigRefusedAtStart(t *testing.T) {
	uri, db := setup(t)
	missing := filepath.Join(t.TempDir(), "bin", "daily-report")
	cases := []struct {
		name string
		c    daemonConfig
		want []string
		load bool // the configuration loads (only the daemon refuses it)
	}{
		{"missing program", daemonConfig{Jobs: "\n  report:\n    exec: [\"" + missing + "\", \"--all\"]\n"},
			[]string{`job "report"`, missing}, true},
		{"missing program on PATH", daemonConfig{Jobs: "\n  report:\n    exec: [\"no-such-report-tool\"]\n"},
			[]string{`job "report"`, "no-such-report-tool", "PATH"}, true},
		{"lock.ttl 1ms", daemonConfig{Extra: "lock:\n  ttl: 1ms\n"}, []string{"lock.ttl 1ms", "at least 3s"}, false},
		{"http url", daemonConfig{Jobs: "\n  hook:\n    http: {url: \"::not a url\"}\n"}, []string{"jobs.hook", "http.url"}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.c.URI, c.c.Database = uri, db.Name()
			cfg := writeConfig(t, c.c)
			start := time.Now()
			_, errOut, code := cli(t, cfg, "run")
			if code == 0 {
				t.Fatalf("run exited 0")
			}
			for _, w := range c.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("run's error does not say %q:\n%s", w, errOut)
				}
			}
			if strings.Contains(errOut, "cronswap started") {
				t.Errorf("the daemon started before refusing:\n%s", errOut)
			}
			t.Logf("refused after %s", time.Since(start))
			out, errOut, code := cli(t, cfg, "schedules", "list")
			if c.load && code != 0 {
				t.Errorf("schedules list with this config: exit %d\n%s%s", code, out, errOut)
			}
			if !c.load && (code == 0 || !strings.Contains(errOut, c.want[0])) {
				t.Errorf("schedules list loaded a config run refuses: exit %d\n%s", code, errOut)
			}
		})
	}
}

// Documents refused at decode, while the daemon streams: enabled: null and
// args too long for CRONSWAP_ARGS keep the last good timer and show the
// error; a refused document whose _id renders as a valid job's id is listed
// apart from that job and its delete does not disarm it.
func TestBadInputDocuments(t *testing.T) {
	uri, db := setup(t)
	insert(t, db, sched("daily_report", "0 9 * * *"))
	d := startDaemon(t, writeConfig(t, daemonConfig{URI: uri, Database: db.Name()}))
	d.waitReady()
	good := d.schedules()["daily_report"]
	if !good.Armed || good.NextRun == nil {
		t.Fatalf("daily_report not armed: %+v", good)
	}
	for _, c := range []struct {
		name, edit, reason string
	}{
		{"enabled null", `db.schedules.updateOne({ _id: "daily_report" }, { $set: { enabled: null, cron_expr: "* * * * * *" } })`, "field enabled"},
		{"args too long", `db.schedules.updateOne({ _id: "daily_report" }, { $set: { args: { blob: "\u0001".repeat(22000) }, cron_expr: "* * * * * *" } })`, "CRONSWAP_ARGS"},
	} {
		mongosh(t, uri, db.Name(), c.edit)
		waitFor(t, 10*time.Second, c.name+": last_error shown", func() bool {
			return strings.Contains(d.schedules()["daily_report"].LastError, c.reason)
		})
		if s := d.schedules()["daily_report"]; !s.Armed || s.CronExpr != "0 9 * * *" || s.NextRun == nil || *s.NextRun != *good.NextRun {
			t.Fatalf("%s: last known good not kept: %+v", c.name, s)
		}
		mongosh(t, uri, db.Name(), `db.schedules.updateOne({ _id: "daily_report" }, { $set: { cron_expr: "0 9 * * *" }, $unset: { enabled: "", args: "" } })`)
		waitFor(t, 10*time.Second, c.name+": fixed document clears the error", func() bool {
			s := d.schedules()["daily_report"]
			return s.LastError == "" && s.Armed && s.CronExpr == "0 9 * * *"
		})
	}

	// The collision: a job whose id is the rendering of another document's _id.
	rendering := `{"tenant": "x","n": {"$numberInt":"1"}}`
	insert(t, db, append(sched(rendering, "0 7 * * *"), bson.E{Key: "job", Value: "heartbeat"}))
	waitFor(t, 10*time.Second, "job with the rendered id armed", func() bool { return d.schedules()[rendering].Armed })
	mongosh(t, uri, db.Name(), `db.schedules.insertOne({ _id: { tenant: "x", n: 1 }, cron_expr: "@hourly", job: "heartbeat" })`)
	waitFor(t, 10*time.Second, "non-string _id listed apart", func() bool {
		s, ok := d.schedules()[schedule.RefusedKey(rendering)]
		return ok && s.InvalidID && !s.Armed && strings.Contains(s.LastError, "must be a string job id")
	})
	if s := d.schedules()[rendering]; !s.Armed || s.LastError != "" || s.CronExpr != "0 7 * * *" {
		t.Fatalf("the job was touched by the refused document: %+v", s)
	}
	mongosh(t, uri, db.Name(), `db.schedules.deleteOne({ _id: { tenant: "x", n: 1 } })`)
	waitFor(t, 10*time.Second, "refused document gone", func() bool {
		_, ok := d.schedules()[schedule.RefusedKey(rendering)]
		return !ok
	})
	// A later edit shows the stream went on past the delete; the job is still armed.
	mongosh(t, uri, db.Name(), seedOneLiner)
	waitFor(t, 10*time.Second, "still streaming", func() bool { return d.schedules()["daily_report"].CronExpr == "0 8 * * *" })
	if s := d.schedules()[rendering]; !s.Armed || s.LastError != "" {
		t.Fatalf("deleting the refused document disarmed the job %q: %+v", rendering, s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := db.Collection("schedules").CountDocuments(ctx, bson.D{{Key: "_id", Value: rendering}})
	if err != nil || n != 1 {
		t.Fatalf("the job's document: %d, %v", n, err)
	}
}
