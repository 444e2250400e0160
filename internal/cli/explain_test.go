package cli_test

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/cli"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/schedule"
)

// update rewrites the golden files under testdata/ (explain, next) from the output.
var update = flag.Bool("update", false, "rewrite the golden files under testdata/ from the output")

// insertExplainJob stores a job whose timeline over 2026-03-01 00:00 to
// 06:00 UTC has, in this order: a run at 00:00, a skip at 01:00, a missed
// range of 02:00 and 03:00 (one record, count 2), the edit at 03:15 that
// changed the expression from "0 * * * *" to "30 * * * *", and the new
// expression's three slots with nothing on record. The documents are
// written in the stored formats of job_runs and the edit history, not
// through the packages that write them.
func insertExplainJob(t *testing.T, e *env, id string) {
	t.Helper()
	h := func(hour, minute int) time.Time { return time.Date(2026, 3, 1, hour, minute, 0, 0, time.UTC) }
	insertDocs(t, e.db.Collection("schedules"), bson.D{
		{Key: "_id", Value: id}, {Key: "cron_expr", Value: "30 * * * *"}, {Key: "enabled", Value: true},
		{Key: "updated_at", Value: h(3, 15)}, {Key: "updated_by", Value: "alice"},
	})
	insertDocs(t, e.db.Collection(record.RunsCollection),
		bson.D{
			{Key: "_id", Value: "run-0000"}, {Key: "job_id", Value: id}, {Key: "scheduled_at", Value: h(0, 0)},
			{Key: "instance", Value: "host-a"}, {Key: "fence", Value: int64(7)}, {Key: "status", Value: record.StatusSucceeded},
			{Key: "started_at", Value: h(0, 0).Add(20 * time.Millisecond)}, {Key: "ended_at", Value: h(0, 0).Add(1520 * time.Millisecond)},
			{Key: "expire_at", Value: h(0, 0).Add(720 * time.Hour)},
		},
		bson.D{
			{Key: "_id", Value: "run-0100"}, {Key: "job_id", Value: id}, {Key: "scheduled_at", Value: h(1, 0)},
			{Key: "instance", Value: "host-b"}, {Key: "fence", Value: int64(0)}, {Key: "status", Value: record.StatusSkipped},
			{Key: "started_at", Value: h(1, 0)}, {Key: "ended_at", Value: h(1, 0)},
			{Key: "error", Value: "overlap forbid: run run-0000 of host-a still holds the lock"},
			{Key: "expire_at", Value: h(1, 0).Add(720 * time.Hour)},
		},
		bson.D{
			{Key: "_id", Value: id + "@2026-03-01T02:00:00Z"}, {Key: "job_id", Value: id}, {Key: "status", Value: "missed"},
			{Key: "scheduled_at", Value: h(2, 0)}, {Key: "last_scheduled_at", Value: h(3, 0)}, {Key: "count", Value: int32(2)},
			{Key: "reason", Value: "no_replica_running"}, {Key: "instance", Value: "host-a"},
			{Key: "recorded_at", Value: h(3, 10)}, {Key: "expire_at", Value: h(3, 10).Add(720 * time.Hour)},
		},
	)
	insertDocs(t, e.db.Collection("schedule_history"), bson.D{
		{Key: "_id", Value: "8263f0a1b2000000012b022c0100296e5a1004"}, {Key: "job_id", Value: id},
		{Key: "at", Value: h(3, 15)}, {Key: "op", Value: "update"},
		{Key: "changes", Value: bson.A{
			bson.D{{Key: "field", Value: "cron_expr"}, {Key: "before", Value: "0 * * * *"}, {Key: "after", Value: "30 * * * *"}},
			bson.D{{Key: "field", Value: "updated_at"}, {Key: "before", Value: h(0, 0).Add(-time.Hour)}, {Key: "after", Value: h(3, 15)}},
		}},
		{Key: "updated_by", Value: "alice"}, {Key: "expire_at", Value: h(3, 15).Add(720 * time.Hour)},
	})
}

// explain -o json of a job with a run, a skip, a missed range and an edit
// shows all four in that order, then the new expression's slots; the whole
// JSON is compared with testdata/explain.golden.json (go test -update
// rewrites it).
func TestExplainGolden(t *testing.T) {
	e := newEnv(t)
	insertExplainJob(t, e, "report")
	r := e.ok("explain", "report", "--from", "2026-03-01T00:00:00Z", "--to", "2026-03-01T06:00:00Z", "-o", "json")
	golden := filepath.Join("testdata", "explain.golden.json")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, []byte(r.stdout), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -run TestExplainGolden -update to create it)", err)
	}
	if r.stdout != string(want) {
		t.Errorf("explain -o json differs from %s:\n%s\nwant:\n%s", golden, r.stdout, want)
	}

	// The kinds in order, as a reader of the golden file should see them.
	var kinds []string
	for _, line := range strings.Split(r.stdout, "\n") {
		if k, ok := strings.CutPrefix(strings.TrimSpace(line), `"kind": `); ok {
			kinds = append(kinds, strings.Trim(k, `",`))
		}
	}
	if got := strings.Join(kinds, " "); got != "run skipped missed edit no_record" {
		t.Errorf("kinds in order: %s", got)
	}
}

