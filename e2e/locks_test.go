package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/faultproxy"
	"github.com/cronswap/cronswap/internal/firepath"
	"github.com/cronswap/cronswap/internal/record"
)

// startReplicas starts n daemons on one database, instance ids r1..rn.
func startReplicas(t *testing.T, uri, dbName string, n int, extra, jobsYAML string) []*daemon {
	t.Helper()
	ds := make([]*daemon, n)
	for i := range ds {
		ds[i] = startDaemon(t, writeConfig(t, daemonConfig{URI: uri, Database: dbName,
			InstanceID: fmt.Sprintf("r%d", i+1), Extra: extra, Jobs: jobsYAML}))
	}
	for _, d := range ds {
		d.waitReady()
	}
	return ds
}

// waitArmed waits until every daemon has all ids armed.
func waitArmed(t *testing.T, ds []*daemon, ids []string) {
	t.Helper()
	for _, d := range ds {
		waitFor(t, 60*time.Second, "schedules armed on "+d.cfgPath, func() bool {
			armed := d.armedExprs()
			for _, id := range ids {
				if _, ok := armed[id]; !ok {
					return false
				}
			}
			return true
		})
	}
}

func allRuns(t *testing.T, db *mongo.Database, filter bson.D) []record.RunDoc {
	t.Helper()
	ctx := testCtx(t)
	cur, err := db.Collection(record.RunsCollection).Find(ctx, filter,
		options.Find().SetSort(bson.D{{Key: "job_id", Value: 1}, {Key: "scheduled_at", Value: 1}}))
	if err != nil {
		t.Fatal(err)
	}
	var out []record.RunDoc
	if err := cur.All(ctx, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func lockDoc(t *testing.T, db *mongo.Database, id string) (record.LockDoc, bool) {
	t.Helper()
	var l record.LockDoc
	err := db.Collection(record.LocksCollection).FindOne(testCtx(t), bson.D{{Key: "_id", Value: id}}).Decode(&l)
	if err == mongo.ErrNoDocuments {
		return l, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return l, true
}

// Exactly once across replicas: three daemons on one database, 20 jobs
// firing every second for 30 s, an exec action appending "job slot
// instance fence" to a file. Every (job, slot) of the window is in job_runs
// exactly once and in the file exactly once; no slot is missing. Half the
// jobs are overlap allow; the other half are forbid (the default), where a
// slot that fires while the previous run still holds the lock (a loaded
// machine) is legitimately recorded skipped instead — then it must not be
// in the file, and its record must name an earlier run of the job as the
// holder and fall inside that run. The forbid job job00 holds its lock for
// 1.5 s at every slot ending in 0 s, so that skips are checked on every
// run of the test, not only on a loaded machine.
func TestExactlyOnceAcrossReplicas(t *testing.T) {
	uri, db := setup(t)
	out := filepath.Join(t.TempDir(), "fires.log")
	line := `printf '%s %s %s %s\n' "$CRONSWAP_JOB_ID" "$CRONSWAP_SCHEDULED_AT" "$CRONSWAP_INSTANCE_ID" "$CRONSWAP_FENCE" >> ` + out
	const slowForbid = "job00"
	slowLine := line + `; case "$CRONSWAP_JOB_ID@$CRONSWAP_SCHEDULED_AT" in ` + slowForbid + `@*0Z) sleep 1.5;; esac`
	jobsYAML := fmt.Sprintf(`
  append_forbid:
    exec: ["sh", "-c", %q]
    timeout: 20s
  append_allow:
    exec: ["sh", "-c", %q]
    timeout: 20s
    overlap: allow
`, slowLine, line)
	ds := startReplicas(t, uri, db.Name(), 3, "", jobsYAML)

	const nJobs = 20
	const window = 30 * time.Second
	var ids []string
	var docs []bson.D
	forbid := map[string]bool{}
	for i := range nJobs {
		id := fmt.Sprintf("job%02d", i)
		ids = append(ids, id)
		action := "append_allow"
		if i%2 == 0 {
			action = "append_forbid"
			forbid[id] = true
		}
		docs = append(docs, bson.D{{Key: "_id", Value: id}, {Key: "cron_expr", Value: "* * * * * *"},
			{Key: "job", Value: action}, {Key: "category", Value: fmt.Sprintf("cat%d", i%3)}, {Key: "updated_at", Value: time.Now()}})
	}
	insert(t, db, docs...)
	waitArmed(t, ds, ids)
	from := time.Now().Truncate(time.Second).Add(2 * time.Second)
	to := from.Add(window) // slots in [from, to)
	t.Logf("window %s .. %s", from.Format(time.TimeOnly), to.Format(time.TimeOnly))

	// Wait until every slot of the window is recorded and finished.
	inWindow := bson.D{{Key: "scheduled_at", Value: bson.D{{Key: "$gte", Value: from}, {Key: "$lt", Value: to}}}}
	want := nJobs * int(window/time.Second)
	waitFor(t, time.Until(to)+60*time.Second, "all runs of the window recorded and ended", func() bool {
		if time.Now().Before(to) {
			return false
		}
		runs := allRuns(t, db, inWindow)
		if len(runs) < want {
			return false
		}
		for _, r := range runs {
			if r.Status == record.StatusRunning {
				return false
			}
		}
		return true
	})
	runs := allRuns(t, db, inWindow)
	type key struct {
		job  string
		slot string
	}
	recorded := map[key]int{}
	skipped := map[key]bool{}
	byID := map[string]record.RunDoc{}
	for _, r := range allRuns(t, db, bson.D{}) {
		byID[r.ID] = r
	}
	for _, r := range runs {
		k := key{r.JobID, r.ScheduledAt.UTC().Format(time.RFC3339)}
		recorded[k]++
		switch {
		case r.Status == record.StatusSucceeded:
		case r.Status == record.StatusSkipped && forbid[r.JobID]:
			// Legitimate only while an earlier run of the job held the lock:
			// the record names the holder's run id (record.RunID, job@slot).
			skipped[k] = true
			var h record.RunDoc
			ok := false
			for _, w := range strings.Fields(r.Error) {
				if strings.HasPrefix(w, r.JobID+"@") {
					h, ok = byID[w]
					break
				}
			}
			if !ok || h.JobID != r.JobID || !h.ScheduledAt.Before(r.ScheduledAt) || r.StartedAt.Before(h.StartedAt) {
				t.Errorf("%s at %s skipped (%s), but the named holder run %+v is not an earlier run of the job", r.JobID, k.slot, r.Error, h)
			}
		default:
			t.Errorf("run %+v: status %s, want succeeded", r, r.Status)
		}
	}

	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	inFile := map[key]int{}
	fences := map[string][]struct {
		slot  string
		fence int64
	}{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 4 {
			t.Fatalf("odd line %q", sc.Text())
		}
		k := key{fields[0], fields[1]}
		inFile[k]++
		if inFile[k] > 1 {
			t.Errorf("%s at %s ran %d times (last on %s)", k.job, k.slot, inFile[k], fields[2])
		}
		fence, err := strconv.ParseInt(fields[3], 10, 64)
		if err != nil {
			t.Fatalf("line %q: fence: %v", sc.Text(), err)
		}
		fences[k.job] = append(fences[k.job], struct {
			slot  string
			fence int64
		}{k.slot, fence})
	}
	instances := map[string]int{}
	for _, r := range runs {
		instances[r.Instance]++
	}
	missing := 0
	for _, id := range ids {
		for s := from; s.Before(to); s = s.Add(time.Second) {
			k := key{id, s.UTC().Format(time.RFC3339)}
			wantInFile := 1
			if skipped[k] {
				wantInFile = 0
			}
			if inFile[k] != wantInFile || recorded[k] != 1 {
				missing++
				if missing <= 20 {
					t.Errorf("%s at %s: %d times in the file, %d in job_runs; want %d and 1", id, k.slot, inFile[k], recorded[k], wantInFile)
				}
			}
		}
		// Fences grow with the slots.
		fs := fences[id]
		sort.Slice(fs, func(i, j int) bool { return fs[i].slot < fs[j].slot })
		for i := 1; i < len(fs); i++ {
			if fs[i].fence <= fs[i-1].fence {
				t.Errorf("%s: fence %d at %s after %d at %s", id, fs[i].fence, fs[i].slot, fs[i-1].fence, fs[i-1].slot)
			}
		}
	}
	if missing > 0 {
		t.Fatalf("%d of %d (job, slot) pairs not exactly once", missing, want)
	}
	slowSkips := 0
	for k := range skipped {
		if k.job == slowForbid {
			slowSkips++
		}
	}
	if slowSkips == 0 {
		t.Errorf("no fire of %s skipped, though its run at every slot ending in 0 s holds the lock for 1.5 s", slowForbid)
	}
	t.Logf("%d runs in the window, by instance: %v; %d forbid fires skipped while the previous run held the lock", len(runs), instances, len(skipped))
	if len(instances) < 2 {
		t.Errorf("runs by instance %v: want the work spread over the replicas", instances)
	}
}

// Dead holder: with lock.ttl 3s, SIGKILL the replica holding a long job's
// lock. Another replica takes the job over at the first slot after the dead
// holder's lease (within ttl + one fire interval of the kill), the old run
// is recorded abandoned, the taker's run — longer than 3 TTLs, next to a
// live third replica — is never taken over, recorded runs of the job never
// overlap (overlap forbid), and fences strictly increase.
func TestDeadHolderIsTakenOver(t *testing.T) {
	uri, db := setup(t)
	const ttl = 3 * time.Second
	const interval = 2 * time.Second
	jobsYAML := `
  long:
    exec: ["sleep", "10"]
    timeout: 1m
`
	ds := startReplicas(t, uri, db.Name(), 3, "lock:\n  ttl: 3s\n", jobsYAML)
	insert(t, db, sched("long", "*/2 * * * * *"))
	waitArmed(t, ds, []string{"long"})

	var held record.LockDoc
	waitFor(t, 60*time.Second, "a replica to hold the lock and run", func() bool {
		l, ok := lockDoc(t, db, "long")
		held = l
		if !ok || l.State != record.LockRunning {
			return false
		}
		n, err := db.Collection(record.RunsCollection).CountDocuments(testCtx(t),
			bson.D{{Key: "_id", Value: l.RunID}, {Key: "status", Value: record.StatusRunning}})
		return err == nil && n == 1
	})
	var victim *daemon
	var survivors []*daemon
	for i, d := range ds {
		if fmt.Sprintf("r%d", i+1) == held.Holder {
			victim = d
		} else {
			survivors = append(survivors, d)
		}
	}
	if victim == nil {
		t.Fatalf("lock held by %q, not one of the replicas", held.Holder)
	}
	victim.signal(syscall.SIGKILL)
	killedAt := time.Now()
	// Its last lease, now that nobody renews it.
	dead, _ := lockDoc(t, db, "long")
	if dead.Holder != held.Holder || dead.RunID != held.RunID {
		t.Fatalf("lock changed hands before the kill: %+v then %+v", held, dead)
	}
	if dead.LeaseUntil.After(killedAt.Add(ttl)) {
		t.Fatalf("lease until %v, more than ttl after the kill at %v", dead.LeaseUntil, killedAt)
	}
	// The first slot after the lease runs out.
	takeoverSlot := dead.LeaseUntil.Truncate(interval)
	if !takeoverSlot.After(dead.LeaseUntil) {
		takeoverSlot = takeoverSlot.Add(interval)
	}

	var taker record.RunDoc
	waitFor(t, 60*time.Second, "another replica to take the job over", func() bool {
		for _, r := range allRuns(t, db, bson.D{{Key: "job_id", Value: "long"}, {Key: "fence", Value: bson.D{{Key: "$gt", Value: dead.Fence}}}}) {
			if r.Status != record.StatusSkipped && r.Status != record.StatusClaiming {
				taker = r
				return true
			}
		}
		return false
	})
	t.Logf("killed %s at %s (lease until %s); %s took over slot %s, started %s after the kill",
		dead.Holder, killedAt.Format(time.StampMilli), dead.LeaseUntil.Format(time.StampMilli), taker.Instance,
		taker.ScheduledAt.Format(time.TimeOnly), taker.StartedAt.Sub(killedAt))
	if taker.Instance == dead.Holder {
		t.Fatalf("taken over by the dead replica %s", taker.Instance)
	}
	// (An earlier slot is possible only for a fire that reached its claim
	// after the lease ended anyway.)
	if taker.ScheduledAt.After(takeoverSlot) {
		t.Errorf("takeover at slot %s, want at the latest the first slot after the lease, %s (within ttl %s + interval %s of the kill)",
			taker.ScheduledAt.Format(time.TimeOnly), takeoverSlot.Format(time.TimeOnly), ttl, interval)
	}
	if taker.Fence != record.FenceOf(taker.ScheduledAt) || taker.Fence <= dead.Fence {
		t.Errorf("taker's fence %d, want its slot's, %d, above the dead holder's %d", taker.Fence, record.FenceOf(taker.ScheduledAt), dead.Fence)
	}
	// The dead holder's record is swept abandoned soon after the
	// takeover, without a made-up end.
	var old record.RunDoc
	waitFor(t, 15*time.Second, "the dead holder's run marked abandoned", func() bool {
		if err := db.Collection(record.RunsCollection).FindOne(testCtx(t), bson.D{{Key: "_id", Value: dead.RunID}}).Decode(&old); err != nil {
			t.Fatal(err)
		}
		return old.Status == record.StatusAbandoned
	})
	if old.Instance != dead.Holder || old.AbandonedAt.IsZero() || !old.EndedAt.IsZero() {
		t.Fatalf("dead holder's run %+v: want abandoned, with abandoned_at and no ended_at", old)
	}

	// The taker's run (10 s, over 3 TTLs) ends on its own: renewals keep
	// the third replica out.
	waitFor(t, 60*time.Second, "the taker's run to end", func() bool {
		var r record.RunDoc
		err := db.Collection(record.RunsCollection).FindOne(testCtx(t), bson.D{{Key: "_id", Value: taker.ID}}).Decode(&r)
		taker = r
		return err == nil && r.Status != record.StatusRunning
	})
	if taker.Status != record.StatusSucceeded || taker.EndedAt.Sub(taker.StartedAt) < 3*ttl {
		t.Fatalf("taker's run %+v: want succeeded after more than 3 TTLs", taker)
	}
	for _, d := range survivors {
		if l, ok := d.findLog(func(l logLine) bool { return l.str("msg") == "lock lost while running; cancelling the action" }); ok {
			t.Errorf("a live holder lost its lock: %v", l)
		}
	}

	// Recorded runs never overlap; fences strictly increase.
	var ran []record.RunDoc
	for _, r := range allRuns(t, db, bson.D{{Key: "job_id", Value: "long"}}) {
		if r.Status != record.StatusSkipped && r.Status != record.StatusRunning {
			ran = append(ran, r)
		}
	}
	sort.Slice(ran, func(i, j int) bool { return ran[i].StartedAt.Before(ran[j].StartedAt) })
	for i := 1; i < len(ran); i++ {
		if ran[i].StartedAt.Before(ran[i-1].EndedAt) {
			t.Errorf("runs overlap: %s %s..%s and %s %s..%s", ran[i-1].Instance, ran[i-1].StartedAt.Format(time.StampMilli),
				ran[i-1].EndedAt.Format(time.StampMilli), ran[i].Instance, ran[i].StartedAt.Format(time.StampMilli), ran[i].EndedAt.Format(time.StampMilli))
		}
		if ran[i].Fence <= ran[i-1].Fence {
			t.Errorf("fence %d after %d", ran[i].Fence, ran[i-1].Fence)
		}
	}
	if len(ran) < 2 {
		t.Fatalf("runs %+v: want the abandoned and the taker's", ran)
	}
}

// damagedLockCases are the damaged rows of the lock state table in docs/locks.md, as
// an operator would write them by hand with mongosh.
var damagedLockCases = map[string]string{
	"dmg_state_missing":      `{holder: "", run_id: "", lease_until: past, fence: NumberLong(7), last_slot: past}`,
	"dmg_state_unknown":      `{state: "editing", holder: "", run_id: "", lease_until: past, fence: NumberLong(7), last_slot: past}`,
	"dmg_state_wrong_type":   `{state: true, holder: "", run_id: "", lease_until: past, fence: NumberLong(7), last_slot: past}`,
	"dmg_fence_fraction":     `{state: "free", holder: "", run_id: "", lease_until: past, fence: 7.5, last_slot: past}`,
	"dmg_fence_string":       `{state: "free", holder: "", run_id: "", lease_until: past, fence: "7", last_slot: past}`,
	"dmg_fence_missing":      `{state: "free", holder: "", run_id: "", lease_until: past, last_slot: past}`,
	"dmg_last_slot_missing":  `{state: "free", holder: "", run_id: "", lease_until: past, fence: NumberLong(7)}`,
	"dmg_last_slot_string":   `{state: "free", holder: "", run_id: "", lease_until: past, fence: NumberLong(7), last_slot: "yesterday"}`,
	"dmg_last_slot_future":   `{state: "free", holder: "", run_id: "", lease_until: past, fence: NumberLong(7), last_slot: new Date("2999-01-01")}`,
	"dmg_running_no_holder":  `{state: "running", holder: "", run_id: "r", lease_until: soon, fence: NumberLong(7), last_slot: past}`,
	"dmg_running_holder_num": `{state: "running", holder: 3, run_id: "r", lease_until: soon, fence: NumberLong(7), last_slot: past}`,
	"dmg_running_no_lease":   `{state: "running", holder: "ghost", run_id: "r", fence: NumberLong(7), last_slot: past}`,
	"dmg_running_lease_str":  `{state: "running", holder: "ghost", run_id: "r", lease_until: "soon", fence: NumberLong(7), last_slot: past}`,
	"dmg_running_lease_far":  `{state: "running", holder: "ghost", run_id: "r", lease_until: new Date("2999-01-01"), fence: NumberLong(7), last_slot: past}`,
	"dmg_running_run_id_num": `{state: "running", holder: "ghost", run_id: 5, lease_until: soon, fence: NumberLong(7), last_slot: past}`,
	"dmg_empty":              `{}`,
}

// Damaged lock documents, written by hand into job_locks, are repaired and
// their jobs run at their next slot.
func TestDamagedLockDocumentsAreRepaired(t *testing.T) {
	uri, db := setup(t)
	var js strings.Builder
	js.WriteString(`const past = new Date(Date.now() - 3600e3); const soon = new Date(Date.now() + 300e3);
db.job_locks.insertMany([`)
	var ids []string
	for id, doc := range damagedLockCases {
		ids = append(ids, id)
		fmt.Fprintf(&js, "Object.assign({_id: %q}, %s),\n", id, doc)
	}
	js.WriteString(`]);`)
	sort.Strings(ids)
	mongosh(t, uri, db.Name(), js.String())

	jobsYAML := "\n  noop:\n    exec: [\"true\"]\n"
	var docs []bson.D
	for _, id := range ids {
		docs = append(docs, bson.D{{Key: "_id", Value: id}, {Key: "cron_expr", Value: "* * * * * *"},
			{Key: "job", Value: "noop"}, {Key: "updated_at", Value: time.Now()}})
	}
	insert(t, db, docs...)
	d := startDaemon(t, writeConfig(t, daemonConfig{URI: uri, Database: db.Name(), Jobs: jobsYAML}))
	d.waitReady()
	armedAt := time.Now()
	waitFor(t, 60*time.Second, "every job to run after its repair", func() bool {
		done := map[string]bool{}
		for _, r := range allRuns(t, db, bson.D{{Key: "status", Value: record.StatusSucceeded}}) {
			done[r.JobID] = true
		}
		return len(done) == len(ids)
	})
	for _, id := range ids {
		l, ok := lockDoc(t, db, id)
		if !ok || l.RepairReason == "" || l.RepairedAt.IsZero() {
			t.Errorf("%s: lock %+v, want a recorded repair", id, l)
		}
		if l.Fence <= 7 && id != "dmg_fence_missing" && id != "dmg_fence_string" && id != "dmg_empty" {
			t.Errorf("%s: fence %d, want above the damaged document's 7", id, l.Fence)
		}
		if _, ok := d.findLog(func(l logLine) bool {
			return l.str("msg") == "lock document damaged; reset to free" && l.str("job_id") == id && l.str("level") == "WARN"
		}); !ok {
			t.Errorf("%s: no warning about the repair", id)
		}
		runs := allRuns(t, db, bson.D{{Key: "job_id", Value: id}})
		if len(runs) == 0 || runs[0].ScheduledAt.After(armedAt.Add(5*time.Second)) {
			t.Errorf("%s: first run %+v, want one at the first slots after start (%s)", id, runs, armedAt.Format(time.TimeOnly))
		}
	}
}

// Database unreachable at fire time: the claim's connection is cut, so the
// fire does not run (at most once); the daemon logs it with job id and slot
// and counts it; a later fire runs again.
func TestUnreachableDatabaseAtFireTimeDoesNotRun(t *testing.T) {
	uri, db := setup(t)
	p := newProxy(t, uri)
	out := filepath.Join(t.TempDir(), "fires.log")
	jobsYAML := fmt.Sprintf("\n  tick:\n    exec: [\"sh\", \"-c\", %q]\n", `echo "$CRONSWAP_SCHEDULED_AT" >> `+out)
	insert(t, db, sched("tick", "* * * * * *"))
	d := startDaemon(t, writeConfig(t, daemonConfig{URI: p.URI(uri), Database: db.Name(), Jobs: jobsYAML}))
	d.waitReady()
	waitFor(t, 30*time.Second, "a first run", func() bool {
		return len(allRuns(t, db, bson.D{{Key: "status", Value: record.StatusSucceeded}})) > 0
	})
	// The next claims (the insert of their run records) lose their
	// connection, try after try (the claim reads back and sends again
	// while the fire could still start: 1 s for this every-second job), so
	// a fire is not run; the cuts are cleared once one is reported.
	for range 50 {
		p.CutNext(faultproxy.All(faultproxy.CommandName("insert"), faultproxy.Collection(record.RunsCollection)))
	}
	// The reason is the database, or the starting deadline when the
	// claim's read-back waited past it (the deadline wins once passed).
	l := d.waitLog("a fire not run for an unreachable database", func(l logLine) bool {
		return l.str("msg") == "fire not run: could not claim it" &&
			(l.str("reason") == firepath.NotRunUnreachable || l.str("reason") == firepath.NotRunStartingDeadline)
	})
	reason := l.str("reason")
	p.ClearFailures()
	if l.str("job_id") != "tick" || l.str("level") != "WARN" {
		t.Errorf("log %v: want a warning naming job_id tick", l)
	}
	slot, err := time.Parse(time.RFC3339, l.str("scheduled_at"))
	if err != nil {
		t.Fatalf("log %v: scheduled_at: %v", l, err)
	}
	// Later fires run again.
	waitFor(t, 30*time.Second, "a run after the outage", func() bool {
		return len(allRuns(t, db, bson.D{{Key: "status", Value: record.StatusSucceeded},
			{Key: "scheduled_at", Value: bson.D{{Key: "$gt", Value: slot}}}})) > 0
	})
	if runs := allRuns(t, db, bson.D{{Key: "scheduled_at", Value: slot}}); len(runs) != 0 {
		t.Errorf("the slot whose claim failed was recorded: %+v", runs)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), slot.UTC().Format(time.RFC3339)) {
		t.Errorf("the slot whose claim failed ran:\n%s", data)
	}
	var metrics string
	resp, err := http.Get(d.url("/metrics"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	metrics = string(b)
	for _, want := range []string{
		`cronswap_fires_not_run_total{reason="` + reason + `"}`,
		`cronswap_lock_acquisitions_total{result="acquired"}`,
		`cronswap_lock_acquisitions_total{result="error"}`,
		`cronswap_runs_total{job_id="tick",status="succeeded"}`,
		`cronswap_fire_lateness_seconds_count`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// A replica restarted with the same instance id after a crash takes its
// own left-over lock back at the next slot instead of waiting for the
// lease (10 minutes by default) to run out.
func TestRestartedInstanceReclaimsItsLock(t *testing.T) {
	uri, db := setup(t)
	jobsYAML := "\n  long:\n    exec: [\"sleep\", \"6\"]\n"
	insert(t, db, sched("long", "*/2 * * * * *"))
	cfg := writeConfig(t, daemonConfig{URI: uri, Database: db.Name(), InstanceID: "r1", Jobs: jobsYAML})
	d := startDaemon(t, cfg)
	d.waitReady()
	var held record.LockDoc
	waitFor(t, 60*time.Second, "the lock held by a running run", func() bool {
		l, ok := lockDoc(t, db, "long")
		held = l
		if !ok || l.State != record.LockRunning {
			return false
		}
		n, err := db.Collection(record.RunsCollection).CountDocuments(testCtx(t),
			bson.D{{Key: "_id", Value: l.RunID}, {Key: "status", Value: record.StatusRunning}})
		return err == nil && n == 1
	})
	d.signal(syscall.SIGKILL)
	held, _ = lockDoc(t, db, "long")

	d2 := startDaemon(t, cfg)
	d2.waitReady()
	d2.waitLog("the left-over run abandoned", func(l logLine) bool {
		return l.str("msg") == "run left by a previous life of this instance; abandoned" && l.str("job_id") == "long"
	})
	var again record.RunDoc
	waitFor(t, 30*time.Second, "a new run", func() bool {
		runs := allRuns(t, db, bson.D{{Key: "job_id", Value: "long"}, {Key: "instance", Value: "r1"},
			{Key: "fence", Value: bson.D{{Key: "$gt", Value: held.Fence}}}, {Key: "status", Value: bson.D{{Key: "$ne", Value: record.StatusSkipped}}}})
		if len(runs) == 1 {
			again = runs[0]
		}
		return len(runs) == 1
	})
	if again.Instance != "r1" || !again.StartedAt.Before(held.LeaseUntil) {
		t.Fatalf("new run %+v, want r1 before the old lease ends at %s", again, held.LeaseUntil)
	}
	var old record.RunDoc
	if err := db.Collection(record.RunsCollection).FindOne(testCtx(t), bson.D{{Key: "_id", Value: held.RunID}}).Decode(&old); err != nil {
		t.Fatal(err)
	}
	if old.Status != record.StatusAbandoned {
		t.Fatalf("the crashed run %+v: want abandoned", old)
	}
}
