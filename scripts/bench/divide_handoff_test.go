package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cronswap/cronswap/internal/record"
)

// account sorts each (job, slot) into its stretch and tells a slot run
// once from one doubled in the action's ledger, one recorded missed (by
// reason, ranges expanded) and one with no record at all; a run the killed
// replica had claimed counts as once without its ledger line.
func TestHandoffAccount(t *testing.T) {
	base := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return base.Add(time.Duration(s) * time.Second) }
	res := &handoffResult{victims: []string{"r1"}, killAt: at(3).Add(400 * time.Millisecond), joinAt: at(6).Add(200 * time.Millisecond),
		runsByMember: map[string]int{}}
	run := func(job string, s int, by, status string, late time.Duration) record.RunDoc {
		return record.RunDoc{JobID: job, ScheduledAt: at(s), Instance: by, Status: status, StartedAt: at(s).Add(late)}
	}
	lines := map[slotKey]int{}
	var runs []record.RunDoc
	for s := range 9 { // slots 0..8 of job a (r1's) and b
		for _, job := range []string{"a", "b"} {
			switch {
			case job == "a" && s == 3: // claimed by r1 as it died: no line
				runs = append(runs, run(job, s, "r1", record.StatusAbandoned, 0))
			case job == "a" && s == 4, job == "a" && s == 5: // recorded missed, one range
			case job == "b" && s == 7: // no record at all
			default:
				by := "r2"
				if s < 3 && job == "a" {
					by = "r1"
				}
				runs = append(runs, run(job, s, by, record.StatusSucceeded, 10*time.Millisecond))
				lines[slotKey{job, at(s).Unix()}]++
			}
		}
	}
	runs = append(runs, record.RunDoc{JobID: "a", ScheduledAt: at(4), LastScheduledAt: at(5), Count: 2,
		Status: record.StatusMissed, Reason: record.MissedHandOver})
	lines[slotKey{"b", at(8).Unix()}]++ // b at 8 ran twice by its ledger
	if n := unrecordedSlots(runs, []string{"a", "b"}, at(0), at(9)); n != 1 {
		t.Errorf("unrecorded slots: %d, want 1 (b at 7; a's missed range counts for both its slots)", n)
	}
	res.account(runs, lines, []string{"a", "b"}, []string{"a"}, at(0), at(9))

	want := []struct{ slots, once, doubled, handOver, none int }{
		{4, 4, 0, 0, 0}, // all up, r1's (a: 0..3, 3 abandoned)
		{4, 4, 0, 0, 0}, // all up, others (b: 0..3)
		{3, 1, 0, 2, 0}, // after the death, r1's (a: 4..6)
		{3, 3, 0, 0, 0}, // after the death, others (b: 4..6)
		{4, 2, 1, 0, 1}, // after the join (a 7, 8; b 7 none, 8 doubled)
	}
	if len(res.phases) != len(want) {
		t.Fatalf("%d phases, want %d", len(res.phases), len(want))
	}
	for i, w := range want {
		p := res.phases[i]
		got := struct{ slots, once, doubled, handOver, none int }{p.slots, p.once, p.doubled, p.missed[record.MissedHandOver], p.none}
		if got != w {
			t.Errorf("%s: %+v, want %+v", p.name, got, w)
		}
	}
	if len(res.first) != 1 || res.first[0].job != "a" || !res.first[0].slot.Equal(at(4)) || res.first[0].missed != record.MissedHandOver {
		t.Errorf("first slots after the death %+v, want a's at 4, recorded missed hand_over", res.first)
	}
}

// readSafepoints reads the end time and length of each stop-the-world
// pause of a JDK 17 safepoint log and skips other lines; summarisePauses
// counts those that ended in a window.
func TestServerPauses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "safepoints.log")
	log := `[2026-12-03T14:17:46.419+0000] Safepoint "Cleanup", Time since last: 1001677073 ns, Reaching safepoint: 8762409 ns, Cleanup: 61231 ns, At safepoint: 10906 ns, Total: 8834546 ns
[2026-12-03T14:17:47.000+0000] some other line
[2026-12-03T14:17:48.500+0000] Safepoint "GenCollectForAllocation", Time since last: 1 ns, Reaching safepoint: 1 ns, At safepoint: 1200000000 ns, Total: 1200000001 ns
[2026-12-03T14:17:50.000+0000] Safepoint "Cleanup", Time since last: 1 ns, Reaching safepoint: 1 ns, At safepoint: 1 ns, Total: 3000000 ns
`
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	ps, err := readSafepoints(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 3 || ps[1].d != 1200000001 || !ps[1].end.Equal(time.Date(2026, 12, 3, 14, 17, 48, 500e6, time.UTC)) {
		t.Fatalf("pauses %+v", ps)
	}
	s := summarisePauses(ps, time.Date(2026, 12, 3, 14, 17, 47, 0, time.UTC), time.Date(2026, 12, 3, 14, 17, 50, 0, time.UTC))
	if s.n != 1 || s.total != 1200000001 || s.max != 1200000001 || s.over1s != 1 {
		t.Fatalf("summary %+v", s)
	}
}
