package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/internal/record"
)

// ledgerJobs is a jobs: section with one action, tick, that appends
// "slot start" (RFC 3339, then Unix seconds with nanoseconds) to ledger.
func ledgerJobs(ledger string) string {
	line := `printf '%s %s\n' "$CRONSWAP_SCHEDULED_AT" "$(date +%s.%N)" >> ` + ledger
	return fmt.Sprintf("\n  tick:\n    exec: [\"sh\", \"-c\", %q]\n", line)
}

// ledgerSlots reads which slots the action ran, and how often.
func ledgerSlots(t *testing.T, path string) map[time.Time]int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	out := map[time.Time]int{}
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(l)
		if len(f) != 2 {
			continue
		}
		s, err := time.Parse(time.RFC3339, f[0])
		if err != nil {
			t.Fatalf("ledger line %q: %v", l, err)
		}
		out[s.UTC()]++
	}
	return out
}

func missedRecords(t *testing.T, db *mongo.Database, job string) []record.RunDoc {
	t.Helper()
	return allRuns(t, db, bson.D{{Key: "job_id", Value: job}, {Key: "status", Value: record.StatusMissed}})
}

// killAfterRun waits for a succeeded run of job and SIGKILLs every daemon
// at once, well before the next slot of an every-5-seconds job; it returns
// the job's last decided slot as the lock says after the kill.
func killAfterRun(t *testing.T, db *mongo.Database, job string, ds ...*daemon) time.Time {
	t.Helper()
	waitFor(t, 60*time.Second, "a succeeded run", func() bool {
		runs := allRuns(t, db, bson.D{{Key: "job_id", Value: job}, {Key: "status", Value: record.StatusSucceeded}})
		if len(runs) == 0 {
			return false
		}
		last := runs[len(runs)-1].ScheduledAt
		// Kill early in the 5 s between slots.
		since := time.Since(last)
		return since > 200*time.Millisecond && since < 2*time.Second
	})
	for _, d := range ds {
		d.signal(syscall.SIGKILL)
	}
	l, ok := lockDoc(t, db, job)
	if !ok {
		t.Fatal("no lock document after a run")
	}
	return l.LastSlot.UTC()
}

// checkGap checks that the slots after decided that no replica ran are one
// missed record (no_replica_running) ending right before the first slot
// that ran after the restart, and that every slot from decided to that one
// is accounted for exactly once. It returns the record.
func checkGap(t *testing.T, db *mongo.Database, decided time.Time, step time.Duration, minSlots int64) record.RunDoc {
	t.Helper()
	var first time.Time
	waitFor(t, 60*time.Second, "a run after the restart", func() bool {
		runs := allRuns(t, db, bson.D{{Key: "job_id", Value: "tick"}, {Key: "status", Value: record.StatusSucceeded},
			{Key: "scheduled_at", Value: bson.D{{Key: "$gt", Value: decided}}}})
		if len(runs) > 0 {
			first = runs[0].ScheduledAt.UTC()
		}
		return len(runs) > 0
	})
	var miss []record.RunDoc
	waitFor(t, 30*time.Second, "the gap on record", func() bool {
		miss = missedRecords(t, db, "tick")
		return len(miss) > 0
	})
	if len(miss) != 1 {
		t.Fatalf("%d missed records, want exactly one for the gap: %+v", len(miss), miss)
	}
	m := miss[0]
	wantFrom, wantTo := decided.Add(step), first.Add(-step)
	wantCount := int64(wantTo.Sub(wantFrom)/step) + 1
	if m.Reason != record.MissedNoReplica || !m.ScheduledAt.Equal(wantFrom) || !m.LastScheduledAt.Equal(wantTo) ||
		m.Count != wantCount || m.Instance == "" || m.RecordedAt.IsZero() {
		t.Fatalf("missed record %+v\nwant reason %s, %s .. %s, count %d", m, record.MissedNoReplica,
			wantFrom.Format(time.RFC3339), wantTo.Format(time.RFC3339), wantCount)
	}
	if m.Count < minSlots {
		t.Fatalf("gap of %d slots, want at least %d (the daemons were down that long)", m.Count, minSlots)
	}
	// Every slot from decided up to the first run after the restart has
	// exactly one record: ran, or inside the missed range.
	for s := decided; !s.After(first); s = s.Add(step) {
		n := 0
		for _, r := range allRuns(t, db, bson.D{{Key: "job_id", Value: "tick"}}) {
			if r.ScheduledAt.Equal(s) || (r.Status == record.StatusMissed && !s.Before(r.ScheduledAt) && !s.After(r.LastScheduledAt)) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("slot %s has %d records, want exactly one", s.Format(time.RFC3339), n)
		}
	}
	return m
}

