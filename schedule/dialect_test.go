package schedule

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cronswap/cronswap/internal/crondialect"
	"github.com/robfig/cron/v3"
)

// dialectTransitions are transitions of five zones, spring and autumn,
// with the wall date they fall on: America/New_York and Europe/Berlin
// (Sundays, at 02:00/03:00), Australia/Lord_Howe (a 30-minute shift),
// Africa/Cairo (a Friday at midnight, a Thursday at 24:00, so W and the
// weekdays land on them) and America/Santiago (midnight skipped and
// repeated).
var dialectTransitions = []struct {
	zone string
	at   string // the transition, in UTC
	day  string // its wall date
}{
	{"America/New_York", "2027-03-14T07:00:00Z", "2027-03-14"},
	{"America/New_York", "2027-11-07T06:00:00Z", "2027-11-07"},
	{"Europe/Berlin", "2027-03-28T01:00:00Z", "2027-03-28"},
	{"Europe/Berlin", "2027-10-31T01:00:00Z", "2027-10-31"},
	{"Australia/Lord_Howe", "2027-04-03T15:00:00Z", "2027-04-04"},
	{"Australia/Lord_Howe", "2027-10-02T15:30:00Z", "2027-10-03"},
	{"Africa/Cairo", "2027-04-29T22:00:00Z", "2027-04-30"},
	{"Africa/Cairo", "2027-10-28T21:00:00Z", "2027-10-28"},
	{"America/Santiago", "2027-04-04T03:00:00Z", "2027-04-03"},
	{"America/Santiago", "2027-09-05T04:00:00Z", "2027-09-05"},
}

// dayTermsFor returns day-of-month and day-of-week terms of the dialect
// that name the wall date day (and, for W, days beside it).
func dayTermsFor(day time.Time) (dom, dow []string) {
	n := crondialect.DaysIn(day.Year(), day.Month())
	d, w := day.Day(), int(day.Weekday())
	dom = append(dom, fmt.Sprintf("L-%d", n-d), fmt.Sprintf("%dW", d), fmt.Sprintf("%dW", max(1, d-1)), fmt.Sprintf("%dW", min(n, d+1)))
	if n-d < 3 {
		dom = append(dom, "L", "LW", fmt.Sprintf("L-%dW", n-d))
	}
	dow = append(dow, fmt.Sprintf("%d#%d", w, (d-1)/7+1), fmt.Sprintf("%s#%d", strings.ToUpper(day.Weekday().String()[:3]), (d-1)/7+1))
	if d+7 > n {
		dow = append(dow, fmt.Sprintf("%dL", w))
	}
	return dom, dow
}

// dialectTimes are times of day around the transitions of
// dialectTransitions: fixed times (once on a repeated wall time) and
// wildcards and steps (on real elapsed time).
var dialectTimes = []string{"30 2", "0 2", "15 2", "30 1", "0 3", "0 0", "30 0", "30 23", "0 23", "*/15 *", "0 */2", "45 0-3", "10,40 1,2"}

