package cli_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/record"
)

// A job paused after consecutive failures shows it in `schedules list`
// (status and note; failure_pause in JSON) and `schedules get`;
// `schedules resume` clears it (state resumed, who and when); a damaged
// pause document shows as the schedule's error and pauses nothing.
func TestSchedulesFailurePauseListAndResume(t *testing.T) {
	e := newEnv(t)
	now := time.Now().UTC().Truncate(time.Second)
	insertDocs(t, e.db.Collection("schedules"),
		bson.D{{Key: "_id", Value: "flaky"}, {Key: "cron_expr", Value: "@hourly"}},
		bson.D{{Key: "_id", Value: "damaged"}, {Key: "cron_expr", Value: "@hourly"}},
		bson.D{{Key: "_id", Value: "fine"}, {Key: "cron_expr", Value: "@hourly"}},
	)
	insertDocs(t, e.db.Collection(record.PausesCollection),
		bson.D{{Key: "_id", Value: "flaky"}, {Key: "state", Value: record.PauseStatePaused}, {Key: "paused_at", Value: now},
			{Key: "note", Value: "paused after 3 consecutive failed slots; the last: exit status 1"}, {Key: "failures", Value: 3}},
		bson.D{{Key: "_id", Value: "damaged"}, {Key: "state", Value: 12}},
	)
	var list []map[string]any
	e.okJSON(&list, "schedules", "list")
	byID := map[string]map[string]any{}
	for _, v := range list {
		byID[v["id"].(string)] = v
	}
	fp, ok := byID["flaky"]["failure_pause"].(map[string]any)
	if !ok || fp["state"] != "paused" || !strings.Contains(fp["note"].(string), "3 consecutive") {
		t.Fatalf("flaky: %v, want failure_pause with the note", byID["flaky"])
	}
	if _, ok := byID["fine"]["failure_pause"]; ok {
		t.Errorf("fine: %v, want no failure_pause", byID["fine"])
	}
	if v := byID["damaged"]; v["failure_pause"] != nil || !strings.Contains(v["error"].(string), "no valid state") {
		t.Errorf("damaged: %v, want not paused and the damage as its error", v)
	}
	r := e.ok("schedules", "list")
	if got := column(t, r.stdout, "flaky", "STATUS"); got != "paused after failures" {
		t.Errorf("flaky STATUS %q\n%s", got, r.stdout)
	}
	if got := column(t, r.stdout, "flaky", "ERROR"); !strings.Contains(got, "3 consecutive failed slots") {
		t.Errorf("flaky ERROR %q\n%s", got, r.stdout)
	}

	r = e.ok("schedules", "resume", "flaky")
	if !strings.Contains(r.stdout, "resumed flaky") {
		t.Errorf("resume: %q", r.stdout)
	}
	var p record.PauseDoc
	if err := e.db.Collection(record.PausesCollection).FindOne(ctx(t), bson.D{{Key: "_id", Value: "flaky"}}).Decode(&p); err != nil {
		t.Fatal(err)
	}
	if p.State != record.PauseStateResumed || p.ResumedAt.IsZero() || p.ResumedBy == "" {
		t.Errorf("after resume: %+v, want resumed with when and by whom", p)
	}
	list = nil
	e.okJSON(&list, "schedules", "list")
	for _, v := range list {
		if v["id"] == "flaky" && v["failure_pause"] != nil {
			t.Errorf("flaky after resume: %v", v)
		}
	}
	r = e.ok("schedules", "resume", "flaky")
	if !strings.Contains(r.stdout, "already") {
		t.Errorf("second resume: %q, want already enabled", r.stdout)
	}
}

