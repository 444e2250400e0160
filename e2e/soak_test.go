package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/internal/faultproxy"
)

// EnvSoak sets the chaos soak's duration (a Go duration, e.g. "10m");
// scripts/soak.sh sets it. Default 60 s.
const EnvSoak = "CRONSWAP_SOAK"

// EnvSoakJobs sets how many load jobs of the chaos soak fire every second
// (CRONSWAP_SOAK_JOBS=N scripts/soak.sh); default DefaultSoakJobs.
const EnvSoakJobs = "CRONSWAP_SOAK_JOBS"

// DefaultSoakJobs is the soak's number of load jobs firing every second
// across the three replicas, the count CI runs. Measured on the 2-core
// machine shared with other work (race-built daemons, 60 s runs): every
// run from 30 to 300 jobs ended with no duplicate and every run recorded;
// of the load jobs' slots 84–98 % ran at 200, 95 % at 250 and 81–90 % at
// 300 (the daemons no longer keep up, the rest is recorded missed), and
// the stable jobs missed 0.5–14 % of theirs at 200 (37 % once, while other
// test suites and a benchmark shared the cores) against 11–29 % at 300,
// near their bound of a third. 200 keeps that margin, and costs the test
// a few seconds over 30 (66 s against 63 s on a quiet machine). (The
// convergence failure once seen at 100, a replica "keeping" a deleted job,
// was the check's: see waitConverged.)
const DefaultSoakJobs = 200

func soakJobs(t *testing.T) int {
	t.Helper()
	v := os.Getenv(EnvSoakJobs)
	if v == "" {
		return DefaultSoakJobs
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive number of jobs", EnvSoakJobs, v)
	}
	return n
}

func soakDuration(t *testing.T) time.Duration {
	t.Helper()
	v := os.Getenv(EnvSoak)
	if v == "" {
		return 60 * time.Second
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive duration like 10m", EnvSoak, v)
	}
	return d
}

