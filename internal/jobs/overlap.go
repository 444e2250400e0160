package jobs

import (
	"errors"
	"fmt"
	"strings"
)

// Overlap is a job's overlap policy: what a fire does while an earlier run
// of the same job is still running. A new policy adds its constant here, its
// entry in overlapPolicies, and says in MongoStore.ClaimBatch what its claim
// does while the job's lock is held.
type Overlap string

// The overlap policies (config jobs.<name>.overlap).
const (
	// OverlapSkip takes the job's lock with the claim: while another run
	// holds it, the fire is skipped (and recorded skipped). The default.
	OverlapSkip Overlap = "skip"
	// OverlapForbid is the former name of OverlapSkip, still accepted in
	// the config with the same behaviour.
	OverlapForbid = OverlapSkip
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

// takesLock reports whether a claim under o takes the job's lock, so that
// it cannot win while another live run holds it. Only allow does not; an
// empty or unknown policy takes the lock, the side that never runs a job
// twice at once.
func (o Overlap) takesLock() bool { return o != OverlapAllow }

// buffers reports whether a fire under o that finds the lock held waits on
// the lock (its fire buffered) instead of being skipped.
func (o Overlap) buffers() bool { return o.bufferLimit() > 0 }

// bufferLimit is how many fires under o may wait on the job's lock.
func (o Overlap) bufferLimit() int {
	switch o {
	case OverlapBufferOne, OverlapCancelOther:
		return 1
	case OverlapBufferAll:
		return BufferAllLimit
	}
	return 0
}

// Fields of a job_locks document written by the overlap policies that
// buffer (docs/locks.md).
const (
	// LockBufferField is the array of fires waiting for the lock, in the
	// order buffered (slot order for cron fires): {run_id, slot, category,
	// at, by, off_schedule (a run-now request)}.
	LockBufferField = "overlap_buffer"
	// LockCancelField asks the holding run to stop (cancel_other):
	// {run_id (the run to stop), by (the run replacing it), at}.
	LockCancelField = "overlap_cancel"
)

// Fields of a buffered job_runs record: what the fire named, so that
// whichever replica runs it later runs the same action with the same args.
const (
	RunBufferedActionField   = "overlap_action"
	RunBufferedArgsField     = "overlap_args"
	RunBufferedCategoryField = "overlap_category"
)

// StatusBuffered marks the record of a fire whose slot is won while the
// job's lock is held, under a policy that buffers: it becomes running when
// a replica takes the lock for it (docs/locks.md, overlap policies).
const StatusBuffered = "buffered"

// ReasonReplaced is the RunEnd.Reason of a run stopped because a later
// fire of its cancel_other job replaced it (recorded abandoned by design,
// not by a fault).
const ReasonReplaced = "replaced"

// ErrCancelledByOverlap is the cause of a run stopped because a later
// fire of its cancel_other job replaced it; the run is recorded abandoned.
var ErrCancelledByOverlap = errors.New("cancelled by a later fire (overlap cancel_other)")
