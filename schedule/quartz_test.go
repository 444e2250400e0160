package schedule

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// quartzJarEnv points the differential tests at another build of the
// reference (scripts/quartz-ref).
const quartzJarEnv = "CRONSWAP_QUARTZ_JAR"

// quartzFires is how many fire times of each expression are compared.
const quartzFires = 200

// quartzCases is how many random expressions the differential test draws.
const quartzCases = 3000

// quartzUntil is where the comparison stops: Quartz searches no further
// than 100 years past the current one.
var quartzUntil = time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)

// quartzZones are the zones the expressions are read in: UTC, and zones
// whose offset has not changed since 2020 (Quartz's daylight-saving
// handling is its own, so the comparison keeps clear of transitions; the
// dialect's daylight saving is tested against plain expressions instead).
var quartzZones = []string{"UTC", "UTC", "Asia/Kolkata", "Asia/Tokyo", "America/Bogota", "Pacific/Kiritimati"}

// quartzCase is one random expression, in this package's dialect and in
// Quartz's.
type quartzCase struct {
	ours, quartz, zone string
	from               time.Time
}

// genQuartzCase draws an expression with one L, W or # term in a day field
// and plain second, minute, hour and month fields that both dialects read
// alike. The other day field is "*" or "?" here and "?" in Quartz, whose
// days of week are 1-7 from Sunday.
func genQuartzCase(r *rand.Rand) quartzCase {
	// Sparse times of day, so that 200 fires reach across years of
	// months.
	timeField := func(max int, dense bool) string {
		switch k := r.IntN(10); {
		case k < 6 || !dense && k < 8:
			return strconv.Itoa(r.IntN(max + 1))
		case k < 8:
			a := r.IntN(max)
			return fmt.Sprintf("%d-%d", a, a+1+r.IntN(min(3, max-a)))
		case k < 9:
			return fmt.Sprintf("%d,%d", r.IntN(max/2), max/2+r.IntN(max/2+1))
		default:
			step := 2 + r.IntN(max/2)
			if r.IntN(2) == 0 {
				return fmt.Sprintf("%d/%d", r.IntN(step), step)
			}
			return fmt.Sprintf("*/%d", step)
		}
	}
	months := [...]string{"JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"}
	var month string
	switch k := r.IntN(10); {
	case k < 5:
		month = "*"
	case k < 7:
		a := 1 + r.IntN(11)
		month = fmt.Sprintf("%d-%d", a, a+1+r.IntN(12-a))
	case k < 8:
		month = fmt.Sprintf("%s,%s", months[r.IntN(6)], months[6+r.IntN(6)])
	case k < 9:
		month = fmt.Sprintf("%d/%d", 1+r.IntN(3), 2+r.IntN(4))
	default:
		month = strconv.Itoa(1 + r.IntN(12))
	}
	days := [...]string{"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"}
	weekday := func() (ours, quartz string) {
		w := r.IntN(7)
		if r.IntN(3) == 0 {
			return days[w], days[w]
		}
		return strconv.Itoa(w), strconv.Itoa(w + 1)
	}
	star := "*"
	if r.IntN(4) == 0 {
		star = "?"
	}
	var dom, dow, qdom, qdow string
	switch k := r.IntN(7); k {
	case 0:
		dom = "L"
	case 1:
		dom = fmt.Sprintf("L-%d", r.IntN(31))
	case 2:
		// 1W to 28W: every month has the day (see docs/time.md for a
		// day some months lack).
		dom = fmt.Sprintf("%dW", 1+r.IntN(28))
	case 3:
		dom = "LW"
	case 4:
		dom = fmt.Sprintf("L-%dW", r.IntN(28))
	case 5:
		o, q := weekday()
		dow, qdow = o+"L", q+"L"
	case 6:
		o, q := weekday()
		k := strconv.Itoa(1 + r.IntN(5))
		dow, qdow = o+"#"+k, q+"#"+k
	}
	if dom != "" {
		qdom, dow, qdow = dom, star, "?"
	} else {
		dom, qdom = star, "?"
	}
	sec, minute, hour := timeField(59, false), timeField(59, false), timeField(23, true)
	from := time.Unix(time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC).Unix()+r.Int64N(20*365*86400), 0).UTC()
	return quartzCase{
		ours:   strings.Join([]string{sec, minute, hour, dom, month, dow}, " "),
		quartz: strings.Join([]string{sec, minute, hour, qdom, month, qdow}, " "),
		zone:   quartzZones[r.IntN(len(quartzZones))],
		from:   from,
	}
}

// quartzJar returns the reference's jar, built by scripts/quartz.sh when
// missing or older than its sources.
func quartzJar(t *testing.T) string {
	t.Helper()
	if p := os.Getenv(quartzJarEnv); p != "" {
		return p
	}
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "scripts", "quartz.sh")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("repository root (scripts/quartz.sh) not found")
		}
		dir = parent
	}
	build := exec.Command(filepath.Join(dir, "scripts", "quartz.sh"), "build")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("scripts/quartz.sh build (needs JDK 17 and Maven, as scripts/mongo.sh): %v\n%s", err, out)
	}
	return filepath.Join(dir, "scripts", "quartz-ref", "target", "quartz-ref.jar")
}

