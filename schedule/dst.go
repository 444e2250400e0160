package schedule

import (
	"math/bits"
	"time"

	"github.com/cronswap/cronswap/internal/crondialect"
	"github.com/robfig/cron/v3"
)

// dstSchedule is a cron expression in a time zone whose UTC offset changes
// (daylight saving, or a zone moving across the date line), with the
// DSTShift semantics: every wall time the expression names fires once, at
// an instant that follows from the expression and the zone's rules alone,
// so all replicas agree on it whenever they start and whatever instant they
// compute from.
//
// The activations are a fixed set of instants, built from the wall times
// (date and time of day) the expression names:
//
//   - A wall time that occurs exactly once fires then.
//   - A wall time that does not occur, because the clocks jump over it
//     (02:30 on a day that goes from 02:00 straight to 03:00), fires at the
//     first instant after the jump, the instant the clocks show 03:00. All
//     skipped wall times of one jump fire there together, once, and not at
//     all apart from the expression's own activation when the expression
//     names the wall time at the end of the jump ("*/15 * * * *" fires at
//     03:00 once, as it would on any day).
//   - A wall time that occurs twice, because the clocks go back (01:30 on a
//     day that goes from 02:00 back to 01:00), fires at its first
//     occurrence only when the expression names a single second, minute and
//     hour ("30 1 * * *": a daily job runs once that day); when the
//     expression has a wildcard, list, range or step in any of these fields
//     ("*/15 * * * *", "0 */2 * * *", "0,30 1 * * *") it fires at both
//     occurrences, on real elapsed time.
//
// Next(t) is the least activation after t and Prev(t) the greatest at or
// before t, both whole seconds; dstSchedule therefore works with anything
// that searches a schedule with Next. Each call looks only at the zone
// period (the stretch of time with one UTC offset) that contains t and, near
// a transition, its neighbours: in the middle of a period it costs about
// what robfig's SpecSchedule.Next does.
//
// The wall times are those of the expression read on a clock that never
// jumps: robfig's field bit sets for the second, minute, hour and month, and
// a day rule — robfig's own on its day-of-month and day-of-week bits, or,
// for an expression with L, W or # terms, a crondialect.Days. Everything
// above holds for both alike.
//
// ParseExpr returns a *dstSchedule for a cron expression in a zone with
// transitions, unless asked for DSTPlain.
type dstSchedule struct {
	loc *time.Location
	// civil has the expression's fields in UTC: a clock that never jumps,
	// on which the wall times of the expression are read off. A wall time
	// is held as the Unix seconds of that wall time in UTC.
	civil cron.SpecSchedule
	// days is the day rule of an expression with L, W or # terms (civil's
	// day fields are then every day); nil for robfig's own.
	days *crondialect.Days
	// fixed is true when the second, minute and hour are single values: a
	// repeated wall time then fires once.
	fixed bool
}

// robfig marks a field written as "*" or "?" with this bit.
const starBit = 1 << 63

// maxJump bounds the change of UTC offset at one transition (the largest
// in the zone database is about 24 hours, a zone moving across the date
// line). A wall time more than maxJump after the start of a zone period
// cannot occur in the period before.
const maxJump = 26 * 3600

// maxPeriods bounds how many zone periods one Next or Prev looks through.
const maxPeriods = 200

// newDSTSchedule returns the schedule of spec in its location; days is
// the day rule when spec's day fields are every day and the expression's
// L, W or # terms decide, nil for robfig's own rule.
func newDSTSchedule(spec *cron.SpecSchedule, days *crondialect.Days) *dstSchedule {
	civil := *spec
	civil.Location = time.UTC
	single := func(b uint64) bool { return bits.OnesCount64(b&^starBit) == 1 }
	return &dstSchedule{
		loc:   spec.Location,
		civil: civil,
		days:  days,
		fixed: single(spec.Second) && single(spec.Minute) && single(spec.Hour),
	}
}

