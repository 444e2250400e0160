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

	"github.com/cronswap/cronswap/jobs"
)

// bufferHead reads the first fire waiting on a job's lock: its run id and
// the replica that buffered it; ok is false while none waits.
func bufferHead(t *testing.T, raw bson.Raw) (runID, by string, ok bool) {
	t.Helper()
	val, err := raw.LookupErr(jobs.LockBufferField)
	if err != nil {
		return "", "", false
	}
	arr, isArr := val.ArrayOK()
	if !isArr {
		t.Fatalf("lock %s: %s is not an array", raw, jobs.LockBufferField)
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
// (2 s): the replica that buffered a fire, which also holds the job's
// lock, is SIGKILLed while the fire waits; the buffered fire still runs,
// exactly once, on a survivor after the dead holder's lease (3 s); the
// job's recorded runs never overlap.
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
	// The buffering replica is killed while it also holds the lock (the
	// owner claims first, so it runs and buffers): nobody alive will end a
	// run behind which the fire waits, and a survivor must take it up.
	waitFor(t, 60*time.Second, "a fire buffered by the holder behind its running run", func() bool {
		raw, err := db.Collection(jobs.LocksCollection).FindOne(testCtx(t), bson.D{{Key: "_id", Value: "buf"}}).Raw()
		if err != nil {
			return false
		}
		var ok bool
		buffered, by, ok = bufferHead(t, raw)
		holder, _ = raw.Lookup("holder").StringValueOK()
		return ok && holder == by
	})
	var victim *daemon
	for i, d := range ds {
		if fmt.Sprintf("r%d", i+1) == by {
			victim = d
		}
	}
	if victim == nil {
		t.Fatalf("fire %s buffered by %q, not one of the replicas", buffered, by)
	}
	victim.signal(syscall.SIGKILL)
	killedAt := time.Now()
	t.Logf("fire %s buffered by %s (holder %s); %s killed", buffered, by, holder, by)

	var rec jobs.RunDoc
	waitFor(t, 60*time.Second, "the buffered fire to run to its end", func() bool {
		err := db.Collection(jobs.RunsCollection).FindOne(testCtx(t), bson.D{{Key: "_id", Value: buffered}}).Decode(&rec)
		return err == nil && rec.Status != jobs.StatusBuffered && rec.Status != jobs.StatusRunning
	})
	if rec.Status != jobs.StatusSucceeded || rec.Instance == by || rec.Fence != jobs.FenceOf(rec.ScheduledAt) {
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
	var prev *jobs.RunDoc
	for _, r := range allRuns(t, db, bson.D{{Key: "job_id", Value: "buf"}}) {
		if r.EndedAt.IsZero() || r.Status == jobs.StatusSkipped {
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
