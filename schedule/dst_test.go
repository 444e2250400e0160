package schedule

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the zones below, whatever the machine has installed

	"github.com/robfig/cron/v3"
)

func rfc(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func parseIn(t *testing.T, expr, zone string, opts ParseOptions) cron.Schedule {
	t.Helper()
	loc, err := LoadLocation(zone)
	if err != nil {
		t.Fatal(err)
	}
	sched, err := ParseExprWith(expr, loc, opts)
	if err != nil {
		t.Fatalf("%q in %s: %v", expr, zone, err)
	}
	return sched
}

// nextN returns the n activations after from.
func nextN(sched cron.Schedule, from time.Time, n int) []time.Time {
	var out []time.Time
	for t := from; len(out) < n; {
		t = sched.Next(t)
		if t.IsZero() {
			break
		}
		out = append(out, t)
	}
	return out
}

func same(a, b []time.Time) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Equal(b[i]) {
			return false
		}
	}
	return true
}

func show(ts []time.Time, loc *time.Location) string {
	var b strings.Builder
	for _, t := range ts {
		fmt.Fprintf(&b, "\n\t%s", t.In(loc).Format(time.RFC3339))
	}
	return b.String()
}

// dstCases are the activations of the expressions across real
// transitions, written out: the first instants after from (exclusive).
var dstCases = []struct {
	name, zone, expr, from string
	want                   []string
}{
	// America/New_York springs forward on 2027-03-14: 02:00 EST becomes
	// 03:00 EDT, 02:00-02:59 does not exist.
	{"NY spring 30 2", "America/New_York", "30 2 * * *", "2027-03-13T00:00:00-05:00",
		[]string{"2027-03-13T02:30:00-05:00", "2027-03-14T03:00:00-04:00", "2027-03-15T02:30:00-04:00"}},
	{"NY spring 0 1", "America/New_York", "0 1 * * *", "2027-03-13T00:00:00-05:00",
		[]string{"2027-03-13T01:00:00-05:00", "2027-03-14T01:00:00-05:00", "2027-03-15T01:00:00-04:00"}},
	{"NY spring 30 1", "America/New_York", "30 1 * * *", "2027-03-13T00:00:00-05:00",
		[]string{"2027-03-13T01:30:00-05:00", "2027-03-14T01:30:00-05:00", "2027-03-15T01:30:00-04:00"}},
	{"NY spring */15", "America/New_York", "*/15 * * * *", "2027-03-14T01:30:00-05:00",
		[]string{"2027-03-14T01:45:00-05:00", "2027-03-14T03:00:00-04:00", "2027-03-14T03:15:00-04:00"}},
	{"NY spring 0 */2", "America/New_York", "0 */2 * * *", "2027-03-13T22:00:00-05:00",
		[]string{"2027-03-14T00:00:00-05:00", "2027-03-14T03:00:00-04:00", "2027-03-14T04:00:00-04:00", "2027-03-14T06:00:00-04:00"}},
	// America/New_York falls back on 2027-11-07: 02:00 EDT becomes
	// 01:00 EST, 01:00-01:59 happens twice.
	{"NY fall 30 2", "America/New_York", "30 2 * * *", "2027-11-06T00:00:00-04:00",
		[]string{"2027-11-06T02:30:00-04:00", "2027-11-07T02:30:00-05:00", "2027-11-08T02:30:00-05:00"}},
	{"NY fall 0 1", "America/New_York", "0 1 * * *", "2027-11-06T00:00:00-04:00",
		[]string{"2027-11-06T01:00:00-04:00", "2027-11-07T01:00:00-04:00", "2027-11-08T01:00:00-05:00"}},
	{"NY fall 30 1", "America/New_York", "30 1 * * *", "2027-11-06T00:00:00-04:00",
		[]string{"2027-11-06T01:30:00-04:00", "2027-11-07T01:30:00-04:00", "2027-11-08T01:30:00-05:00"}},
	{"NY fall */15", "America/New_York", "*/15 * * * *", "2027-11-07T00:30:00-04:00",
		[]string{"2027-11-07T00:45:00-04:00", "2027-11-07T01:00:00-04:00", "2027-11-07T01:15:00-04:00",
			"2027-11-07T01:30:00-04:00", "2027-11-07T01:45:00-04:00", "2027-11-07T01:00:00-05:00",
			"2027-11-07T01:15:00-05:00", "2027-11-07T01:30:00-05:00", "2027-11-07T01:45:00-05:00",
			"2027-11-07T02:00:00-05:00", "2027-11-07T02:15:00-05:00"}},
	{"NY fall 0 */2", "America/New_York", "0 */2 * * *", "2027-11-06T22:00:00-04:00",
		[]string{"2027-11-07T00:00:00-04:00", "2027-11-07T02:00:00-05:00", "2027-11-07T04:00:00-05:00"}},
	// Europe/Berlin springs forward on 2027-03-28: 02:00 CET becomes
	// 03:00 CEST.
	{"Berlin spring 30 2", "Europe/Berlin", "30 2 * * *", "2027-03-27T00:00:00+01:00",
		[]string{"2027-03-27T02:30:00+01:00", "2027-03-28T03:00:00+02:00", "2027-03-29T02:30:00+02:00"}},
	{"Berlin spring 0 1", "Europe/Berlin", "0 1 * * *", "2027-03-27T00:00:00+01:00",
		[]string{"2027-03-27T01:00:00+01:00", "2027-03-28T01:00:00+01:00", "2027-03-29T01:00:00+02:00"}},
	{"Berlin spring 30 1", "Europe/Berlin", "30 1 * * *", "2027-03-27T00:00:00+01:00",
		[]string{"2027-03-27T01:30:00+01:00", "2027-03-28T01:30:00+01:00", "2027-03-29T01:30:00+02:00"}},
	{"Berlin spring */15", "Europe/Berlin", "*/15 * * * *", "2027-03-28T01:30:00+01:00",
		[]string{"2027-03-28T01:45:00+01:00", "2027-03-28T03:00:00+02:00", "2027-03-28T03:15:00+02:00"}},
	{"Berlin spring 0 */2", "Europe/Berlin", "0 */2 * * *", "2027-03-27T22:00:00+01:00",
		[]string{"2027-03-28T00:00:00+01:00", "2027-03-28T03:00:00+02:00", "2027-03-28T04:00:00+02:00", "2027-03-28T06:00:00+02:00"}},
	// Europe/Berlin falls back on 2027-10-31: 03:00 CEST becomes
	// 02:00 CET, 02:00-02:59 happens twice.
	{"Berlin fall 30 2", "Europe/Berlin", "30 2 * * *", "2027-10-30T00:00:00+02:00",
		[]string{"2027-10-30T02:30:00+02:00", "2027-10-31T02:30:00+02:00", "2027-11-01T02:30:00+01:00"}},
	{"Berlin fall 0 1", "Europe/Berlin", "0 1 * * *", "2027-10-30T00:00:00+02:00",
		[]string{"2027-10-30T01:00:00+02:00", "2027-10-31T01:00:00+02:00", "2027-11-01T01:00:00+01:00"}},
	{"Berlin fall 30 1", "Europe/Berlin", "30 1 * * *", "2027-10-30T00:00:00+02:00",
		[]string{"2027-10-30T01:30:00+02:00", "2027-10-31T01:30:00+02:00", "2027-11-01T01:30:00+01:00"}},
	{"Berlin fall */15", "Europe/Berlin", "*/15 * * * *", "2027-10-31T01:30:00+02:00",
		[]string{"2027-10-31T01:45:00+02:00", "2027-10-31T02:00:00+02:00", "2027-10-31T02:15:00+02:00",
			"2027-10-31T02:30:00+02:00", "2027-10-31T02:45:00+02:00", "2027-10-31T02:00:00+01:00",
			"2027-10-31T02:15:00+01:00", "2027-10-31T02:30:00+01:00", "2027-10-31T02:45:00+01:00",
			"2027-10-31T03:00:00+01:00"}},
	{"Berlin fall 0 */2", "Europe/Berlin", "0 */2 * * *", "2027-10-30T22:00:00+02:00",
		[]string{"2027-10-31T00:00:00+02:00", "2027-10-31T02:00:00+02:00", "2027-10-31T02:00:00+01:00", "2027-10-31T04:00:00+01:00"}},
	// Beyond the zone's table of transitions, across the end of a leap
	// year (Go's zone periods are off by a day there).
	{"NY end of a leap year", "America/New_York", "0 12 * * *", "2040-12-30T00:00:00-05:00",
		[]string{"2040-12-30T12:00:00-05:00", "2040-12-31T12:00:00-05:00", "2041-01-01T12:00:00-05:00"}},
	{"Lord Howe end of a leap year", "Australia/Lord_Howe", "30 23 * * *", "2040-12-30T00:00:00+11:00",
		[]string{"2040-12-30T23:30:00+11:00", "2040-12-31T23:30:00+11:00", "2041-01-01T23:30:00+11:00"}},
	// A fixed time with seconds, and a list in the minute field (not a
	// fixed time: both occurrences fire).
	{"Berlin fall seconds", "Europe/Berlin", "15 30 2 * * *", "2027-10-31T00:00:00+02:00",
		[]string{"2027-10-31T02:30:15+02:00", "2027-11-01T02:30:15+01:00"}},
	{"Berlin fall minute list", "Europe/Berlin", "0,30 2 * * *", "2027-10-31T00:00:00+02:00",
		[]string{"2027-10-31T02:00:00+02:00", "2027-10-31T02:30:00+02:00", "2027-10-31T02:00:00+01:00",
			"2027-10-31T02:30:00+01:00", "2027-11-01T02:00:00+01:00"}},
	{"Berlin fall hour list", "Europe/Berlin", "30 2,14 * * *", "2027-10-31T00:00:00+02:00",
		[]string{"2027-10-31T02:30:00+02:00", "2027-10-31T02:30:00+01:00", "2027-10-31T14:30:00+01:00"}},
	// A skipped wall time on a day the expression also fires at the end
	// of the jump fires once there.
	{"Berlin spring 30 2 and 0 3", "Europe/Berlin", "0,30 2,3 * * *", "2027-03-28T00:00:00+01:00",
		[]string{"2027-03-28T03:00:00+02:00", "2027-03-28T03:30:00+02:00", "2027-03-29T02:00:00+02:00"}},
	// Australia/Lord_Howe moves by 30 minutes: on 2027-10-03 02:00
	// becomes 02:30 (+10:30 to +11), on 2027-04-04 02:00 becomes 01:30
	// (+11 to +10:30).
	{"Lord Howe spring 15 2", "Australia/Lord_Howe", "15 2 * * *", "2027-10-02T00:00:00+10:30",
		[]string{"2027-10-02T02:15:00+10:30", "2027-10-03T02:30:00+11:00", "2027-10-04T02:15:00+11:00"}},
	{"Lord Howe spring 30 2", "Australia/Lord_Howe", "30 2 * * *", "2027-10-02T00:00:00+10:30",
		[]string{"2027-10-02T02:30:00+10:30", "2027-10-03T02:30:00+11:00", "2027-10-04T02:30:00+11:00"}},
	{"Lord Howe spring */15", "Australia/Lord_Howe", "*/15 * * * *", "2027-10-03T01:30:00+10:30",
		[]string{"2027-10-03T01:45:00+10:30", "2027-10-03T02:30:00+11:00", "2027-10-03T02:45:00+11:00"}},
	{"Lord Howe spring 0 */2", "Australia/Lord_Howe", "0 */2 * * *", "2027-10-02T22:00:00+10:30",
		[]string{"2027-10-03T00:00:00+10:30", "2027-10-03T02:30:00+11:00", "2027-10-03T04:00:00+11:00"}},
	{"Lord Howe fall 45 1", "Australia/Lord_Howe", "45 1 * * *", "2027-04-03T00:00:00+11:00",
		[]string{"2027-04-03T01:45:00+11:00", "2027-04-04T01:45:00+11:00", "2027-04-05T01:45:00+10:30"}},
	{"Lord Howe fall 0 1", "Australia/Lord_Howe", "0 1 * * *", "2027-04-03T00:00:00+11:00",
		[]string{"2027-04-03T01:00:00+11:00", "2027-04-04T01:00:00+11:00", "2027-04-05T01:00:00+10:30"}},
	{"Lord Howe fall */15", "Australia/Lord_Howe", "*/15 * * * *", "2027-04-04T01:00:00+11:00",
		[]string{"2027-04-04T01:15:00+11:00", "2027-04-04T01:30:00+11:00", "2027-04-04T01:45:00+11:00",
			"2027-04-04T01:30:00+10:30", "2027-04-04T01:45:00+10:30", "2027-04-04T02:00:00+10:30"}},
	// Pacific/Apia skipped 2011-12-30: after 2011-12-29 23:59:59 (-10)
	// came 2011-12-31 00:00:00 (+14).
	{"Apia daily", "Pacific/Apia", "0 9 * * *", "2011-12-29T00:00:00-10:00",
		[]string{"2011-12-29T09:00:00-10:00", "2011-12-31T00:00:00+14:00", "2011-12-31T09:00:00+14:00", "2012-01-01T09:00:00+14:00"}},
	{"Apia */15", "Pacific/Apia", "*/15 * * * *", "2011-12-29T23:30:00-10:00",
		[]string{"2011-12-29T23:45:00-10:00", "2011-12-31T00:00:00+14:00", "2011-12-31T00:15:00+14:00"}},
	{"Apia on the 30th", "Pacific/Apia", "0 12 30 * *", "2011-11-01T00:00:00-10:00",
		[]string{"2011-11-30T12:00:00-10:00", "2011-12-31T00:00:00+14:00", "2012-01-30T12:00:00+14:00"}},
	{"Apia on Fridays", "Pacific/Apia", "0 8 * * 5", "2011-12-20T00:00:00-10:00",
		[]string{"2011-12-23T08:00:00-10:00", "2011-12-31T00:00:00+14:00", "2012-01-06T08:00:00+14:00"}},
}

