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

// attemptLines reads the lines "slot attempt fence instance" the retry
// tests' action appends, by slot.
func attemptLines(t *testing.T, path string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if f := strings.Fields(l); len(f) == 4 {
			out[f[0]] = append(out[f[0]], l)
		}
	}
	return out
}

// Three replicas; an action that fails its first attempt of a slot and
// succeeds after. The replica that ran the failed attempt is SIGKILLed
// during the backoff: another replica runs the next attempt, once — the
// same slot and run id, the next fence, recorded on the same record.
func TestRetryReplicaKilledBetweenAttempts(t *testing.T) {
	uri, db := setup(t)
	out := filepath.Join(t.TempDir(), "attempts.log")
	script := `printf '%s %s %s %s\n' "$CRONSWAP_SCHEDULED_AT" "$CRONSWAP_ATTEMPT" "$CRONSWAP_FENCE" "$CRONSWAP_INSTANCE_ID" >> ` + out +
		` && [ "$CRONSWAP_ATTEMPT" -ge 2 ]`
	jobsYAML := fmt.Sprintf(`
  flaky:
    exec: ["sh", "-c", %q]
    timeout: 20s
    retry: {attempts: 3, backoff: 4s}
`, script)
	// lock.ttl 15s: the replicas look for due retries every 5 s.
	ds := startReplicas(t, uri, db.Name(), 3, "lock: {ttl: 15s}\n", jobsYAML)
	insert(t, db, bson.D{{Key: "_id", Value: "flaky"}, {Key: "cron_expr", Value: "*/30 * * * * *"}, {Key: "updated_at", Value: time.Now()}})
	waitArmed(t, ds, []string{"flaky"})

	var first record.RunDoc
	waitFor(t, 60*time.Second, "a first attempt that failed", func() bool {
		runs := allRuns(t, db, bson.D{{Key: "job_id", Value: "flaky"}, {Key: "status", Value: record.StatusRetrying}})
		if len(runs) == 0 {
			return false
		}
		first = runs[0]
		return true
	})
	if len(first.Attempts) != 1 || time.Until(first.RetryAt) < 0 {
		t.Fatalf("retrying record %+v: want one attempt recorded, the next one due later", first)
	}
	killed := first.Attempts[0].Instance
	for i, d := range ds { // startReplicas names them r1..r3
		if fmt.Sprintf("r%d", i+1) == killed {
			d.signal(syscall.SIGKILL)
		}
	}
	t.Logf("slot %s: attempt 1 failed on %s, killed; attempt 2 due %s", first.ScheduledAt.UTC().Format(time.RFC3339),
		killed, first.RetryAt.UTC().Format(time.RFC3339Nano))

	slot := first.ScheduledAt.UTC()
	var done record.RunDoc
	waitFor(t, 60*time.Second, "the slot's second attempt succeeded", func() bool {
		done = record.RunDoc{}
		if err := db.Collection(record.RunsCollection).FindOne(testCtx(t), bson.D{{Key: "_id", Value: first.ID}}).Decode(&done); err != nil {
			t.Fatal(err)
		}
		return done.Status == record.StatusSucceeded
	})
	if len(done.Attempts) != 2 || done.Attempt != 2 {
		t.Fatalf("record %+v: want 2 attempts", done)
	}
	a1, a2 := done.Attempts[0], done.Attempts[1]
	if a1.Fence != record.FenceOf(slot) || a2.Fence != record.FenceOf(slot)+1 || a1.Status != record.StatusRetrying ||
		a2.Status != record.StatusSucceeded || a2.Instance == killed || done.Instance != a2.Instance || done.Fence != a2.Fence {
		t.Errorf("attempts %+v / %+v: want fences %d, %d, the second on a replica still alive", a1, a2,
			record.FenceOf(slot), record.FenceOf(slot)+1)
	}
	if !a2.StartedAt.After(first.RetryAt.Add(-time.Millisecond)) {
		t.Errorf("attempt 2 started %s, before it was due %s", a2.StartedAt, first.RetryAt)
	}
	// The action saw each attempt once: its own slot, attempt and fence.
	lines := attemptLines(t, out)[slot.Format(time.RFC3339)]
	want := []string{
		fmt.Sprintf("%s 1 %d %s", slot.Format(time.RFC3339), record.FenceOf(slot), killed),
		fmt.Sprintf("%s 2 %d %s", slot.Format(time.RFC3339), record.FenceOf(slot)+1, a2.Instance),
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("the action ran\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}
