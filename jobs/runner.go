package jobs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Target is what a fire of a job needs from its schedule.
type Target struct {
	// Action is the registered action name.
	Action string
	// Args is the JSON of the schedule's args.
	Args json.RawMessage
}

// RunnerOptions configures a Runner.
type RunnerOptions struct {
	Registry   *Registry
	InstanceID string
	// Resolve returns the current target of a job id; false if the job is
	// no longer armed (the fire is then dropped).
	Resolve func(id string) (Target, bool)
	Logger  *slog.Logger
	// Done, if set, is called after each run with its outcome.
	Done func(f Fire, err error, took time.Duration)
}

// Runner executes fires: it resolves the job's action and runs it with the
// action's timeout. Shutdown stops it accepting fires and waits for running
// actions.
type Runner struct {
	opts   RunnerOptions
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	stopping bool
	running  sync.WaitGroup
}

// NewRunner returns a runner ready to take fires.
func NewRunner(opts RunnerOptions) *Runner {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Runner{opts: opts, log: opts.Logger, ctx: ctx, cancel: cancel}
}

// Fire runs job id for cron slot slot and returns when the action ended.
// It is the scheduler's fire callback.
func (r *Runner) Fire(id string, slot time.Time) {
	r.mu.Lock()
	if r.stopping {
		r.mu.Unlock()
		r.log.Info("shutting down; fire not started", "job_id", id, "scheduled_at", slot)
		return
	}
	r.running.Add(1)
	r.mu.Unlock()
	defer r.running.Done()

	target, ok := r.opts.Resolve(id)
	if !ok {
		r.log.Info("job no longer armed; fire dropped", "job_id", id, "scheduled_at", slot)
		return
	}
	f := Fire{
		JobID:       id,
		ScheduledAt: slot.UTC(),
		RunID:       newRunID(),
		InstanceID:  r.opts.InstanceID,
		Args:        target.Args,
	}
	spec, ok := r.opts.Registry.Lookup(target.Action)
	if !ok {
		err := fmt.Errorf("job %s: %w %q", id, ErrUnknownAction, target.Action)
		r.log.Error("fire names an unknown action", "job_id", id, "scheduled_at", f.ScheduledAt, "action", target.Action)
		if r.opts.Done != nil {
			r.opts.Done(f, err, 0)
		}
		return
	}
	ctx := r.ctx
	if spec.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, spec.Timeout)
		defer cancel()
	}
	start := time.Now()
	log := r.log.With("job_id", id, "scheduled_at", f.ScheduledAt, "run_id", f.RunID)
	log.Info("run started", "action", target.Action)
	err := runSafely(ctx, spec.Action, f)
	took := time.Since(start)
	if err != nil {
		log.Warn("run failed", "duration", took, "error", err)
	} else {
		log.Info("run succeeded", "duration", took)
	}
	if r.opts.Done != nil {
		r.opts.Done(f, err, took)
	}
}

func runSafely(ctx context.Context, a Action, f Fire) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("action panicked: %v", p)
		}
	}()
	return a.Run(ctx, f)
}

// abandonAfterCancel bounds the wait for actions that ignore cancellation
// (a Go function that never looks at its context), so shutdown always ends.
const abandonAfterCancel = 10 * time.Second

// Shutdown stops taking fires and waits for running actions; after grace it
// cancels them and waits for them to return (at most abandonAfterCancel). It reports whether every action
// ended within the grace period.
func (r *Runner) Shutdown(grace time.Duration) bool {
	r.mu.Lock()
	r.stopping = true
	r.mu.Unlock()
	done := make(chan struct{})
	go func() { r.running.Wait(); close(done) }()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
		r.cancel()
		return true
	case <-t.C:
		r.log.Warn("grace period over; cancelling running actions", "grace", grace)
		r.cancel()
		select {
		case <-done:
		case <-time.After(abandonAfterCancel):
			r.log.Error("actions ignored cancellation; leaving them behind", "waited", abandonAfterCancel)
		}
		return false
	}
}

func newRunID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