func TestDSTShift(t *testing.T) {
	for _, c := range dstCases {
		t.Run(c.name, func(t *testing.T) {
			sched := parseIn(t, c.expr, c.zone, ParseOptions{})
			if _, ok := sched.(*dstSchedule); !ok {
				t.Fatalf("%q in %s parsed to %T, want *dstSchedule", c.expr, c.zone, sched)
			}
			var want []time.Time
			for _, w := range c.want {
				want = append(want, rfc(t, w))
			}
			loc := sched.(*dstSchedule).Location()
			if got := nextN(sched, rfc(t, c.from), len(want)); !same(got, want) {
				t.Fatalf("%q in %s from %s:\ngot%s\nwant%s", c.expr, c.zone, c.from, show(got, loc), show(want, loc))
			}
		})
	}
}

// TestDSTDeterministic: the activations are one fixed set, whatever instant
// the computation starts from: Next from any instant is the least
// activation after it, and Prev the greatest at or before it. The starts
// include the instants of the transitions, the gaps' neighbourhoods and both
// occurrences of the repeated hours, to the nanosecond.
func TestDSTDeterministic(t *testing.T) {
	transitions := []struct {
		zone string
		at   string // the transition, in UTC
	}{
		{"America/New_York", "2027-03-14T07:00:00Z"},
		{"America/New_York", "2027-11-07T06:00:00Z"},
		{"Europe/Berlin", "2027-03-28T01:00:00Z"},
		{"Europe/Berlin", "2027-10-31T01:00:00Z"},
		{"Australia/Lord_Howe", "2027-04-03T15:00:00Z"},
		{"Australia/Lord_Howe", "2027-10-02T15:30:00Z"},
		{"Pacific/Apia", "2011-12-30T10:00:00Z"},
	}
	exprs := []string{"30 2 * * *", "0 1 * * *", "30 1 * * *", "*/15 * * * *", "0 */2 * * *",
		"45 1 * * *", "15 2 * * *", "0 9 * * *", "*/7 * * * *", "0 * * * *", "30 */3 * * *",
		"15 30 1 * * *", "*/20 * 1,2 * * *", "0 0 * * *", "0 12 30 * *"}
	for _, tr := range transitions {
		at := rfc(t, tr.at)
		for _, expr := range exprs {
			checkDeterministic(t, parseIn(t, expr, tr.zone, ParseOptions{}).(*dstSchedule), expr, tr.zone, at, 48*time.Hour)
		}
	}
}

