package schedule

import (
	"strings"
	"testing"
	"time"

	"github.com/cronswap/cronswap/internal/crondialect"
)

// fuzzZones are the zones FuzzParseExpr reads expressions in: UTC, two
// zones with daylight saving (one that skips midnight) and a 30-minute
// one.
var fuzzZones = []string{"UTC", "America/New_York", "America/Santiago", "Australia/Lord_Howe"}

// FuzzParseExpr feeds expressions of the dialect (H, L, W, #, names,
// lists, prefixes) to ParseExprWith with a job id, a zone and a dst mode.
// The seed corpus is the forms docs/time.md shows and their refusals; CI
// runs the fuzzer briefly (scripts/test.sh) on top of replaying it.
//
// Invariants: crondialect.Resolve never panics; ParseExprWith never panics
// (not even behind its own recover, which would surface a runtime error in
// the message); an accepted expression's Next answers — the search is
// bounded, five years ahead at most — with a later instant or none, twenty
// times running from three instants (two of them at New York's
// transitions); and where the schedule has Prev, Prev of a fire is that
// fire.
func FuzzParseExpr(f *testing.F) {
	for _, expr := range []string{
		"H H * * *", "H/15 * * * *", "H(0-29) 9 * * 1-5", "H(0-29)/10 H(9-17) * * *", "H H H * * *",
		"0 0 L * *", "0 0 L-3 * *", "0 9 15W * *", "0 9 LW * *", "0 9 L-2W * *", "0 9 1,15,L * *",
		"0 9 * * 5L", "0 9 * * FRIL", "0 9 ? * 5#3", "0 9 ? * FRI#3", "0 9 L * 5#3", "30 2 ? 3 SUN#2",
		"CRON_TZ=Europe/Berlin 30 2 * 3 0L", "0 0 32W * *", "0 0 * * 6#6", "0 L * * *", "H/0 * * * *",
		"0 0 * * L", "0 0 30W 2 *", "@daily", "*/5 * * * * *", "0 0 ? 2 2#5",
	} {
		f.Add(expr, "daily_report", uint8(0), false)
		f.Add(expr, "job-7", uint8(1), true)
	}
	f.Fuzz(func(t *testing.T, expr, id string, zone uint8, plain bool) {
		if len(expr) > MaxExprBytes || len(id) > MaxIDBytes {
			return
		}
		body := expr
		if _, rest, ok := cutTZPrefix(strings.TrimSpace(expr)); ok {
			body = rest
		}
		_, _ = crondialect.Resolve(strings.TrimSpace(body), id) // must not panic
		loc, err := LoadLocation(fuzzZones[int(zone)%len(fuzzZones)])
		if err != nil {
			t.Fatal(err)
		}
		opts := ParseOptions{JobID: id}
		if plain {
			opts.DST = DSTPlain
		}
		sched, err := ParseExprWith(expr, loc, opts)
		if err != nil {
			if strings.Contains(err.Error(), "runtime error") {
				t.Fatalf("ParseExprWith(%q) panicked: %v", expr, err)
			}
			return
		}
		p, _ := sched.(interface{ Prev(time.Time) time.Time })
		for _, from := range []time.Time{
			time.Date(2027, 3, 14, 6, 30, 0, 0, time.UTC),
			time.Date(2027, 11, 7, 5, 30, 0, 0, time.UTC),
			time.Date(2031, 12, 31, 23, 59, 59, 0, time.UTC),
		} {
			at := from
			for range 20 {
				next := sched.Next(at)
				if next.IsZero() {
					break
				}
				if !next.After(at) {
					t.Fatalf("%q (id %q, %s): Next(%s) = %s, not after it", expr, id, loc, at, next)
				}
				if p != nil {
					if back := p.Prev(next); !back.Equal(next) {
						t.Fatalf("%q (id %q, %s): Prev(%s) = %s", expr, id, loc, next, back)
					}
				}
				at = next
			}
		}
	})
}
