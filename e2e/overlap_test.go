package e2e

import (
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

// bufferHead reads the first fire waiting on a job's lock: its run id and
// the replica that buffered it; ok is false while none waits.
func bufferHead(t *testing.T, raw bson.Raw) (runID, by string, ok bool) {
	t.Helper()
	val, err := raw.LookupErr(record.LockBufferField)
	if err != nil {
		return "", "", false
	}
	arr, isArr := val.ArrayOK()
	if !isArr {
		t.Fatalf("lock %s: %s is not an array", raw, record.LockBufferField)
	}
	vals, _ := arr.Values()
	if len(vals) == 0 {
		return "", "", false
	}
	d := vals[0].Document()
	runID, _ = d.Lookup("run_id").StringValueOK()
	by, _ = d.Lookup("by").StringValueOK()
	return runID, by, true
}

// buffer_one on 3 replicas with an action (5 s) outlasting its interval
// (2 s): the replica that buffered a fire is SIGKILLed while the fire
// waits, and so is the holder of the job's lock when that is another
// replica (then nobody alive ends the run the fire waits behind); the
// buffered fire still runs, exactly once, on the survivor after the dead
// holder's lease (3 s); the job's recorded runs never overlap.
func TestBufferOneSurvivesBufferingReplicaKilled(t *testing.T) {
	uri, db := setup(t)
	out := filepath.Join(t.TempDir(), "ran")
	jobsYAML := fmt.Sprintf(`
  buf:
    exec: ["sh", "-c", "echo \"$CRONSWAP_RUN_ID $CRONSWAP_INSTANCE_ID\" >> %s; sleep 5"]
    timeout: 1m
    overlap: buffer_one
`, out)
	ds := startReplicas(t, uri, db.Name(), 3, "lock:\n  ttl: 3s\n", jobsYAML)
	insert(t, db, sched("buf", "*/2 * * * * *"))
	waitArmed(t, ds, []string{"buf"})

	var buffered, by, holder string
	// Usually the owner claims first, so it both runs and buffers; while
	// the replicas' member views still differ (just after the start) the
	// holder may be another replica, which would take the fire up at its
	// run's end. Either way the buffering replica and the holder are
	// killed: nobody alive ends the run the fire waits behind, and the
	// survivor must take it up.
	waitFor(t, 60*time.Second, "a fire buffered behind a running run", func() bool {
		raw, err := db.Collection(record.LocksCollection).FindOne(testCtx(t), bson.D{{Key: "_id", Value: "buf"}}).Raw()
		if err != nil {
			return false
		}
		var ok bool
		buffered, by, ok = bufferHead(t, raw)
		holder, _ = raw.Lookup("holder").StringValueOK()
		// With at least 2 s of the 5 s run left, so that the holder cannot
		// end it and take the fire up before the kill.
		acquired, _ := raw.Lookup("acquired_at").TimeOK()
		return ok && holder != "" && time.Since(acquired) < 3*time.Second
	})
	killed := map[string]bool{}
	for i, d := range ds {
		if id := fmt.Sprintf("r%d", i+1); id == by || id == holder {
			d.signal(syscall.SIGKILL)
			killed[id] = true
		}
	}
	if !killed[by] || !killed[holder] {
		t.Fatalf("fire %s buffered by %q behind holder %q: not replicas of this test", buffered, by, holder)
	}
	killedAt := time.Now()
	t.Logf("fire %s buffered by %s (holder %s); both killed", buffered, by, holder)

	var rec record.RunDoc
	waitFor(t, 60*time.Second, "the buffered fire to run to its end", func() bool {
		err := db.Collection(record.RunsCollection).FindOne(testCtx(t), bson.D{{Key: "_id", Value: buffered}}).Decode(&rec)
		return err == nil && rec.Status != record.StatusBuffered && rec.Status != record.StatusRunning
	})
	if rec.Status != record.StatusSucceeded || killed[rec.Instance] || rec.Fence != record.FenceOf(rec.ScheduledAt) {
		t.Fatalf("buffered fire's record %+v: want succeeded on a survivor with its slot's fence", rec)
	}
	t.Logf("buffered fire started on %s %s after the kill", rec.Instance, rec.StartedAt.Sub(killedAt))
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	starts := 0
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == buffered {
			starts++
			if f[1] != rec.Instance {
				t.Errorf("buffered fire ran on %s, its record says %s", f[1], rec.Instance)
			}
		}
	}
	if starts != 1 {
		t.Fatalf("buffered fire %s started %d times, want once:\n%s", buffered, starts, b)
	}
	// Recorded runs with an end never overlap, fences increase.
	var prev *record.RunDoc
	for _, r := range allRuns(t, db, bson.D{{Key: "job_id", Value: "buf"}}) {
		if r.EndedAt.IsZero() || r.Status == record.StatusSkipped {
			continue
		}
		if prev != nil && (r.StartedAt.Before(prev.EndedAt) || r.Fence <= prev.Fence) {
			t.Errorf("runs overlap or fences do not increase: %s %s..%s (%d), %s %s..%s (%d)",
				prev.ID, prev.StartedAt.Format(time.StampMilli), prev.EndedAt.Format(time.StampMilli), prev.Fence,
				r.ID, r.StartedAt.Format(time.StampMilli), r.EndedAt.Format(time.StampMilli), r.Fence)
		}
		p := r
		prev = &p
	}
}

