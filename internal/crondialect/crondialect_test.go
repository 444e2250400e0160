package crondialect

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
)

var robfigParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// TestHashDocumented pins H to the formula and the example docs/time.md
// gives: a change of either would move every hashed job's slots, on a
// rolling upgrade differently on each replica.
func TestHashDocumented(t *testing.T) {
	// The formula, computed here independently of Hash.
	doc := func(id, field string, k, n int) int {
		sum := sha256.Sum256([]byte(id + "\x00" + field + "\x00" + strconv.Itoa(k)))
		return int(binary.BigEndian.Uint64(sum[:8]) % uint64(n))
	}
	for _, id := range []string{"daily_report", "nightly_backup", "일일_보고", "a"} {
		for f := Second; f <= DayOfWeek; f++ {
			for _, n := range []int{1, 7, 24, 28, 60} {
				if got, want := Hash(id, f, 2, n), doc(id, fieldNames[f], 2, n); got != want {
					t.Errorf("Hash(%q, %s, 2, %d) = %d, the documented formula gives %d", id, f, n, got, want)
				}
			}
		}
	}
	// The examples of docs/time.md.
	for _, c := range []struct{ id, expr, want string }{
		{"daily_report", "H H * * *", "14 15 * * *"},
		{"nightly_backup", "H H * * *", "48 13 * * *"},
		{"daily_report", "H(0-29)/10 H(9-17) * * 1-5", "4-29/10 9 * * 1-5"},
	} {
		r, err := Resolve(c.expr, c.id)
		if err != nil || r.Concrete != c.want || r.Robfig != c.want || !r.Hashed {
			t.Errorf("Resolve(%q, %q) = %+v, %v; want %q", c.expr, c.id, r, err, c.want)
		}
	}
}

// TestHashInRange resolves every form of H in every field for many ids:
// each value lies in the field's bounds (1-28 for a day of month without
// a range) or in the range given, and a step's start lies within one step
// of the range's start.
func TestHashInRange(t *testing.T) {
	type form struct {
		field    Field
		term     string
		lo, hi   int // the values may lie in [lo, hi]
		step     int // 0: a single value
		position int // of the field in a six-field expression
	}
	var forms []form
	for f := Second; f <= DayOfWeek; f++ {
		b := fieldBounds[f]
		hi := b.max
		if f == DayOfMonth {
			hi = hashDayOfMonthMax
		}
		mid := (b.min + b.max) / 2
		forms = append(forms,
			form{f, "H", b.min, hi, 0, int(f)},
			form{f, "H/3", b.min, hi, 3, int(f)},
			form{f, fmt.Sprintf("H(%d-%d)", mid, b.max), mid, b.max, 0, int(f)},
			form{f, fmt.Sprintf("H(%d-%d)/2", b.min, mid), b.min, mid, 2, int(f)},
		)
	}
	forms = append(forms, form{Month, "H(MAR-MAY)", 3, 5, 0, 4}, form{DayOfWeek, "H(MON-FRI)", 1, 5, 0, 5})
	for _, fm := range forms {
		fields := []string{"0", "0", "0", "*", "*", "*"}
		fields[fm.position] = fm.term
		expr := strings.Join(fields, " ")
		starts := map[int]bool{}
		for i := range 2000 {
			id := "job-" + strconv.Itoa(i)
			r, err := Resolve(expr, id)
			if err != nil {
				t.Fatalf("%q for %s: %v", expr, id, err)
			}
			got := strings.Fields(r.Robfig)[fm.position]
			spec, err := robfigParser.Parse(r.Robfig)
			if err != nil {
				t.Fatalf("%q resolves to %q, which robfig refuses: %v", expr, r.Robfig, err)
			}
			s := spec.(*cron.SpecSchedule)
			set := [...]uint64{s.Second, s.Minute, s.Hour, s.Dom, s.Month, s.Dow}[fm.position] &^ starBit
			var values []int
			for v := range 64 {
				if set&(1<<v) != 0 {
					values = append(values, v)
				}
			}
			if len(values) == 0 || values[0] < fm.lo || values[len(values)-1] > fm.hi {
				t.Fatalf("%q for %s: %s reads %q: values %v, outside %d-%d", expr, id, fm.term, got, values, fm.lo, fm.hi)
			}
			if fm.step == 0 && len(values) != 1 {
				t.Fatalf("%q for %s: %q is not one value", expr, id, got)
			}
			if fm.step > 0 {
				if values[0] >= fm.lo+fm.step {
					t.Fatalf("%q for %s: %q starts a step or more after %d", expr, id, got, fm.lo)
				}
				for k := 1; k < len(values); k++ {
					if values[k]-values[k-1] != fm.step {
						t.Fatalf("%q for %s: %q is not every %d", expr, id, got, fm.step)
					}
				}
				if values[len(values)-1]+fm.step <= fm.hi {
					t.Fatalf("%q for %s: %q stops before %d", expr, id, got, fm.hi)
				}
			}
			starts[values[0]] = true
		}
		if want := fm.hi - fm.lo + 1; fm.step > 0 {
			want = fm.step
			if len(starts) != want {
				t.Errorf("%q: 2000 ids start on %d values, want all %d", expr, len(starts), want)
			}
		} else if len(starts) != want {
			t.Errorf("%q: 2000 ids take %d values, want all %d", expr, len(starts), want)
		}
	}
}

