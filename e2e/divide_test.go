package e2e

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/record"
)

// armers returns, per job id, the replicas whose /api/schedules says the
// job is armed there.
func armers(ds []*daemon, ids []string) map[string][]string {
	out := map[string][]string{}
	for i, d := range ds {
		if d == nil {
			continue
		}
		s := d.schedules()
		for _, id := range ids {
			if s[id].Armed {
				out[id] = append(out[id], fmt.Sprintf("r%d", i+1))
			}
		}
	}
	return out
}

// The membership's timing the hand-over test gives its daemons (members:
// in their config): short, so that the killed replica's lease passes and
// the survivors re-divide within the window, but a heartbeat's write and
// read still have 2 s each on a loaded machine, and the lease is four
// heartbeats. The claim grace is short too: a dead owner's every-second
// fires are claimed by a non-owner after max(grace, twice the claim
// latency), at most half a second, and its claim has what is left of the
// second; a 2 s grace would leave it half a second, which a test server
// stalled a few hundred milliseconds by a loaded machine misses (the slot
// is then recorded missed, starting_deadline).
const (
	divideHeartbeat  = 2 * time.Second
	divideLease      = 8 * time.Second
	divideClaimGrace = 100 * time.Millisecond
)

// TestDividedReplicasHandOffOnDeathAndJoin runs three replicas that divide
// the schedules (divide_schedules: true) and 12 every-second jobs, kills
// one replica (SIGKILL) and later starts a fourth, and checks that every
// slot of every job in the window ran exactly once: once in job_runs
// (succeeded; a run the killed replica had claimed when it died may be
// abandoned instead), at most once in the actions' own ledger. Each job is
// armed by two replicas at a time (its owner and its next owner), so the
// death leaves each of the dead replica's jobs armed by the other; the
// survivors re-divide once its lease passes, and the new replica takes
// its share.
//
// The action has a catch-up window (10 s): after the death a job has one
// live armer until the survivors re-divide, and when a loaded machine
// stalls that armer past a few slots, its timer skips them; the window
// has them run once each when it runs again (without it they would be
// recorded missed, stalled).
//
// The action keeps the default starting deadline, the second to the next
// slot, so a non-owner's grace is at most half a second: with a grace
// longer than the period, a slot still waiting for it when the survivors re-divide
// loses to a later slot its new owner claims at once, and is recorded
// skipped ("a later slot was claimed").
//
// It also checks the design's bound on the hand-over: the first slot due
// after the death of each job the killed replica owned started (its run
// record's started_at, written at the claim) at most lease + claim grace
// + 1 s after that slot — the other armer claims after the grace, and a
// job no survivor armed is armed here once the lease passes (the re-divide
// looks every second). The times are the daemons' own records, not the
// test's waits.
func TestDividedReplicasHandOffOnDeathAndJoin(t *testing.T) {
	uri, db := setup(t)
	out := filepath.Join(t.TempDir(), "fires.log")
	line := `printf '%s %s %s\n' "$CRONSWAP_JOB_ID" "$CRONSWAP_SCHEDULED_AT" "$CRONSWAP_INSTANCE_ID" >> ` + out
	jobsYAML := fmt.Sprintf(`
  append:
    exec: ["sh", "-c", %q]
    timeout: 20s
    overlap: allow
    catchup: 10s
`, line)
	extra := fmt.Sprintf("divide_schedules: true\nlock:\n  ttl: 3s\nmembers:\n  heartbeat: %s\n  lease: %s\n  claim_grace: %s\n",
		divideHeartbeat, divideLease, divideClaimGrace)
	start := func(i int) *daemon {
		d := startDaemon(t, writeConfig(t, daemonConfig{URI: uri, Database: db.Name(),
			InstanceID: fmt.Sprintf("r%d", i+1), Extra: extra, Jobs: jobsYAML}))
		d.waitReady()
		return d
	}
	ds := []*daemon{start(0), start(1), start(2), nil}

	const nJobs = 12
	var ids []string
	var docs []bson.D
	for i := range nJobs {
		id := fmt.Sprintf("div%02d", i)
		ids = append(ids, id)
		docs = append(docs, bson.D{{Key: "_id", Value: id}, {Key: "cron_expr", Value: "* * * * * *"},
			{Key: "job", Value: "append"}, {Key: "updated_at", Value: time.Now()}})
	}
	insert(t, db, docs...)
	// Once every replica's view holds the three, each job is armed by two.
	waitFor(t, 60*time.Second, "every job armed by exactly two replicas", func() bool {
		a := armers(ds, ids)
		for _, id := range ids {
			if len(a[id]) != 2 {
				return false
			}
		}
		return true
	})
	for _, id := range ids {
		var s apiSchedule
		if ds[0].get("/api/schedules/"+id, &s) != 200 || len(s.ArmedBy) != 2 {
			t.Fatalf("%s: armed_by %v, want its two armers", id, s.ArmedBy)
		}
	}

	from := time.Now().Truncate(time.Second).Add(2 * time.Second)
	to := from.Add(50 * time.Second) // slots in [from, to)
	t.Logf("window %s .. %s", from.Format(time.TimeOnly), to.Format(time.TimeOnly))
	time.Sleep(time.Until(from.Add(8 * time.Second)))
	killed := ds[0]
	// The jobs r1 owns (it claims their fires at once; the others after
	// the grace), as r1 sees it just before it dies.
	var owned []string
	for id, s := range killed.schedules() {
		if s.Owner == "r1" && strings.HasPrefix(id, "div") {
			owned = append(owned, id)
		}
	}
	killedAt := time.Now()
	_ = syscall.Kill(-killed.cmd.Process.Pid, syscall.SIGKILL)
	<-killed.done
	ds[0] = nil
	t.Logf("r1 killed at %s, owning %v", killedAt.Format(time.TimeOnly+".000"), owned)
	if len(owned) == 0 {
		t.Fatal("r1 owned none of the jobs: the hand-over is not exercised")
	}
	time.Sleep(time.Until(from.Add(22 * time.Second)))
	ds[3] = start(3)
	t.Logf("r4 ready at %s", time.Now().Format(time.TimeOnly))
	// The survivors see r1's lease pass and re-divide; r4 takes its share.
	waitFor(t, 90*time.Second, "every job armed by exactly two live replicas, r4 among them for some", func() bool {
		a := armers(ds, ids)
		r4 := 0
		for _, id := range ids {
			if len(a[id]) != 2 {
				return false
			}
			if strings.Contains(strings.Join(a[id], ","), "r4") {
				r4++
			}
		}
		return r4 > 0
	})

	inWindow := bson.D{{Key: "scheduled_at", Value: bson.D{{Key: "$gte", Value: from}, {Key: "$lt", Value: to}}}}
	want := nJobs * int(to.Sub(from)/time.Second)
	// Every slot of the window recorded and ended; if not by the deadline,
	// the checks below name the slots that are not.
	settled := func() bool {
		if time.Now().Before(to) {
			return false
		}
		runs := allRuns(t, db, inWindow)
		if len(runs) < want {
			return false
		}
		for _, r := range runs {
			if r.Status == record.StatusRunning || r.Status == record.StatusClaiming {
				return false
			}
		}
		return true
	}
	for deadline := to.Add(90 * time.Second); !settled(); time.Sleep(500 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Errorf("not every slot of the window was recorded and ended within 90s of its end")
			break
		}
	}
	type key struct{ job, slot string }
	recorded := map[key]int{}
	abandoned := map[key]bool{}
	byInstance := map[string]int{}
	runs := allRuns(t, db, inWindow)
	// The bound: the first slot after the death of each job r1 owned.
	bound := divideLease + divideClaimGrace + time.Second
	firstAfter := map[string]record.RunDoc{}
	for _, r := range runs {
		if f, ok := firstAfter[r.JobID]; r.ScheduledAt.After(killedAt) && (!ok || r.ScheduledAt.Before(f.ScheduledAt)) {
			firstAfter[r.JobID] = r
		}
	}
	for _, id := range owned {
		r, ok := firstAfter[id]
		if !ok {
			t.Errorf("%s: no run of a slot after r1's death", id)
			continue
		}
		if r.StartedAt.IsZero() || r.Status == record.StatusMissed || r.Status == record.StatusSkipped {
			t.Errorf("%s: the first slot after r1's death (%s) did not run: %s (%s)", id,
				r.ScheduledAt.Format(time.TimeOnly), r.Status, r.Reason)
			continue
		}
		late := r.StartedAt.Sub(r.ScheduledAt)
		t.Logf("%s: first slot after the death %s started %s late by %s", id,
			r.ScheduledAt.Format(time.TimeOnly), late.Round(time.Millisecond), r.Instance)
		if r.Instance == "r1" || late > bound {
			t.Errorf("%s: the first slot after r1's death (%s) started %s after it by %s, want within lease %s + claim grace %s + 1s = %s by a survivor",
				id, r.ScheduledAt.Format(time.TimeOnly), late, r.Instance, divideLease, divideClaimGrace, bound)
		}
	}
	for _, r := range runs {
		k := key{r.JobID, r.ScheduledAt.UTC().Format(time.RFC3339)}
		recorded[k]++
		byInstance[r.Instance]++
		switch {
		case r.Status == record.StatusSucceeded:
		case r.Status == record.StatusAbandoned && r.Instance == "r1":
			abandoned[k] = true // claimed by r1 as it was killed
		default:
			t.Errorf("%s at %s: status %s (%s) by %s, want succeeded", r.JobID, k.slot, r.Status, r.Reason, r.Instance)
		}
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	inFile := map[key]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 3 {
			inFile[key{fields[0], fields[1]}]++
		}
	}
	bad := 0
	for _, id := range ids {
		for s := from; s.Before(to); s = s.Add(time.Second) {
			k := key{id, s.UTC().Format(time.RFC3339)}
			ranOK := inFile[k] == 1 || (abandoned[k] && inFile[k] <= 1)
			if recorded[k] != 1 || !ranOK {
				if bad++; bad <= 20 {
					t.Errorf("%s at %s: %d records, %d runs in the ledger; want exactly one", id, k.slot, recorded[k], inFile[k])
				}
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d (job, slot) pairs not exactly once", bad, want)
	}
	t.Logf("%d slots, runs by instance %v, %d abandoned by the killed replica", want, byInstance, len(abandoned))
	if byInstance["r4"] == 0 {
		t.Errorf("the joining replica ran nothing: %v", byInstance)
	}
}
