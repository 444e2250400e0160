package actions

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/cronswap/cronswap/jobs"
)

// Output is what a run printed, as its run record keeps it: the tails of
// its standard output and standard error.
type Output struct {
	Stdout string
	Stderr string
	// ExitCode is the program's exit status for an action that has one
	// (exec: 0 on success); nil for the others.
	ExitCode *int
}

// OutputHandler is an Action that also reports what a run printed. The
// runner calls HandleOutput instead of Handle and records the output of every run,
// whether it succeeded or failed.
type OutputHandler interface {
	jobs.Handler
	HandleOutput(ctx context.Context, f jobs.Run) (Output, error)
}

// ErrUnknownAction is wrapped when a schedule names an action that is not registered.
var ErrUnknownAction = errors.New("unknown action")

// argsJSON returns the fire's args, "{}" when there are none. A schedule
// without args hands the runner an empty (possibly non-nil) Args.
func argsJSON(f jobs.Run) json.RawMessage {
	if len(bytes.TrimSpace(f.Args)) == 0 {
		return json.RawMessage("{}")
	}
	return f.Args
}

// Env returns the environment variables describing run f, as an exec
// action's program sees them: job id, slot (RFC 3339, UTC), run id, fence,
// instance id and the args as JSON, and the attempt when the action
// retries.
func Env(f jobs.Run) []string {
	args := string(argsJSON(f))
	env := []string{
		"CRONSWAP_JOB_ID=" + f.JobID,
		"CRONSWAP_SCHEDULED_AT=" + f.Slot.UTC().Format(time.RFC3339),
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
