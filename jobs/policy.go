package jobs

import (
	"time"
)

// Policy is a job's run policy: how its runs are bounded, when they may
// start, what happens while an earlier run still holds the job's lock, and
// after a failure. The zero Policy runs each slot once, without a timeout,
// skipping a slot while the previous run still runs.
type Policy struct {
	// Timeout bounds each run; 0 is none.
	Timeout time.Duration
	// Jitter bounds a fixed per-job delay after each slot (the slot's
	// identity stays the undelayed time); 0 is none.
	Jitter time.Duration
	// StartingDeadline is how long after its slot plus jitter a fire of
	// this job may still start; a fire that cannot start by then is not
	// run and is recorded missed. 0: the time to the job's next slot, at
	// most five minutes, unless the daemon sets another default.
	StartingDeadline time.Duration
	// Overlap is the overlap policy; empty means DefaultOverlap.
	Overlap Overlap
	// Catchup, when set, overrides the daemon's default catch-up window:
	// how long after downtime the latest missed slot is still run; nil:
	// the daemon's default.
	Catchup *time.Duration
	// Retry says how a failed run is tried again as further attempts of
	// its slot; the zero policy does not retry.
	Retry RetryPolicy
	// PauseAfterFailures, when positive, pauses the job after that many
	// consecutive failed slots (job_pauses) until an operator resumes it.
	PauseAfterFailures int
}
