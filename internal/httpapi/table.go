package httpapi

import (
	"sync"
	"time"

	"github.com/cronswap/cronswap/scheduler"
)

// jobTable is the API form of the engine's jobs at one engine version
// (Schedules.Version): what /api/schedule-rows filters, sorts and pages and
// /api/overview counts. Building it costs the engine's List (a next run
// computed for every job) and a conversion per job; with 100,000 jobs that
// is most of a request's time, so it is built once per change of the
// engine instead of once per request. A table is never modified once
// built. It holds no failure pause and no owner (both are read per
// request), and next runs as of its build only (see tableCache.get).
type jobTable struct {
	version uint64
	// keys are the engine's ids (for Schedules.Get), jobs their API form
	// without next run, failure pause and owner, nexts their next runs
	// when the table was built; index i is the same job in all three, in
	// List's order.
	keys  []string
	jobs  []Schedule
	nexts []time.Time
	// categories is categoriesOf(jobs), ids jobIDs(jobs).
	categories []string
	ids        []string
	// index is the position in jobs of each job id (not of a refused
	// document whose _id is not a job id: no failure pause is its).
	index map[string]int
}

// buildTable converts list, the engine's jobs at version v.
func buildTable(v uint64, list []scheduler.Status, defaultTZ string) *jobTable {
	t := &jobTable{version: v, keys: make([]string, len(list)), jobs: schedulesOf(list, defaultTZ),
		nexts: make([]time.Time, len(list))}
	t.index = make(map[string]int, len(list))
	for i, st := range list {
		t.keys[i], t.nexts[i] = st.ID, st.NextRun
		t.jobs[i].NextRun = nil // it follows the clock: a row reads it from the engine
		if !t.jobs[i].InvalidID {
			t.index[t.jobs[i].ID] = i
		}
	}
	t.categories, t.ids = categoriesOf(t.jobs), jobIDs(t.jobs)
	return t
}

// paused is the failure pauses of one request over a table: the paused
// jobs' entries, copied with their pause (the table is shared), by
// position.
type paused map[int]*Schedule

// withPauses returns the entries of t's jobs paused after failures
// (pauses, by job id) with their pause set.
func (t *jobTable) withPauses(pauses map[string]FailurePause) paused {
	out := make(paused, len(pauses))
	for id, p := range pauses {
		if i, ok := t.index[id]; ok {
			s := t.jobs[i]
			s.FailurePause = &p
			out[i] = &s
		}
	}
	return out
}

// job returns job i of t as p has it: with its failure pause, if any.
func (t *jobTable) job(i int, p paused) *Schedule {
	if s, ok := p[i]; ok {
		return s
	}
	return &t.jobs[i]
}

// tableCache keeps the newest jobTable of the engine.
type tableCache struct {
	mu sync.Mutex
	t  *jobTable
}

// get returns the table of src's current version, built again only when
// the engine changed since the last one (concurrent callers wait for one
// build). Its next runs are those of its build: with fresh, get builds a
// new table, whose next runs are current (the sort by next run needs them
// all; the other readers take a row's next run from Schedules.Get).
func (c *tableCache) get(src Schedules, defaultTZ string, fresh bool) *jobTable {
	c.mu.Lock()
	defer c.mu.Unlock()
	v := src.Version() // read before List: a change during List makes the next get build again
	if !fresh && c.t != nil && c.t.version == v {
		return c.t
	}
	c.t = buildTable(v, src.List(), defaultTZ)
	return c.t
}