// checkDeterministic checks that sched's activations within window of the
// transition at are one fixed set, whatever instant the computation starts
// from (see TestDSTDeterministic), and returns how many activations there
// are.
func checkDeterministic(t *testing.T, sched *dstSchedule, expr, zone string, at time.Time, window time.Duration) int {
	t.Helper()
	// The reference: every activation from window before to window
	// after.
	lo, hi := at.Add(-window), at.Add(window)
	var ref []time.Time
	for s := sched.Next(lo); s.Before(hi); s = sched.Next(s) {
		if len(ref) > 0 && !s.After(ref[len(ref)-1]) {
			t.Fatalf("%q in %s: Next not increasing at %s", expr, zone, s)
		}
		ref = append(ref, s)
	}
	if len(ref) == 0 {
		return 0 // not on these days
	}
	// The least activation > x, and the greatest <= x.
	after := func(x time.Time) time.Time {
		if i := sort.Search(len(ref), func(i int) bool { return ref[i].After(x) }); i < len(ref) {
			return ref[i]
		}
		return time.Time{}
	}
	atOrBefore := func(x time.Time) time.Time {
		if i := sort.Search(len(ref), func(i int) bool { return ref[i].After(x) }); i > 0 {
			return ref[i-1]
		}
		return time.Time{}
	}
	// Around every activation within six hours of the transition and
	// every tenth further away; every five minutes of the six hours
	// around it; every 67 minutes of the four days.
	var starts []time.Time
	for i, s := range ref {
		if i%10 == 0 || s.Sub(at).Abs() < 6*time.Hour {
			starts = append(starts, s, s.Add(-time.Nanosecond), s.Add(time.Nanosecond), s.Add(-time.Second))
		}
	}
	for d := -3 * time.Hour; d <= 3*time.Hour; d += 5 * time.Minute {
		starts = append(starts, at.Add(d), at.Add(d-time.Nanosecond), at.Add(d+500*time.Millisecond))
	}
	for d := -40 * time.Hour; d <= 40*time.Hour; d += 67 * time.Minute {
		starts = append(starts, at.Add(d))
	}
	for d := -window; d <= window; d += window/60 + 7*time.Minute {
		starts = append(starts, at.Add(d))
	}
	for _, x := range starts {
		if x.Before(ref[0]) || !x.Before(ref[len(ref)-1]) {
			continue
		}
		if got, want := sched.Next(x), after(x); !got.Equal(want) {
			t.Fatalf("%q in %s: Next(%s) = %s, want %s", expr, zone, x.UTC().Format(time.RFC3339Nano), got.UTC(), want.UTC())
		}
		if got, want := sched.Prev(x), atOrBefore(x); !got.Equal(want) {
			t.Fatalf("%q in %s: Prev(%s) = %s, want %s", expr, zone, x.UTC().Format(time.RFC3339Nano), got.UTC(), want.UTC())
		}
		// The sequence from x is the reference's tail.
		i := sort.Search(len(ref), func(i int) bool { return ref[i].After(x) })
		tail := ref[i:min(len(ref), i+8)]
		if got := nextN(sched, x, len(tail)); !same(got, tail) {
			t.Fatalf("%q in %s from %s:\ngot%s\nwant%s", expr, zone, x, show(got, sched.Location()), show(tail, sched.Location()))
		}
	}
	return len(ref)
}

