package daemon

import (
	"log/slog"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/metrics"
	"github.com/cronswap/cronswap/schedule"
	"github.com/cronswap/cronswap/scheduler"
)

// engineSink turns raw schedules documents into engine calls. Decoding and
// validation happen here, through the schedule package, so a bad document
// becomes a Reject (last known good) instead of a Reload.
type engineSink struct {
	engine  *scheduler.Engine
	log     *slog.Logger
	metrics *metrics.Metrics
}

// Upsert implements changestream.Sink.
func (s engineSink) Upsert(doc bson.Raw) {
	sched, err := schedule.Decode(doc)
	if err != nil {
		s.reject(sched.ID, err)
		return
	}
	s.metrics.CountReload(reloadResult(s.engine.Reload(sched)))
}

// reloadResult names a Reload outcome for the reloads metric.
func reloadResult(o scheduler.Outcome) string {
	switch o {
	case scheduler.Unchanged:
		return metrics.ReloadUnchanged
	case scheduler.Rejected:
		return metrics.ReloadRejected
	default:
		return metrics.ReloadApplied
	}
}

func (s engineSink) reject(id string, err error) {
	if id == "" {
		s.log.Warn("schedules document refused and not attributable to a job", "error", err)
		return
	}
	s.engine.Reject(id, err)
	s.metrics.CountReload(metrics.ReloadRejected)
}

// Delete implements changestream.Sink.
func (s engineSink) Delete(id bson.RawValue) {
	jobID, _ := schedule.DecodeID(id)
	if jobID == "" {
		return
	}
	if s.engine.Remove(jobID) {
		s.metrics.CountReload(metrics.ReloadRemoved)
	}
}

// ReplaceAll implements changestream.Sink.
func (s engineSink) ReplaceAll(docs []bson.Raw) []string {
	changed, _, _ := s.ReplaceAllTimed(docs)
	return changed
}

// ReplaceAllTimed implements changestream.TimedSink: ReplaceAll, saying how
// long decoding and the engine's Sync took.
func (s engineSink) ReplaceAllTimed(docs []bson.Raw) ([]string, time.Duration, time.Duration) {
	start := time.Now()
	items := make([]scheduler.Item, 0, len(docs))
	for _, d := range docs {
		sched, err := schedule.Decode(d)
		if err != nil && sched.ID == "" {
			s.log.Warn("schedules document refused and not attributable to a job", "error", err)
			continue
		}
		items = append(items, scheduler.Item{Schedule: sched, Err: err})
	}
	decoded := time.Now()
	changed := s.engine.Sync(items).Changed
	return changed, decoded.Sub(start), time.Since(decoded)
}