// Each overlap policy on 3 replicas, each job's action (3 s) outlasting
// its interval (2 s), for about a dozen seconds: the records and their
// start and end times are what the policy says.
func TestOverlapPoliciesAcrossReplicas(t *testing.T) {
	uri, db := setup(t)
	policies := []string{"skip", "forbid", "buffer_one", "buffer_all", "cancel_other", "allow"}
	var jobsYAML strings.Builder
	for _, p := range policies {
		fmt.Fprintf(&jobsYAML, "\n  ov_%s:\n    exec: [\"sleep\", \"3\"]\n    timeout: 1m\n    overlap: %s\n", p, p)
	}
	ds := startReplicas(t, uri, db.Name(), 3, "lock:\n  ttl: 30s\n", jobsYAML.String())
	var ids []string
	for _, p := range policies {
		ids = append(ids, "ov_"+p)
		insert(t, db, sched("ov_"+p, "*/2 * * * * *"))
	}
	waitArmed(t, ds, ids)
	start := time.Now()
	fpUntil(t, start.Add(13*time.Second), "a dozen seconds of fires")
	if _, err := db.Collection("schedules").UpdateMany(testCtx(t), bson.D{},
		bson.D{{Key: "$set", Value: bson.D{{Key: "enabled", Value: false}, {Key: "updated_at", Value: time.Now()}}}}); err != nil {
		t.Fatal(err)
	}
	runs := map[string][]record.RunDoc{}
	waitFor(t, 90*time.Second, "every record decided (buffered fires run after the pause too)", func() bool {
		for _, id := range ids {
			rs := allRuns(t, db, bson.D{{Key: "job_id", Value: id}})
			for _, r := range rs {
				switch r.Status {
				case record.StatusRunning, record.StatusBuffered, record.StatusClaiming:
					return false
				}
			}
			runs[id] = rs
		}
		return true
	})
	count := func(rs []record.RunDoc, status string) int {
		n := 0
		for _, r := range rs {
			if r.Status == status {
				n++
			}
		}
		return n
	}
	ran := func(rs []record.RunDoc) []record.RunDoc {
		var out []record.RunDoc
		for _, r := range rs {
			if r.Status == record.StatusSucceeded || r.Status == record.StatusAbandoned {
				out = append(out, r)
			}
		}
		return out
	}
	noOverlap := func(id string, rs []record.RunDoc) {
		for i := 1; i < len(rs); i++ {
			if rs[i].StartedAt.Before(rs[i-1].EndedAt) || rs[i].Fence <= rs[i-1].Fence {
				t.Errorf("%s: %s (%s..%s) overlaps %s (%s..%s) or its fence does not increase", id,
					rs[i].ID, rs[i].StartedAt.Format(time.StampMilli), rs[i].EndedAt.Format(time.StampMilli),
					rs[i-1].ID, rs[i-1].StartedAt.Format(time.StampMilli), rs[i-1].EndedAt.Format(time.StampMilli))
			}
		}
	}
	for _, id := range ids {
		rs := runs[id]
		r := ran(rs)
		t.Logf("%s: %d records, %d ran, %d skipped, %d abandoned", id, len(rs), len(r), count(rs, record.StatusSkipped), count(rs, record.StatusAbandoned))
		if len(r) < 2 {
			t.Errorf("%s: %d runs, want several", id, len(r))
			continue
		}
		switch id {
		case "ov_skip", "ov_forbid":
			noOverlap(id, r)
			if count(rs, record.StatusSkipped) == 0 || count(rs, record.StatusAbandoned) != 0 {
				t.Errorf("%s: want skipped slots and no abandoned run", id)
			}
		case "ov_buffer_one":
			noOverlap(id, r)
			late := 0
			for i := 1; i < len(r); i++ {
				// A buffered fire starts when the previous run ends, not
				// at its slot.
				if r[i].StartedAt.Sub(r[i].ScheduledAt) > 500*time.Millisecond {
					late++
				}
			}
			if late == 0 || count(rs, record.StatusSkipped) == 0 {
				t.Errorf("%s: %d runs started late (buffered), %d skipped; want both", id, late, count(rs, record.StatusSkipped))
			}
		case "ov_buffer_all":
			noOverlap(id, r)
			if count(rs, record.StatusSkipped) != 0 || len(r) != len(rs) {
				t.Errorf("%s: every fire should run (%d of %d), none skipped", id, len(r), len(rs))
			}
			for i := 1; i < len(r); i++ {
				if !r[i].ScheduledAt.After(r[i-1].ScheduledAt) {
					t.Errorf("%s: %s ran after %s, want slot order", id, r[i].ID, r[i-1].ID)
				}
			}
		case "ov_cancel_other":
			noOverlap(id, r)
			for i := 0; i+1 < len(r); i++ {
				old, next := r[i], r[i+1]
				if old.Status != record.StatusAbandoned || !strings.Contains(old.Error, next.ID) {
					t.Errorf("%s: %s %s (%q), want abandoned naming %s", id, old.ID, old.Status, old.Error, next.ID)
					continue
				}
				if took := old.EndedAt.Sub(next.ScheduledAt); took > 2*time.Second {
					t.Errorf("%s: %s stopped %v after the slot of %s, want within 2s", id, old.ID, took, next.ID)
				}
			}
		case "ov_allow":
			overlapped := false
			for i := 1; i < len(r); i++ {
				if r[i].StartedAt.Before(r[i-1].EndedAt) {
					overlapped = true
				}
			}
			if !overlapped || count(rs, record.StatusSkipped) != 0 {
				t.Errorf("%s: runs should overlap and none be skipped", id)
			}
		}
	}
}
