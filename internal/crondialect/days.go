package crondialect

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"time"
)

// starBit is the bit robfig sets in a field written "*" or "?".
const starBit = 1 << 63

// maxNth is the largest k of n#k: no month has a sixth Monday.
const maxNth = 5

// maxLastOffset is the largest n of L-n: a month has at most 31 days.
const maxLastOffset = 30

// Days says on which days of a month an expression with L, W or # terms
// fires. A day field is "restricted" unless it was written "*" or "?"
// (robfig's star): when both day fields are restricted a day fires when
// either field matches it, otherwise when both do — robfig's rule for
// plain expressions, which holds for the new terms alike ("0 0 L * 5#3"
// fires on the last day and on the third Friday; "0 0 * * 5#3" on the third
// Friday only).
type Days struct {
	// dom and dow are the days of the fields' plain terms, as robfig's
	// bit sets (bit d for day d; days of week 0-6 from Sunday), without
	// the star bit; domStar and dowStar say a field was written "*" or "?".
	dom, dow         uint64
	domStar, dowStar bool
	// domSpecialOnly and dowSpecialOnly: the field has only L, W or #
	// terms, so robfig's bits for it (read from a "*" stand-in) count for
	// nothing.
	domSpecialOnly, dowSpecialOnly bool
	// lastDay has bit n for each L-n (L is L-0); nearest bit d for each dW;
	// lastNearest bit n for each L-nW (LW is L-0W).
	lastDay, nearest, lastNearest uint32
	// lastWeekday has bit w for each wL; nth[w] has bit k for each w#k.
	lastWeekday uint8
	nth         [7]uint8
}

// special reports whether any L, W or # term was read.
func (d *Days) special() bool {
	if d.lastDay|d.nearest|d.lastNearest != 0 || d.lastWeekday != 0 {
		return true
	}
	for _, n := range d.nth {
		if n != 0 {
			return true
		}
	}
	return false
}

// restrict records whether field f, which has L, W or # terms, has plain
// terms beside them.
func (d *Days) restrict(f Field, hasPlain bool) {
	switch f {
	case DayOfMonth:
		d.domSpecialOnly = !hasPlain
	case DayOfWeek:
		d.dowSpecialOnly = !hasPlain
	}
}

// SetPlain takes the day fields of robfig's parse of Resolved.Robfig
// (SpecSchedule's Dom and Dow, star bit included): the days of the plain
// terms beside the L, W and # ones.
func (d *Days) SetPlain(dom, dow uint64) {
	if !d.domSpecialOnly {
		d.dom, d.domStar = dom&^starBit, dom&starBit != 0
	}
	if !d.dowSpecialOnly {
		d.dow, d.dowStar = dow&^starBit, dow&starBit != 0
	}
}

// add reads the upper-cased term up of field f when it is an L, W or #
// term, and reports whether it was one. An L, W or # where the dialect has
// none (another field, a step, a bad day) is refused.
func (d *Days) add(f Field, up string) (bool, error) {
	switch f {
	case DayOfMonth:
		return d.addDayOfMonth(up)
	case DayOfWeek:
		return d.addDayOfWeek(up)
	case Month:
		if _, ok := monthNames[up]; ok {
			return false, nil
		}
	}
	if strings.ContainsAny(up, "LW#") && !strings.ContainsAny(up, "ABCDEFGIJKMNOPQRSTUVXYZ") {
		return false, fmt.Errorf("L, W and # are for day of month (L, L-3, 15W, LW) and day of week (5L, 5#3), not %s", f.words())
	}
	return false, nil
}

func (d *Days) addDayOfMonth(up string) (bool, error) {
	const want = `(want L, L-3, 15W, LW or L-3W)`
	if !strings.ContainsAny(up, "LW#") {
		return false, nil
	}
	if strings.Contains(up, "#") {
		return false, fmt.Errorf("# is for day of week (5#3 is the third Friday), not day of month %s", want)
	}
	if strings.Contains(up, "/") {
		return false, fmt.Errorf("L and W take no step %s", want)
	}
	body, weekday := strings.CutSuffix(up, "W")
	if rest, ok := strings.CutPrefix(body, "L"); ok {
		n := 0
		if rest != "" {
			off, ok := strings.CutPrefix(rest, "-")
			v, err := strconv.Atoi(off)
			if !ok || err != nil || off == "" || off[0] == '+' || off[0] == '-' {
				return false, fmt.Errorf("L-n takes a number of days before the last, 0 to %d %s", maxLastOffset, want)
			}
			if v > maxLastOffset {
				return false, fmt.Errorf("the n of L-n is 0 to %d: a month has at most 31 days %s", maxLastOffset, want)
			}
			n = v
		}
		if weekday {
			d.lastNearest |= 1 << n
		} else {
			d.lastDay |= 1 << n
		}
		return true, nil
	}
	if !weekday || strings.ContainsAny(body, "LW") {
		return false, fmt.Errorf("cannot read %q %s", up, want)
	}
	if body == "" {
		return false, fmt.Errorf("W needs a day: 15W is the weekday nearest the 15th %s", want)
	}
	v, err := strconv.Atoi(body)
	if err != nil || body[0] == '+' || body[0] == '-' || strings.Contains(body, "-") {
		return false, fmt.Errorf("W takes a single day from 1 to 31, not %q %s", body, want)
	}
	if v < 1 || v > 31 {
		return false, fmt.Errorf("W needs a day from 1 to 31 %s", want)
	}
	d.nearest |= 1 << v
	return true, nil
}

