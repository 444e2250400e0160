package schedule

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Bounds of the period of an "@every" expression.
//
// MinEvery is one second: activations are whole seconds (the engine finds a
// run's slot to the second), so a shorter period could only be rounded up,
// and a typo like "@every 5ms" for "@every 5m" would then run a job every
// second without anyone being told.
//
// MaxEvery is 24 hours. An "@every" schedule fires at the multiples of its
// period counted from the Unix epoch, 1970-01-01T00:00:00Z. Up to a day that
// grid is easy to read off ("@every 6h" fires at 00:00, 06:00, 12:00 and
// 18:00 UTC); beyond a day the days it lands on depend on how many days have
// passed since 1970 ("@every 48h" fires on the even ones, "@every 168h" on
// Thursdays at 00:00 UTC, because 1970-01-01 was a Thursday), which nobody
// writing it expects. A cron expression says what such a schedule means
// ("0 0 */2 * *", "0 0 * * 4") and follows the schedule's time zone.
const (
	MinEvery = time.Second
	MaxEvery = 24 * time.Hour
)

// everyHint is the valid example every refusal of an "@every" period ends with.
const everyHint = `want a whole number of hours, minutes and seconds from 1s to 24h, written like "@every 30s", "@every 5m" or "@every 1h30m"`

// parseEvery reads the period of an "@every" expression: one to three
// integer terms with the units h, m and s, in that order ("90s", "5m",
// "1h30m", "1h0m30s"), from MinEvery to MaxEvery. Go's fuller duration
// syntax (signs, fractions, ms, us and ns) is refused rather than rounded:
// "@every 1.5s" or "@every 500ms" cannot be honoured on a grid of whole
// seconds, and "@every -5m" is a typo, not a schedule.
func parseEvery(s string) (time.Duration, error) {
	if s == "" {
		return 0, fmt.Errorf("@every without a period (%s)", everyHint)
	}
	rest := s
	var total int64 // seconds
	last := -1      // index in units of the last unit read
	units := []struct {
		unit byte
		secs int64
	}{{'h', 3600}, {'m', 60}, {'s', 1}}
	for rest != "" {
		i := 0
		for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
			i++
		}
		if i == 0 || i == len(rest) {
			return 0, badEvery(s)
		}
		u := -1
		for k, x := range units {
			if rest[i] == x.unit {
				u = k
			}
		}
		// A unit must be followed by a digit or the end: "5ms" is not
		// "5m" then "s".
		if u < 0 || u <= last || (i+1 < len(rest) && (rest[i+1] < '0' || rest[i+1] > '9')) {
			return 0, badEvery(s)
		}
		n, err := strconv.ParseInt(rest[:i], 10, 64)
		if err != nil || n > int64(MaxEvery/time.Second) {
			return 0, fmt.Errorf("@every %s: the period is more than 24h (%s)", s, everyHint)
		}
		total += n * units[u].secs
		last = u
		rest = rest[i+1:]
	}
	switch {
	case total < int64(MinEvery/time.Second):
		return 0, fmt.Errorf("@every %s: the period is less than 1s (%s)", s, everyHint)
	case total > int64(MaxEvery/time.Second):
		return 0, fmt.Errorf("@every %s: the period is more than 24h (%s)", s, everyHint)
	}
	return time.Duration(total) * time.Second, nil
}

// badEvery says why s, which is not in the accepted syntax, was refused.
func badEvery(s string) error {
	why := "is not a period"
	switch {
	case strings.HasPrefix(s, "-"):
		why = "is negative"
	case strings.ContainsAny(s, ".,"):
		why = "is not a whole number of seconds"
	case strings.Contains(s, "ms") || strings.Contains(s, "us") || strings.Contains(s, "µs") ||
		strings.Contains(s, "μs") || strings.Contains(s, "ns"):
		why = "uses a unit shorter than a second"
	case strings.HasPrefix(s, "+"):
		why = "has a sign"
	}
	return fmt.Errorf("@every %s: the period %s (%s)", s, why, everyHint)
}

// cutEvery reports whether expr (without a time zone prefix) is an "@every"
// expression, and returns its period text.
func cutEvery(expr string) (string, bool) {
	rest, ok := strings.CutPrefix(expr, "@every")
	if !ok || (rest != "" && !isSpace(rest[0])) {
		return "", false
	}
	return strings.TrimSpace(rest), true
}

func isSpace(b byte) bool {
	return b == ' ' || b == '\t' || b == '\n' || b == '\r' || b == '\v' || b == '\f'
}

// Patterns that let a server-side validator (the schedules collection's
// $jsonSchema, installed by `cronswap init`) refuse a bad "@every" period at
// write time, as ParseExpr refuses it. Both are written in the regular
// expression syntax that RE2 (Go) and PCRE (MongoDB) share, without
// lookahead. A cron_expr is acceptable to the validator when it does not
// match EveryExprPattern, or when it matches EveryValidPattern.
//
// EveryValidPattern enforces the period grammar (1 to 3 terms of h, m and s,
// in that order, whole numbers) and a non-zero period; the 24h maximum of
// the whole period is beyond what a regular expression says simply, so
// "@every 25h" passes the validator and is refused by the decoder (the
// daemon keeps the job's last good timer and shows the error).
const (
	// EveryExprPattern matches any cron_expr that is an "@every" expression,
	// with or without a time zone prefix.
	EveryExprPattern = `^\s*(?:(?:CRON_)?TZ=\S*\s+)?@every(?:\s|$)`
	// EveryValidPattern matches the "@every" expressions whose period has
	// the grammar ParseExpr accepts and is not zero.
	EveryValidPattern = `^\s*(?:(?:CRON_)?TZ=\S+\s+)?@every\s+` +
		`(?:0*[1-9][0-9]*h(?:[0-9]+m)?(?:[0-9]+s)?` + // a non-zero hour term first
		`|(?:0+h)?0*[1-9][0-9]*m(?:[0-9]+s)?` + // else a non-zero minute term
		`|(?:0+h)?(?:0+m)?0*[1-9][0-9]*s)` + // else a non-zero second term
		`\s*$`
)
