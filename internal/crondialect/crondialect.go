// Package crondialect reads the parts of cronswap's cron dialect that
// robfig/cron v3's parser does not know, and hands the rest to it:
//
//   - H in any field ("H", "H/15", "H(0-29)", "H(0-29)/10"): a value, or a
//     start for a step, derived from the job id by a stable hash (Hash), so
//     that every replica and every restart computes the same slots;
//   - in day of month, L (the last day), L-n (n days before it), nW (the
//     weekday nearest the nth), LW and L-nW (the weekday nearest the last
//     day, or n days before it);
//   - in day of week, nL (the last day n of the month: 5L, FRIL) and n#k
//     (the kth day n of the month: 5#3, FRI#3), days numbered 0-6 from
//     Sunday as robfig numbers them.
//
// Resolve replaces the H terms by the values they stand for and takes the
// L, W and # terms out of the day fields into a Days rule; what is left is
// a plain expression for robfig's parser. The schedule package builds the
// schedules the engine runs from both.
package crondialect

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
)

// Field is the position of a field in a six-field expression (seconds
// first); a five-field expression has no Second.
type Field int

// The fields of an expression.
const (
	Second Field = iota
	Minute
	Hour
	DayOfMonth
	Month
	DayOfWeek
)

// names of the fields, as refusals say them and as Hash reads them.
var fieldNames = [...]string{"second", "minute", "hour", "day-of-month", "month", "day-of-week"}

// String returns the field's name: "second", "minute", "hour",
// "day-of-month", "month" or "day-of-week".
func (f Field) String() string { return fieldNames[f] }

// words is the field's name as refusals say it: "day of month".
func (f Field) words() string { return strings.ReplaceAll(fieldNames[f], "-", " ") }

// bounds are the values a field takes, as robfig's parser bounds them.
type bounds struct{ min, max int }

var fieldBounds = [...]bounds{{0, 59}, {0, 59}, {0, 23}, {1, 31}, {1, 12}, {0, 6}}

// hashDayOfMonthMax is the last day a day-of-month H picks without a range
// of its own: every month has a 28th, so H in day of month fires every
// month it names.
const hashDayOfMonthMax = 28

var monthNames = map[string]int{
	"JAN": 1, "FEB": 2, "MAR": 3, "APR": 4, "MAY": 5, "JUN": 6,
	"JUL": 7, "AUG": 8, "SEP": 9, "OCT": 10, "NOV": 11, "DEC": 12,
}

var weekdayNames = map[string]int{"SUN": 0, "MON": 1, "TUE": 2, "WED": 3, "THU": 4, "FRI": 5, "SAT": 6}

// Resolved is an expression of the dialect read for one job.
type Resolved struct {
	// Robfig is the expression for robfig's parser: every H term replaced
	// by the values it stands for and the L, W and # terms taken out of
	// the day fields (a day field left with nothing reads "*"; Days says
	// which day fields that is). It is the expression as given when that
	// has no H, L, W or #.
	Robfig string
	// Concrete is the expression as written with every H term replaced by
	// its values: what the job's H stands for, for people to read.
	Concrete string
	// Days is the day rule when a day field has an L, W or # term; nil
	// otherwise (robfig's own day fields then say it all).
	Days *Days
	// Hashed is true when the expression has an H term.
	Hashed bool
}

// Resolve reads expr (a descriptor such as "@daily" or "@every 5m", or 5
// or 6 fields, without a time zone prefix) for the job jobID. An
// expression with H needs the job id its values are hashed from: with an
// empty jobID it is refused. An expression without the dialect's terms
// comes back as it is, for robfig's parser to judge; so does one whose
// number of fields robfig refuses.
func Resolve(expr, jobID string) (Resolved, error) {
	out := Resolved{Robfig: expr, Concrete: expr}
	if strings.HasPrefix(expr, "@") || !strings.ContainsAny(expr, "HhLlWw#") {
		return out, nil
	}
	fields := strings.Fields(expr)
	var kinds []Field
	switch len(fields) {
	case 5:
		kinds = []Field{Minute, Hour, DayOfMonth, Month, DayOfWeek}
	case 6:
		kinds = []Field{Second, Minute, Hour, DayOfMonth, Month, DayOfWeek}
	default:
		return out, nil
	}
	robfig := make([]string, len(fields))
	concrete := make([]string, len(fields))
	var days Days
	for i, text := range fields {
		f := kinds[i]
		var plain, shown []string
		special := false
		for k, term := range strings.Split(text, ",") {
			if term == "" {
				continue // robfig skips empty terms
			}
			up := strings.ToUpper(term)
			if isHashTerm(up) {
				if jobID == "" {
					return out, fmt.Errorf("%s %s: H takes its value from the job id, and there is none here (H is for schedules; give the job's id to check one)", f.words(), term)
				}
				v, err := resolveHash(up, f, jobID, k)
				if err != nil {
					return out, fmt.Errorf("%s %s: %w", f.words(), term, err)
				}
				out.Hashed = true
				plain, shown = append(plain, v), append(shown, v)
				continue
			}
			ok, err := days.add(f, up)
			if err != nil {
				return out, fmt.Errorf("%s %s: %w", f.words(), term, err)
			}
			if ok {
				special = true
				shown = append(shown, up)
				continue
			}
			plain, shown = append(plain, term), append(shown, term)
		}
		if special {
			days.restrict(f, len(plain) > 0)
		}
		robfig[i], concrete[i] = strings.Join(plain, ","), strings.Join(shown, ",")
		switch {
		case special && robfig[i] == "":
			robfig[i] = "*" // the day field's terms are all in days
		case robfig[i] == "":
			robfig[i], concrete[i] = text, text // only commas: robfig refuses it as written
		}
	}
	if !out.Hashed && !days.special() {
		return out, nil
	}
	out.Robfig, out.Concrete = strings.Join(robfig, " "), strings.Join(concrete, " ")
	if days.special() {
		out.Days = &days
	}
	return out, nil
}