// TestDialectDSTSameAsPlain is the daylight-saving test of the dialect: on
// the days around real transitions of five zones, spring and autumn, an
// expression with L, W or # fires exactly where the plain expression that
// names the same days of that month fires ("30 2 * 3 0#2" in March 2027 is
// "30 2 14 3 *"), under shift and under plain alike; and an expression
// with H fires where the expression with its values does. So CRON_TZ and
// the dst modes apply to the new forms by the same rules.
func TestDialectDSTSameAsPlain(t *testing.T) {
	checked, robfigSkipsMidnight := 0, 0
	for _, tr := range dialectTransitions {
		loc, err := LoadLocation(tr.zone)
		if err != nil {
			t.Fatal(err)
		}
		day, err := time.ParseInLocation(time.DateOnly, tr.day, time.UTC)
		if err != nil {
			t.Fatal(err)
		}
		dom, dow := dayTermsFor(day)
		var days []string
		for _, d := range dom {
			days = append(days, d+" * *")
		}
		for _, d := range dow {
			days = append(days, "? * "+d)
		}
		monthStart := time.Date(day.Year(), day.Month(), 1, 0, 0, 0, 0, loc)
		monthEnd := monthStart.AddDate(0, 1, 0)
		for _, tod := range dialectTimes {
			for _, d := range days {
				expr := tod + " " + d
				// The days of the month it names, read in UTC.
				utc, err := ParseExprWith(expr, time.UTC, ParseOptions{})
				if err != nil {
					t.Fatalf("%q: %v", expr, err)
				}
				var named []string
				for _, at := range between(utc, time.Date(day.Year(), day.Month(), 1, 0, 0, 0, 0, time.UTC).Add(-time.Second),
					time.Date(day.Year(), day.Month()+1, 1, 0, 0, 0, 0, time.UTC)) {
					if s := strconv.Itoa(at.Day()); len(named) == 0 || named[len(named)-1] != s {
						named = append(named, s)
					}
				}
				if len(named) == 0 {
					t.Fatalf("%q names no day in %s", expr, day.Format("2006-01"))
				}
				plain := fmt.Sprintf("%s %s %d *", tod, strings.Join(named, ","), int(day.Month()))
				for _, mode := range []DSTMode{DSTShift, DSTPlain} {
					opts := ParseOptions{DST: mode}
					got := between(parseIn(t, expr, tr.zone, opts), monthStart.Add(-time.Second), monthEnd)
					want := between(parseIn(t, plain, tr.zone, opts), monthStart.Add(-time.Second), monthEnd)
					if !same(got, want) && mode == DSTPlain && midnightSkipped(loc, day) {
						// robfig's plain Next steps from midnight to
						// midnight when a day field is restricted, and
						// passes over a day whose midnight does not
						// exist: the documented difference (docs/time.md).
						// The dialect fires on that day at robfig's
						// times of day, as with "*" in the day fields.
						want = onDays(between(parseIn(t, tod+" * * *", tr.zone, opts), monthStart.Add(-time.Second), monthEnd), loc, named)
						robfigSkipsMidnight++
					}
					if !same(got, want) {
						t.Fatalf("%q in %s (%s) in %s:%s\nwant, as %q:%s", expr, tr.zone, mode, day.Format("2006-01"),
							show(got, loc), plain, show(want, loc))
					}
					checked++
				}
			}
		}
		// H: the expression with its values, whatever it is.
		for _, expr := range []string{"H 2 * * *", "H H * * *", "H(0-29)/10 0-3 * * *", "0 H(0-3) * * *", "H H(22-23) * * *", "H(0-59) H(0-3) L * *", "H 2 ? * 0#2"} {
			for _, id := range []string{"daily_report", "nightly_backup", "job-7", "job-8"} {
				r, err := crondialect.Resolve(expr, id)
				if err != nil {
					t.Fatal(err)
				}
				for _, mode := range []DSTMode{DSTShift, DSTPlain} {
					got := between(parseIn(t, expr, tr.zone, ParseOptions{DST: mode, JobID: id}), monthStart.Add(-time.Second), monthEnd)
					want := between(parseIn(t, r.Concrete, tr.zone, ParseOptions{DST: mode}), monthStart.Add(-time.Second), monthEnd)
					if !same(got, want) {
						t.Fatalf("%q for %s in %s (%s):%s\nwant, as %q:%s", expr, id, tr.zone, mode, show(got, loc), r.Concrete, show(want, loc))
					}
					checked++
				}
			}
		}
	}
	t.Logf("%d expression-zone-mode triples fire as their plain equivalents (%d with robfig's day skipped at midnight)", checked, robfigSkipsMidnight)
	if robfigSkipsMidnight == 0 {
		t.Error("no case met a midnight the clocks skip: the test no longer covers it")
	}
}

// midnightSkipped reports whether 00:00 of the wall date day does not
// exist in loc.
func midnightSkipped(loc *time.Location, day time.Time) bool {
	m := time.Date(day.Year(), day.Month(), day.Day(), 0, 0, 0, 0, loc)
	return m.Hour() != 0 || m.Day() != day.Day()
}

// onDays keeps the instants whose wall date in loc is one of the days of
// the month listed.
func onDays(ts []time.Time, loc *time.Location, days []string) []time.Time {
	var out []time.Time
	for _, t := range ts {
		for _, d := range days {
			if strconv.Itoa(t.In(loc).Day()) == d {
				out = append(out, t)
			}
		}
	}
	return out
}

