package jobs

import (
	"fmt"
	"strings"
)

// Overlap is a job's overlap policy: what a fire does while an earlier run
// of the same job still holds the job's lock (docs/overlap.md).
type Overlap string

// The overlap policies (config jobs.<name>.overlap).
const (
	// OverlapSkip takes the job's lock with the claim: while another run
	// holds it, the fire is skipped (and recorded skipped). The default.
	OverlapSkip Overlap = "skip"
	// OverlapBufferOne takes the job's lock like OverlapSkip; a fire while
	// the lock is held is remembered on the lock (at most one) and runs as
	// soon as the holding run ends; further fires meanwhile are skipped.
	OverlapBufferOne Overlap = "buffer_one"
	// OverlapBufferAll is OverlapBufferOne with up to BufferAllLimit fires
	// remembered, run one after another in slot order; beyond the limit
	// fires are skipped.
	OverlapBufferAll Overlap = "buffer_all"
	// OverlapCancelOther takes the job's lock; a fire while the lock is
	// held asks the holding run to stop (it ends abandoned, with the
	// replacing run named) and runs as soon as it has: the holder learns
	// of the request within about a second. At most one fire waits so.
	OverlapCancelOther Overlap = "cancel_other"
	// OverlapAllow claims only the slot: runs of the job may overlap.
	OverlapAllow Overlap = "allow"
)

// DefaultOverlap is the policy of a job that names none.
const DefaultOverlap = OverlapSkip

// BufferAllLimit bounds the fires an OverlapBufferAll job remembers while
// its lock is held; a fire beyond it is skipped.
const BufferAllLimit = 100

// overlapPolicies lists every policy, in the order errors name them.
var overlapPolicies = []Overlap{OverlapSkip, OverlapBufferOne, OverlapBufferAll, OverlapCancelOther, OverlapAllow}

// ParseOverlap returns the policy named s; empty means DefaultOverlap, and
// "forbid" is accepted for OverlapSkip.
func ParseOverlap(s string) (Overlap, error) {
	if s == "" {
		return DefaultOverlap, nil
	}
	if s == "forbid" { // the former name of skip
		return OverlapSkip, nil
	}
	for _, o := range overlapPolicies {
		if string(o) == s {
			return o, nil
		}
	}
	names := make([]string, len(overlapPolicies))
	for i, o := range overlapPolicies {
		names[i] = string(o)
	}
	return "", fmt.Errorf("overlap %q: want %s or %s (forbid: the former name of skip)", s,
		strings.Join(names[:len(names)-1], ", "), names[len(names)-1])
}

// TakesLock reports whether a run under o takes the job's lock, so that it
// cannot start while another live run holds it. Only OverlapAllow does
// not; an empty or unknown policy takes the lock, the side that never runs
// a job twice at once.
func (o Overlap) TakesLock() bool { return o != OverlapAllow }

// Buffers reports whether a fire under o that finds the lock held waits on
// the lock (its fire buffered) instead of being skipped.
func (o Overlap) Buffers() bool { return o.BufferLimit() > 0 }

// BufferLimit is how many fires under o may wait on the job's lock.
func (o Overlap) BufferLimit() int {
	switch o {
	case OverlapBufferOne, OverlapCancelOther:
		return 1
	case OverlapBufferAll:
		return BufferAllLimit
	}
	return 0
}
