package scheduler

import "github.com/cronswap/cronswap/internal/opentable"

// jobIndex is the engine's records by job id. A job costs its entry (the
// id's string header and the record's pointer, 24 B) and a byte a slot,
// the tables 60–85 % full (opentable): 16 B a job less than a Go map of
// the same at a million (BenchmarkHeapPerJob). Not safe for concurrent
// use (the engine's mu guards it), but for concurrent reads.
type jobIndex struct {
	*opentable.Sharded[indexedJob]
}

// indexedJob is one job of a jobIndex.
type indexedJob struct {
	id string
	r  *record
}

// Key is the job's id (opentable.Keyed).
func (j indexedJob) Key() string { return j.id }

func newJobIndex() jobIndex { return jobIndex{opentable.NewSharded[indexedJob]()} }

// get returns the record of id, nil when there is none.
func (x jobIndex) get(id string) *record {
	j, _ := x.Get(id)
	return j.r
}

// set stores r (not nil) as the record of id.
func (x jobIndex) set(id string, r *record) { x.Set(indexedJob{id: id, r: r}) }

// all calls yield with every job and its record, in no particular order.
func (x jobIndex) all(yield func(id string, r *record)) {
	x.Each(func(j indexedJob) { yield(j.id, j.r) })
}