// Location returns the time zone the expression is read in.
func (d *dstSchedule) Location() *time.Location { return d.loc }

// FixedTime reports whether the expression names a single second, minute
// and hour, so that a repeated wall time fires only once.
func (d *dstSchedule) FixedTime() bool { return d.fixed }

// period is a stretch of time with one UTC offset, [start, end) in Unix
// seconds; the first period has no start, the last no end.
type period struct {
	start, end       int64
	hasStart, hasEnd bool
	off              int64 // seconds east of UTC
}

func (d *dstSchedule) periodAt(u int64) period {
	t := time.Unix(u, 0).In(d.loc)
	_, off := t.Zone()
	p := period{off: int64(off)}
	start, end := t.ZoneBounds()
	if !start.IsZero() {
		p.start, p.hasStart = start.Unix(), true
	}
	if !end.IsZero() {
		p.end, p.hasEnd = end.Unix(), true
	}
	if p.hasEnd && p.end <= u {
		// Beyond the zone's table of transitions, where Go computes the
		// periods from the zone's rule a year at a time, it gives the
		// last day of a leap year an end that is not after it (the
		// year taken as 365 days). End the period at the first change
		// of offset within the day after u instead, or a day after u.
		p.end = d.changeWithin(u, u+86400, p.off)
	}
	if p.hasStart && p.start > u {
		p.start = u
	}
	return p
}

// changeWithin returns the first instant in (a, b] whose offset is not off,
// or b when the offset at b is off; the offset at a is off.
func (d *dstSchedule) changeWithin(a, b, off int64) int64 {
	if d.offsetAt(b) == off {
		return b
	}
	for b-a > 1 {
		if m := a + (b-a)/2; d.offsetAt(m) == off {
			a = m
		} else {
			b = m
		}
	}
	return b
}

func (d *dstSchedule) offsetAt(u int64) int64 {
	_, off := time.Unix(u, 0).In(d.loc).Zone()
	return int64(off)
}

// civilNext returns the first wall time of the expression after wall time
// c; false when there is none within robfig's horizon of five years.
func (d *dstSchedule) civilNext(c int64) (int64, bool) {
	var n time.Time
	if d.days == nil {
		n = d.civil.Next(time.Unix(c, 0).UTC())
	} else {
		n = nextOnDays(&d.civil, d.days, time.Unix(c, 0).UTC())
	}
	if n.IsZero() {
		return 0, false
	}
	return n.Unix(), true
}

// civilPrev returns the last wall time of the expression at or before wall
// time c; false when there is none within five years.
func (d *dstSchedule) civilPrev(c int64) (int64, bool) {
	s := &d.civil
	t := time.Unix(c, 0).UTC()
	limit := t.Year() - 5
	for t.Year() >= limit {
		y, mo, day := t.Date()
		if 1<<uint(mo)&s.Month == 0 {
			t = time.Date(y, mo, 1, 0, 0, 0, 0, time.UTC).Add(-time.Second)
			continue
		}
		if d.days != nil && !d.days.Match(y, mo, day) {
			p, ok := prevDay(s.Month, d.days, civilDate{y, mo, day}, limit)
			if !ok {
				return 0, false
			}
			t = time.Date(p.y, p.m, p.d, 23, 59, 59, 0, time.UTC)
			continue
		}
		if d.days == nil && !dayMatches(s, t) {
			t = time.Date(y, mo, day, 0, 0, 0, 0, time.UTC).Add(-time.Second)
			continue
		}
		h, m, sec := t.Clock()
		ph, ok := prevBit(s.Hour, h)
		if !ok {
			t = time.Date(y, mo, day, 0, 0, 0, 0, time.UTC).Add(-time.Second)
			continue
		}
		if ph != h {
			h, m, sec = ph, 59, 59
		}
		pm, ok := prevBit(s.Minute, m)
		if !ok {
			t = time.Date(y, mo, day, h, 0, 0, 0, time.UTC).Add(-time.Second)
			continue
		}
		if pm != m {
			m, sec = pm, 59
		}
		ps, ok := prevBit(s.Second, sec)
		if !ok {
			t = time.Date(y, mo, day, h, m, 0, 0, time.UTC).Add(-time.Second)
			continue
		}
		return time.Date(y, mo, day, h, m, ps, 0, time.UTC).Unix(), true
	}
	return 0, false
}

