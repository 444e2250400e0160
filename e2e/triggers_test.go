package e2e

// Run-now and backfill through the triggers collection: requests inserted
// with mongosh or the CLI reach every replica through the change stream,
// run once through the claim path (also for a paused job), and the request
// records the outcome. What ran is known from the action itself (an http
// action posting to a recorder on 127.0.0.1).

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/internal/triggers"
)

// trigStreamOpen waits until every daemon's triggers stream is open.
func trigStreamOpen(t *testing.T, ds []*daemon) {
	t.Helper()
	for _, d := range ds {
		d.waitLog("the triggers stream opened", func(l logLine) bool {
			return strings.HasPrefix(l.str("msg"), "change stream opened") && strings.HasSuffix(l.str("watcher_id"), "/triggers")
		})
	}
}

// trigFinal waits for request id's final status and returns the document.
func trigFinal(t *testing.T, db *mongo.Database, id any) triggers.Doc {
	t.Helper()
	var doc triggers.Doc
	waitFor(t, 60*time.Second, fmt.Sprintf("trigger %v ended", id), func() bool {
		raw, err := db.Collection(triggers.CollectionName).FindOne(testCtx(t), bson.D{{Key: "_id", Value: id}}).Raw()
		if err != nil {
			return false
		}
		doc = triggers.Doc{}
		if bson.Unmarshal(raw, &doc) != nil {
			// A bad request (a field of the wrong type): what the daemon wrote.
			doc.Status, _ = raw.Lookup(triggers.FieldStatus).StringValueOK()
			doc.Error, _ = raw.Lookup(triggers.FieldError).StringValueOK()
		}
		return triggers.Final(doc.Status)
	})
	return doc
}

// trigSettled waits until every daemon has handled run runID: run it,
// dropped it when the replica that took it said so, or (after its claim
// grace) found it claimed elsewhere.
func trigSettled(t *testing.T, ds []*daemon, runID string) {
	t.Helper()
	for _, d := range ds {
		d.waitLog("run "+runID+" handled", func(l logLine) bool {
			switch l.str("msg") {
			case "run started", "off-schedule run claimed elsewhere", "trigger taken by another replica":
				return l.str("run_id") == runID
			}
			return false
		})
	}
}

// hitsOf returns the recorder's hits of run id.
func hitsOf(rec *fpRecorder, runID string) []fpHit {
	var out []fpHit
	for _, h := range rec.snapshot() {
		if h.RunID == runID {
			out = append(out, h)
		}
	}
	return out
}

