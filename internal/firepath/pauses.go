package firepath

import (
	"log/slog"
	"time"

	"github.com/cronswap/cronswap/internal/actions"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/schedule"
)

// paused reports whether d's job is paused after failures (one read, only
// for actions with PauseAfterFailures): its fire is then not run, and is
// recorded missed (MissedPaused). A read that fails lets the fire go on
// to its claim, which fails the same way when the database is gone.
func (r *Runner) paused(d schedule.Due, deadline time.Duration, spec actions.Action) bool {
	if r.opts.Store == nil || spec.PauseAfterFailures <= 0 {
		return false
	}
	ctx, cancel := r.opCtx()
	p, paused, err := r.opts.Store.Paused(ctx, d.Schedule.ID)
	cancel()
	if err != nil {
		r.log.Warn("could not read the job's pause; claiming the fire", "job_id", d.Schedule.ID,
			"scheduled_at", d.Slot.UTC(), "error", err)
		return false
	}
	if !paused {
		return false
	}
	r.log.Info("fire not run: the job is paused after consecutive failures", "job_id", d.Schedule.ID,
		"scheduled_at", d.Slot.UTC(), "paused_at", p.PausedAt, "note", p.Note)
	r.drop(d, deadline, NotRunPaused, "")
	return true
}

// afterEnd follows a run's end once it is written: a retrying attempt
// gets its local timer, and a failed slot of an action with
// PauseAfterFailures may pause its job.
func (r *Runner) afterEnd(log *slog.Logger, d schedule.Due, spec actions.Action, l record.Lease, end record.RunEnd) {
	switch {
	case end.Status == record.StatusRetrying:
		logRetry(log, l, end)
		r.retries.schedule(d, l.RunID, l.Attempt, end.RetryAt)
	case end.Status == record.StatusFailed && spec.PauseAfterFailures > 0:
		ctx, cancel := r.opCtx()
		p, paused, err := r.opts.Store.PauseIfFailing(ctx, record.PauseCheck{JobID: l.JobID, RunID: l.RunID,
			Failures: spec.PauseAfterFailures, Error: end.Error, Instance: r.opts.InstanceID, Now: end.EndedAt})
		cancel()
		switch {
		case err != nil:
			log.Warn("could not check whether the job is to be paused after failures", "error", err)
		case paused:
			log.Warn("job paused after consecutive failed slots; `cronswap schedules resume` clears it",
				"failures", p.Failures, "note", p.Note)
		}
	}
}
