package httpapi

import (
	"context"
	"time"
)

// FailurePause is a job's pause after consecutive failed slots, as
// /api/schedules shows it.
type FailurePause struct {
	// PausedAt is when the job was paused (RFC 3339).
	PausedAt time.Time `json:"paused_at"`
	// Note says why: the failures and the last run's error.
	Note string `json:"note"`
	// Failures is how many consecutive failed slots paused it.
	Failures int `json:"failures"`
	// RunID is the last failed run.
	RunID string `json:"run_id,omitempty"`
}

// withFailurePauses sets the FailurePause of the schedules of out that are
// paused after failures (nothing when read is nil or fails).
func withFailurePauses(ctx context.Context, read func(context.Context) (map[string]FailurePause, error), out []Schedule) {
	pauses := failurePauses(ctx, read)
	for i := range out {
		if p, ok := pauses[out[i].ID]; ok && !out[i].InvalidID {
			out[i].FailurePause = &p
		}
	}
}

// failurePauses returns the jobs paused after failures, by job id, through
// read; none when read is nil or fails.
func failurePauses(ctx context.Context, read func(context.Context) (map[string]FailurePause, error)) map[string]FailurePause {
	if read == nil {
		return nil
	}
	pauses, err := read(ctx)
	if err != nil {
		return nil
	}
	return pauses
}