// explain shows a pause after consecutive failures (a line in the text,
// failure_pause in JSON), and nothing once resumed; a run between
// attempts shows as retrying with its attempt.
func TestExplainShowsFailurePause(t *testing.T) {
	e := newEnv(t)
	insertExplainJob(t, e, "report")
	at := time.Date(2026, 3, 1, 5, 0, 0, 0, time.UTC)
	insertDocs(t, e.db.Collection(record.PausesCollection),
		bson.D{{Key: "_id", Value: "report"}, {Key: "state", Value: record.PauseStatePaused}, {Key: "paused_at", Value: at},
			{Key: "note", Value: "paused after 2 consecutive failed slots"}, {Key: "failures", Value: 2}})
	slot := time.Date(2026, 3, 1, 3, 30, 0, 0, time.UTC)
	insertDocs(t, e.db.Collection(record.RunsCollection), bson.D{
		{Key: "_id", Value: record.RunID("report", slot)}, {Key: "job_id", Value: "report"}, {Key: "scheduled_at", Value: slot},
		{Key: "instance", Value: "host-a"}, {Key: "fence", Value: record.FenceOf(slot) + 1}, {Key: "status", Value: record.StatusRetrying},
		{Key: record.FieldAttempt, Value: 2}, {Key: record.FieldRetryAt, Value: slot.Add(time.Minute)},
	})
	args := []string{"explain", "report", "--from", "2026-03-01T00:00:00Z", "--to", "2026-03-01T06:00:00Z"}
	r := e.ok(args...)
	if want := fmt.Sprintf("retrying, on host-a, fence %d, attempt 2", record.FenceOf(slot)+1); !strings.Contains(r.stdout, want) {
		t.Errorf("explain lacks %q:\n%s", want, r.stdout)
	}
	if want := "paused after failures since 2026-03-01T05:00:00Z: paused after 2 consecutive failed slots (`cronswap schedules resume report` clears it)\n"; !strings.Contains(r.stdout, want) {
		t.Errorf("explain lacks %q:\n%s", want, r.stdout)
	}
	var tl map[string]any
	e.okJSON(&tl, append(args, "-o", "json")...)
	if fp, ok := tl["failure_pause"].(map[string]any); !ok || fp["failures"] != float64(2) {
		t.Errorf("explain -o json failure_pause: %v", tl["failure_pause"])
	}
	e.ok("schedules", "resume", "report")
	if r := e.ok(args...); strings.Contains(r.stdout, "paused after failures") {
		t.Errorf("explain after resume:\n%s", r.stdout)
	}
}

// `runs get` shows a retried run's attempts: attempt, retry_at and one
// line per ended attempt (attempts in JSON).
func TestRunsGetShowsAttempts(t *testing.T) {
	e := newEnv(t)
	slot := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	id := record.RunID("flaky", slot)
	insertDocs(t, e.db.Collection(record.RunsCollection), bson.D{
		{Key: "_id", Value: id}, {Key: "job_id", Value: "flaky"}, {Key: "scheduled_at", Value: slot},
		{Key: "instance", Value: "host-b"}, {Key: "fence", Value: record.FenceOf(slot) + 1}, {Key: "status", Value: record.StatusRetrying},
		{Key: record.FieldAttempt, Value: 2}, {Key: record.FieldRetryAt, Value: slot.Add(time.Minute)},
		{Key: record.FieldAttempts, Value: bson.A{
			bson.D{{Key: "attempt", Value: 1}, {Key: "fence", Value: record.FenceOf(slot)}, {Key: "instance", Value: "host-a"},
				{Key: "started_at", Value: slot}, {Key: "ended_at", Value: slot.Add(time.Second)}, {Key: "status", Value: record.StatusRetrying},
				{Key: "error", Value: "exit status 1"}},
			bson.D{{Key: "attempt", Value: 2}, {Key: "fence", Value: record.FenceOf(slot) + 1}, {Key: "instance", Value: "host-b"},
				{Key: "started_at", Value: slot.Add(31 * time.Second)}, {Key: "ended_at", Value: slot.Add(32 * time.Second)},
				{Key: "status", Value: record.StatusRetrying}, {Key: "error", Value: "exit status 2"}},
		}},
	})
	r := e.ok("runs", "get", id)
	var lines []string // each line with its runs of blanks as one
	for _, l := range strings.Split(r.stdout, "\n") {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	text := strings.Join(lines, "\n")
	for _, want := range []string{"\nATTEMPT 2\n", "\nRETRY AT 2026-03-01T09:01:00Z\n",
		fmt.Sprintf("\nATTEMPT 1 retrying on host-a, fence %d, 2026-03-01T09:00:00Z .. 2026-03-01T09:00:01Z: exit status 1\n", record.FenceOf(slot))} {
		if !strings.Contains(text, want) {
			t.Errorf("runs get lacks %q:\n%s", want, r.stdout)
		}
	}
	var v map[string]any
	e.okJSON(&v, "runs", "get", id)
	if as, ok := v["attempts"].([]any); !ok || len(as) != 2 || v["attempt"] != float64(2) || v["retry_at"] != "2026-03-01T09:01:00Z" {
		t.Errorf("runs get -o json: %v", v)
	}
}
