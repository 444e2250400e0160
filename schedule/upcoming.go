package schedule

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// WallTime is a date and time of day as a clock shows it, without a zone:
// a wall time can name no instant (the clocks skip it) or two (the clocks
// repeat it).
type WallTime struct {
	Year   int
	Month  time.Month
	Day    int
	Hour   int
	Minute int
	Second int
}

// wallOf returns the wall time held as Unix seconds of that time in UTC.
func wallOf(c int64) WallTime {
	t := time.Unix(c, 0).UTC()
	return WallTime{t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second()}
}

// IsZero reports whether w is the zero WallTime (no wall time).
func (w WallTime) IsZero() bool { return w == WallTime{} }

// String formats w as "2006-01-02 15:04:05".
func (w WallTime) String() string {
	return fmt.Sprintf("%04d-%02d-%02d %02d:%02d:%02d", w.Year, int(w.Month), w.Day, w.Hour, w.Minute, w.Second)
}

// MarshalText makes w a JSON string in the format of String; the zero
// WallTime is the empty string.
func (w WallTime) MarshalText() ([]byte, error) {
	if w.IsZero() {
		return []byte{}, nil
	}
	return []byte(w.String()), nil
}

// Fire is one upcoming activation of a schedule, with what daylight saving
// did to it. Only a *dstSchedule carries more than At; for every other
// schedule the other fields are zero.
type Fire struct {
	// At is the instant of the fire, in the location of Upcoming's from.
	At time.Time
	// Shifted is true when the expression does not name At's own wall
	// time: the fire is there only for wall times the clocks skipped,
	// from MeantFor to MeantForLast, and At is the first instant after
	// the jump.
	Shifted bool
	// MeantFor and MeantForLast, when not zero, are the first and the
	// last wall time of the expression that do not exist because the
	// clocks jumped over them at At, and that this fire stands for
	// (equal when there is one). They are set also when the expression
	// names At's wall time (Shifted false): then the skipped wall times
	// are not run apart from it.
	MeantFor, MeantForLast WallTime
	// Dropped, when not zero, is the instant of the second occurrence of
	// At's wall time, which does not fire: At is the first occurrence of
	// a repeated wall time of a fixed-time expression.
	Dropped time.Time
	// Repeat is true when At is the second occurrence of a repeated wall
	// time, which fires because the expression is not a fixed time (it
	// runs on real elapsed time through the repeated hour).
	Repeat bool
	// Note says in words what daylight saving did to this fire; empty
	// when nothing.
	Note string
}

// Upcoming returns the next n activations of sched after from, annotated
// as Fire values (for `cronswap next`). It stops early when sched fires no
// more. A schedule that wraps another (Unwrap, as a lifetime's bounds do)
// is annotated as the one it wraps.
func Upcoming(sched cron.Schedule, from time.Time, n int) []Fire {
	inner := sched
	if w, ok := sched.(interface{ Unwrap() cron.Schedule }); ok {
		inner = w.Unwrap() // a schedule bounded by a lifetime: its fires are the inner one's
	}
	d, _ := inner.(*dstSchedule)
	out := make([]Fire, 0, max(n, 0))
	for t := from; len(out) < n; {
		if t = sched.Next(t); t.IsZero() {
			break
		}
		f := Fire{At: t}
		if d != nil {
			d.annotate(&f)
		}
		out = append(out, f)
	}
	return out
}

// annotate fills in what the transitions around f.At did to it.
func (d *dstSchedule) annotate(f *Fire) {
	u := f.At.Unix()
	p := d.periodAt(u)
	w := u + p.off
	onSchedule := func(c int64) bool {
		n, ok := d.civilNext(c - 1)
		return ok && n == c
	}
	zone := d.loc.String()
	local := f.At.In(d.loc)
	abbr, _ := local.Zone()
	if p.hasStart && u == p.start {
		if prevOff := d.offsetAt(p.start - 1); prevOff < p.off && d.gapHasSlot(p, prevOff) {
			first, _ := d.civilNext(p.start + prevOff - 1)
			last, _ := d.civilPrev(p.start + p.off - 1)
			f.MeantFor, f.MeantForLast = wallOf(first), wallOf(last)
			f.Shifted = !onSchedule(w)
			skipped := clock(first, first)
			verb := "does"
			if last != first {
				skipped += " to " + clock(last, first)
				verb = "do"
			}
			from, to := clock(p.start+prevOff, p.start+prevOff), clock(w, w)
			if date(p.start+prevOff) != date(w) {
				from, to = clock(p.start+prevOff, 0), clock(w, 0)
			}
			jump := fmt.Sprintf("the clocks go from %s to %s", from, to)
			if f.Shifted {
				f.Note = fmt.Sprintf("%s %s not exist on %s in %s (%s): fires at %s %s instead",
					skipped, verb, date(first), zone, jump, clock(w, w), abbr)
			} else {
				f.Note = fmt.Sprintf("%s %s not exist on %s in %s (%s): not run apart from this fire at %s %s",
					skipped, verb, date(first), zone, jump, clock(w, w), abbr)
			}
		}
	}
	if d.fixed && p.hasEnd {
		if nextOff := d.offsetAt(p.end); nextOff < p.off && w >= p.end+nextOff {
			f.Dropped = time.Unix(w-nextOff, 0).In(f.At.Location())
			second, _ := f.Dropped.In(d.loc).Zone()
			f.Note = fmt.Sprintf("%s occurs twice on %s in %s: fires once, at the first (%s), not again at %s %s",
				clock(w, w), date(w), zone, abbr, clock(w, w), second)
		}
	}
	if !d.fixed && p.hasStart {
		if prevOff := d.offsetAt(p.start - 1); prevOff > p.off && w < p.start+prevOff {
			f.Repeat = true
			first, _ := time.Unix(w-prevOff, 0).In(d.loc).Zone()
			f.Note = fmt.Sprintf("%s occurs twice on %s in %s: this is the second time (%s), %s after the first (%s)",
				clock(w, w), date(w), zone, abbr, shortDuration(time.Duration(prevOff-p.off)*time.Second), first)
		}
	}
}

// date formats wall time c as "2006-01-02".
func date(c int64) string { return time.Unix(c, 0).UTC().Format(time.DateOnly) }

// clock formats wall time c as "15:04" (or "15:04:05" when it has
// seconds), with the date in front when it is not the date of wall time
// ref.
func clock(c, ref int64) string {
	t := time.Unix(c, 0).UTC()
	layout := "15:04"
	if t.Second() != 0 {
		layout = "15:04:05"
	}
	if date(c) != date(ref) {
		layout = time.DateOnly + " " + layout
	}
	return t.Format(layout)
}

// shortDuration formats d like time.Duration.String without zero minutes
// and seconds at the end: "1h", "30m", "1h30m".
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
