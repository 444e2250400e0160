package jobs

import (
	"fmt"
	"strings"
)

// Overlap is a job's overlap policy: what a fire does while an earlier run
// of the same job is still running. A new policy adds its constant here, its
// entry in overlapPolicies, and says in MongoStore.Claim what its claim does
// while the job's lock is held.
type Overlap string

// The overlap policies.
const (
	// OverlapForbid takes the job's lock with the claim: while another run
	// holds it, the fire is skipped (and recorded skipped). The default.
	OverlapForbid Overlap = "forbid"
	// OverlapAllow claims only the slot: runs of the job may overlap.
	OverlapAllow Overlap = "allow"
)

// DefaultOverlap is the policy of a job that names none.
const DefaultOverlap = OverlapForbid

// overlapPolicies lists every policy, in the order errors name them.
var overlapPolicies = []Overlap{OverlapForbid, OverlapAllow}

// ParseOverlap returns the policy named s; empty means DefaultOverlap.
func ParseOverlap(s string) (Overlap, error) {
	if s == "" {
		return DefaultOverlap, nil
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
	return "", fmt.Errorf("overlap %q: want %s", s, strings.Join(names, " or "))
}

// takesLock reports whether a claim under o takes the job's lock, so that
// it cannot win while another live run holds it. Only allow does not; an
// empty or unknown policy takes the lock, the side that never runs a job
// twice at once.
func (o Overlap) takesLock() bool { return o != OverlapAllow }