// TestChaosSoak runs three daemon replicas, each behind its own fault
// proxy, while a writer makes random edits at about 20 per second and
// random faults hit random replicas: connection cuts, refused connections
// (an outage of up to 3 s), ChangeStreamHistoryLost (286) injected on the
// next change-stream getMore or resume, and one SIGKILL and restart of a
// replica — all under several hundred stable jobs firing every second (an
// http action posting to a recording server on 127.0.0.1). At the end
// every replica's /api/schedules must equal the collection, no
// (job_id, scheduled_at) may appear twice in job_runs nor have run twice,
// and every run has its record.
func TestChaosSoak(t *testing.T) {
	began := time.Now()
	dur := soakDuration(t)
	stableJobs := soakJobs(t)
	uri, db := setup(t)
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	t.Logf("soak: %s, %d every-second jobs, seed %d", dur, stableJobs, seed)

	const replicas = 3
	// Every run appends "job slot instance fence" to the ledger: the ground
	// truth of what ran, independent of job_runs (whose unique index makes
	// duplicates there impossible by construction).
	ledger := filepath.Join(t.TempDir(), "ledger")
	// The stable jobs' action posts the fire to a recorder (several hundred
	// processes a second would measure fork, not the fire path); the
	// recorder is their ledger.
	rec := fpNewRecorder(t)
	soakJobsYAML := fmt.Sprintf(`
  tick:
    exec: ["sh", "-c", "printf '%%s %%s %%s %%s\\n' \"$CRONSWAP_JOB_ID\" \"$CRONSWAP_SCHEDULED_AT\" \"$CRONSWAP_INSTANCE_ID\" \"$CRONSWAP_FENCE\" >> %s"]
    overlap: allow
`, ledger) + rec.jobsYAML("allow")
	// Stable jobs fire every second and are never edited: their slots are
	// the ones that must run (see the exactly-once check at the end); the
	// load jobs fire every second too and must run at most once, recorded,
	// but on this machine (three race-built daemons, a wire proxy each and
	// the test server on 2 cores, faults every second) many of their fires
	// are late and recorded missed: their missed share is reported, not
	// bounded.
	const stableCheckedJobs = 4
	var stable []any
	for i := range stableCheckedJobs {
		stable = append(stable, bson.D{{Key: "_id", Value: fmt.Sprintf("stable_%d", i)}, {Key: "cron_expr", Value: "* * * * * *"},
			{Key: "job", Value: "tick"}, {Key: "updated_at", Value: time.Now()}})
	}
	for i := range stableJobs {
		stable = append(stable, bson.D{{Key: "_id", Value: fmt.Sprintf("load_%d", i)}, {Key: "cron_expr", Value: "* * * * * *"},
			{Key: "job", Value: "hit"}, {Key: "updated_at", Value: time.Now()}})
	}
	if _, err := db.Collection("schedules").InsertMany(testCtx(t), stable); err != nil {
		t.Fatal(err)
	}
	proxies := make([]*faultproxy.Proxy, replicas)
	cfgs := make([]string, replicas)
	daemons := make([]*daemon, replicas)
	for i := range replicas {
		proxies[i] = newProxy(t, uri)
		cfgs[i] = writeConfig(t, daemonConfig{URI: proxies[i].URI(uri), Database: db.Name(),
			InstanceID: fmt.Sprintf("soak-%d", i+1), Jobs: soakJobsYAML, Watch: "  resync_interval: 5s\n"})
		daemons[i] = startDaemon(t, cfgs[i])
	}
	for _, d := range daemons {
		d.waitReady()
	}

	w := newWriter(db.Collection("schedules"), seed, 30, append(append([]string{}, quietExprs...), firingExprs...))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); w.run(ctx, 0, 50*time.Millisecond) }()

	faults := map[string]int{}
	start := time.Now()
	end := start.Add(dur)
	killAt := time.Now().Add(dur / 2)
	killed := false
	for time.Now().Before(end) {
		time.Sleep(time.Duration(300+rng.IntN(1200)) * time.Millisecond)
		i := rng.IntN(replicas)
		p := proxies[i]
		switch {
		case !killed && time.Now().After(killAt):
			killed = true
			daemons[i].signal(syscall.SIGKILL)
			faults["sigkill+restart"]++
			daemons[i] = startDaemon(t, cfgs[i])
		default:
			switch rng.IntN(3) {
			case 0:
				p.CutAll()
				faults["cut"]++
			case 1:
				p.Outage(time.Duration(500+rng.IntN(2500)) * time.Millisecond)
				faults["refuse"]++
			case 2:
				p.FailNext(faultproxy.AnyOf(p.ChangeStreamGetMore(), faultproxy.IsChangeStreamAggregate), historyLostReply)
				faults["inject_286"]++
			}
		}
	}
	cancel()
	wg.Wait()
	for _, p := range proxies {
		p.ClearFailures()
		p.RefuseFor(0)
	}

	// Every replica converges to the collection.
	atStop := collectionState(t, db)
	convergeStart := time.Now()
	report := waitConverged(t, func() map[string]jobState { return collectionState(t, db) }, daemons, 60*time.Second)
	checksStart := time.Now()
	converged := checksStart.Sub(convergeStart).Round(time.Millisecond)
	mismatches := len(report)
	lateEdits := len(stateDiff(atStop, collectionState(t, db)))
	dups, runs := countDuplicateRuns(t, db)
	lines := readLedgerLines(t, ledger)
	for _, h := range rec.snapshot() {
		lines = append(lines, fmt.Sprintf("%s %s %s %d", h.Job, h.Slot.Format(time.RFC3339), h.Instance, h.Fence))
	}
	window := windowSlots(start.Add(5*time.Second), end.Add(-3*time.Second))
	lg := checkLedger(t, db, lines, stableCheckedJobs, window)
	inWindow := map[int64]bool{} // by Unix second
	for _, sec := range window {
		inWindow[sec.Unix()] = true
	}
	loadRan := map[string]bool{}
	for _, h := range rec.snapshot() {
		if inWindow[h.Slot.Unix()] {
			loadRan[fpKey(h.Job, h.Slot)] = true
		}
	}
	loadSlots := stableJobs * len(window)
	totalFaults := 0
	for _, n := range faults {
		totalFaults += n
	}
	// Fires as the replicas' logs tell them (the killed replica's first life
	// excluded), and the (job, slot) pairs more than one replica ran: without
	// leader locks every replica runs every fire, so this is informational.
	var fires []string
	perSlot := map[string]int{}
	for i, d := range daemons {
		n := countLogs(d, func(l logLine) bool {
			if l.str("msg") != "run started" {
				return false
			}
			perSlot[l.str("job_id")+"@"+l.str("scheduled_at")]++
			return true
		})
		fires = append(fires, fmt.Sprintf("soak-%d=%d", i+1, n))
	}
	served := 0 // 286 replies the proxies actually sent (an armed one may be cleared unused at the end)
	for _, p := range proxies {
		for _, n := range p.Stats().Injected {
			served += n
		}
	}
	drift := 0
	for _, d := range daemons {
		drift += countLogs(d, func(l logLine) bool { return strings.HasPrefix(l.str("msg"), "resync found drift") })
	}
	multi := 0
	for _, n := range perSlot {
		if n > 1 {
			multi++
		}
	}
	checks := time.Since(checksStart).Round(time.Millisecond)
	t.Logf("soak figures: duration=%s setup=%s converge=%s checks=%s edits=%d (%s) faults=%d %v injected_286_served=%d jobs=%d mismatches=%d late_edits=%d job_runs=%d duplicate_runs=%d fires=[%s] slots_fired=%d slots_run_by_several_replicas=%d drift_reports=%d ledger_runs=%d ledger_duplicates=%d runs_unrecorded=%d stable_slots=%d stable_missed=%d load_jobs=%d load_runs=%d (of about %d slots)",
		dur, start.Sub(began).Round(time.Millisecond), converged, checks, w.total(), w.summary(), totalFaults, faults, served, len(atStop), mismatches, lateEdits, runs, dups, strings.Join(fires, " "), len(perSlot), multi, drift, lg.lines, lg.duplicates, lg.unrecorded, lg.stableSlots, lg.stableMissed, stableJobs, len(loadRan), loadSlots)
	if mismatches != 0 {
		t.Errorf("%d mismatches between replicas and the collection:\n%s", mismatches, strings.Join(report, "\n"))
	}
	if dups != 0 {
		t.Errorf("%d (job_id, scheduled_at) pairs recorded more than once in job_runs", dups)
	}
	if lg.duplicates != 0 {
		t.Errorf("%d (job, slot) pairs ran more than once (ledger):\n%s", lg.duplicates, strings.Join(lg.report, "\n"))
	}
	if lg.unrecorded != 0 {
		t.Errorf("%d runs in the ledger have no job_runs record of the same instance and fence:\n%s", lg.unrecorded, strings.Join(lg.report, "\n"))
	}
	// A stable slot goes unrun when its claim cannot get through within
	// the fire's 1 s starting deadline on any replica (at most once beats
	// at least once): a fault hits some replica every second or so here.
	// Alone they miss under 10 % of their slots; beside 200 load jobs on
	// 2 cores, measured 0.5–14 %, up to 37 % while other test suites and a
	// benchmark shared the cores, so the bound is a third.
	if lg.stableSlots == 0 || lg.stableMissed*3 > lg.stableSlots {
		t.Errorf("stable jobs: %d of %d slots in the window never ran (more than a third)", lg.stableMissed, lg.stableSlots)
	}
	if w.total() < int(dur.Seconds())*5 {
		t.Errorf("the writer made only %d edits in %s (%s)", w.total(), dur, w.summary())
	}
}