// TestDSTPlain: DSTPlain is robfig's own schedule, with its behaviour at
// transitions (nothing at a skipped time, twice at a repeated one).
func TestDSTPlain(t *testing.T) {
	for _, c := range dstCases {
		if c.zone == "Pacific/Apia" {
			// Not compared: robfig's Next does not return when the day
			// the expression names does not exist (2011-12-30 was a
			// Friday and the 30th), so there is no reference to compare
			// against. DSTPlain inherits that for that one historic day.
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			sched := parseIn(t, c.expr, c.zone, ParseOptions{DST: DSTPlain})
			if _, ok := sched.(*cron.SpecSchedule); !ok {
				t.Fatalf("plain %q in %s parsed to %T, want *cron.SpecSchedule", c.expr, c.zone, sched)
			}
			robfig, err := cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor).
				Parse("CRON_TZ=" + c.zone + " " + c.expr)
			if err != nil {
				t.Fatal(err)
			}
			from := rfc(t, c.from)
			for d := time.Duration(0); d < 30*time.Hour; d += 13 * time.Minute {
				x := from.Add(d)
				if got, want := nextN(sched, x, 8), nextN(robfig, x, 8); !same(got, want) {
					t.Fatalf("plain %q from %s:\ngot%s\nrobfig%s", c.expr, x, show(got, time.UTC), show(want, time.UTC))
				}
			}
		})
	}
	// And the double run that DSTShift prevents is there in plain mode.
	sched := parseIn(t, "30 1 * * *", "America/New_York", ParseOptions{DST: DSTPlain})
	got := nextN(sched, rfc(t, "2027-11-07T00:00:00-04:00"), 2)
	if want := []time.Time{rfc(t, "2027-11-07T01:30:00-04:00"), rfc(t, "2027-11-07T01:30:00-05:00")}; !same(got, want) {
		t.Fatalf("plain 30 1 on 2027-11-07: %s", show(got, time.UTC))
	}
}

