package main

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"time"
)

// safepointLogOption is the JVM option that logs every stop-the-world
// pause of the test server (garbage collection or not, whichever collector
// runs) to path, each line stamped with the wall-clock time it ended.
func safepointLogOption(path string) string { return "-Xlog:safepoint:file=" + path + ":time" }

// serverPause is one stop-the-world pause of the test server's JVM.
type serverPause struct {
	end time.Time
	d   time.Duration
}

// safepointLine matches a JDK 17 unified-logging safepoint line with the
// time decorator: `[2026-12-03T14:17:46.419+0000] Safepoint "Cleanup", …,
// Total: 8834546 ns`.
var safepointLine = regexp.MustCompile(`^\[([^\]]+)\] Safepoint "[^"]*",.* Total: (\d+) ns`)

// readSafepoints reads the pauses of a log written with safepointLogOption;
// lines of another shape are skipped.
func readSafepoints(path string) ([]serverPause, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var ps []serverPause
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := safepointLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		end, err := time.Parse("2006-01-02T15:04:05.000-0700", m[1])
		if err != nil {
			continue
		}
		ns, err := strconv.ParseInt(m[2], 10, 64)
		if err != nil {
			continue
		}
		ps = append(ps, serverPause{end: end, d: time.Duration(ns)})
	}
	return ps, sc.Err()
}

// pauseSummary sums the pauses that ended in [from, to).
type pauseSummary struct {
	n          int
	total, max time.Duration
	over1s     int // pauses of a second or more: as long as the every-second jobs' starting deadline
}

func summarisePauses(ps []serverPause, from, to time.Time) pauseSummary {
	var s pauseSummary
	for _, p := range ps {
		if p.end.Before(from) || !p.end.Before(to) {
			continue
		}
		s.n++
		s.total += p.d
		s.max = max(s.max, p.d)
		if p.d >= time.Second {
			s.over1s++
		}
	}
	return s
}

func (s pauseSummary) String() string {
	return fmt.Sprintf("%d pauses, %s in all, the longest %s, %d of 1 s or more", s.n,
		s.total.Round(time.Millisecond), s.max.Round(time.Millisecond), s.over1s)
}
