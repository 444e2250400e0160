package schedule

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cronswap/cronswap/internal/crondialect"
	"github.com/robfig/cron/v3"
)

// DSTMode says how a cron expression treats the wall times that a change of
// the zone's UTC offset (daylight saving, or a zone moving across the date
// line) skips or repeats. The values are spelled as they are meant to appear
// in a schedules document.
type DSTMode string

const (
	// DSTShift, the default, makes every wall time of the expression
	// count once, the same on every replica and however the computation
	// starts (see dstSchedule):
	//   - a wall time the clocks skip fires at the first instant after the
	//     jump (02:30 on a day that goes from 02:00 to 03:00 fires at
	//     03:00), once however many skipped wall times fall there, and not
	//     at all when the expression fires at that instant anyway;
	//   - a wall time the clocks repeat fires once, at its first occurrence,
	//     when the expression names a single second, minute and hour
	//     ("30 1 * * *"); when the hour, minute or second is a wildcard, a
	//     list, a range or a step ("*/15 * * * *", "0 */2 * * *") it fires
	//     at both occurrences, on real elapsed time.
	DSTShift DSTMode = "shift"
	// DSTPlain is robfig/cron's own behaviour: a skipped wall time does
	// not fire, a repeated one fires at each occurrence.
	DSTPlain DSTMode = "plain"
)

// ParseDSTMode reads a DSTMode as written in a document or on a command
// line. The empty string is DSTShift, the default.
func ParseDSTMode(s string) (DSTMode, error) {
	switch m := DSTMode(strings.TrimSpace(s)); m {
	case "", DSTShift:
		return DSTShift, nil
	case DSTPlain:
		return DSTPlain, nil
	default:
		return "", fmt.Errorf("unknown daylight-saving mode %q (want %q, the default, or %q)", s, DSTShift, DSTPlain)
	}
}

// ParseOptions are the choices of ParseExprWith. The zero value is what
// ParseExpr uses.
type ParseOptions struct {
	// DST is how skipped and repeated wall times are treated; empty
	// means DSTShift.
	DST DSTMode
	// JobID is the id of the job the expression is for: an H term takes
	// its value from it (a stable hash, the same on every replica and
	// every restart; docs/time.md). Empty: an expression with H is
	// refused.
	JobID string
}