// waitConverged polls every replica until its /api/schedules equals the
// collection, or the deadline (timeout from now, shared by all replicas)
// has passed, and returns what still differs as "replica N: ..." lines.
// The collection is read again for every comparison: the replicas must
// follow the collection as it is, so an edit that lands after the check
// began (one a stopped writer gave up on can still reach the server) is a
// change for them to apply, not a divergence. Comparing against one read
// taken before that edit blamed each replica polled after it had applied
// the edit, and only those.
func waitConverged(t *testing.T, collection func() map[string]jobState, daemons []*daemon, timeout time.Duration) []string {
	t.Helper()
	var report []string
	deadline := time.Now().Add(timeout)
	for i, d := range daemons {
		var diff []string
		for {
			select {
			case <-d.done:
				t.Fatalf("replica %d exited: %v", i+1, d.exit)
			default:
			}
			diff = stateDiff(collection(), apiState(d.schedules()))
			if len(diff) == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		for _, line := range diff {
			report = append(report, fmt.Sprintf("replica %d: %s", i+1, line))
		}
	}
	return report
}

// ledgerCheck is what checkLedger found.
type ledgerCheck struct {
	lines, duplicates, unrecorded, stableSlots, stableMissed int
	report                                                   []string
}

// readLedgerLines reads the "job slot instance fence" lines an exec
// action appended to path (none when it never ran).
func readLedgerLines(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatalf("ledger: %v", err)
	}
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if line != "" {
			out = append(out, line)
		}
	}
	return out
}