// between returns the activations of sched in (from, to).
func between(sched cron.Schedule, from, to time.Time) []time.Time {
	var out []time.Time
	for t := sched.Next(from); !t.IsZero() && t.Before(to); t = sched.Next(t) {
		out = append(out, t)
	}
	return out
}

// TestDialectDSTDeterministic: an expression with L, W or # under shift is
// one fixed set of activations around each transition, whatever instant
// Next and Prev start from — the property TestDSTDeterministic checks of
// plain expressions.
func TestDialectDSTDeterministic(t *testing.T) {
	for _, tr := range dialectTransitions {
		day, err := time.Parse(time.DateOnly, tr.day)
		if err != nil {
			t.Fatal(err)
		}
		dom, dow := dayTermsFor(day)
		// L-n and nW, n#k and nL (TestDialectDSTSameAsPlain takes every
		// term of dayTermsFor).
		dom = dom[:2]
		if len(dow) > 2 {
			dow = []string{dow[0], dow[2]}
		} else {
			dow = dow[:1]
		}
		// Fixed times over 100 days each way (they fire about monthly);
		// wildcards and steps over two days (they fire all through the
		// transition's day).
		for tod, window := range map[string]time.Duration{
			"30 2": 100 * 24 * time.Hour, "30 1": 100 * 24 * time.Hour, "0 0": 100 * 24 * time.Hour, "30 23": 100 * 24 * time.Hour,
			"*/15 *": 48 * time.Hour, "0 */2": 48 * time.Hour, "*/20 0-3": 48 * time.Hour,
		} {
			var exprs []string
			for _, d := range dom {
				exprs = append(exprs, tod+" "+d+" * *")
			}
			for _, d := range dow {
				exprs = append(exprs, tod+" * * "+d)
			}
			for _, expr := range exprs {
				sched := parseIn(t, expr, tr.zone, ParseOptions{}).(*dstSchedule)
				if n := checkDeterministic(t, sched, expr, tr.zone, rfc(t, tr.at), window); n < 3 && window > 48*time.Hour {
					t.Fatalf("%q in %s: %d activations within %s of %s: too few to check", expr, tr.zone, n, window, tr.at)
				}
			}
		}
	}
}

// TestDialectDSTExamples are the cases docs/time.md shows, written out.
func TestDialectDSTExamples(t *testing.T) {
	for _, c := range []struct {
		expr, zone, from string
		dst              DSTMode
		want             []string
	}{
		// The second Sunday of March is New York's spring-forward day:
		// 02:30 does not exist and fires at 03:00 EDT.
		{"30 2 ? 3 SUN#2", "America/New_York", "2027-03-01T00:00:00-05:00", "", []string{"2027-03-14T03:00:00-04:00", "2028-03-12T03:00:00-04:00"}},
		// The first Sunday of November repeats 01:30: once.
		{"30 1 ? 11 0#1", "America/New_York", "2027-11-01T00:00:00-04:00", "", []string{"2027-11-07T01:30:00-04:00", "2028-11-05T01:30:00-04:00"}},
		// ... and twice under plain.
		{"30 1 ? 11 0#1", "America/New_York", "2027-11-01T00:00:00-04:00", DSTPlain, []string{"2027-11-07T01:30:00-04:00", "2027-11-07T01:30:00-05:00"}},
		// Europe changes on the last Sunday.
		{"30 2 * 3 0L", "Europe/Berlin", "2027-03-01T00:00:00+01:00", "", []string{"2027-03-28T03:00:00+02:00", "2028-03-26T03:00:00+02:00"}},
		{"30 2 * 10 SUNL", "Europe/Berlin", "2027-10-01T00:00:00+02:00", "", []string{"2027-10-31T02:30:00+02:00", "2028-10-29T02:30:00+02:00"}},
		// Cairo springs forward at midnight on the last Friday of April,
		// 2027-04-30, which is also April's last weekday (and so is
		// 2028-04-28).
		{"30 0 LW 4 *", "Africa/Cairo", "2027-04-01T00:00:00+02:00", "", []string{"2027-04-30T01:00:00+03:00", "2028-04-28T01:00:00+03:00"}},
		// and falls back at 24:00 on the last Thursday of October
		// (2028-10-26: the 27th, nearest the 28th, is after it).
		{"30 23 28W 10 *", "Africa/Cairo", "2027-10-01T00:00:00+03:00", "", []string{"2027-10-28T23:30:00+03:00", "2028-10-27T23:30:00+02:00"}},
		// Lord Howe moves 30 minutes on the first Sunday of October.
		{"15 2 ? 10 SUN#1", "Australia/Lord_Howe", "2027-10-01T00:00:00+10:30", "", []string{"2027-10-03T02:30:00+11:00", "2028-10-01T02:30:00+11:00"}},
	} {
		sched := parseIn(t, c.expr, c.zone, ParseOptions{DST: c.dst})
		got := nextN(sched, rfc(t, c.from), len(c.want))
		var want []time.Time
		for _, w := range c.want {
			want = append(want, rfc(t, w))
		}
		if !same(got, want) {
			loc, _ := LoadLocation(c.zone)
			t.Errorf("%q in %s (%s) from %s:%s\nwant%s", c.expr, c.zone, c.dst, c.from, show(got, loc), show(want, loc))
		}
	}
}

