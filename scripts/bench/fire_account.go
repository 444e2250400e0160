package main

import (
	"maps"
	"slices"
	"strings"
	"time"
)

// arrival is one action request as the recording sink received it: the job,
// slot and run id from the JSON body the http action posts (jobs.Run), the
// replica that sent it, and the sink's clock when the request reached its
// handler.
type arrival struct {
	job      string
	slot     time.Time
	runID    string
	instance string
	at       time.Time
}

// burstStats is the accounting of one burst: every expected job due at
// slot, and what the sink saw of them.
type burstStats struct {
	slot time.Time
	// next is the jobs' next slot: a fire not started before it is missed.
	next time.Time
	// expected is the number of jobs due at slot.
	expected int
	// ran is the number of expected jobs with at least one arrival for slot.
	ran int
	// duplicates counts arrivals beyond the first of an expected (job, slot);
	// dupJobs the jobs that had any.
	duplicates, dupJobs int
	// missed counts expected jobs whose first arrival for slot is not before
	// next (never arrived, or arrived at or after next).
	missed int
	// never counts expected jobs with no arrival for slot at all (a subset
	// of missed).
	never int
	// lateness holds first arrival − slot of each job that ran.
	lateness series
	// byInstance counts first arrivals per replica.
	byInstance map[string]int
}

// accountBursts splits arrivals over bursts. slots are the consecutive
// slots of the jobs (ascending); the last one is only the next slot of the
// one before it, so len(slots)-1 bursts are accounted. Arrivals of a loaded
// job for a slot at or after the last one are ignored (the bursts after the
// measured ones), those for a slot before the first are counted as earlier
// (a burst that came due after the daemons were ready but before the
// measured ones); arrivals for an unknown job or for a slot between the
// measured ones are unexpected.
func accountBursts(jobIDs []string, slots []time.Time, arrivals []arrival) (bursts []burstStats, earlier, unexpected int) {
	if len(slots) < 2 {
		return nil, 0, 0
	}
	known := make(map[string]bool, len(jobIDs))
	for _, id := range jobIDs {
		known[id] = true
	}
	index := make(map[int64]int, len(slots))
	for i, s := range slots[:len(slots)-1] {
		index[s.UnixNano()] = i
	}
	last := slots[len(slots)-1]
	type firstSeen struct {
		at       time.Time
		instance string
		count    int
	}
	seen := make([]map[string]*firstSeen, len(slots)-1)
	for i := range seen {
		seen[i] = map[string]*firstSeen{}
	}
	for _, a := range arrivals {
		i, ok := index[a.slot.UnixNano()]
		switch {
		case known[a.job] && !a.slot.Before(last):
			continue
		case known[a.job] && a.slot.Before(slots[0]):
			earlier++
			continue
		case !known[a.job] || !ok:
			unexpected++
			continue
		}
		f := seen[i][a.job]
		if f == nil {
			seen[i][a.job] = &firstSeen{at: a.at, instance: a.instance, count: 1}
			continue
		}
		f.count++
		if a.at.Before(f.at) {
			f.at, f.instance = a.at, a.instance
		}
	}
	for i := range len(slots) - 1 {
		b := burstStats{slot: slots[i], next: slots[i+1], expected: len(known), byInstance: map[string]int{}}
		var late []time.Duration
		for id := range known {
			f := seen[i][id]
			if f == nil {
				b.missed++
				b.never++
				continue
			}
			b.ran++
			b.byInstance[f.instance]++
			if f.count > 1 {
				b.duplicates += f.count - 1
				b.dupJobs++
			}
			if !f.at.Before(b.next) {
				b.missed++
			}
			late = append(late, f.at.Sub(b.slot))
		}
		b.lateness = newSeries("start lateness", late, b.never)
		bursts = append(bursts, b)
	}
	return bursts, earlier, unexpected
}

// arrivalsIn counts the arrivals (of any job and slot) in [from, to).
func arrivalsIn(arrivals []arrival, from, to time.Time) int {
	n := 0
	for _, a := range arrivals {
		if !a.at.Before(from) && a.at.Before(to) {
			n++
		}
	}
	return n
}

// commandDelta is after − before, per command name (names with no change
// left out).
func commandDelta(before, after map[string]int) map[string]int {
	d := map[string]int{}
	for name, n := range after {
		if k := n - before[name]; k != 0 {
			d[name] = k
		}
	}
	return d
}

// namedRate is one command name and its count divided by something.
type namedRate struct {
	name string
	rate float64
}

// perFire divides a window's command counts by the fires in it: the total
// and each name, highest first (ties by name). Zero fires gives no rates.
func perFire(cmds map[string]int, fires int) (total float64, byName []namedRate) {
	if fires <= 0 {
		return 0, nil
	}
	for _, name := range slices.Sorted(maps.Keys(cmds)) {
		r := float64(cmds[name]) / float64(fires)
		total += r
		byName = append(byName, namedRate{name, r})
	}
	slices.SortStableFunc(byName, func(a, b namedRate) int {
		switch {
		case a.rate > b.rate:
			return -1
		case a.rate < b.rate:
			return 1
		}
		return strings.Compare(a.name, b.name)
	})
	return total, byName
}