func (d *Days) addDayOfWeek(up string) (bool, error) {
	const want = `(want e.g. 5L, the last Friday, or 5#3 or FRI#3, the third Friday; days 0-6 from Sunday)`
	if day, k, ok := strings.Cut(up, "#"); ok {
		w, err := weekday(day)
		if err != nil {
			return false, fmt.Errorf("%v %s", err, want)
		}
		n, err := strconv.Atoi(k)
		if err != nil || k == "" || k[0] == '+' || k[0] == '-' || n < 1 || n > maxNth {
			return false, fmt.Errorf("the k of n#k is 1 to %d: a month has at most five of each weekday %s", maxNth, want)
		}
		d.nth[w] |= 1 << n
		return true, nil
	}
	day, ok := strings.CutSuffix(up, "L")
	if !ok {
		if _, name := weekdayNames[up]; !name && strings.Contains(up, "W") && !strings.ContainsAny(up, "-/") {
			return false, fmt.Errorf("W is for day of month (15W), not day of week %s", want)
		}
		return false, nil
	}
	if day == "" {
		return false, fmt.Errorf("L alone in day of week names no day: 5L is the last Friday %s", want)
	}
	if strings.ContainsAny(day, "-/,") {
		return false, fmt.Errorf("L takes a single day, not %q %s", day, want)
	}
	w, err := weekday(day)
	if err != nil {
		return false, fmt.Errorf("%v %s", err, want)
	}
	d.lastWeekday |= 1 << w
	return true, nil
}

// weekday reads a day of week, 0-6 or a name.
func weekday(s string) (int, error) {
	if w, ok := weekdayNames[s]; ok {
		return w, nil
	}
	w, err := strconv.Atoi(s)
	if err != nil || s == "" || s[0] == '+' || s[0] == '-' || w < 0 || w > 6 {
		return 0, fmt.Errorf("%q is not a day of week", s)
	}
	return w, nil
}

// DaysIn returns the number of days of month m of year y.
func DaysIn(y int, m time.Month) int {
	return time.Date(y, m+1, 0, 0, 0, 0, 0, time.UTC).Day()
}

// MonthDays returns the days of month m of year y the rule fires on, bit d
// for day d.
func (d *Days) MonthDays(y int, m time.Month) uint32 {
	n := DaysIn(y, m)
	all := uint32(1)<<(n+1) - 2 // days 1..n
	first := int(time.Date(y, m, 1, 0, 0, 0, 0, time.UTC).Weekday())
	// weekdayOf is the day of week of day x of the month.
	weekdayOf := func(x int) int { return (first + x - 1) % 7 }

	dom := uint32(d.dom) & all
	if d.domStar {
		dom = all
	}
	for off := range bits.Len32(d.lastDay) {
		if d.lastDay&(1<<off) != 0 && n-off >= 1 {
			dom |= 1 << (n - off)
		}
	}
	nearest := func(x int) int {
		switch weekdayOf(x) {
		case 6: // Saturday: the Friday before, or the Monday after the 1st
			if x == 1 {
				return 3
			}
			return x - 1
		case 0: // Sunday: the Monday after, or the Friday before the last day
			if x == n {
				return x - 2
			}
			return x + 1
		}
		return x
	}
	for x := range bits.Len32(d.nearest) {
		if d.nearest&(1<<x) != 0 && x <= n {
			dom |= 1 << nearest(x)
		}
	}
	for off := range bits.Len32(d.lastNearest) {
		if d.lastNearest&(1<<off) != 0 && n-off >= 1 {
			dom |= 1 << nearest(n-off)
		}
	}

	var dow uint32
	if d.dowStar {
		dow = all
	} else {
		for x := 1; x <= n; x++ {
			w := weekdayOf(x)
			if d.dow&(1<<w) != 0 || (d.lastWeekday&(1<<w) != 0 && x+7 > n) {
				dow |= 1 << x
				continue
			}
			if k := (x-1)/7 + 1; d.nth[w]&(1<<k) != 0 {
				dow |= 1 << x
			}
		}
	}
	if d.domStar || d.dowStar {
		return dom & dow
	}
	return dom | dow
}

// Match reports whether the rule fires on day x of month m of year y.
func (d *Days) Match(y int, m time.Month, x int) bool {
	return d.MonthDays(y, m)&(1<<x) != 0
}