// The text form has one row per entry with the edit rendered as
// before → after.
func TestExplainText(t *testing.T) {
	e := newEnv(t)
	insertExplainJob(t, e, "report")
	r := e.ok("explain", "report", "--from", "2026-03-01T00:00:00Z", "--to", "2026-03-01T06:00:00Z")
	for _, want := range []string{
		"job report from 2026-03-01T00:00:00Z to 2026-03-01T06:00:00Z\n",
		`  2026-03-01T00:00:00Z .. 2026-03-01T03:15:00Z  "0 * * * *" in UTC` + "\n",
		`  2026-03-01T03:15:00Z .. 2026-03-01T06:00:00Z  "30 * * * *" in UTC` + "\n",
		"2026-03-01T00:00:00Z  run        -      succeeded, on host-a, fence 7, took 1.5s\n",
		"2026-03-01T01:00:00Z  skipped    -      overlap forbid: run run-0000 of host-a still holds the lock, on host-b\n",
		"2026-03-01T02:00:00Z  missed     2      no_replica_running, 2 slots to 2026-03-01T03:00:00Z, recorded by host-a\n",
		`2026-03-01T03:15:00Z  edit       -      update cron_expr "0 * * * *" → "30 * * * *", by alice` + "\n",
		"2026-03-01T03:30:00Z  no_record  3      unrecorded, 3 slots to 2026-03-01T05:30:00Z\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("explain lacks %q:\n%s", want, r.stdout)
		}
	}
}

// Bad input exits 1 before any database is asked; an unknown job with
// nothing recorded exits 1; an unreachable server exits 2.
func TestExplainBadInputAndExitCodes(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"explain"}, "want exactly one job ID"},
		{[]string{"explain", "a", "b"}, "want exactly one job ID"},
		{[]string{"explain", "a", "--from", "yesterday"}, `from: bad time range: "yesterday": want RFC 3339`},
		{[]string{"explain", "a", "--to", "2h"}, "a relative time needs a sign: -2h"},
		{[]string{"explain", "a", "--from", "-1h", "--to", "-2h"}, "is after to"},
		{[]string{"explain", "a", "--from", "-40d"}, "more than the 744h0m0s one timeline covers"},
		{[]string{"explain", "a", "-o", "yaml"}, `--output "yaml": want text or json`},
	} {
		// A closed port: none of these may get as far as connecting.
		r := run(t, append(c.args, "--mongo-uri", "mongodb://"+closedPort(t)+"/?directConnection=true", "--timeout", "200ms")...)
		if r.code != cli.ExitUserError || !strings.Contains(r.stderr, c.want) || r.stdout != "" {
			t.Errorf("%q: %v; want exit 1 saying %q", c.args, r, c.want)
		}
	}

	e := newEnv(t)
	if r := e.run("explain", "nobody"); r.code != cli.ExitUserError || !strings.Contains(r.stderr, `no job "nobody"`) || r.stdout != "" {
		t.Errorf("explain of an unknown job: %v", r)
	}
	// A job whose document is gone but whose runs are on record is known.
	insertDocs(t, e.db.Collection(record.RunsCollection), bson.D{
		{Key: "_id", Value: "r1"}, {Key: "job_id", Value: "gone"}, {Key: "scheduled_at", Value: time.Now().Add(-time.Hour).UTC()},
		{Key: "status", Value: record.StatusSucceeded}, {Key: "instance", Value: "h"}, {Key: "fence", Value: int64(1)},
	})
	if r := e.ok("explain", "gone", "-o", "json"); !strings.Contains(r.stdout, `"schedule": null`) || !strings.Contains(r.stdout, `"kind": "run"`) {
		t.Errorf("explain of a deleted job with runs: %v", r)
	}

	r := run(t, "explain", "a", "--mongo-uri", "mongodb://"+closedPort(t)+"/?directConnection=true", "--timeout", "300ms")
	if r.code != cli.ExitUnreachable || !strings.Contains(r.stderr, "cannot reach MongoDB") {
		t.Errorf("explain with the server unreachable: %v; want exit 2", r)
	}
}