// quartzAnswers asks the reference in jar for the fire times of every
// case, one answer line per case.
func quartzAnswers(jar string, cases []quartzCase) ([]string, error) {
	cmd := exec.Command("java", "-jar", jar)
	var in strings.Builder
	for _, c := range cases {
		fmt.Fprintf(&in, "%s\t%d\t%d\t%s\n", c.quartz, c.from.Unix(), quartzFires, c.zone)
	}
	cmd.Stdin = strings.NewReader(in.String())
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("java -jar %s: %w", jar, err)
	}
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) != len(cases) {
		return nil, fmt.Errorf("the reference answered %d lines for %d expressions", len(lines), len(cases))
	}
	return lines, nil
}

// TestDaysAgainstQuartz compares the next 200 fire times of 3,000 random
// expressions with an L, W or # term (seeded: the same expressions on
// every run) with Quartz's CronExpression, the reference these terms come
// from. Every fire time must be Quartz's, up to the one documented
// difference (docs/time.md): this package searches five years ahead, as
// robfig does, where Quartz searches on, so a schedule whose next fire is
// further away than that ends early here.
func TestDaysAgainstQuartz(t *testing.T) {
	r := rand.New(rand.NewPCG(2027, 3))
	cases := make([]quartzCase, quartzCases)
	for i := range cases {
		cases[i] = genQuartzCase(r)
	}
	// The reference answers in its own process while this one computes
	// its fire times.
	jar := quartzJar(t)
	answered := make(chan []string, 1)
	refErr := make(chan error, 1)
	go func() {
		lines, err := quartzAnswers(jar, cases)
		answered <- lines
		refErr <- err
	}()
	type oursResult struct {
		fires []time.Time
		err   error
	}
	results := make([]oursResult, len(cases))
	for i, c := range cases {
		loc, err := LoadLocation(c.zone)
		if err != nil {
			t.Fatal(err)
		}
		sched, err := ParseExprWith(c.ours, loc, ParseOptions{})
		if err != nil {
			results[i].err = err
			continue
		}
		for at := c.from; len(results[i].fires) < quartzFires; {
			if at = sched.Next(at); at.IsZero() || !at.Before(quartzUntil) {
				break
			}
			results[i].fires = append(results[i].fires, at)
		}
	}
	answers := <-answered
	if err := <-refErr; err != nil {
		t.Fatal(err)
	}
	compared, horizon, failures := 0, 0, 0
	for i, c := range cases {
		verdict, want, ok := strings.Cut(answers[i], " ")
		if !ok {
			verdict = answers[i]
		}
		if verdict != "OK" {
			t.Errorf("Quartz refuses %q: %s", c.quartz, answers[i])
			failures++
			continue
		}
		var quartz []time.Time
		for _, f := range strings.Fields(want) {
			u, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				t.Fatalf("reference answered %q", answers[i])
			}
			if at := time.Unix(u, 0); at.Before(quartzUntil) {
				quartz = append(quartz, at)
			}
		}
		loc, err := LoadLocation(c.zone)
		if err != nil {
			t.Fatal(err)
		}
		if err := results[i].err; err != nil {
			if len(quartz) > 0 && quartz[0].Sub(c.from) > searchYears*365*24*time.Hour {
				horizon++ // documented: nothing within five years
				continue
			}
			t.Errorf("%q in %s refused: %v; Quartz fires at %s", c.ours, c.zone, err, show(quartz[:min(3, len(quartz))], loc))
			failures++
			continue
		}
		ours := results[i].fires
		for k := range max(len(ours), len(quartz)) {
			switch {
			case k < len(ours) && k < len(quartz) && ours[k].Equal(quartz[k]):
				compared++
				continue
			case k == len(ours) && k < len(quartz):
				prev := c.from
				if k > 0 {
					prev = ours[k-1]
				}
				if quartz[k].Sub(prev) > searchYears*365*24*time.Hour {
					horizon++
					break // documented: nothing within five years
				}
				fallthrough
			default:
				failures++
				lo := max(0, k-2)
				t.Errorf("%q in %s (Quartz %q) from %s differs at fire %d:\n  ours:   %s\n  Quartz: %s",
					c.ours, c.zone, c.quartz, c.from.Format(time.RFC3339), k,
					show(ours[lo:min(k+3, len(ours))], loc), show(quartz[lo:min(k+3, len(quartz))], loc))
			}
			break
		}
		if failures > 20 {
			t.Fatal("more than 20 expressions differ; stopping")
		}
	}
	t.Logf("%d expressions, %d fire times equal to Quartz's; %d ended early at the five-year horizon", len(cases), compared, horizon)
	if compared < quartzCases*quartzFires/2 {
		t.Fatalf("only %d fire times compared", compared)
	}
}