// Run-now through mongosh and through the CLI, on a paused job and an
// enabled one, across 3 replicas: each request runs exactly once, starting
// within 1 s of its insert, with the request's args; the request says
// succeeded with the run id; bad requests are refused with their error on
// them and the daemons go on.
func TestTriggersRunNowOnceAcrossReplicas(t *testing.T) {
	uri, db := setup(t)
	rec := fpNewRecorder(t)
	ds := startReplicas(t, uri, db.Name(), 3, "", rec.jobsYAML(""))
	insert(t, db,
		bson.D{{Key: "_id", Value: "paused_job"}, {Key: "cron_expr", Value: "0 0 3 1 1 *"}, {Key: "job", Value: "hit"}, {Key: "enabled", Value: false}},
		bson.D{{Key: "_id", Value: "live_job"}, {Key: "cron_expr", Value: "0 0 3 1 1 *"}, {Key: "job", Value: "hit"}})
	waitArmed(t, ds, []string{"live_job"})
	trigStreamOpen(t, ds)

	// mongosh, on the paused job: the operator's one-liner.
	out := mongosh(t, uri, db.Name(), `const t = Date.now(); db.triggers.insertOne({_id: "m1", job_id: "paused_job", args: {x: 1}}); print(t)`)
	ms, err := strconv.ParseInt(strings.TrimSpace(out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:]), 10, 64)
	if err != nil {
		t.Fatalf("mongosh printed %q: %v", out, err)
	}
	insertedAt := time.UnixMilli(ms)
	doc := trigFinal(t, db, "m1")
	if doc.Status != record.StatusSucceeded || doc.RunID != triggers.RunIDOf("m1") {
		t.Fatalf("trigger m1: %+v, want succeeded under %s", doc, triggers.RunIDOf("m1"))
	}
	// The replicas that do not own the job look after the claim grace.
	trigSettled(t, ds, triggers.RunIDOf("m1"))
	hits := hitsOf(rec, triggers.RunIDOf("m1"))
	if len(hits) != 1 {
		t.Fatalf("trigger m1 ran %d times, want once: %+v", len(hits), hits)
	}
	if lat := hits[0].At.Sub(insertedAt); lat > time.Second {
		t.Errorf("trigger m1 started %s after its insert, want within 1s", lat)
	}
	if hits[0].Job != "paused_job" || hits[0].Instance != doc.Instance {
		t.Errorf("hit %+v, trigger %+v: want the paused job, run where the trigger says", hits[0], doc)
	}

	// The CLI, on the enabled job, waiting for the outcome.
	cfg := ds[0].cfgPath
	stdout := cliOK(t, cfg, "run-now", "live_job", "--args", `{"y": 2}`, "--wait", "30s", "--output", "json")
	var res struct {
		TriggerID string `json:"trigger_id"`
		RunID     string `json:"run_id"`
		Status    string `json:"status"`
	}
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("run-now output %q: %v", stdout, err)
	}
	if res.Status != record.StatusSucceeded || res.RunID != triggers.RunIDOf(res.TriggerID) {
		t.Fatalf("run-now: %+v, want succeeded under trigger/<id>", res)
	}
	oid, err := bson.ObjectIDFromHex(res.TriggerID)
	if err != nil {
		t.Fatal(err)
	}
	doc = trigFinal(t, db, oid)
	trigSettled(t, ds, res.RunID)
	hits = hitsOf(rec, res.RunID)
	if len(hits) != 1 {
		t.Fatalf("CLI trigger ran %d times, want once: %+v", len(hits), hits)
	}
	if lat := hits[0].At.Sub(doc.RequestedAt); lat > time.Second {
		t.Errorf("CLI trigger started %s after it was requested, want within 1s", lat)
	}
	if _, errOut, code := cli(t, cfg, "run-now", "no_such_job"); code != 1 || !strings.Contains(errOut, "no schedule") {
		t.Errorf("run-now of a missing job: exit %d, %q; want 1 and no schedule", code, errOut)
	}

	// Bad requests: refused, their error written on them.
	mongosh(t, uri, db.Name(), `db.triggers.insertMany([{_id: "bad1", job_id: 42}, {_id: "bad2", job_id: "nope"}, {_id: "bad3", job_id: "live_job", args: "x"}])`)
	for id, want := range map[string]string{"bad1": "must be a string", "bad2": "no schedule", "bad3": "must be an object"} {
		d := trigFinal(t, db, id)
		if d.Status != triggers.StatusRejected || !strings.Contains(d.Error, want) {
			t.Errorf("%s: %+v, want rejected with %q", id, d, want)
		}
	}
	mongosh(t, uri, db.Name(), `db.triggers.insertOne({_id: "after_bad", job_id: "live_job"})`)
	if d := trigFinal(t, db, "after_bad"); d.Status != record.StatusSucceeded {
		t.Errorf("a good request after bad ones: %+v", d)
	}
}

