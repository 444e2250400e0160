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

// stallFreeze is how long the daemon is frozen: four slots of an
// every-second job at least.
const stallFreeze = 4 * time.Second

// TestStalledArmerDecidesEverySkippedSlot freezes the only daemon
// (SIGSTOP) across several slots of two every-second jobs and checks that
// every slot around the freeze has exactly one record once it resumed:
// the job whose action has a catch-up window ran each slot its timer
// skipped (once, in the action's own ledger too), the one without records
// them missed with reason stalled. Without the stall rule the skipped
// slots had no record at all.
func TestStalledArmerDecidesEverySkippedSlot(t *testing.T) {
	uri, db := setup(t)
	out := filepath.Join(t.TempDir(), "fires.log")
	line := `printf '%s %s\n' "$CRONSWAP_JOB_ID" "$CRONSWAP_SCHEDULED_AT" >> ` + out
	jobsYAML := fmt.Sprintf(`
  caught:
    exec: ["sh", "-c", %q]
    overlap: allow
    catchup: 30s
  plain:
    exec: ["sh", "-c", %q]
    overlap: allow
`, line, line)
	d := startDaemon(t, writeConfig(t, daemonConfig{URI: uri, Database: db.Name(), Jobs: jobsYAML}))
	d.waitReady()
	insert(t, db,
		bson.D{{Key: "_id", Value: "st-caught"}, {Key: "cron_expr", Value: "* * * * * *"}, {Key: "job", Value: "caught"},
			{Key: "updated_at", Value: time.Now()}},
		bson.D{{Key: "_id", Value: "st-plain"}, {Key: "cron_expr", Value: "* * * * * *"}, {Key: "job", Value: "plain"},
			{Key: "updated_at", Value: time.Now()}})
	ran := func(job string) int {
		return len(allRuns(t, db, bson.D{{Key: "job_id", Value: job}, {Key: "status", Value: record.StatusSucceeded}}))
	}
	waitFor(t, 30*time.Second, "both jobs ran twice", func() bool { return ran("st-caught") >= 2 && ran("st-plain") >= 2 })

	from := time.Now().Truncate(time.Second).Add(-time.Second)
	d.signal(syscall.SIGSTOP)
	stopped := time.Now()
	t.Cleanup(func() { _ = d.cmd.Process.Signal(syscall.SIGCONT) })
	<-time.After(stallFreeze)
	d.signal(syscall.SIGCONT)
	resumed := time.Now()
	t.Logf("frozen %s .. %s", stopped.Format(time.TimeOnly+".000"), resumed.Format(time.TimeOnly+".000"))
	to := resumed.Truncate(time.Second).Add(3 * time.Second) // slots in [from, to)

	// covered counts, per job and slot, the records that decide it: a
	// run record of the slot, or a missed range holding it.
	type key struct{ job, slot string }
	slotKey := func(job string, s time.Time) key { return key{job, s.UTC().Format(time.RFC3339)} }
	covered := func() (map[key][]record.RunDoc, bool) {
		runs := allRuns(t, db, bson.D{{Key: "job_id", Value: bson.D{{Key: "$in", Value: bson.A{"st-caught", "st-plain"}}}},
			{Key: "scheduled_at", Value: bson.D{{Key: "$lt", Value: to}}}})
		got := map[key][]record.RunDoc{}
		for _, r := range runs {
			last := r.ScheduledAt
			if r.Status == record.StatusMissed && r.LastScheduledAt.After(last) {
				last = r.LastScheduledAt
			}
			for s := r.ScheduledAt; !s.After(last); s = s.Add(time.Second) {
				got[slotKey(r.JobID, s)] = append(got[slotKey(r.JobID, s)], r)
			}
			if r.Status == record.StatusRunning || r.Status == record.StatusClaiming {
				return got, false
			}
		}
		for _, job := range []string{"st-caught", "st-plain"} {
			for s := from; s.Before(to); s = s.Add(time.Second) {
				if len(got[slotKey(job, s)]) == 0 {
					return got, false
				}
			}
		}
		return got, true
	}
	// Decided once the missed records' wait (the slot's starting
	// deadline, a margin) has passed; if not within a minute, the checks
	// below name the slots that are not.
	got, ok := covered()
	for deadline := time.Now().Add(time.Minute); !ok; got, ok = covered() {
		if time.Now().After(deadline) {
			t.Errorf("not every slot around the freeze decided within a minute")
			break
		}
		time.Sleep(250 * time.Millisecond)
	}

	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ledger := map[key]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) == 2 {
			ledger[key{fields[0], fields[1]}]++
		}
	}
	// caught's slots that started more than a second (their starting
	// deadline) after their time: only the catch-up of the skipped ones
	// may start that late.
	late := 0
	stalled := 0
	for _, job := range []string{"st-caught", "st-plain"} {
		for s := from; s.Before(to); s = s.Add(time.Second) {
			k := slotKey(job, s)
			rs := got[k]
			if len(rs) != 1 {
				t.Errorf("%s at %s: %d records, want one", job, k.slot, len(rs))
				continue
			}
			r := rs[0]
			switch {
			case r.Status == record.StatusSucceeded:
				if ledger[k] != 1 {
					t.Errorf("%s at %s: succeeded, %d runs in the ledger", job, k.slot, ledger[k])
				}
				if job == "st-caught" && r.StartedAt.Sub(s) > time.Second {
					late++
				}
			case r.Status == record.StatusMissed && r.Reason == record.MissedStalled && job == "st-plain":
				stalled++
				if ledger[k] != 0 {
					t.Errorf("%s at %s: recorded missed, %d runs in the ledger", job, k.slot, ledger[k])
				}
			case r.Status == record.StatusMissed && r.Reason == record.MissedStartingDeadline && !s.After(stopped):
				// Handed to the fire path as the freeze began, it could
				// not start within its second.
				t.Logf("%s at %s: missed starting_deadline (due as the freeze began)", job, k.slot)
			default:
				t.Errorf("%s at %s: %s (%s), want succeeded or (without catch-up) missed stalled", job, k.slot, r.Status, r.Reason)
			}
		}
	}
	t.Logf("slots %s .. %s: caught ran %d slots over 1 s late, plain has %d missed stalled", from.Format(time.TimeOnly),
		to.Format(time.TimeOnly), late, stalled)
	// Frozen four seconds: the timer skipped at least the three slots
	// strictly between the last one fired before the freeze and the one
	// it fired on waking.
	if late < 3 || stalled < 3 {
		t.Errorf("the freeze skipped %d slots of caught (ran late) and %d of plain (missed stalled), want at least 3 each", late, stalled)
	}
}
