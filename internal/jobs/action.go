// Package jobs owns the fire path: the named actions a schedule may run
// (exec, http, registered Go functions) and the runner that executes a fire.
// What runs is defined here, in config or code — never by a schedules
// document, which only names an action and hands it data.
package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"
)

// Fire is one execution of a job for one cron slot, as handed to an action.
type Fire struct {
	JobID       string          `json:"job_id"`
	ScheduledAt time.Time       `json:"scheduled_at"`
	RunID       string          `json:"run_id"`
	Fence       int64           `json:"fence"`
	InstanceID  string          `json:"instance_id"`
	Args        json.RawMessage `json:"args"`
	// Attempt is the attempt of the slot (1 the first) when the action
	// retries failed runs (RetryPolicy); 0 when it does not.
	Attempt int `json:"attempt,omitempty"`
}

// Action runs a job. Run must return when ctx is done.
type Action interface {
	Run(ctx context.Context, f Fire) error
}

// ActionFunc adapts a Go function to Action.
type ActionFunc func(ctx context.Context, f Fire) error

// Run implements Action.
func (fn ActionFunc) Run(ctx context.Context, f Fire) error { return fn(ctx, f) }

// Output is what a run printed, as its run record keeps it: the tails of
// its standard output and standard error.
type Output struct {
	Stdout string
	Stderr string
	// ExitCode is the program's exit status for an action that has one
	// (exec: 0 on success); nil for the others.
	ExitCode *int
}

// OutputAction is an Action that also reports what a run printed. The
// runner calls RunOutput instead of Run and records the output of every run,
// whether it succeeded or failed.
type OutputAction interface {
	Action
	RunOutput(ctx context.Context, f Fire) (Output, error)
}

// ErrUnknownAction is wrapped when a schedule names an action that is not registered.
var ErrUnknownAction = errors.New("unknown action")

// argsJSON returns the fire's args, "{}" when there are none. A schedule
// without args hands the runner an empty (possibly non-nil) Args.
func (f Fire) argsJSON() json.RawMessage {
	if len(bytes.TrimSpace(f.Args)) == 0 {
		return json.RawMessage("{}")
	}
	return f.Args
}

// Env returns the environment variables describing f, as an exec action's
// program sees them: job id, slot (RFC 3339, UTC), run id, fence, instance
// id and the args as JSON, and the attempt when the action retries.
func (f Fire) Env() []string {
	args := string(f.argsJSON())
	env := []string{
		"CRONSWAP_JOB_ID=" + f.JobID,
		"CRONSWAP_SCHEDULED_AT=" + f.ScheduledAt.UTC().Format(time.RFC3339),
		"CRONSWAP_RUN_ID=" + f.RunID,
		"CRONSWAP_FENCE=" + strconv.FormatInt(f.Fence, 10),
		"CRONSWAP_INSTANCE_ID=" + f.InstanceID,
		"CRONSWAP_ARGS=" + args,
	}
	if f.Attempt > 0 {
		env = append(env, "CRONSWAP_ATTEMPT="+strconv.Itoa(f.Attempt))
	}
	return env
}
