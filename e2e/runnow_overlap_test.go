package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/internal/triggers"
)

// ledgerLine is one line the action wrote: its run, replica, start or
// end, and when.
type ledgerLine struct {
	runID, instance, what string
	at                    time.Time
}

// readLedger reads the action's ledger.
func readLedger(t *testing.T, path string) []ledgerLine {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []ledgerLine
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) != 4 {
			continue
		}
		ns, err := strconv.ParseInt(f[3], 10, 64)
		if err != nil {
			t.Fatalf("ledger line %q: %v", line, err)
		}
		out = append(out, ledgerLine{runID: f[0], instance: f[1], what: f[2], at: time.Unix(0, ns)})
	}
	return out
}

// ledgerOf returns run runID's line what (start, end) and how many there are.
func ledgerOf(lines []ledgerLine, runID, what string) (ledgerLine, int) {
	var got ledgerLine
	n := 0
	for _, l := range lines {
		if l.runID == runID && l.what == what {
			got, n = l, n+1
		}
	}
	return got, n
}

// holdAction is an exec action that writes its start and end to ledger
// and, when its args say "hold", runs until the file release exists (the
// test creates it once it has seen what it waits for; the action's
// timeout ends it otherwise), a second when they do not.
func holdAction(ledger, release string) string {
	return fmt.Sprintf(`["sh", "-c", "echo \"$CRONSWAP_RUN_ID $CRONSWAP_INSTANCE_ID start $(date +%%s%%N)\" >> %[1]s; `+
		`case \"$CRONSWAP_ARGS\" in *hold*) while [ ! -e %[2]s ]; do sleep 0.05; done;; *) sleep 1;; esac; `+
		`echo \"$CRONSWAP_RUN_ID $CRONSWAP_INSTANCE_ID end $(date +%%s%%N)\" >> %[1]s"]`, ledger, release)
}

