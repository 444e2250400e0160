package daemon

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/cronswap/cronswap/schedule"
)

// The slots a stall skipped: those within the job's catch-up window are
// offered (the newest maxStallOffers, oldest first), the others recorded
// missed as one range, reason stalled; without a window all are missed.
func TestStallPlan(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	sec := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Second) }
	log := slog.New(slog.DiscardHandler)
	d := schedule.Due{Schedule: schedule.Schedule{ID: "job"}, Slot: sec(10)}
	for _, c := range []struct {
		name       string
		d          schedule.Due
		window     time.Duration
		now        time.Time
		wantOffers string
		wantMissed string
	}{
		{"no catch-up: every skipped slot missed", d, 0, sec(10).Add(200 * time.Millisecond), "[]",
			fmt.Sprintf("[{job %s %s 9 stalled}]", sec(1), sec(9))},
		{"catch-up window covers the newest", d, 5 * time.Second, sec(10).Add(200 * time.Millisecond),
			fmt.Sprint([]time.Time{sec(6), sec(7), sec(8), sec(9)}),
			fmt.Sprintf("[{job %s %s 5 stalled}]", sec(1), sec(5))},
		{"catch-up window covers all", d, time.Minute, sec(10), fmt.Sprint([]time.Time{sec(1), sec(2), sec(3), sec(4),
			sec(5), sec(6), sec(7), sec(8), sec(9)}), "[]"},
		{"jitter: the fire's own slot is not in the gap", schedule.Due{Schedule: d.Schedule, Slot: sec(10), Delay: 300 * time.Millisecond},
			0, sec(10).Add(400 * time.Millisecond), "[]", fmt.Sprintf("[{job %s %s 9 stalled}]", sec(1), sec(9))},
	} {
		t.Run(c.name, func(t *testing.T) {
			offers, missed := stallPlan(c.d, t0, c.window, c.now, every(time.Second), log)
			if got := fmt.Sprint(offers); got != c.wantOffers && !(len(offers) == 0 && c.wantOffers == "[]") {
				t.Errorf("offers %s, want %s", got, c.wantOffers)
			}
			if got := fmt.Sprint(missed); got != c.wantMissed && !(len(missed) == 0 && c.wantMissed == "[]") {
				t.Errorf("missed %s, want %s", got, c.wantMissed)
			}
		})
	}
	// A stall longer than maxStallOffers slots within the window: the
	// newest are offered, the rest missed.
	long := schedule.Due{Schedule: d.Schedule, Slot: sec(1000)}
	offers, missed := stallPlan(long, t0, time.Hour, sec(1000), every(time.Second), log)
	if len(offers) != maxStallOffers || !offers[0].Equal(sec(1000-maxStallOffers)) || !offers[len(offers)-1].Equal(sec(999)) {
		t.Errorf("offers %d from %s to %s, want %d ending at %s", len(offers), offers[0], offers[len(offers)-1], maxStallOffers, sec(999))
	}
	if want := fmt.Sprintf("[{job %s %s %d stalled}]", sec(1), sec(999-maxStallOffers), 999-maxStallOffers); fmt.Sprint(missed) != want {
		t.Errorf("missed %v, want %s", missed, want)
	}
}
