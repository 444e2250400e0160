package e2e

// A run never outlives its lease: a holder SIGKILLed mid-run
// takes its exec child with it, and a holder frozen (SIGSTOP) past its
// lease stops its child the moment it resumes; the records tell the truth
// (abandoned, abandoned_at, and the real end — never one back-dated to the
// takeover). The child's pid comes from the action's own ledger line
// (fpExecLedger with a sleep: the pid is the daemon's direct child).

import (
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/internal/record"
)

// fpRunTruth is a job_runs record with the fields PLAN-12 adds for an
// abandoned run (jobs.RunDoc does not have them yet).
type fpRunTruth struct {
	ID          string    `bson:"_id"`
	JobID       string    `bson:"job_id"`
	ScheduledAt time.Time `bson:"scheduled_at"`
	Instance    string    `bson:"instance"`
	Status      string    `bson:"status"`
	StartedAt   time.Time `bson:"started_at"`
	EndedAt     time.Time `bson:"ended_at"`
	AbandonedAt time.Time `bson:"abandoned_at"`
	EndStatus   string    `bson:"end_status"`
	EndObserved bool      `bson:"end_observed"`
	EndedAfter  time.Time `bson:"ended_after"`
	LeaseUntil  time.Time `bson:"lease_until"`
	Error       string    `bson:"error"`
}