// prevBit returns the greatest value <= v in the bit set.
func prevBit(set uint64, v int) (int, bool) {
	m := set &^ starBit & (1<<(uint(v)+1) - 1)
	if m == 0 {
		return 0, false
	}
	return bits.Len64(m) - 1, true
}

// dayMatches is robfig's rule: with a "*" in day of month or day of week
// both must match, otherwise either.
func dayMatches(s *cron.SpecSchedule, t time.Time) bool {
	dom := 1<<uint(t.Day())&s.Dom != 0
	dow := 1<<uint(t.Weekday())&s.Dow != 0
	if s.Dom&starBit != 0 || s.Dow&starBit != 0 {
		return dom && dow
	}
	return dom || dow
}

// Next returns the first activation after t, in t's location, or the zero
// time when there is none within five years.
func (d *dstSchedule) Next(t time.Time) time.Time {
	u := t.Unix()
	p := d.periodAt(u)
	c := u + p.off // the wall time of t, to the second
	var prevOff int64
	prevKnown := false
	for range maxPeriods {
		w, ok := d.civilNext(c)
		if !ok {
			return time.Time{}
		}
		if d.fixed && p.hasStart && w-p.off-p.start < maxJump {
			if !prevKnown {
				prevOff, prevKnown = d.offsetAt(p.start-1), true
			}
			if prevOff > p.off && w < p.start+prevOff {
				// The clocks went back at p.start and w occurred
				// in the period before: it fired there.
				c = p.start + prevOff - 1
				continue
			}
		}
		if !p.hasEnd || w-p.off < p.end {
			return time.Unix(w-p.off, 0).In(t.Location())
		}
		// w is not in this period: look from the start of the next.
		prevOff, prevKnown = p.off, true
		from := p.end
		p = d.periodAt(from)
		if p.off > prevOff && p.start == from && d.gapHasSlot(p, prevOff) {
			return time.Unix(p.start, 0).In(t.Location())
		}
		c = max(from, p.start) + p.off - 1
	}
	return time.Time{}
}

// Prev returns the last activation at or before t, in t's location, or the
// zero time when there is none within five years.
func (d *dstSchedule) Prev(t time.Time) time.Time {
	u := t.Unix()
	p := d.periodAt(u)
	c := u + p.off
	for range maxPeriods {
		w, ok := d.civilPrev(c)
		if !ok {
			return time.Time{}
		}
		if !p.hasStart || w-p.off-p.start >= maxJump {
			return time.Unix(w-p.off, 0).In(t.Location())
		}
		prevOff := d.offsetAt(p.start - 1)
		lo := p.start + p.off // the first wall time of the period
		if d.fixed && prevOff > p.off {
			lo = p.start + prevOff // the wall times before fired in the period before
		}
		if w >= lo {
			return time.Unix(w-p.off, 0).In(t.Location())
		}
		if p.off > prevOff && d.gapHasSlot(p, prevOff) {
			return time.Unix(p.start, 0).In(t.Location())
		}
		end := p.start
		p = d.periodAt(end - 1)
		c = end - 1 + p.off
	}
	return time.Time{}
}

// gapHasSlot reports whether the expression names a wall time the clocks
// skip at the start of p, coming from offset prevOff < p.off: one of
// [p.start+prevOff, p.start+p.off).
func (d *dstSchedule) gapHasSlot(p period, prevOff int64) bool {
	g, ok := d.civilNext(p.start + prevOff - 1)
	return ok && g < p.start+p.off
}