// All replicas stopped for several slots of an every-5-seconds job, one
// started again: the gap is exactly one missed record (no_replica_running)
// with its range and count, counted in cronswap_missed_slots_total and
// shown by `cronswap runs list`; the action never ran a slot of it.
func TestMissedSlotsWhileNoReplicaRuns(t *testing.T) {
	uri, db := setup(t)
	ledger := filepath.Join(t.TempDir(), "ledger")
	jobsYAML := ledgerJobs(ledger)
	insert(t, db, sched("tick", "*/5 * * * * *"))
	ds := startReplicas(t, uri, db.Name(), 2, "", jobsYAML)
	decided := killAfterRun(t, db, "tick", ds...)
	// Down for at least four slots.
	waitFor(t, 60*time.Second, "four slots of downtime", func() bool { return time.Now().After(decided.Add(21 * time.Second)) })
	cfg := writeConfig(t, daemonConfig{URI: uri, Database: db.Name(), InstanceID: "r1", Jobs: jobsYAML})
	d := startDaemon(t, cfg)
	d.waitReady()
	m := checkGap(t, db, decided, 5*time.Second, 4)
	t.Logf("gap on record: %s .. %s, %d slots, %s, by %s", m.ScheduledAt.UTC().Format(time.RFC3339),
		m.LastScheduledAt.UTC().Format(time.RFC3339), m.Count, m.Reason, m.Instance)

	ran := ledgerSlots(t, ledger)
	for s := m.ScheduledAt; !s.After(m.LastScheduledAt); s = s.Add(5 * time.Second) {
		if ran[s.UTC()] != 0 {
			t.Errorf("slot %s is recorded missed but the action ran it", s.Format(time.RFC3339))
		}
	}
	if got := d.scrapeMetrics()["cronswap_missed_slots_total,reason="+record.MissedNoReplica]; got != float64(m.Count) {
		t.Errorf("cronswap_missed_slots_total{reason=%q} = %v, want %d", record.MissedNoReplica, got, m.Count)
	}
	d.waitLog("the gap logged", func(l logLine) bool {
		return l.str("msg") == "missed slots recorded" && l.str("job_id") == "tick" && l.str("reason") == record.MissedNoReplica &&
			l.str("scheduled_at") != "" && l["count"] == float64(m.Count)
	})

	out := cliOK(t, cfg, "runs", "list", "--job", "tick", "--limit", "100")
	wantNote := fmt.Sprintf("%s: %d slots, %s .. %s", record.MissedNoReplica, m.Count,
		m.ScheduledAt.UTC().Format(time.RFC3339), m.LastScheduledAt.UTC().Format(time.RFC3339))
	found := false
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, " missed ") && strings.Contains(line, wantNote) {
			found = true
		}
	}
	if !found {
		t.Errorf("runs list does not show the missed range %q:\n%s", wantNote, out)
	}
	var views []map[string]any
	if err := json.Unmarshal([]byte(cliOK(t, cfg, "runs", "list", "--job", "tick", "--limit", "100", "-o", "json")), &views); err != nil {
		t.Fatal(err)
	}
	found = false
	for _, v := range views {
		if v["status"] == record.StatusMissed {
			found = v["reason"] == record.MissedNoReplica && v["count"] == float64(m.Count) &&
				v["last_scheduled_at"] == m.LastScheduledAt.UTC().Format(time.RFC3339)
		}
	}
	if !found {
		t.Errorf("runs list -o json lacks the missed record's reason, count and last_scheduled_at: %v", views)
	}
}

// Two replicas started together after the same gap both find it: it is
// written once, by one of them, and counted once across both.
func TestMissedGapRecordedOnceByTwoReplicas(t *testing.T) {
	uri, db := setup(t)
	ledger := filepath.Join(t.TempDir(), "ledger")
	jobsYAML := ledgerJobs(ledger)
	insert(t, db, sched("tick", "*/5 * * * * *"))
	d := startDaemon(t, writeConfig(t, daemonConfig{URI: uri, Database: db.Name(), InstanceID: "r1", Jobs: jobsYAML}))
	d.waitReady()
	decided := killAfterRun(t, db, "tick", d)
	waitFor(t, 60*time.Second, "three slots of downtime", func() bool { return time.Now().After(decided.Add(16 * time.Second)) })
	ds := startReplicas(t, uri, db.Name(), 2, "", jobsYAML)
	m := checkGap(t, db, decided, 5*time.Second, 3)
	// Both replicas have looked: each logs the gap it found at start-up,
	// or that it left the read out because the other fired already.
	for _, r := range ds {
		r.waitLog("the gap found at start-up, or the other replica firing", func(l logLine) bool {
			return (l.str("msg") == "start-up: slots missed while no replica ran" && l.str("job_id") == "tick") ||
				l.str("msg") == "start-up: other members fire already; the decided slots are read only for the jobs none of them arms"
		})
	}
	// Each has had its chance to record it (deadline of the gap's last
	// slot, 5 s, plus the margin), yet there is one record.
	waitFor(t, 30*time.Second, "past the recording time of the gap", func() bool {
		return time.Now().After(m.LastScheduledAt.Add(8 * time.Second))
	})
	if miss := missedRecords(t, db, "tick"); len(miss) != 1 {
		t.Fatalf("%d missed records after both replicas looked, want 1: %+v", len(miss), miss)
	}
	var sum float64
	for _, r := range ds {
		sum += r.scrapeMetrics()["cronswap_missed_slots_total,reason="+record.MissedNoReplica]
	}
	if sum != float64(m.Count) {
		t.Fatalf("cronswap_missed_slots_total summed over the replicas = %v, want %d", sum, m.Count)
	}
}