// TestDSTWhichType: the wrapper is used for cron expressions in zones with
// transitions only.
func TestDSTWhichType(t *testing.T) {
	cases := []struct {
		expr, zone string
		opts       ParseOptions
		want       string
	}{
		{"0 9 * * *", "America/New_York", ParseOptions{}, "*schedule.dstSchedule"},
		{"@daily", "Europe/Berlin", ParseOptions{DST: DSTShift}, "*schedule.dstSchedule"},
		{"CRON_TZ=Europe/Berlin 0 9 * * *", "UTC", ParseOptions{}, "*schedule.dstSchedule"},
		{"0 9 * * *", "UTC", ParseOptions{}, "*cron.SpecSchedule"},
		{"0 9 * * *", "Etc/GMT+5", ParseOptions{}, "*cron.SpecSchedule"},
		{"CRON_TZ=UTC 0 9 * * *", "Europe/Berlin", ParseOptions{}, "*cron.SpecSchedule"},
		{"0 9 * * *", "America/New_York", ParseOptions{DST: DSTPlain}, "*cron.SpecSchedule"},
		{"@every 1h", "America/New_York", ParseOptions{}, "schedule.everySchedule"},
	}
	for _, c := range cases {
		if got := fmt.Sprintf("%T", parseIn(t, c.expr, c.zone, c.opts)); got != c.want {
			t.Errorf("%q in %s %+v parsed to %s, want %s", c.expr, c.zone, c.opts, got, c.want)
		}
	}
}