// windowSlots returns the whole seconds after from and before to (UTC):
// the slots of an every-second job that the soak counts.
func windowSlots(from, to time.Time) []time.Time {
	var out []time.Time
	for sec := from.Truncate(time.Second).Add(time.Second); sec.Before(to); sec = sec.Add(time.Second) {
		out = append(out, sec.UTC())
	}
	return out
}

// checkLedger takes the runs the actions themselves wrote down ("job slot
// instance fence" lines) and checks them against job_runs: no (job, slot)
// ran twice; every run has the record of the replica and fence that ran
// it; and it counts the slots of the stable jobs in window that never ran.
func checkLedger(t *testing.T, db *mongo.Database, lines []string, stable int, window []time.Time) ledgerCheck {
	t.Helper()
	var c ledgerCheck
	type run struct{ instance, fence string }
	ran := map[string][]run{}
	for _, line := range lines {
		f := strings.Fields(line)
		if len(f) != 4 {
			t.Fatalf("ledger line %q: want job slot instance fence", line)
		}
		c.lines++
		key := f[0] + " " + f[1]
		ran[key] = append(ran[key], run{f[2], f[3]})
	}
	recorded := map[string]run{}
	for _, r := range allRuns(t, db, bson.D{}) {
		recorded[r.JobID+" "+r.ScheduledAt.UTC().Format(time.RFC3339)] = run{r.Instance, strconv.FormatInt(r.Fence, 10)}
	}
	for key, rs := range ran {
		if len(rs) > 1 {
			c.duplicates++
			c.report = append(c.report, fmt.Sprintf("ran %d times: %s %v", len(rs), key, rs))
		}
		if rec, ok := recorded[key]; !ok || rec != rs[0] {
			c.unrecorded++
			c.report = append(c.report, fmt.Sprintf("run %s %v has job_runs record %v (found %v)", key, rs[0], rec, ok))
		}
	}
	for _, sec := range window {
		for i := range stable {
			c.stableSlots++
			if len(ran[fmt.Sprintf("stable_%d %s", i, sec.Format(time.RFC3339))]) == 0 {
				c.stableMissed++
			}
		}
	}
	return c
}

// countDuplicateRuns counts the (job_id, scheduled_at) pairs that occur
// more than once in job_runs, and the run records in all.
func countDuplicateRuns(t *testing.T, db *mongo.Database) (dups, runs int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cur, err := db.Collection("job_runs").Aggregate(ctx, mongo.Pipeline{
		{{Key: "$group", Value: bson.D{
			{Key: "_id", Value: bson.D{{Key: "job_id", Value: "$job_id"}, {Key: "scheduled_at", Value: "$scheduled_at"}}},
			{Key: "n", Value: bson.D{{Key: "$sum", Value: 1}}},
		}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var groups []struct {
		N int `bson:"n"`
	}
	if err := cur.All(ctx, &groups); err != nil {
		t.Fatal(err)
	}
	for _, g := range groups {
		runs += g.N
		if g.N > 1 {
			dups++
		}
	}
	return dups, runs
}