// randomDayExpr draws an expression with a random L, W or # term in one
// day field (and "*" in the other) and sparse times.
func randomDayExpr(r *rand.Rand) (tod, dom, dow string) {
	tod = fmt.Sprintf("%d %d", r.IntN(60), r.IntN(24))
	if r.IntN(3) == 0 {
		tod = fmt.Sprintf("%d */%d", r.IntN(60), 6+r.IntN(7))
	}
	doms := []string{"L", fmt.Sprintf("L-%d", r.IntN(10)), fmt.Sprintf("%dW", 1+r.IntN(31)), "LW", fmt.Sprintf("L-%dW", r.IntN(5)), fmt.Sprintf("%d", 1+r.IntN(31)), fmt.Sprintf("%d-%d", 1+r.IntN(10), 11+r.IntN(10))}
	dows := []string{fmt.Sprintf("%dL", r.IntN(7)), fmt.Sprintf("%d#%d", r.IntN(7), 1+r.IntN(5)), strconv.Itoa(r.IntN(7)), fmt.Sprintf("%d-%d", r.IntN(3), 3+r.IntN(4))}
	return tod, doms[r.IntN(len(doms))], dows[r.IntN(len(dows))]
}

// merged returns the union of the activation lists, in order, without
// duplicates.
func merged(lists ...[]time.Time) []time.Time {
	var all []time.Time
	for _, l := range lists {
		all = append(all, l...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Before(all[j]) })
	var out []time.Time
	for _, t := range all {
		if len(out) == 0 || !out[len(out)-1].Equal(t) {
			out = append(out, t)
		}
	}
	return out
}

// TestDialectEitherDayMatches: with both day fields restricted, an
// expression fires on the days either field names — robfig's rule for
// plain expressions, kept for the new terms: its activations are the
// union of those of the two expressions with one day field each. And a
// list fires on the union of its terms ("1,L" is "1" and "L"). Checked on
// 120 random expressions over half a year, in UTC and in New York (shift
// and plain).
func TestDialectEitherDayMatches(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	from := time.Date(2026, 12, 20, 0, 0, 0, 0, time.UTC)
	to := from.AddDate(0, 6, 0)
	for range 120 {
		tod, dom, dow := randomDayExpr(r)
		_, dom2, dow2 := randomDayExpr(r)
		for _, z := range []struct {
			zone string
			dst  DSTMode
		}{{"UTC", ""}, {"America/New_York", ""}, {"America/New_York", DSTPlain}} {
			opts := ParseOptions{DST: z.dst}
			fires := func(d string) []time.Time {
				return between(parseIn(t, tod+" "+d, z.zone, opts), from, to)
			}
			both := fires(dom + " * " + dow)
			if want := merged(fires(dom+" * *"), fires("* * "+dow)); !same(both, want) {
				t.Fatalf("%q in %s (%s) is not the union of its day fields:%s\nwant%s", tod+" "+dom+" * "+dow, z.zone, z.dst, show(both, time.UTC), show(want, time.UTC))
			}
			list := fires(dom + "," + dom2 + " * *")
			if want := merged(fires(dom+" * *"), fires(dom2+" * *")); !same(list, want) {
				t.Fatalf("%q in %s is not the union of its terms", tod+" "+dom+","+dom2+" * *", z.zone)
			}
			list = fires("? * " + dow + "," + dow2)
			if want := merged(fires("? * "+dow), fires("? * "+dow2)); !same(list, want) {
				t.Fatalf("%q in %s is not the union of its terms", tod+" ? * "+dow+","+dow2, z.zone)
			}
		}
	}
}