// Backfill over a range where some slots ran: --dry-run lists the others
// and requests nothing; the backfill runs exactly those, each under its
// slot's run id, and never a slot that ran; asking again runs nothing.
func TestTriggersBackfillRunsOnlyUnrunSlots(t *testing.T) {
	uri, db := setup(t)
	rec := fpNewRecorder(t)
	ds := startReplicas(t, uri, db.Name(), 2, "", rec.jobsYAML(""))
	// Paused: the daemons fire none of its slots themselves.
	insert(t, db, bson.D{{Key: "_id", Value: "bf"}, {Key: "cron_expr", Value: "0 * * * * *"}, {Key: "job", Value: "hit"}, {Key: "enabled", Value: false}})
	trigStreamOpen(t, ds)
	end := time.Now().Truncate(time.Minute).Add(-time.Minute).UTC()
	slots := make([]time.Time, 6)
	for i := range slots {
		slots[i] = end.Add(time.Duration(i-5) * time.Minute)
	}
	for _, i := range []int{1, 3} { // these ran
		s := slots[i]
		if _, err := db.Collection(record.RunsCollection).InsertOne(testCtx(t), record.RunDoc{ID: record.RunID("bf", s), JobID: "bf", ScheduledAt: s,
			Instance: "earlier", Fence: record.FenceOf(s), Status: record.StatusSucceeded, StartedAt: s, EndedAt: s.Add(time.Second),
			ExpireAt: time.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := ds[0].cfgPath
	// The job was created just now, after its slots: they are before its
	// first sighting, so the backfill asks for them explicitly.
	args := []string{"backfill", "bf", "--from", slots[0].Format(time.RFC3339), "--to", slots[5].Format(time.RFC3339), "--output", "json",
		"--before-first-seen"}
	var plan struct {
		Wanted    int `json:"wanted"`
		Requested int `json:"requested"`
		Slots     []triggers.BackfillSlot
	}
	if err := json.Unmarshal([]byte(cliOK(t, cfg, append(args, "--dry-run")...)), &plan); err != nil {
		t.Fatal(err)
	}
	if plan.Wanted != 4 || plan.Requested != 0 || len(plan.Slots) != 6 {
		t.Fatalf("dry run: %+v, want 4 of 6 slots wanted, nothing requested", plan)
	}
	if n, err := db.Collection(triggers.CollectionName).CountDocuments(testCtx(t), bson.D{}); err != nil || n != 0 {
		t.Fatalf("after --dry-run: %d requests (%v), want none", n, err)
	}
	if err := json.Unmarshal([]byte(cliOK(t, cfg, args...)), &plan); err != nil {
		t.Fatal(err)
	}
	if plan.Requested != 4 {
		t.Fatalf("backfill: %+v, want 4 requested", plan)
	}
	for i, s := range slots {
		if i == 1 || i == 3 {
			continue // ran: not asked for
		}
		d := trigFinal(t, db, triggers.BackfillIDPrefix+record.RunID("bf", s))
		if d.Status != record.StatusSucceeded || d.RunID != record.RunID("bf", s) {
			t.Errorf("slot %d: request %+v, want succeeded under %s", i, d, record.RunID("bf", s))
		}
	}
	for i, s := range slots {
		if i != 1 && i != 3 {
			trigSettled(t, ds, record.RunID("bf", s))
		}
	}
	for i, s := range slots {
		hits := hitsOf(rec, record.RunID("bf", s))
		want := 1
		if i == 1 || i == 3 {
			want = 0
		}
		if len(hits) != want {
			t.Errorf("slot %d ran %d times, want %d", i, len(hits), want)
		}
		for _, h := range hits {
			if !h.Slot.Equal(s) {
				t.Errorf("slot %d ran as %v", i, h.Slot)
			}
		}
	}
	for _, i := range []int{1, 3} {
		var r record.RunDoc
		if err := db.Collection(record.RunsCollection).FindOne(testCtx(t), bson.D{{Key: "_id", Value: record.RunID("bf", slots[i])}}).Decode(&r); err != nil || r.Instance != "earlier" {
			t.Errorf("slot %d's record: %+v (%v), want the earlier run's untouched", i, r, err)
		}
	}
	// Again: every slot is decided or requested; nothing is asked for.
	if err := json.Unmarshal([]byte(cliOK(t, cfg, args...)), &plan); err != nil {
		t.Fatal(err)
	}
	if plan.Wanted != 0 || plan.Requested != 0 {
		t.Errorf("second backfill: %+v, want nothing wanted", plan)
	}
}

// A request inserted while no daemon runs is not lost: the first daemon to
// start reads the pending requests and runs it.
func TestTriggersPendingRequestRunsAtStart(t *testing.T) {
	uri, db := setup(t)
	rec := fpNewRecorder(t)
	insert(t, db, bson.D{{Key: "_id", Value: "later"}, {Key: "cron_expr", Value: "0 0 3 1 1 *"}, {Key: "job", Value: "hit"}})
	mongosh(t, uri, db.Name(), `db.triggers.insertOne({_id: "while_down", job_id: "later"})`)
	startReplicas(t, uri, db.Name(), 1, "", rec.jobsYAML(""))
	doc := trigFinal(t, db, "while_down")
	if doc.Status != record.StatusSucceeded || doc.Instance != "r1" {
		t.Fatalf("request inserted while down: %+v, want succeeded on r1", doc)
	}
	if hits := hitsOf(rec, triggers.RunIDOf("while_down")); len(hits) != 1 {
		t.Fatalf("ran %d times, want once", len(hits))
	}
}
