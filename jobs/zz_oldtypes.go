package jobs

import "time"

// TEMPORARY (old API, until the store branch lands)
// ClaimRequest asks for one fire of a job.
type ClaimRequest struct {
	JobID string
	// Slot is the cron slot being fired; at most one claim per (JobID,
	// Slot) ever wins, and none for a slot at or before the job's last slot.
	Slot time.Time
	// Instance is this replica's id; RunID the id of the run if it wins.
	Instance string
	RunID    string
	// Overlap is the job's overlap policy: under OverlapForbid the claim
	// also takes the job's lock and is skipped while another run holds it;
	// under OverlapAllow only the slot is claimed.
	Overlap Overlap
	// Now is the claimer's clock, for leases; TTL the lease length.
	Now time.Time
	TTL time.Duration
	// Running, if set, reports whether a run id is one of this process's
	// runs in progress. A lock held under this Instance by a run that is
	// not is left over from a previous life of this instance (crashed and
	// restarted with the same instance id): it is taken over at once
	// instead of waiting for its lease.
	Running func(runID string) bool
}

// Claim is the answer to a ClaimRequest.
type Claim struct {
	Result ClaimResult
	// Lease is set when Result is Acquired or TakenOver.
	Lease Lease
	// Holder and HolderRunID name the live holder when Result is Skipped,
	// or the previous (dead) holder when Result is TakenOver.
	Holder      string
	HolderRunID string
	// Repaired lists the damage found and repaired in the lock document on
	// the way (empty when none).
	Repaired []string
}


