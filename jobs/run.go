package jobs

import (
	"context"
	"encoding/json"
	"time"
)

// Run is one execution of a job, as a Handler is handed it: a cron slot of
// the job's schedule, a run asked for by an operator (run-now, a backfilled
// slot), or a further attempt of a failed slot.
type Run struct {
	// JobID is the job's id: the _id of its schedules document.
	JobID string `json:"job_id"`
	// Slot is the cron slot the run is for, in UTC (a run asked for by an
	// operator: when it was asked for).
	Slot time.Time `json:"scheduled_at"`
	// RunID identifies the run: the _id of its job_runs record, the same
	// on every replica and in every attempt.
	RunID string `json:"run_id"`
	// Fence increases with every acquisition of the job's lock: pass it
	// with writes to another system and have that system refuse a fence
	// lower than the highest it has seen.
	Fence int64 `json:"fence"`
	// InstanceID names the replica running it.
	InstanceID string `json:"instance_id"`
	// Args are the schedule's args (a JSON object), or those of the
	// operator's request.
	Args json.RawMessage `json:"args"`
	// Attempt is the attempt of the slot (1 the first) when the job's
	// policy retries failed runs (Policy.Retry); 0 when it does not.
	Attempt int `json:"attempt,omitempty"`
}

// Handler runs a job. Handle must return when ctx ends: the run's lease
// was lost, a later fire replaced it (OverlapCancelOther), its timeout
// passed, or the process shuts down. The error it returns is the run's
// outcome (nil: succeeded); a panic is recorded as a failure.
type Handler interface {
	Handle(ctx context.Context, run Run) error
}

// HandlerFunc adapts a Go function to Handler.
type HandlerFunc func(ctx context.Context, run Run) error

// Handle calls fn(ctx, run).
func (fn HandlerFunc) Handle(ctx context.Context, run Run) error { return fn(ctx, run) }