// ParseExprWith is ParseExpr with options.
//
// It accepts 5 fields ("0 9 * * *"), 6 fields with leading seconds
// ("*/5 * * * * *"), descriptors ("@hourly", "@every 30s") and one
// CRON_TZ=Area/City or TZ=Area/City prefix, which wins over loc (nil means
// UTC). Beyond robfig's syntax it reads H in any field ("H", "H/15",
// "H(0-29)", "H(0-29)/10", hashed from opts.JobID), L, L-n, nW, LW and
// L-nW in day of month, and nL and n#k in day of week (package
// crondialect). It refuses an expression that never fires within five
// years (like "0 0 30 2 *"), a prefix without an expression after it, and
// an "@every" period that is not a whole number of seconds from MinEvery
// to MaxEvery.
//
// "@every" compiles to Every, on a grid that ignores time zones. Any other
// expression in a zone whose UTC offset ever changes compiles, under
// DSTShift, to a *dstSchedule; in a zone without changes, or under
// DSTPlain, to robfig's *cron.SpecSchedule, or for an expression with L, W
// or # terms to a *daySchedule (robfig's SpecSchedule with a day rule on
// top). H terms are values by then: an expression with H compiles as the
// expression with those values would.
func ParseExprWith(expr string, loc *time.Location, opts ParseOptions) (sched cron.Schedule, err error) {
	mode, err := ParseDSTMode(string(opts.DST))
	if err != nil {
		return nil, err
	}
	if expr, err = trimExpr(expr); err != nil {
		return nil, err
	}
	if loc == nil {
		loc = time.UTC
	}
	body := expr
	if name, rest, ok := cutTZPrefix(expr); ok {
		if name == "" {
			return nil, fmt.Errorf("cannot parse %q: the time zone prefix names no zone (want e.g. \"CRON_TZ=Europe/Berlin 0 9 * * *\")", expr)
		}
		if loc, err = LoadLocation(name); err != nil {
			return nil, err
		}
		if rest == "" {
			return nil, fmt.Errorf("cannot parse %q: a time zone prefix without an expression after it (want e.g. \"CRON_TZ=%s 0 9 * * *\")", expr, name)
		}
		if _, _, again := cutTZPrefix(rest); again {
			return nil, fmt.Errorf("cannot parse %q: more than one time zone prefix (want one, e.g. \"CRON_TZ=%s 0 9 * * *\")", expr, name)
		}
		body = rest
	}
	if period, ok := cutEvery(body); ok {
		d, err := parseEvery(period)
		if err != nil {
			return nil, err
		}
		return everySchedule{period: d}, nil
	}
	defer func() {
		if r := recover(); r != nil {
			sched, err = nil, fmt.Errorf("cannot parse %q: %v", expr, r)
		}
	}()
	res, err := crondialect.Resolve(body, opts.JobID)
	if err != nil {
		return nil, fmt.Errorf("cannot parse %q: %v", expr, err)
	}
	// The zone is set on the result rather than handed to robfig as a
	// prefix: robfig would load it from the zone database once more on
	// every parse.
	sched, err = exprParser.Parse(res.Robfig)
	if err != nil {
		return nil, fmt.Errorf("cannot parse %q: %v (want e.g. \"0 9 * * *\", \"*/10 * * * * *\" or \"@hourly\")", expr, err)
	}
	if _, ok := sched.(cron.ConstantDelaySchedule); ok {
		// Only "@every " makes one, and that was read above.
		return nil, fmt.Errorf("cannot parse %q (%s)", expr, everyHint)
	}
	now := time.Now()
	if spec, ok := sched.(*cron.SpecSchedule); ok {
		spec.Location = loc
		var days *crondialect.Days
		if res.Days != nil {
			rule := *res.Days
			rule.SetPlain(spec.Dom, spec.Dow)
			days, spec.Dom, spec.Dow = &rule, everyDom, everyDow
		}
		switch {
		case mode == DSTShift && hasTransitions(loc, now):
			sched = newDSTSchedule(spec, days)
		case days != nil:
			sched = &daySchedule{spec: spec, days: days}
		}
	}
	if sched.Next(now).IsZero() {
		return nil, fmt.Errorf("%q never fires (no fire within five years)", expr)
	}
	return sched, nil
}

// trimExpr returns expr without the white space around it, after checking
// its length as written: at most MaxExprBytes, the white space included, so
// that padding cannot smuggle a long string past the limit. An expression
// of white space only is refused as empty.
func trimExpr(expr string) (string, error) {
	const want = `(want e.g. "0 9 * * *", "*/10 * * * * *" or "@hourly")`
	if len(expr) > MaxExprBytes {
		return "", fmt.Errorf("expression is %d bytes, more than %d (white space around it included) %s", len(expr), MaxExprBytes, want)
	}
	trimmed := strings.TrimSpace(expr)
	switch {
	case expr == "":
		return "", errors.New("empty expression " + want)
	case trimmed == "":
		return "", fmt.Errorf("empty expression: %d bytes of white space only %s", len(expr), want)
	}
	return trimmed, nil
}

// cutTZPrefix splits "CRON_TZ=Area/City rest" or "TZ=Area/City rest" into
// the zone name and the trimmed rest. ok is false when expr has no prefix.
func cutTZPrefix(expr string) (name, rest string, ok bool) {
	var after string
	if after, ok = strings.CutPrefix(expr, "CRON_TZ="); !ok {
		if after, ok = strings.CutPrefix(expr, "TZ="); !ok {
			return "", "", false
		}
	}
	i := strings.IndexFunc(after, func(r rune) bool { return r < 0x80 && isSpace(byte(r)) })
	if i < 0 {
		return after, "", true
	}
	return after[:i], strings.TrimSpace(after[i:]), true
}

// hasTransitions reports whether loc has ever changed its UTC offset (or
// its abbreviation): then the instant at is in a zone period with a start
// or an end.
func hasTransitions(loc *time.Location, at time.Time) bool {
	start, end := at.In(loc).ZoneBounds()
	return !start.IsZero() || !end.IsZero()
}
