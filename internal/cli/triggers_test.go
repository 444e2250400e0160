package cli_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/internal/cli"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/internal/triggers"
)

// run-now writes a request for an existing job (its args, who asked,
// when); a missing job, bad --args and a negative --wait are user errors;
// --wait without a daemon ends pending, exit 1.
func TestRunNowWritesRequest(t *testing.T) {
	e := newEnv(t)
	e.ok("schedules", "set", "rep", "--cron", "0 9 * * *")
	var out struct {
		TriggerID string `json:"trigger_id"`
		JobID     string `json:"job_id"`
		RunID     string `json:"run_id"`
	}
	before := time.Now().Add(-time.Millisecond)
	e.okJSON(&out, "run-now", "rep", "--args", `{"region": "eu"}`, "-o", "json")
	oid, err := bson.ObjectIDFromHex(out.TriggerID)
	if err != nil || out.JobID != "rep" || out.RunID != triggers.RunIDOf(out.TriggerID) {
		t.Fatalf("run-now output %+v (%v)", out, err)
	}
	var doc triggers.Doc
	if err := e.db.Collection(triggers.CollectionName).FindOne(ctx(t), bson.D{{Key: "_id", Value: oid}}).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	if doc.JobID != "rep" || doc.Args["region"] != "eu" || doc.RequestedAt.Before(before) || doc.RequestedBy == "" || doc.Status != "" {
		t.Errorf("request %+v: want rep, its args, requested_at, requested_by, pending", doc)
	}
	for _, args := range [][]string{
		{"run-now", "nope"},
		{"run-now", "rep", "--args", "[1]"},
		{"run-now", "rep", "--wait", "-1s"},
		{"run-now"},
	} {
		if r := e.run(args...); r.code != cli.ExitUserError {
			t.Errorf("%q: %v, want exit 1", args, r)
		}
	}
	r := e.run("run-now", "rep", "--wait", "300ms")
	if r.code != cli.ExitUserError || !strings.Contains(r.stdout, "still pending (no daemon has taken it yet) after waiting 300ms") ||
		!strings.Contains(r.stdout, "cronswap schedules history rep") {
		t.Errorf("--wait with no daemon: %v, want exit 1, still pending after waiting 300ms, and where to look later", r)
	}
}