// TestDSTQuietPeriods: away from transitions the wrapper agrees with robfig,
// for many kinds of expression, also in zones whose last transition is
// long past.
func TestDSTQuietPeriods(t *testing.T) {
	exprs := []string{"0 9 * * *", "*/5 * * * * *", "7,41 30 * * * *", "0 0 29 2 *", "@weekly", "@monthly",
		"0 9 * * 1-5", "0 9 1,15 * *", "0 9 1 * 1", "*/10 8-17 * * *", "0 0 1 1 *"}
	for _, zone := range []string{"America/New_York", "Europe/Berlin", "Asia/Seoul", "Asia/Kolkata", "Australia/Lord_Howe"} {
		loc, _ := LoadLocation(zone)
		for _, expr := range exprs {
			sched := parseIn(t, expr, zone, ParseOptions{})
			robfig := parseIn(t, expr, zone, ParseOptions{DST: DSTPlain})
			d, ok := sched.(*dstSchedule)
			if !ok {
				t.Fatalf("%q in %s: %T", expr, zone, sched)
			}
			for _, from := range []time.Time{time.Date(2024, 5, 10, 12, 0, 0, 0, loc), time.Date(2025, 1, 15, 3, 4, 5, 6, loc)} {
				// robfig's own Next is not always right across a
				// transition (it skips @weekly on 2025-04-13 in
				// Lord_Howe): compare up to the first one.
				got, want := beforeChange(nextN(sched, from, 20), from), beforeChange(nextN(robfig, from, 20), from)
				if !same(got, want) {
					t.Fatalf("%q in %s from %s:\ngot%s\nrobfig%s", expr, zone, from, show(got, loc), show(want, loc))
				}
				for i := 1; i < len(got); i++ {
					if p := d.Prev(got[i].Add(-time.Nanosecond)); !p.Equal(got[i-1]) {
						t.Fatalf("%q in %s: Prev(%s - 1ns) = %s, want %s", expr, zone, got[i], p, got[i-1])
					}
					if p := d.Prev(got[i]); !p.Equal(got[i]) {
						t.Fatalf("%q in %s: Prev(%s) = %s", expr, zone, got[i], p)
					}
				}
			}
		}
	}
}

// beforeChange returns the prefix of ts before the first change of UTC
// offset after from (found an hour at a time).
func beforeChange(ts []time.Time, from time.Time) []time.Time {
	if len(ts) == 0 {
		return ts
	}
	_, off := from.Zone()
	change := from
	for last := ts[len(ts)-1]; !change.After(last); change = change.Add(time.Hour) {
		if _, o := change.Zone(); o != off {
			break
		}
	}
	i := 0
	for i < len(ts) && ts[i].Before(change.Add(-time.Hour)) {
		i++
	}
	return ts[:i]
}

func TestParseDSTMode(t *testing.T) {
	for in, want := range map[string]DSTMode{"": DSTShift, "shift": DSTShift, " plain ": DSTPlain} {
		if got, err := ParseDSTMode(in); err != nil || got != want {
			t.Errorf("ParseDSTMode(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"Plain", "off", "robfig"} {
		if _, err := ParseDSTMode(in); err == nil || !strings.Contains(err.Error(), `"shift"`) {
			t.Errorf("ParseDSTMode(%q) = %v, want a refusal naming the values", in, err)
		}
	}
	if _, err := ParseExprWith("0 9 * * *", nil, ParseOptions{DST: "bogus"}); err == nil {
		t.Error("ParseExprWith accepted an unknown DST mode")
	}
}
