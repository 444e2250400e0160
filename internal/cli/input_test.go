package cli_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/internal/admin"
	"github.com/cronswap/cronswap/internal/cli"
	"github.com/cronswap/cronswap/internal/record"
)

// enabled: null is refused by the validator init installs, by `schedules
// set` (which checks the merged document as the daemon decodes it), and
// `schedules resume` repairs it.
func TestEnabledNullRefusedEverywhere(t *testing.T) {
	e := newEnv(t)
	coll := e.db.Collection("schedules")
	// Stored behind the validator's back (no init yet).
	insertDocs(t, coll, bson.D{{Key: "_id", Value: "billing"}, {Key: "cron_expr", Value: "0 2 * * *"}, {Key: "enabled", Value: nil}})

	r := e.run("schedules", "set", "billing", "--cron", "0 3 * * *")
	if r.code != cli.ExitUserError || !strings.Contains(r.stderr, "nothing written") || !strings.Contains(r.stderr, "field enabled") ||
		!strings.Contains(r.stderr, "not null") {
		t.Fatalf("set over enabled: null: %v", r)
	}
	if doc := e.rawSchedule("billing"); doc["cron_expr"] != "0 2 * * *" {
		t.Fatalf("refused set wrote %v", doc)
	}
	var list []map[string]any
	e.okJSON(&list, "schedules", "list")
	if len(list) != 1 || !strings.Contains(list[0]["error"].(string), "field enabled") || list[0]["next_run"] != nil {
		t.Fatalf("list shows enabled: null as %v, want the error and no next run", list)
	}

	r = e.ok("schedules", "resume", "billing")
	if strings.Contains(r.stdout, "already") {
		t.Fatalf("resume over enabled: null said %q, want it to set enabled: true", r.stdout)
	}
	if doc := e.rawSchedule("billing"); doc["enabled"] != true {
		t.Fatalf("after resume: %v", doc)
	}
	e.ok("schedules", "set", "billing", "--cron", "0 3 * * *")
	// resume on a document without enabled (enabled) changes nothing.
	e.ok("schedules", "set", "plain", "--cron", "@hourly")
	if r := e.ok("schedules", "resume", "plain"); !strings.Contains(r.stdout, "already") {
		t.Errorf("resume of a document without enabled: %q", r.stdout)
	}

	var rep admin.InitReport
	e.okJSON(&rep, "init")
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := coll.InsertOne(c, bson.D{{Key: "_id", Value: "nulled"}, {Key: "cron_expr", Value: "@hourly"}, {Key: "enabled", Value: nil}})
	switch rep.Validator {
	case admin.ValidatorUpdated, admin.ValidatorCreated:
		var we mongo.WriteException
		if !errors.As(err, &we) || !strings.Contains(err.Error(), "Document failed validation") {
			t.Fatalf("insert of enabled: null behind the validator: %v", err)
		}
		for _, ok := range []bson.D{
			{{Key: "_id", Value: "off"}, {Key: "cron_expr", Value: "@hourly"}, {Key: "enabled", Value: false}},
			{{Key: "_id", Value: "nullzone"}, {Key: "cron_expr", Value: "@hourly"}, {Key: "timezone", Value: nil}},
		} {
			if _, err := coll.InsertOne(c, ok); err != nil {
				t.Errorf("validator refused %v: %v", ok, err)
			}
		}
	case admin.ValidatorUnsupported:
		t.Logf("server without validators: %v", err)
	default:
		t.Fatalf("init validator %q", rep.Validator)
	}
}

// Args whose JSON would not fit in the CRONSWAP_ARGS environment variable
// are refused by `schedules set` before anything is written.
func TestSchedulesSetRefusesArgsTooLongForTheEnvironment(t *testing.T) {
	e := newEnv(t)
	big := `{"blob":"` + strings.Repeat(`\u0001`, 22000) + `"}` // 22 KB of BSON, 132 KB of JSON
	r := e.run("schedules", "set", "export", "--cron", "@hourly", "--args", big)
	if r.code != cli.ExitUserError || !strings.Contains(r.stderr, "nothing written") || !strings.Contains(r.stderr, "field args") ||
		!strings.Contains(r.stderr, "CRONSWAP_ARGS") {
		t.Fatalf("set with oversized args: exit %d\n%s", r.code, r.stderr)
	}
	if e.count("schedules") != 0 {
		t.Fatal("refused set wrote a document")
	}
	e.ok("schedules", "set", "export", "--cron", "@hourly", "--args", `{"region":"eu"}`)
}

// A document whose _id is not a string is listed apart from the job whose
// id equals the _id's rendering, and the job's runs are not shown as its.
func TestSchedulesListShowsNonStringIDsApart(t *testing.T) {
	e := newEnv(t)
	rendering := `{"tenant": "x","n": {"$numberInt":"1"}}`
	insertDocs(t, e.db.Collection("schedules"),
		bson.D{{Key: "_id", Value: bson.D{{Key: "tenant", Value: "x"}, {Key: "n", Value: int32(1)}}}, {Key: "cron_expr", Value: "@hourly"}},
		bson.D{{Key: "_id", Value: rendering}, {Key: "cron_expr", Value: "@hourly"}},
	)
	slot := time.Now().UTC().Truncate(time.Hour)
	insertDocs(t, e.db.Collection(record.RunsCollection),
		record.RunDoc{ID: "r1", JobID: rendering, ScheduledAt: slot, Status: record.StatusSucceeded, StartedAt: slot, EndedAt: slot.Add(time.Second)})

	var list []map[string]any
	e.okJSON(&list, "schedules", "list")
	if len(list) != 2 {
		t.Fatalf("list: %v", list)
	}
	var job, refused map[string]any
	for _, v := range list {
		if v["invalid_id"] == true {
			refused = v
		} else {
			job = v
		}
	}
	if job == nil || refused == nil {
		t.Fatalf("want one job and one invalid _id: %v", list)
	}
	if job["id"] != rendering || job["error"] != "" || job["last_status"] != "succeeded" || job["next_run"] == nil {
		t.Errorf("job: %v", job)
	}
	if refused["id"] != rendering || !strings.Contains(refused["error"].(string), "must be a string job id") ||
		refused["last_run"] != nil || refused["last_status"] != "" || refused["next_run"] != nil {
		t.Errorf("invalid _id: %v", refused)
	}
	r := e.ok("schedules", "list")
	if got := column(t, r.stdout, "_id "+rendering, "ERROR"); !strings.Contains(got, "must be a string job id") {
		t.Errorf("invalid _id row ERROR %q\n%s", got, r.stdout)
	}
	if got := column(t, r.stdout, rendering, "STATUS"); got != "succeeded" {
		t.Errorf("job row STATUS %q\n%s", got, r.stdout)
	}
}
