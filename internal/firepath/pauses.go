package firepath

import (
	"log/slog"

	"github.com/cronswap/cronswap/internal/record"
)

// paused reports whether f's job is paused after failures (one read, only
// for actions with PauseAfterFailures): the fire is then not run, and is
// recorded missed (MissedPaused). A read that fails lets the fire go on
// to its claim, which fails the same way when the database is gone.
func (r *Runner) paused(f *fire) bool {
	if r.opts.Store == nil || f.action.PauseAfterFailures <= 0 {
		return false
	}
	log := f.logger(r.log)
	ctx, cancel := r.opCtx()
	p, paused, err := r.opts.Store.Paused(ctx, f.jobID())
	cancel()
	if err != nil {
		log.Warn("could not read the job's pause; claiming the fire", "error", err)
		return false
	}
	if !paused {
		return false
	}
	log.Info("fire not run: the job is paused after consecutive failures", "paused_at", p.PausedAt, "note", p.Note)
	r.notStarted(f, NotRunPaused, "")
	return true
}

// afterEnd follows the end of f's run once it is written: a retrying
// attempt gets its local timer, and a failed slot of an action with
// PauseAfterFailures may pause its job.
func (r *Runner) afterEnd(log *slog.Logger, f *fire, end record.RunEnd) {
	l := f.lease
	switch {
	case end.Status == record.StatusRetrying:
		logRetry(log, l, end)
		r.retries.schedule(f.due, l.RunID, l.Attempt, end.RetryAt)
	case end.Status == record.StatusFailed && f.action.PauseAfterFailures > 0:
		ctx, cancel := r.opCtx()
		p, paused, err := r.opts.Store.PauseIfFailing(ctx, record.PauseCheck{JobID: l.JobID, RunID: l.RunID,
			Failures: f.action.PauseAfterFailures, Error: end.Error, Instance: r.opts.InstanceID, Now: end.EndedAt})
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
