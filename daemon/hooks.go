package daemon

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/changestream"
	"github.com/cronswap/cronswap/internal/firepath"
	"github.com/cronswap/cronswap/internal/httpapi"
	"github.com/cronswap/cronswap/internal/metrics"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/internal/tracecontext"
)

// fireHooks reports the fire path's events as metrics, and the starts and
// ends of runs to /api/events (never blocking: httpapi.Broker). Fire
// lateness is measured from when the fire was due (its slot plus the
// job's planned jitter delay), so jitter does not show as lateness.
func fireHooks(mx *metrics.Metrics, events *httpapi.Broker) firepath.Hooks {
	return firepath.Hooks{
		Dispatched: func(ctx context.Context, id, category string, due, at time.Time) {
			mx.ObserveFireLateness(category, due, at, tracecontext.TraceID(ctx))
			events.RunChanged(id, record.StatusRunning)
		},
		Claimed:       func(_ string, result string) { mx.CountLockAcquisition(result) },
		ClaimBatch:    func(size int, took time.Duration) { mx.ObserveClaimBatch(size, took) },
		OwnerTakeover: func(string) { mx.CountOwnerTakeover() },
		RunEnded: func(id, status string) {
			mx.CountRun(id, status)
			events.RunChanged(id, status)
		},
		NotRun:  func(_ string, _ time.Time, reason string) { mx.CountFireNotRun(reason) },
		Missed:  func(_ string, reason string, n int64) { mx.CountMissedSlots(reason, n) },
		Skipped: func(_ string, reason string) { mx.CountSkippedFire(reason) },
	}
}

// ensureRunIndexes creates job_runs' indexes, retrying with backoff until
// it succeeds or ctx ends: the daemon starts without waiting for the
// database, and exactly-once does not depend on them (a run record's _id
// decides its slot); the claim path also checks them before claiming
// (record.Store.VerifyIndexes) and recreates a missing one.
func ensureRunIndexes(ctx context.Context, runs *mongo.Collection, log *slog.Logger) {
	wait := 500 * time.Millisecond
	for {
		octx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := record.EnsureIndexes(octx, runs)
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

// watchHooks reports the watcher's events, full reloads, reconnects and
// resync drift (jobs whose event was missed) as metrics. An event counts as
// applied when the engine armed (or disarmed) the job, as armedAt says
// (set by the engine's Applied hook, before the change is logged), and
// otherwise when the sink call returned.
func watchHooks(mx *metrics.Metrics, armedAt *atomic.Int64) changestream.Hooks {
	return changestream.Hooks{
		Event: func(ev changestream.EventInfo) {
			mx.CountChangeEvent(ev.Op)
			written := ev.WallTime
			if written.IsZero() {
				written = ev.UpdatedAt // servers without wallTime
			}
			applied := ev.Applied
			if at := time.Unix(0, armedAt.Swap(0)); !at.Before(ev.Received) && at.Before(ev.Applied) {
				applied = at
			}
			mx.ObserveEditToArmed(written, applied)
			mx.ObserveEventApply(applied.Sub(ev.Received))
		},
		FullReload: func(reason string, _ []string) { mx.CountFullReload(reason) },
		Reconnect:  func(int, time.Duration, error) { mx.CountReconnect() },
		Drift:      func(ids []string) { mx.CountResyncDrift(len(ids)) },
	}
}
