package actions

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/cronswap/cronswap/jobs"
)

// Output is what a run printed or was answered, as its run record keeps
// it, with every known secret value redacted: an exec action's tails of
// standard output and standard error and its exit status, an http
// action's answer.
type Output struct {
	Stdout string
	Stderr string
	// ExitCode is the program's exit status for an action that has one
	// (exec: 0 on success); nil for the others.
	ExitCode *int
	// AnswerStatus is an http action's answer status code; 0 when there
	// was no answer (or the action is not http).
	AnswerStatus int
	// Answer is the first bytes of the answer's body (at most the
	// action's AnswerBytes, trimmed of surrounding space).
	Answer string
}

// OutputHandler is an Action that also reports what a run printed. The
// runner calls HandleOutput instead of Handle and records the output of every run,
// whether it succeeded or failed.
type OutputHandler interface {
	jobs.Handler
	HandleOutput(ctx context.Context, f jobs.Run) (Output, error)
}

// Stopper is a handler that may take a while to stop once its context
// ends: StopGrace says how long at most (an exec action's kill grace,
// between SIGTERM and SIGKILL). The fire path cancels such a run that
// much before its local lease deadline, so that it has stopped by then.
type Stopper interface {
	jobs.Handler
	StopGrace() time.Duration
}

// StopGraceOf returns h's stop grace: 0 for a handler that is not a
// Stopper (it stops when its context ends).
func StopGraceOf(h jobs.Handler) time.Duration {
	if s, ok := h.(Stopper); ok {
		return max(s.StopGrace(), 0)
	}
	return 0
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