// run-now --wait waits as long as it is told, not 10 × --timeout (each
// operation's bound): an outcome written 3 s after the request, well
// past 10 × 200ms, is reported, exit 0.
func TestRunNowWaitOutlastsTimeout(t *testing.T) {
	e := newEnv(t)
	e.ok("schedules", "set", "rep", "--cron", "0 9 * * *") // also clears the CRONSWAP_* variables for cli.Run below
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		var stdout, stderr bytes.Buffer
		code := cli.Run([]string{"cronswap", "run-now", "rep", "--wait", "20s", "-o", "json", "--config", e.cfg, "--timeout", "200ms"},
			strings.NewReader(""), &stdout, &stderr)
		done <- result{code, stdout.String(), stderr.String()}
	}()
	// The request, once written: play the daemon that runs it.
	coll := e.db.Collection(triggers.CollectionName)
	c := ctx(t)
	var id any
	for id == nil {
		var doc bson.M
		err := coll.FindOne(c, bson.D{{Key: triggers.FieldJobID, Value: "rep"}}).Decode(&doc)
		switch {
		case err == nil:
			id = doc["_id"]
		case err != mongo.ErrNoDocuments:
			t.Fatal(err)
		}
		select {
		case r := <-done:
			t.Fatalf("run-now ended before its request was seen: %v", r)
		case <-c.Done():
			t.Fatal("no request written")
		case <-time.After(10 * time.Millisecond):
		}
	}
	// The outcome arrives 3 s after the command started: past its old
	// budget (10 × 200ms), well within --wait.
	select {
	case r := <-done:
		t.Fatalf("run-now ended before the outcome was written, after %s: %v", time.Since(start), r)
	case <-time.After(time.Until(start.Add(3 * time.Second))):
	}
	if _, err := coll.UpdateOne(c, bson.D{{Key: "_id", Value: id}},
		bson.D{{Key: "$set", Value: bson.D{{Key: triggers.FieldStatus, Value: "succeeded"}}}}); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-done:
	case <-c.Done():
		t.Fatal("run-now did not end within 30 s")
	}
	var out struct {
		Status string `json:"status"`
		Waited string `json:"waited"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || r.code != cli.ExitOK || out.Status != "succeeded" || out.Waited != "" {
		t.Errorf("run-now --wait 20s --timeout 200ms with an outcome after 3 s: %v (%v), want exit 0 and succeeded", r, err)
	}
}

// backfill --dry-run lists the range's slots with what is recorded and
// requests nothing; backfill requests the slots without a record of their
// own (a missed one included), oldest first, and asking again requests none.
func TestBackfillPlansAndRequests(t *testing.T) {
	e := newEnv(t)
	e.ok("schedules", "set", "bf", "--cron", "0 * * * *")
	base := time.Now().UTC().Truncate(time.Hour).Add(-5 * time.Hour)
	slot := func(i int) time.Time { return base.Add(time.Duration(i) * time.Hour) }
	insertDocs(t, e.db.Collection(record.RunsCollection),
		record.RunDoc{ID: record.RunID("bf", slot(1)), JobID: "bf", ScheduledAt: slot(1), Status: record.StatusSucceeded},
		record.RunDoc{ID: record.MissedID("bf", slot(2)), JobID: "bf", ScheduledAt: slot(2), LastScheduledAt: slot(3), Count: 2,
			Status: record.StatusMissed, Reason: record.MissedNoReplica})
	args := []string{"backfill", "bf", "--from", slot(0).Format(time.RFC3339), "--to", slot(4).Format(time.RFC3339), "-o", "json"}
	var plan struct {
		DryRun    bool                    `json:"dry_run"`
		Wanted    int                     `json:"wanted"`
		Requested int                     `json:"requested"`
		Slots     []triggers.BackfillSlot `json:"slots"`
	}
	e.okJSON(&plan, append(args, "--dry-run")...)
	if !plan.DryRun || plan.Wanted != 4 || plan.Requested != 0 || len(plan.Slots) != 5 ||
		plan.Slots[1].Recorded != record.StatusSucceeded || plan.Slots[2].Recorded != record.StatusMissed || plan.Slots[3].Recorded != record.StatusMissed {
		t.Fatalf("dry run: %+v", plan)
	}
	if n := e.count(triggers.CollectionName); n != 0 {
		t.Fatalf("--dry-run wrote %d requests", n)
	}
	e.okJSON(&plan, args...)
	if plan.Requested != 4 {
		t.Fatalf("backfill: %+v, want 4 requested", plan)
	}
	for _, i := range []int{0, 2, 3, 4} {
		var doc triggers.Doc
		id := triggers.BackfillIDPrefix + record.RunID("bf", slot(i))
		if err := e.db.Collection(triggers.CollectionName).FindOne(ctx(t), bson.D{{Key: "_id", Value: id}}).Decode(&doc); err != nil ||
			!doc.Slot.Equal(slot(i)) || doc.JobID != "bf" {
			t.Errorf("request %s: %+v (%v)", id, doc, err)
		}
	}
	e.okJSON(&plan, args...)
	if plan.Wanted != 0 || plan.Requested != 0 {
		t.Errorf("again: %+v, want nothing", plan)
	}
	text := e.ok(append(args[:len(args)-2], "--dry-run")...).stdout
	if !strings.Contains(text, "already requested") || !strings.Contains(text, "not run again") {
		t.Errorf("table:\n%s", text)
	}
	for _, bad := range [][]string{
		{"backfill", "bf", "--from", "-2h"},
		{"backfill", "nope", "--from", "-2h", "--to", "now"},
		{"backfill", "bf", "--from", "now", "--to", "-2h"},
	} {
		if r := e.run(bad...); r.code != cli.ExitUserError {
			t.Errorf("%q: %v, want exit 1", bad, r)
		}
	}
}

// A job first seen a minute ago: backfill --from -3m refuses, naming the
// sighting's time and the flag, and requests nothing; as a dry run it
// lists those slots as what a request would refuse, and exits 0; from
// after the sighting it requests only later slots; with
// --before-first-seen it requests the earlier slots too, marked so that
// the daemons let them through.
func TestBackfillRefusesSlotsBeforeTheFirstSighting(t *testing.T) {
	e := newEnv(t)
	e.ok("schedules", "set", "young", "--cron", "*/20 * * * * *")
	seen := time.Now().UTC().Add(-time.Minute).Truncate(time.Millisecond)
	insertFirstSeen(t, e, "young", seen, "insert")
	args := []string{"backfill", "young", "--from", "-3m", "--to", "now"}
	r := e.run(args...)
	if r.code != cli.ExitUserError || !strings.Contains(r.stderr, "first seen at "+seen.Format("2006-01-02T15:04:05.000Z07:00")) ||
		!strings.Contains(r.stderr, "--before-first-seen") || r.stdout != "" {
		t.Errorf("%q: %v, want exit 1 naming the first sighting and --before-first-seen", args, r)
	}
	r = e.run(append(args, "--dry-run")...)
	if r.code != cli.ExitOK || !strings.Contains(r.stdout, "before the job was first seen: needs --before-first-seen") ||
		!strings.Contains(r.stdout, "refused unless asked with --before-first-seen") {
		t.Errorf("%q --dry-run: %v, want the slots before the sighting listed as refused", args, r)
	}
	var dry struct {
		Wanted          int                     `json:"wanted"`
		BeforeFirstSeen int                     `json:"before_first_seen"`
		Slots           []triggers.BackfillSlot `json:"slots"`
	}
	e.okJSON(&dry, append(args, "--dry-run")...)
	var before, after int
	for _, s := range dry.Slots {
		if s.Slot.After(seen) {
			after++
		} else {
			before++
		}
	}
	if before < 3 || dry.BeforeFirstSeen != before || dry.Wanted != after {
		t.Errorf("dry run: wanted %d, before_first_seen %d; the plan has %d slots before the sighting and %d after",
			dry.Wanted, dry.BeforeFirstSeen, before, after)
	}
	if n := e.count(triggers.CollectionName); n != 0 {
		t.Fatalf("a refused backfill or a dry run wrote %d requests", n)
	}
	var plan struct {
		Requested int                     `json:"requested"`
		Slots     []triggers.BackfillSlot `json:"slots"`
	}
	e.okJSON(&plan, "backfill", "young", "--from", seen.Add(time.Second).Format(time.RFC3339), "--to", "now")
	for _, s := range plan.Slots {
		if !s.Slot.After(seen) {
			t.Errorf("slot %s offered from after the sighting %s", s.Slot, seen)
		}
	}
	if plan.Requested == 0 || plan.Requested != len(plan.Slots) {
		t.Errorf("from after the sighting: %+v", plan)
	}
	e.okJSON(&plan, "backfill", "young", "--from", "-3m", "--to", "now", "--before-first-seen")
	if plan.Requested < 3 {
		t.Fatalf("--before-first-seen: %+v, want the slots before the sighting requested", plan)
	}
	cur, err := e.db.Collection(triggers.CollectionName).Find(ctx(t), bson.D{{Key: "slot", Value: bson.D{{Key: "$lte", Value: seen}}}})
	if err != nil {
		t.Fatal(err)
	}
	var docs []bson.M
	if err := cur.All(ctx(t), &docs); err != nil || len(docs) < 3 {
		t.Fatalf("requests before the sighting: %d (%v)", len(docs), err)
	}
	for _, d := range docs {
		if d[triggers.FieldBeforeFirstSeen] != true {
			t.Errorf("request %v lacks %s: true", d["_id"], triggers.FieldBeforeFirstSeen)
		}
	}
}
