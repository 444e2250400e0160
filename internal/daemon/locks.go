package daemon

import (
	"context"
	"log/slog"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/internal/metrics"
	"github.com/cronswap/cronswap/jobs"
	"github.com/cronswap/cronswap/schedule"
	"github.com/cronswap/cronswap/scheduler"
)

// fireHooks reports the fire path's events as metrics. Fire lateness is
// measured from when the fire was due (its slot plus the job's planned
// jitter delay), so jitter does not show as lateness.
func fireHooks(mx *metrics.Metrics) jobs.Hooks {
	return jobs.Hooks{
		Dispatched: func(_ string, due, at time.Time) { mx.ObserveFireLateness(due, at) },
		Claimed:    func(_ string, result string) { mx.CountLockAcquisition(result) },
		RunEnded:   func(id, status string) { mx.CountRun(id, status) },
		NotRun:     func(_ string, _ time.Time, reason string) { mx.CountFireNotRun(reason) },
	}
}

// ensureRunIndexes creates job_runs' indexes, retrying with backoff until
// it succeeds or ctx ends: the daemon starts without waiting for the
// database, and exactly-once does not depend on the indexes alone (the
// lock's last slot decides first; the unique index is the second line).
func ensureRunIndexes(ctx context.Context, runs *mongo.Collection, log *slog.Logger) {
	wait := 500 * time.Millisecond
	for {
		octx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := jobs.EnsureIndexes(octx, runs)
		cancel()
		if err == nil {
			log.Debug("job_runs indexes in place", "collection", runs.Name())
			return
		}
		log.Warn("could not create the job_runs indexes; retrying", "collection", runs.Name(), "error", err, "retry_in", wait)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, 30*time.Second)
	}
}

// armedFire hands the runner the fire of job id for slot as a schedule.Due,
// built from the engine's current record of the job: its armed schedule and
// its jitter delay. A job no longer armed is dropped. It stands in for the
// engine handing over the Due itself.
func armedFire(engine *scheduler.Engine, runner *jobs.Runner, log *slog.Logger, id string, slot time.Time) {
	d, ok := armedDue(engine, id, slot)
	if !ok {
		log.Info("job no longer armed; fire dropped", "job_id", id, "scheduled_at", slot)
		return
	}
	runner.Fire(d)
}

// armedDue is the Due of job id's armed schedule for slot; false when the
// engine does not hold the job armed.
func armedDue(engine *scheduler.Engine, id string, slot time.Time) (schedule.Due, bool) {
	st, ok := engine.Get(id)
	if !ok || !st.Armed {
		return schedule.Due{}, false
	}
	return schedule.Due{
		Schedule: schedule.Schedule{ID: st.ID, CronExpr: st.CronExpr, Timezone: st.Timezone, Enabled: st.Enabled,
			Job: st.Job, Category: st.Category, Args: st.Args, UpdatedAt: st.UpdatedAt},
		Slot:  slot,
		Delay: st.Delay,
	}, true
}