// insertFirstSeen stores job id's first sighting at at, in the stored
// format of the edit history (not through the package that writes it).
func insertFirstSeen(t *testing.T, e *env, id string, at time.Time, source string) {
	t.Helper()
	insertDocs(t, e.db.Collection("schedule_history"), bson.D{
		{Key: "_id", Value: "first_seen/" + id}, {Key: "job_id", Value: id}, {Key: "op", Value: "first_seen"},
		{Key: "at", Value: at}, {Key: "source", Value: source}, {Key: "instance", Value: "host-a"}, {Key: "recorded_at", Value: at},
	})
}

// A job first seen at 02:30:00.123 whose insert is not in the history (no
// replica recorded it) expects no slot before its sighting: the timeline
// lists 03:00 to 06:00 only, and says where it begins and why.
func TestExplainStartsAtTheFirstSighting(t *testing.T) {
	e := newEnv(t)
	seen := time.Date(2026, 3, 1, 2, 30, 0, 123e6, time.UTC)
	insertDocs(t, e.db.Collection("schedules"), bson.D{{Key: "_id", Value: "fresh"}, {Key: "cron_expr", Value: "0 * * * *"}, {Key: "updated_at", Value: seen}})
	insertFirstSeen(t, e, "fresh", seen, "insert")
	var tl struct {
		FirstSeen *struct {
			At     time.Time `json:"at"`
			Source string    `json:"source"`
		} `json:"first_seen"`
		Entries []struct {
			Kind  string    `json:"kind"`
			At    time.Time `json:"at"`
			Count int       `json:"count"`
		} `json:"entries"`
	}
	e.okJSON(&tl, "explain", "fresh", "--from", "2026-03-01T00:00:00Z", "--to", "2026-03-01T06:00:00Z")
	if len(tl.Entries) != 1 || !tl.Entries[0].At.Equal(seen.Truncate(time.Hour).Add(time.Hour)) || tl.Entries[0].Count != 4 {
		t.Errorf("entries %+v, want one no_record stretch from 03:00, 4 slots", tl.Entries)
	}
	if tl.FirstSeen == nil || !tl.FirstSeen.At.Equal(seen) || tl.FirstSeen.Source != "insert" {
		t.Errorf("first_seen %+v, want %s from its insert", tl.FirstSeen, seen)
	}
	r := e.ok("explain", "fresh", "--from", "2026-03-01T00:00:00Z", "--to", "2026-03-01T06:00:00Z")
	for _, want := range []string{
		"first seen 2026-03-01T02:30:00.123Z (when its document was inserted): no slot before it is expected\n",
		"2026-03-01T03:00:00Z  no_record  4      unrecorded, 4 slots to 2026-03-01T06:00:00Z\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("explain lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "T02:00:00Z  no_record") || strings.Contains(r.stdout, "T00:00:00Z  no_record") {
		t.Errorf("explain lists slots before the first sighting:\n%s", r.stdout)
	}
}

// A numeric cron_expr reads as the daemon reads it: the stored value (5)
// and the decoder's error, word for word, not "" and "empty expression".
func TestExplainShowsTheDaemonsDecodeError(t *testing.T) {
	e := newEnv(t)
	doc := bson.D{{Key: "_id", Value: "num"}, {Key: "cron_expr", Value: int32(5)}}
	insertDocs(t, e.db.Collection("schedules"), doc)
	raw, err := bson.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	_, daemonErr := schedule.DecodeFields(raw)
	if daemonErr == nil || !strings.Contains(daemonErr.Error(), "must be a string, not an int32") {
		t.Fatalf("the daemon's decoder says %v", daemonErr)
	}
	r := e.ok("explain", "num", "--from", "2026-03-01T00:00:00Z", "--to", "2026-03-01T06:00:00Z")
	for _, want := range []string{
		"schedule now refused by the daemons: " + daemonErr.Error() + "\n",
		"  2026-03-01T00:00:00Z .. 2026-03-01T06:00:00Z  5 in UTC: " + daemonErr.Error() + "\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("explain lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, `""`) || strings.Contains(r.stdout, "empty") {
		t.Errorf("explain shows an empty expression:\n%s", r.stdout)
	}
	var tl struct {
		Schedule struct {
			CronExpr string `json:"cron_expr"`
			Error    string `json:"error"`
		} `json:"schedule"`
	}
	e.okJSON(&tl, "explain", "num", "--from", "2026-03-01T00:00:00Z", "--to", "2026-03-01T06:00:00Z")
	if tl.Schedule.CronExpr != "5" || tl.Schedule.Error != daemonErr.Error() {
		t.Errorf("schedule %+v, want cron_expr 5 and the daemon's error", tl.Schedule)
	}
}