// TestHashSpread checks that H spreads jobs evenly: the minute of "H * * *
// *" over 60,000 ids, the day of "0 0 H * *" and the start of "H(0-29)/10"
// pass a chi-square test of uniformity at the 0.1% level. The ids are fixed
// (job-0 ... and uuid-like ones), so the outcome is too.
func TestHashSpread(t *testing.T) {
	ids := make([]string, 0, 60000)
	for i := range 30000 {
		ids = append(ids, fmt.Sprintf("job-%d", i), fmt.Sprintf("%08x-billing-%d", i*2654435761, i%7))
	}
	// Critical values of chi-square at p = 0.001 for n-1 degrees of freedom.
	critical := map[int]float64{60: 99.607, 28: 55.476, 10: 27.877}
	for _, c := range []struct {
		expr     string
		position int
		lo, n    int
	}{
		{"H * * * *", 0, 0, 60},
		{"0 0 H * *", 2, 1, 28},
		{"H(0-29)/10 * * * *", 0, 0, 10},
	} {
		counts := make([]int, c.n)
		for _, id := range ids {
			r, err := Resolve(c.expr, id)
			if err != nil {
				t.Fatal(err)
			}
			v, err := strconv.Atoi(strings.FieldsFunc(strings.Fields(r.Robfig)[c.position], func(r rune) bool { return r == '-' })[0])
			if err != nil {
				t.Fatal(err)
			}
			counts[v-c.lo]++
		}
		expected := float64(len(ids)) / float64(c.n)
		chi := 0.0
		for _, got := range counts {
			chi += math.Pow(float64(got)-expected, 2) / expected
		}
		if chi > critical[c.n] {
			t.Errorf("%q over %d ids: chi-square %.1f > %.1f (counts %v)", c.expr, len(ids), chi, critical[c.n], counts)
		}
		t.Logf("%q over %d ids: chi-square %.1f (critical %.1f at 0.1%%)", c.expr, len(ids), chi, critical[c.n])
	}
	// Different fields and positions are hashed apart: the minute and the
	// hour of "H H * * *" are not the same draw.
	same := 0
	for _, id := range ids[:1000] {
		r, _ := Resolve("H H * * *", id)
		f := strings.Fields(r.Robfig)
		m, _ := strconv.Atoi(f[0])
		h, _ := strconv.Atoi(f[1])
		if m%24 == h {
			same++
		}
	}
	if same > 100 {
		t.Errorf("minute mod 24 equals the hour for %d of 1000 ids: the fields are not hashed apart", same)
	}
}

