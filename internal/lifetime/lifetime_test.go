package lifetime_test

import (
	"testing"
	"time"

	"github.com/cronswap/cronswap/internal/lifetime"
	"github.com/cronswap/cronswap/schedule"
)

func TestWhy(t *testing.T) {
	t0 := time.Date(2030, 5, 1, 12, 0, 0, 0, time.UTC)
	l := lifetime.Lifetime{StartAt: t0, EndAt: t0.Add(time.Hour), PausedUntil: t0.Add(10 * time.Minute)}
	for _, c := range []struct {
		at   time.Time
		want string
	}{
		{t0.Add(-time.Nanosecond), lifetime.ReasonBeforeStart},
		{t0, "paused until 2030-05-01T12:10:00Z"},
		{t0.Add(10 * time.Minute), ""},
		{t0.Add(time.Hour - time.Nanosecond), ""},
		{t0.Add(time.Hour), lifetime.ReasonAfterEnd},
	} {
		if got := l.Why(c.at); got != c.want {
			t.Errorf("Why(%v) = %q, want %q", c.at, got, c.want)
		}
	}
	if !l.Over(t0.Add(time.Hour)) || l.Over(t0) || (lifetime.Lifetime{}).Over(t0) {
		t.Error("Over: wrong")
	}
}

// Bound keeps exactly the slots Why lets run, for a schedule with an exact
// Prev (daylight saving in force, @every) and without one (a zone without
// transitions, a day rule), in both directions; a lifetime that bounds no
// slot returns the schedule itself.
func TestBoundKeepsTheSlotsWhyLetsRun(t *testing.T) {
	t0 := time.Date(2027, 3, 13, 20, 0, 0, 0, time.UTC)
	l := lifetime.Lifetime{StartAt: t0.Add(90*time.Minute + 500*time.Millisecond), PausedUntil: t0.Add(2 * time.Hour),
		EndAt: t0.Add(30 * time.Hour), MaxRuns: 4}
	for _, c := range []struct{ expr, tz string }{
		{"*/20 * * * *", "America/New_York"}, {"@every 7m", "UTC"}, {"*/20 * * * *", "UTC"}, {"0 * L-18 * *", "UTC"},
	} {
		loc, _ := schedule.LoadLocation(c.tz)
		raw, err := schedule.ParseExpr(c.expr, loc)
		if err != nil {
			t.Fatal(err)
		}
		b := l.Bound(raw)
		var want []time.Time
		for at := raw.Next(t0); at.Before(t0.Add(40 * time.Hour)); at = raw.Next(at) {
			if l.Why(at) == "" {
				want = append(want, at)
			}
		}
		var got []time.Time
		for at := b.Next(t0); !at.IsZero(); at = b.Next(at) {
			got = append(got, at)
			if len(got) > len(want) {
				break
			}
		}
		if len(got) != len(want) || len(want) == 0 {
			t.Fatalf("%q in %s: %d slots, want %d (> 0)", c.expr, c.tz, len(got), len(want))
		}
		for i := range want {
			if !got[i].Equal(want[i]) {
				t.Fatalf("%q in %s: slot %d is %v, want %v", c.expr, c.tz, i, got[i], want[i])
			}
		}
		if p, ok := b.(interface{ Prev(time.Time) time.Time }); ok {
			if at := p.Prev(t0.Add(40 * time.Hour)); !at.Equal(want[len(want)-1]) {
				t.Errorf("%q in %s: Prev after end_at = %v, want %v", c.expr, c.tz, at, want[len(want)-1])
			}
			if at := p.Prev(l.StartAt); !at.IsZero() {
				t.Errorf("%q in %s: Prev before start_at = %v, want none", c.expr, c.tz, at)
			}
		}
	}
	raw, _ := schedule.ParseExpr("* * * * *", nil)
	if b := (lifetime.Lifetime{MaxRuns: 3}).Bound(raw); b != raw {
		t.Error("a lifetime of max_runs only wrapped the schedule")
	}
}