// UsesHash reports whether expr (possibly with a CRON_TZ= or TZ= prefix)
// has an H term, whose value depends on the job id.
func UsesHash(expr string) bool {
	if !strings.ContainsAny(expr, "Hh") {
		return false
	}
	for _, field := range strings.Fields(expr) {
		if strings.Contains(field, "=") || strings.HasPrefix(field, "@") {
			continue
		}
		for _, term := range strings.Split(field, ",") {
			if isHashTerm(strings.ToUpper(term)) {
				return true
			}
		}
	}
	return false
}

// isHashTerm reports whether the upper-cased term is an H term.
func isHashTerm(up string) bool {
	return up == "H" || strings.HasPrefix(up, "H(") || strings.HasPrefix(up, "H/")
}

// Hash returns the value the kth term (counted from 0, commas included) of
// field f takes for the job jobID, among n values: the first eight bytes of
// the SHA-256 of jobID, a zero byte, the field's name (Field.String), a
// zero byte and k in decimal, read as a big-endian unsigned integer, modulo
// n. It depends on nothing else, so every replica and every restart
// computes the same value.
func Hash(jobID string, f Field, k, n int) int {
	sum := sha256.Sum256([]byte(jobID + "\x00" + f.String() + "\x00" + strconv.Itoa(k)))
	return int(binary.BigEndian.Uint64(sum[:8]) % uint64(n))
}

// resolveHash returns the robfig term the upper-cased H term up of field f
// stands for: a single value, or start-end/step.
func resolveHash(up string, f Field, jobID string, k int) (string, error) {
	b := fieldBounds[f]
	lo, hi := b.min, b.max
	if f == DayOfMonth {
		hi = hashDayOfMonthMax
	}
	rest := up[1:]
	if strings.HasPrefix(rest, "(") {
		end := strings.IndexByte(rest, ')')
		if end < 0 {
			return "", fmt.Errorf("H( without a closing parenthesis (want e.g. H(0-29))")
		}
		a, z, ok := strings.Cut(rest[1:end], "-")
		if !ok {
			return "", fmt.Errorf("H(...) takes a range a-b (want e.g. H(0-29))")
		}
		var err error
		if lo, err = fieldValue(f, a); err != nil {
			return "", err
		}
		if hi, err = fieldValue(f, z); err != nil {
			return "", err
		}
		if lo > hi {
			return "", fmt.Errorf("the range of H starts after it ends (want e.g. H(%d-%d))", hi, lo)
		}
		rest = rest[end+1:]
	}
	width := hi - lo + 1
	if rest == "" {
		return strconv.Itoa(lo + Hash(jobID, f, k, width)), nil
	}
	stepText, ok := strings.CutPrefix(rest, "/")
	if !ok {
		return "", fmt.Errorf("unexpected %q after H (want H, H/15, H(0-29) or H(0-29)/10)", rest)
	}
	step, err := strconv.Atoi(stepText)
	switch {
	case err != nil || step < 0:
		return "", fmt.Errorf("the step of H must be a whole number from 1 to %d", width)
	case step == 0:
		return "", fmt.Errorf("the step of H is 0 (want 1 to %d)", width)
	case step > width:
		return "", fmt.Errorf("the step of H, %d, is more than the %d values it ranges over (want 1 to %d)", step, width, width)
	}
	start := lo + Hash(jobID, f, k, step)
	return fmt.Sprintf("%d-%d/%d", start, hi, step), nil
}

// fieldValue reads one value of field f (a number, or a name in month and
// day of week) and checks it is in the field's bounds.
func fieldValue(f Field, s string) (int, error) {
	var names map[string]int
	switch f {
	case Month:
		names = monthNames
	case DayOfWeek:
		names = weekdayNames
	}
	b := fieldBounds[f]
	v, ok := names[s]
	if !ok {
		n, err := strconv.Atoi(s)
		if err != nil || s == "" || s[0] == '+' || s[0] == '-' {
			return 0, fmt.Errorf("%q is not a %s value (want %d to %d)", s, f.words(), b.min, b.max)
		}
		v = n
	}
	if v < b.min || v > b.max {
		return 0, fmt.Errorf("%d is out of range for %s (want %d to %d)", v, f.words(), b.min, b.max)
	}
	return v, nil
}

// Show returns expr (possibly with a CRON_TZ= or TZ= prefix, which it
// keeps) with its H terms replaced by the values they take for jobID: what
// a job's expression stands for, for people to read. It returns expr as it
// is when expr has no H or cannot be read.
func Show(expr, jobID string) string {
	body, prefix := strings.TrimSpace(expr), ""
	if first, rest, ok := strings.Cut(body, " "); ok && strings.Contains(first, "=") {
		body, prefix = strings.TrimSpace(rest), first+" "
	}
	r, err := Resolve(body, jobID)
	if err != nil || !r.Hashed {
		return expr
	}
	return prefix + r.Concrete
}