// TestDialectRarelyFires: a day the rule names only in some years is
// searched for up to five years ahead, as robfig searches; a schedule with
// no fire within five years is refused as never firing.
func TestDialectRarelyFires(t *testing.T) {
	// The fifth Tuesday of February: 2028-02-29 (a leap year starting on
	// a Tuesday), then 2056.
	// Built without ParseExprWith's check, which depends on today.
	res, err := crondialect.Resolve("0 0 ? 2 2#5", "")
	if err != nil {
		t.Fatal(err)
	}
	spec, err := exprParser.Parse(res.Robfig)
	if err != nil {
		t.Fatal(err)
	}
	days := *res.Days
	days.SetPlain(spec.(*cron.SpecSchedule).Dom, spec.(*cron.SpecSchedule).Dow)
	spec.(*cron.SpecSchedule).Dom, spec.(*cron.SpecSchedule).Dow = everyDom, everyDow
	sched := &daySchedule{spec: spec.(*cron.SpecSchedule), days: &days}
	if got := sched.Next(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)); !got.Equal(time.Date(2028, 2, 29, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("0 0 ? 2 2#5 from 2026: %s", got)
	}
	if got := sched.Next(time.Date(2028, 3, 1, 0, 0, 0, 0, time.UTC)); !got.IsZero() {
		t.Errorf("0 0 ? 2 2#5 from 2028-03: %s, want none within five years", got)
	}
	for _, expr := range []string{"0 0 30W 2 *", "0 0 L-29 2 *", "0 0 31W 4,6,9,11 *"} {
		if _, err := ParseExprWith(expr, time.UTC, ParseOptions{}); err == nil || !strings.Contains(err.Error(), "never fires") {
			t.Errorf("%q: %v, want never fires", expr, err)
		}
	}
}

// TestDialectWhichType: what ParseExprWith builds for the new forms.
func TestDialectWhichType(t *testing.T) {
	for _, c := range []struct {
		expr, zone string
		dst        DSTMode
		want       string
	}{
		{"0 0 L * *", "UTC", "", "*schedule.daySchedule"},
		{"0 0 L * *", "America/New_York", DSTPlain, "*schedule.daySchedule"},
		{"0 0 L * *", "America/New_York", "", "*schedule.dstSchedule"},
		{"H H * * *", "UTC", "", "*cron.SpecSchedule"},
		{"H H * * *", "America/New_York", "", "*schedule.dstSchedule"},
		{"0 0 1 * *", "UTC", "", "*cron.SpecSchedule"},
	} {
		sched := parseIn(t, c.expr, c.zone, ParseOptions{DST: c.dst, JobID: "job"})
		if got := fmt.Sprintf("%T", sched); got != c.want {
			t.Errorf("%q in %s (%s): %s, want %s", c.expr, c.zone, c.dst, got, c.want)
		}
	}
}

// TestScheduleParseHashesItsID: Schedule.Parse, which every reader of the
// schedules collection goes through, hashes H from the document's _id.
func TestScheduleParseHashesItsID(t *testing.T) {
	from := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, id := range []string{"daily_report", "nightly_backup"} {
		s := Schedule{ID: id, CronExpr: "H H * * *", Enabled: true}
		sched, err := s.Parse(time.UTC)
		if err != nil {
			t.Fatal(err)
		}
		r, _ := crondialect.Resolve(s.CronExpr, id)
		want := parseIn(t, r.Concrete, "UTC", ParseOptions{})
		if got, w := sched.Next(from), want.Next(from); !got.Equal(w) {
			t.Errorf("%s: %s, want %s (%q)", id, got, w, r.Concrete)
		}
	}
	if _, err := (Schedule{CronExpr: "H * * * *"}).Parse(time.UTC); err == nil {
		t.Error("H without an id accepted")
	}
}