// TestResolveRefusals lists what the dialect refuses, each with the words
// that say why.
func TestResolveRefusals(t *testing.T) {
	for _, c := range []struct{ expr, want string }{
		{"H/0 * * * *", "minute H/0: the step of H is 0"},
		{"H(0-29)/0 * * * *", "the step of H is 0"},
		{"H/61 * * * *", "more than the 60 values"},
		{"H(0-29)/31 * * * *", "more than the 30 values"},
		{"H/x * * * *", "must be a whole number"},
		{"H(5-2) * * * *", "starts after it ends"},
		{"H(0-60) * * * *", "60 is out of range for minute"},
		{"0 H(0-24) * * *", "24 is out of range for hour"},
		{"0 0 H(0-5) * *", "0 is out of range for day of month"},
		{"0 0 * H(FOO-DEC) *", `"FOO" is not a month value`},
		{"H(0-29 * * * *", "without a closing parenthesis"},
		{"H(29) * * * *", "takes a range a-b"},
		{"Hx * * * *", ""}, // not an H term: robfig's to refuse
		{"0 0 32W * *", "day of month 32W: W needs a day from 1 to 31"},
		{"0 0 0W * *", "W needs a day from 1 to 31"},
		{"0 0 W * *", "W needs a day"},
		{"0 0 1-5W * *", "W takes a single day"},
		{"0 0 L-31 * *", "the n of L-n is 0 to 30"},
		{"0 0 L-x * *", "L-n takes a number"},
		{"0 0 L/2 * *", "L and W take no step"},
		{"0 0 5L * *", "cannot read"},
		{"0 0 1#2 * *", "# is for day of week"},
		{"0 0 * * 6#6", "day of week 6#6: the k of n#k is 1 to 5"},
		{"0 0 * * 5#0", "the k of n#k is 1 to 5"},
		{"0 0 * * 7#1", `"7" is not a day of week`},
		{"0 0 * * FOO#1", `"FOO" is not a day of week`},
		{"0 0 * * L", "L alone in day of week names no day"},
		{"0 0 * * 1-5L", "L takes a single day"},
		{"0 0 * * 8L", `"8" is not a day of week`},
		{"0 0 * * 15W", "W is for day of month"},
		{"0 L * * *", "hour L: L, W and # are for day of month"},
		{"L * * * *", "minute L: L, W and # are for day of month"},
		{"0 0 * L *", "month L: L, W and # are for day of month"},
		{"0 0 * 5#1 *", "not month"},
		{"5W 0 * * * *", "not second"},
	} {
		r, err := Resolve(c.expr, "job")
		if c.want == "" {
			if err != nil || r.Robfig != c.expr {
				t.Errorf("Resolve(%q) = %+v, %v: want it handed to robfig as it is", c.expr, r, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Resolve(%q) = %v, want an error containing %q", c.expr, err, c.want)
		}
	}
	if _, err := Resolve("H * * * *", ""); err == nil || !strings.Contains(err.Error(), "H takes its value from the job id") {
		t.Errorf("H without a job id: %v", err)
	}
}

// TestResolvePlain: expressions without the dialect's terms, names with
// the letters H, L and W among them, come back as they are.
func TestResolvePlain(t *testing.T) {
	for _, expr := range []string{
		"0 9 * * *", "*/5 * * * * *", "@hourly", "@every 1h", "0 0 * JUL,AUG WED,THU",
		"0 0 * * SAT-SUN", "0 0 1,15 * *", "0 0 * * ?", "1 2 3",
	} {
		r, err := Resolve(expr, "")
		if err != nil || r.Robfig != expr || r.Concrete != expr || r.Days != nil || r.Hashed {
			t.Errorf("Resolve(%q) = %+v, %v; want it unchanged", expr, r, err)
		}
	}
	for _, c := range []struct {
		expr string
		want bool
	}{
		{"H * * * *", true}, {"0 h(0-5) * * *", true}, {"CRON_TZ=Pacific/Honolulu 0 9 * * *", false},
		{"CRON_TZ=Pacific/Honolulu H 9 * * *", true}, {"0 0 * * THU", false}, {"@hourly", false}, {"0 0 1,H * *", true},
	} {
		if got := UsesHash(c.expr); got != c.want {
			t.Errorf("UsesHash(%q) = %v, want %v", c.expr, got, c.want)
		}
	}
}

// TestMonthDays checks the day rule on months written out by hand
// (February 2027 starts on a Monday and has 28 days; May 2027 starts on a
// Saturday and has 31).
func TestMonthDays(t *testing.T) {
	for _, c := range []struct {
		expr  string
		month int
		want  []int
	}{
		{"0 0 L * *", 2, []int{28}},
		{"0 0 L-2 * *", 2, []int{26}},
		{"0 0 L-27 * *", 2, []int{1}},
		{"0 0 L-28 * *", 2, nil},
		{"0 0 1W * *", 5, []int{3}},   // Saturday the 1st: Monday the 3rd
		{"0 0 LW * *", 5, []int{31}},  // Monday the 31st
		{"0 0 30W * *", 5, []int{31}}, // Sunday the 30th: Monday the 31st, not the 28th
		{"0 0 2W * *", 5, []int{3}},   // Sunday the 2nd: Monday the 3rd
		{"0 0 8W * *", 5, []int{7}},   // Saturday the 8th: Friday the 7th
		{"0 0 30W * *", 2, nil},       // February has no 30th
		{"0 0 L-1W * *", 5, []int{31}},
		{"0 0 * * 1L", 5, []int{31}},
		{"0 0 * * SATL", 5, []int{29}},
		{"0 0 * * 6#5", 5, []int{29}},
		{"0 0 * * 1#5", 5, []int{31}},
		{"0 0 * * 2#5", 5, nil},
		{"0 0 * * MON#1", 2, []int{1}},
		{"0 0 1,L * *", 2, []int{1, 28}},
		{"0 0 L * 1#2", 2, []int{8, 28}}, // both restricted: either
		{"0 0 ? * 1#2", 2, []int{8}},     // "?" is robfig's star: both
		{"0 0 1-7 * 1L", 2, []int{1, 2, 3, 4, 5, 6, 7, 22}},
		{"0 0 */10 * 5L", 2, []int{1, 11, 21, 26}},
		{"0 0 L * 1,3", 2, []int{1, 3, 8, 10, 15, 17, 22, 24, 28}},
	} {
		r, err := Resolve(c.expr, "")
		if err != nil {
			t.Fatalf("%q: %v", c.expr, err)
		}
		spec, err := robfigParser.Parse(r.Robfig)
		if err != nil {
			t.Fatalf("%q: robfig refuses %q: %v", c.expr, r.Robfig, err)
		}
		days := *r.Days
		days.SetPlain(spec.(*cron.SpecSchedule).Dom, spec.(*cron.SpecSchedule).Dow)
		mask := days.MonthDays(2027, timeMonth(c.month))
		var got []int
		for d := 1; d <= 31; d++ {
			if mask&(1<<d) != 0 {
				got = append(got, d)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%q in 2027-%02d: days %v, want %v", c.expr, c.month, got, c.want)
		}
	}
}

func timeMonth(m int) time.Month { return time.Month(m) }
