package schedule

import (
	"math/bits"
	"time"

	"github.com/cronswap/cronswap/internal/crondialect"
	"github.com/robfig/cron/v3"
)

// Robfig's bit sets for "every day" in day of month (1-31) and day of week
// (0-6), star bit included: with them robfig's own day rule matches every
// day, and a crondialect.Days rule decides instead.
const (
	everyDom = 1<<32 - 2 | starBit
	everyDow = 1<<7 - 1 | starBit
)

// searchYears is how far ahead Next searches, and back Prev, as robfig's
// SpecSchedule.Next does: a schedule with no activation within five years
// has none.
const searchYears = 5

// maxDaySteps bounds the loop of nextOnDays (each step is one robfig Next):
// about one step per day with activations that the rule leaves out, plus
// the seconds of an hour around a midnight a time zone skips.
const maxDaySteps = 1 << 16

// daySchedule is an expression with L, W or # terms in a zone without
// daylight saving, or in any zone under DSTPlain: robfig's SpecSchedule
// finds the months and times of day, exactly as for a plain expression
// (its day fields are every day), and the activations it finds on days
// that days leaves out are passed over. A skipped or repeated wall time
// therefore does what robfig does with it in a plain expression.
type daySchedule struct {
	spec *cron.SpecSchedule
	days *crondialect.Days
}

// Next returns the first activation after t, in t's location, or the zero
// time when there is none within five years.
func (s *daySchedule) Next(t time.Time) time.Time {
	return nextOnDays(s.spec, s.days, t)
}

// civilDate is a day of the calendar.
type civilDate struct {
	y int
	m time.Month
	d int
}

func (a civilDate) before(b civilDate) bool {
	if a.y != b.y {
		return a.y < b.y
	}
	if a.m != b.m {
		return a.m < b.m
	}
	return a.d < b.d
}

// nextOnDays returns the first activation of spec (whose day fields are
// every day) after t that falls on a day of days in spec's location, in
// t's location; the zero time when there is none within five years.
func nextOnDays(spec *cron.SpecSchedule, days *crondialect.Days, t time.Time) time.Time {
	loc := spec.Location
	limit := t.In(loc).Year() + searchYears
	var from civilDate // no activation before this day can fire
	for range maxDaySteps {
		n := spec.Next(t)
		if n.IsZero() {
			return n
		}
		y, m, d := n.In(loc).Date()
		if y > limit {
			return time.Time{}
		}
		at := civilDate{y, m, d}
		if at.before(from) {
			// The jump to from's midnight landed on the day before
			// (a zone that skips midnight): walk on.
			t = n
			continue
		}
		if days.Match(y, m, d) {
			return n
		}
		next, ok := nextDay(spec.Month, days, civilDate{y, m, d + 1}, limit)
		if !ok {
			return time.Time{}
		}
		from = next
		t = n
		if jump := time.Date(next.y, next.m, next.d, 0, 0, 0, 0, loc).Add(-time.Second); jump.After(n) {
			t = jump
		}
	}
	return time.Time{}
}

// nextDay returns the first day on or after from (a day past the end of
// its month means the first of the next) in a month of the bit set months
// that days fires on, up to the end of year limit.
func nextDay(months uint64, days *crondialect.Days, from civilDate, limit int) (civilDate, bool) {
	y, m, d := from.y, from.m, from.d
	for y <= limit {
		if months&(1<<uint(m)) != 0 {
			if mask := days.MonthDays(y, m) >> uint(d) << uint(d); mask != 0 {
				return civilDate{y, m, lowestBit(mask)}, true
			}
		}
		d = 1
		if m++; m > time.December {
			y, m = y+1, time.January
		}
	}
	return civilDate{}, false
}

// prevDay returns the last day on or before from in a month of months that
// days fires on, down to the start of year limit.
func prevDay(months uint64, days *crondialect.Days, from civilDate, limit int) (civilDate, bool) {
	y, m, d := from.y, from.m, from.d
	for y >= limit {
		if months&(1<<uint(m)) != 0 {
			if mask := days.MonthDays(y, m) & (1<<uint(d+1) - 1); mask != 0 {
				return civilDate{y, m, highestBit(mask)}, true
			}
		}
		d = 31
		if m--; m < time.January {
			y, m = y-1, time.December
		}
	}
	return civilDate{}, false
}

func lowestBit(x uint32) int { return bits.TrailingZeros32(x) }

func highestBit(x uint32) int { return bits.Len32(x) - 1 }
