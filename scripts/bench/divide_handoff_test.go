package main

import (
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
	res := &handoffResult{victim: "r1", killAt: at(3).Add(400 * time.Millisecond), joinAt: at(6).Add(200 * time.Millisecond),
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