// Run-now requests under the job's overlap policy, on 3 replicas: a
// request inserted with mongosh while a run of its job holds the lock
// replaces that run under cancel_other (the run stops within 2 s,
// recorded abandoned, reason replaced) and waits for it under buffer_one
// (the request says buffered, then starts after the holder's end); each
// request's run runs exactly once (the action's own ledger) and the
// request records its outcome, fence above the holder's. The holders run
// until the test has seen what it waits for, however long mongosh takes
// to start: cancel_other's until it is replaced, buffer_one's until its
// request says buffered.
func TestRunNowUnderOverlapPolicies(t *testing.T) {
	uri, db := setup(t)
	dir := t.TempDir()
	ledger := filepath.Join(dir, "ledger")
	releaseCancel, releaseBuf := filepath.Join(dir, "release_cancel"), filepath.Join(dir, "release_buf")
	jobsYAML := fmt.Sprintf(`
  rn_cancel:
    exec: %s
    timeout: 1m
    overlap: cancel_other
  rn_buf:
    exec: %s
    timeout: 1m
    overlap: buffer_one
`, holdAction(ledger, releaseCancel), holdAction(ledger, releaseBuf))
	ds := startReplicas(t, uri, db.Name(), 3, "", jobsYAML)
	insert(t, db, sched("rn_cancel", "0 0 3 1 1 *"), sched("rn_buf", "0 0 3 1 1 *"))
	waitArmed(t, ds, []string{"rn_cancel", "rn_buf"})
	trigStreamOpen(t, ds)

	// The holders: a request each, running long.
	coll := db.Collection(triggers.CollectionName)
	for _, h := range []bson.D{
		{{Key: "_id", Value: "hold_c"}, {Key: "job_id", Value: "rn_cancel"}, {Key: "args", Value: bson.D{{Key: "hold", Value: 1}}}},
		{{Key: "_id", Value: "hold_b"}, {Key: "job_id", Value: "rn_buf"}, {Key: "args", Value: bson.D{{Key: "hold", Value: 1}}}},
	} {
		if _, err := coll.InsertOne(testCtx(t), h); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 30*time.Second, "both holders running", func() bool {
		lines := readLedger(t, ledger)
		_, c := ledgerOf(lines, triggers.RunIDOf("hold_c"), "start")
		_, b := ledgerOf(lines, triggers.RunIDOf("hold_b"), "start")
		return c == 1 && b == 1
	})

	out := mongosh(t, uri, db.Name(), `const t = Date.now(); db.triggers.insertOne({_id: "now_c", job_id: "rn_cancel"}); `+
		`db.triggers.insertOne({_id: "now_b", job_id: "rn_buf"}); print(t)`)
	trimmed := strings.TrimSpace(out)
	ms, err := strconv.ParseInt(trimmed[strings.LastIndex(trimmed, "\n")+1:], 10, 64)
	if err != nil {
		t.Fatalf("mongosh printed %q: %v", out, err)
	}
	insertedAt := time.UnixMilli(ms)

	// buffer_one: the request waits, and says so.
	waitFor(t, 10*time.Second, "now_b buffered", func() bool {
		var doc triggers.Doc
		err := coll.FindOne(testCtx(t), bson.D{{Key: "_id", Value: "now_b"}}).Decode(&doc)
		return err == nil && doc.Status == triggers.StatusBuffered
	})
	if err := os.WriteFile(releaseBuf, nil, 0o644); err != nil {
		t.Fatal(err)
	}

	// cancel_other: the holder stops within 2 s and the request runs.
	nowC := trigFinal(t, db, "now_c")
	holdC := trigFinal(t, db, "hold_c")
	if nowC.Status != record.StatusSucceeded || nowC.RunID != triggers.RunIDOf("now_c") || nowC.Fence <= holdC.Fence {
		t.Errorf("now_c %+v (holder %+v): want succeeded under its run id, fence above the holder's", nowC, holdC)
	}
	if holdC.Status != record.StatusAbandoned || !strings.Contains(holdC.Error, nowC.RunID) {
		t.Errorf("hold_c %+v: want abandoned, naming %s", holdC, nowC.RunID)
	}
	var rec bson.M
	if err := db.Collection(record.RunsCollection).FindOne(testCtx(t), bson.D{{Key: "_id", Value: holdC.RunID}}).Decode(&rec); err != nil {
		t.Fatal(err)
	}
	ended, _ := rec["ended_at"].(bson.DateTime)
	if rec["reason"] != record.ReasonReplaced || ended.Time().Sub(insertedAt) > 2*time.Second {
		t.Errorf("holder's record %v: want reason replaced, ended within 2s of the request (%s)", rec, ended.Time().Sub(insertedAt))
	}
	t.Logf("cancel_other: the holder ended %s after the request", ended.Time().Sub(insertedAt))

	// buffer_one: it runs after the holder's end.
	nowB := trigFinal(t, db, "now_b")
	holdB := trigFinal(t, db, "hold_b")
	if nowB.Status != record.StatusSucceeded || nowB.RunID != triggers.RunIDOf("now_b") || nowB.Fence <= holdB.Fence ||
		holdB.Status != record.StatusSucceeded {
		t.Errorf("now_b %+v (holder %+v): want both succeeded, the request's fence above", nowB, holdB)
	}

	// Every replica has handled each request (run it, buffered it, found
	// it claimed, or dropped it when the replica that took it said so)
	// before the ledger is counted.
	for _, id := range []string{"now_c", "now_b"} {
		runID := triggers.RunIDOf(id)
		for _, d := range ds {
			d.waitLog("run "+runID+" handled", func(l logLine) bool {
				switch l.str("msg") {
				case "run started", "fire buffered", "off-schedule run claimed elsewhere", "trigger taken by another replica":
					return l.str("run_id") == runID
				}
				return false
			})
		}
	}
	lines := readLedger(t, ledger)
	for _, id := range []string{"hold_c", "hold_b", "now_c", "now_b"} {
		if _, n := ledgerOf(lines, triggers.RunIDOf(id), "start"); n != 1 {
			t.Errorf("%s started %d times, want once", id, n)
		}
	}
	cStart, _ := ledgerOf(lines, nowC.RunID, "start")
	if !cStart.at.After(ended.Time()) {
		t.Errorf("now_c started at %s, before the holder ended (%s)", cStart.at, ended.Time())
	}
	bStart, _ := ledgerOf(lines, nowB.RunID, "start")
	hEnd, n := ledgerOf(lines, holdB.RunID, "end")
	if n != 1 || !bStart.at.After(hEnd.at) {
		t.Errorf("now_b started at %s, holder's end %s (%d lines): want after it", bStart.at, hEnd.at, n)
	}
	t.Logf("buffer_one: the request started %s after the holder's end, on %s (the holder ran on %s)",
		bStart.at.Sub(hEnd.at), bStart.instance, hEnd.instance)
}