// The database cut for longer than the starting deadline under an
// every-second job: no slot whose deadline fell in the cut runs — not
// during it, not late after it — and each is on record as missed
// (starting_deadline when it could not start in time, or
// database_unreachable when its claim failed at once); every run that
// did start, started within its deadline.
func TestDatabaseCutLongerThanStartingDeadline(t *testing.T) {
	uri, db := setup(t)
	p := newProxy(t, uri)
	ledger := filepath.Join(t.TempDir(), "ledger")
	insert(t, db, sched("tick", "* * * * * *"))
	d := startDaemon(t, writeConfig(t, daemonConfig{URI: p.URI(uri), Database: db.Name(), Jobs: ledgerJobs(ledger)}))
	d.waitReady()
	waitFor(t, 30*time.Second, "runs before the cut", func() bool {
		return len(allRuns(t, db, bson.D{{Key: "status", Value: record.StatusSucceeded}})) >= 2
	})
	const cut = 6 * time.Second
	cutAt := time.Now()
	p.Outage(cut)
	cutEnd := cutAt.Add(cut)
	// Slots that could only start within the cut: due after it began, their
	// deadline (1 s, the time to the next slot) over before it ended.
	var inCut []time.Time
	for s := cutAt.Truncate(time.Second).Add(time.Second); s.Add(time.Second).Before(cutEnd); s = s.Add(time.Second) {
		inCut = append(inCut, s.UTC())
	}
	if len(inCut) < 3 {
		t.Fatalf("only %d slots inside the cut", len(inCut))
	}
	last := inCut[len(inCut)-1]
	waitFor(t, 60*time.Second, "runs after the cut", func() bool {
		return len(allRuns(t, db, bson.D{{Key: "status", Value: record.StatusSucceeded},
			{Key: "scheduled_at", Value: bson.D{{Key: "$gt", Value: last.Add(2 * time.Second)}}}})) >= 2
	})
	covered := func(s time.Time) (record.RunDoc, bool) {
		for _, r := range missedRecords(t, db, "tick") {
			if !s.Before(r.ScheduledAt) && !s.After(r.LastScheduledAt) {
				return r, true
			}
		}
		return record.RunDoc{}, false
	}
	waitFor(t, 60*time.Second, "every slot of the cut on record as missed", func() bool {
		for _, s := range inCut {
			if _, ok := covered(s); !ok {
				return false
			}
		}
		return true
	})
	ran := ledgerSlots(t, ledger)
	byReason := map[string]int64{}
	for _, r := range missedRecords(t, db, "tick") {
		byReason[r.Reason] += r.Count
	}
	t.Logf("cut of %s: %d slots inside it; missed slots on record by reason %v; %d runs in all", cut, len(inCut), byReason, len(ran))
	for _, s := range inCut {
		m, _ := covered(s)
		if m.Reason != record.MissedStartingDeadline && m.Reason != record.MissedUnreachable {
			t.Errorf("slot %s recorded missed for %q, want %s or %s", s.Format(time.RFC3339), m.Reason,
				record.MissedStartingDeadline, record.MissedUnreachable)
		}
		if ran[s] != 0 {
			t.Errorf("slot %s of the cut ran (%d times)", s.Format(time.RFC3339), ran[s])
		}
		if runs := allRuns(t, db, bson.D{{Key: "job_id", Value: "tick"}, {Key: "scheduled_at", Value: s},
			{Key: "status", Value: bson.D{{Key: "$ne", Value: record.StatusMissed}}}}); len(runs) != 0 {
			t.Errorf("slot %s of the cut has a run record: %+v", s.Format(time.RFC3339), runs)
		}
	}
	for _, r := range allRuns(t, db, bson.D{{Key: "job_id", Value: "tick"}, {Key: "status", Value: record.StatusSucceeded}}) {
		if late := r.StartedAt.Sub(r.ScheduledAt); late > time.Second {
			t.Errorf("slot %s started %s after its slot, past its 1 s starting deadline", r.ScheduledAt.UTC().Format(time.RFC3339), late)
		}
	}
	// No slot ran twice, none of the cut is recorded twice.
	for s, n := range ran {
		if n != 1 {
			t.Errorf("slot %s ran %d times", s.Format(time.RFC3339), n)
		}
	}
	for _, s := range inCut {
		n := 0
		for _, r := range missedRecords(t, db, "tick") {
			if !s.Before(r.ScheduledAt) && !s.After(r.LastScheduledAt) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("slot %s is in %d missed records, want 1", s.Format(time.RFC3339), n)
		}
	}
}
