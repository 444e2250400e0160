package main

import (
	"testing"
	"time"
)

// Edits are put with a resync when their write was acknowledged between
// the resync's start (its record's time less its duration) and its end,
// both included; the others are outside. An edit with no armed line that
// the daemon shows armed (its job not lost) was armed by the next resync's
// read and is timed to its end; one the daemon does not show, or never
// acknowledged, or with no resync after it, is counted apart.
func TestSplitByResync(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 15, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	resyncs := []logRecord{
		{Time: at(20), Duration: int64(5 * time.Second)}, // 15 s → 20 s
		{Time: at(45), Duration: int64(4 * time.Second)}, // 41 s → 45 s
	}
	mk := func(job string, ack, armed float64) *edit {
		e := &edit{job: job, ack: at(ack), acked: true}
		if armed > 0 {
			e.armedLog = at(armed)
		}
		return e
	}
	got := splitByResync([]*edit{
		mk("a", 10, 10.01),  // outside
		mk("b", 15, 20.5),   // at a start: during
		mk("c", 17, 20.3),   // during
		mk("d", 20, 20.02),  // at an end: during
		mk("e", 20.5, 20.6), // outside
		mk("f", 42, 45.2),   // during the second
		mk("g", 43, 0),      // armed by the second's read: during, 2 s
		mk("h", 30, 0),      // armed by the second's read: outside, 15 s
		mk("i", 44, 0),      // lost
		mk("j", 50, 0),      // no resync after it
		{job: "k"},          // not acknowledged
	}, resyncs, []string{"i"})
	want := resyncEdits{
		during:  []time.Duration{20 * time.Millisecond, 2 * time.Second, 3200 * time.Millisecond, 3300 * time.Millisecond, 5500 * time.Millisecond},
		outside: []time.Duration{10 * time.Millisecond, 100 * time.Millisecond, 15 * time.Second},
		byRead:  []time.Duration{2 * time.Second, 15 * time.Second},
		missing: 3,
	}
	if !equalDurations(got.during, want.during) || !equalDurations(got.outside, want.outside) ||
		!equalDurations(got.byRead, want.byRead) || got.missing != want.missing {
		t.Fatalf("split: during %v outside %v by a read %v missing %d; want %v, %v, %v, %d",
			got.during, got.outside, got.byRead, got.missing, want.during, want.outside, want.byRead, want.missing)
	}
}

func equalDurations(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if d := a[i] - b[i]; d < -time.Microsecond || d > time.Microsecond {
			return false
		}
	}
	return true
}