func fpRun(t *testing.T, db *mongo.Database, job string, slot time.Time) (fpRunTruth, bool) {
	t.Helper()
	var r fpRunTruth
	err := db.Collection(record.RunsCollection).FindOne(testCtx(t),
		bson.D{{Key: "job_id", Value: job}, {Key: "scheduled_at", Value: slot}}).Decode(&r)
	if err == mongo.ErrNoDocuments {
		return r, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return r, true
}

// fpLongJob starts n replicas (lock.ttl 3s) running job long every 2 s
// (overlap forbid): an exec child that writes its ledger line and sleeps
// sleep seconds. It returns the replicas, the ledger path and the first
// run seen running, with its record. Children still running when the test
// ends are killed by their pid (they are in their own process group, out
// of the harness's reach).
func fpLongJob(t *testing.T, db *mongo.Database, uri string, n, sleep int) ([]*daemon, string, fpEntry) {
	t.Helper()
	ledger := filepath.Join(t.TempDir(), "ledger")
	jobsYAML := fmt.Sprintf("\n  long:\n    exec: [\"sh\", \"-c\", %q]\n    timeout: 1m\n", fpExecLedger(ledger, sleep))
	ds := startReplicas(t, uri, db.Name(), n, "lock:\n  ttl: 3s\n", jobsYAML)
	t.Cleanup(func() {
		for _, e := range fpReadLedger(t, ledger) {
			if p, ok := readProc(e.PID); ok && p.argv0() == "sleep" {
				_ = syscall.Kill(e.PID, syscall.SIGKILL)
			}
		}
	})
	insert(t, db, sched("long", "*/2 * * * * *"))
	waitArmed(t, ds, []string{"long"})
	var first fpEntry
	waitFor(t, 60*time.Second, "a run of long running, its child alive", func() bool {
		for _, e := range fpReadLedger(t, ledger) {
			if r, ok := fpRun(t, db, e.Job, e.Slot); ok && r.Status == record.StatusRunning && running(e.PID) {
				first = e
				return true
			}
		}
		return false
	})
	return ds, ledger, first
}

// fpReplica returns the daemon of instance id ("r<i>") and the others.
func fpReplica(t *testing.T, ds []*daemon, id string) (*daemon, []*daemon) {
	t.Helper()
	var d *daemon
	var rest []*daemon
	for i, x := range ds {
		if fmt.Sprintf("r%d", i+1) == id {
			d = x
		} else {
			rest = append(rest, x)
		}
	}
	if d == nil {
		t.Fatalf("run held by %q, not one of the replicas", id)
	}
	return d, rest
}

// fpGone polls until pid no longer runs (gone or a zombie) and returns
// when that was seen; false when it still ran after limit.
func fpGone(pid int, limit time.Duration) (time.Time, bool) {
	deadline := time.Now().Add(limit)
	for running(pid) {
		if time.Now().After(deadline) {
			return time.Time{}, false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Now(), true
}

// fpTaker waits for the first ledger run of job long on another instance
// than holder, for a slot after after.
func fpTaker(t *testing.T, ledger, holder string, after time.Time, timeout time.Duration) fpEntry {
	t.Helper()
	var taker fpEntry
	waitFor(t, timeout, "another replica to take long over", func() bool {
		for _, e := range fpReadLedger(t, ledger) {
			if e.Instance != holder && e.Slot.After(after) {
				taker = e
				return true
			}
		}
		return false
	})
	return taker
}

// (e) Kill mid-run: SIGKILL the replica whose exec child is running. The
// child dies with it (its pid is gone within fpChildGone — the parent-death
// signal is immediate; the allowance is for a loaded machine), the other
// replica takes over only after the dead holder's lease and within lock.ttl
// + one interval + the claim grace (+ fpSlack), the two runs do not overlap
// at all, and the dead run's record shows the truth: abandoned, with
// abandoned_at not before its lease ended, and no ended_at (nobody saw it
// end; a back-dated end would hide the overlap).
func TestLeaseKillMidRunChildDies(t *testing.T) {
	uri, db := setup(t)
	const ttl, interval = 3 * time.Second, 2 * time.Second
	ds, ledger, held := fpLongJob(t, db, uri, 2, 20)
	victim, _ := fpReplica(t, ds, held.Instance)
	victim.signal(syscall.SIGKILL)
	killed := time.Now()
	dead, _ := fpRun(t, db, held.Job, held.Slot)
	lock, _ := lockDoc(t, db, held.Job)
	lease := dead.LeaseUntil
	if lock.RunID == dead.ID && lock.LeaseUntil.After(lease) {
		lease = lock.LeaseUntil
	}

	gone, ok := fpGone(held.PID, 30*time.Second)
	if !ok {
		t.Errorf("the killed holder's child (pid %d) still runs 30 s after the kill", held.PID)
	} else if took := gone.Sub(killed); took > fpChildGone {
		t.Errorf("the killed holder's child (pid %d) ran on %s after the kill, want gone within %s", held.PID, took.Round(time.Millisecond), fpChildGone)
	}

	taker := fpTaker(t, ledger, held.Instance, held.Slot, ttl+interval+fpClaimGrace+time.Minute)
	t.Logf("killed %s at %s, lease until %s; child gone after %s; %s took over slot %s, its child started %s after the kill",
		held.Instance, killed.Format(time.StampMilli), lease.Format(time.StampMilli), gone.Sub(killed).Round(time.Millisecond),
		taker.Instance, taker.Slot.Format(time.TimeOnly), taker.Start.Sub(killed).Round(time.Millisecond))
	if taker.Start.Before(lease) {
		t.Errorf("taken over at %s, before the dead holder's lease ended at %s", taker.Start.Format(time.StampMilli), lease.Format(time.StampMilli))
	}
	if bound := ttl + interval + fpClaimGrace + fpSlack; taker.Start.Sub(killed) > bound {
		t.Errorf("taken over %s after the kill, want within lock.ttl %s + interval %s + grace %s + %s",
			taker.Start.Sub(killed).Round(time.Millisecond), ttl, interval, fpClaimGrace, fpSlack)
	}
	if ok && gone.After(taker.Start) {
		t.Errorf("the dead holder's child ran until %s, after the taker's run started at %s: overlap %s",
			gone.Format(time.StampMilli), taker.Start.Format(time.StampMilli), gone.Sub(taker.Start).Round(time.Millisecond))
	}
	if !ok {
		t.Errorf("the dead holder's child overlaps the taker's run from %s on", taker.Start.Format(time.StampMilli))
	}

	var r fpRunTruth
	waitFor(t, 30*time.Second, "the dead run recorded abandoned", func() bool {
		r, _ = fpRun(t, db, held.Job, held.Slot)
		return r.Status != record.StatusRunning
	})
	if r.Status != record.StatusAbandoned || r.Instance != held.Instance {
		t.Errorf("dead run's record %+v: want abandoned, of %s", r, held.Instance)
	}
	if r.AbandonedAt.IsZero() || r.AbandonedAt.Before(lease) {
		t.Errorf("dead run's abandoned_at %s: want set, not before its lease ended at %s", r.AbandonedAt.Format(time.StampMilli), lease.Format(time.StampMilli))
	}
	if !r.EndedAt.IsZero() {
		t.Errorf("dead run's ended_at %s: want none — the holder died, nobody saw the run end (a back-dated end hides the overlap)", r.EndedAt.Format(time.StampMilli))
	}
}

// fpChildGone is how soon after its daemon's death (or resume, for a
// frozen one past its lease) a child must be gone: the signal is
// immediate; the rest is polling and a loaded machine.
const fpChildGone = 2 * time.Second

// fpFreezeOn is how long a frozen holder stays frozen after the taker's
// run started: long past its own lease, so that on resume its local lease
// deadline is seconds old.
const fpFreezeOn = 3 * time.Second

// (f) Freeze: SIGSTOP the holder past its lock lease (lock.ttl 3s) until
// another replica has taken the job over and its child has run for
// fpFreezeOn, then SIGCONT.
// The frozen holder's child is stopped at once on resume (within
// fpChildGone: its local lease deadline passed long ago, no database
// answer needed), so the overlap of the two children is bounded by the
// freeze; the stale run's record is abandoned (abandoned_at during the
// freeze) and keeps its true end — ended_at at or after the resume, not the
// takeover time — with the holder's own end status, marked as seen only
// after the stall (end_observed, and ended_after no later than the freeze's
// start: the holder cannot tell whether its child ended during the freeze
// or when it resumed); the resumed holder
// disturbs neither the taker's run nor its record, and starts no run of
// its own while the taker's lasts.
func TestLeaseFrozenHolderStopsOnResume(t *testing.T) {
	uri, db := setup(t)
	ds, ledger, held := fpLongJob(t, db, uri, 2, 25)
	frozen, _ := fpReplica(t, ds, held.Instance)
	frozen.signal(syscall.SIGSTOP)
	stopped := time.Now()
	t.Cleanup(func() { _ = frozen.cmd.Process.Signal(syscall.SIGCONT) })

	taker := fpTaker(t, ledger, held.Instance, held.Slot, time.Minute)
	waitFor(t, 30*time.Second, "the taker's run recorded running", func() bool {
		r, ok := fpRun(t, db, taker.Job, taker.Slot)
		return ok && r.Status == record.StatusRunning
	})
	// Frozen on, well past the lease, while both children run, and until a
	// live replica's sweep has marked the stale run abandoned: sweeps come
	// every sweep interval (5 s with this lock.ttl), so on a loaded machine
	// the mark can land later than fpFreezeOn after the takeover — a
	// holder resumed before it would write its end on a record still
	// running, and this test is about the record a sweep marked first.
	fpUntil(t, taker.Start.Add(fpFreezeOn), "the freeze to last past the takeover")
	waitFor(t, 30*time.Second, "a sweep to mark the frozen holder's run abandoned", func() bool {
		r, ok := fpRun(t, db, held.Job, held.Slot)
		return ok && r.Status == record.StatusAbandoned
	})
	if !running(held.PID) {
		t.Fatalf("the frozen holder's child (pid %d) ended on its own before the resume: the freeze was too long for the test", held.PID)
	}
	frozen.signal(syscall.SIGCONT)
	resumed := time.Now()
	freeze := resumed.Sub(stopped)

	gone, ok := fpGone(held.PID, 30*time.Second)
	switch {
	case !ok:
		t.Errorf("the resumed holder's child (pid %d) still runs 30 s after the resume", held.PID)
	case gone.Sub(resumed) > fpChildGone:
		t.Errorf("the resumed holder's child (pid %d) ran on %s after the resume, want stopped at once (within %s)",
			held.PID, gone.Sub(resumed).Round(time.Millisecond), fpChildGone)
	}
	overlap := gone.Sub(taker.Start)
	if !ok {
		overlap = time.Since(taker.Start)
	}
	t.Logf("froze %s for %s; %s took over slot %s %s into the freeze; stale child gone %s after the resume; overlap %s",
		held.Instance, freeze.Round(time.Millisecond), taker.Instance, taker.Slot.Format(time.TimeOnly),
		taker.Start.Sub(stopped).Round(time.Millisecond), gone.Sub(resumed).Round(time.Millisecond), overlap.Round(time.Millisecond))
	if overlap > freeze {
		t.Errorf("the two runs overlapped %s, more than the freeze %s", overlap.Round(time.Millisecond), freeze.Round(time.Millisecond))
	}

	var r fpRunTruth
	if !fpWaitUntil(30*time.Second, func() bool {
		r, _ = fpRun(t, db, held.Job, held.Slot)
		return !r.EndedAt.IsZero()
	}) {
		t.Errorf("the stale run's record has no ended_at 30 s after the resume: %+v", r)
	}
	if r.Status != record.StatusAbandoned {
		t.Errorf("stale run's status %q, want abandoned (it was taken over)", r.Status)
	}
	if r.AbandonedAt.IsZero() || r.AbandonedAt.Before(stopped) || r.AbandonedAt.After(resumed) {
		t.Errorf("stale run's abandoned_at %s: want set, during the freeze %s .. %s", r.AbandonedAt.Format(time.StampMilli),
			stopped.Format(time.StampMilli), resumed.Format(time.StampMilli))
	}
	// The daemon stamps its end (to the millisecond) on its own clock the
	// moment it runs again, which can be a hair before this process reads
	// the clock after SIGCONT returns; a back-dated end is seconds earlier.
	const stampSlack = 100 * time.Millisecond
	if !r.EndedAt.IsZero() && (r.EndedAt.Before(resumed.Add(-stampSlack)) || (ok && r.EndedAt.After(gone.Add(fpChildGone)))) {
		t.Errorf("stale run's ended_at %s: want its true end, after the resume at %s (child gone at %s), not back-dated to the takeover at %s",
			r.EndedAt.Format(time.StampMilli), resumed.Format(time.StampMilli), gone.Format(time.StampMilli), taker.Start.Format(time.StampMilli))
	}
	if r.EndStatus == "" {
		t.Errorf("stale run's record has no end_status (what the holder saw at its end): %+v", r)
	}
	if !r.EndObserved || r.EndedAfter.IsZero() || r.EndedAfter.After(stopped) || r.EndedAfter.Before(r.StartedAt) {
		t.Errorf("stale run's record %+v: want its end marked observed after the stall, ended_after between its start %s and the freeze at %s",
			r, r.StartedAt.Format(time.StampMilli), stopped.Format(time.StampMilli))
	}

	tr, _ := fpRun(t, db, taker.Job, taker.Slot)
	if tr.Status != record.StatusRunning && tr.Status != record.StatusSucceeded {
		t.Errorf("the taker's run %+v after the resume: want it running or succeeded", tr)
	}
	if !running(taker.PID) && tr.Status == record.StatusRunning {
		t.Errorf("the taker's child (pid %d) is gone but its run is recorded running", taker.PID)
	}
	for _, e := range fpReadLedger(t, ledger) {
		if e.Instance == held.Instance && e.Start.After(resumed) && running(taker.PID) {
			t.Errorf("the resumed holder started slot %s at %s while the taker's run still held the job", e.Slot.Format(time.TimeOnly), e.Start.Format(time.StampMilli))
		}
	}
}
