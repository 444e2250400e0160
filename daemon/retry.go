package daemon

import (
	"context"

	"github.com/cronswap/cronswap/internal/httpapi"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/schedule"
)

// lookup gives the runner the schedule armed for a job, for the retries
// other replicas left pending (jobs.RunnerOptions.Lookup); a job not
// armed here (deleted, disabled, not yet loaded) is not retried here.
func (s *Service) lookup(id string) (schedule.Schedule, bool) {
	st, ok := s.engine.Get(id)
	if !ok || !st.Armed {
		return schedule.Schedule{}, false
	}
	return st.Schedule, true
}

// failurePauses gives /api/schedules the jobs paused after consecutive
// failed slots (one read of job_pauses per request).
func (s *Service) failurePauses(ctx context.Context) (map[string]httpapi.FailurePause, error) {
	ps, err := s.store.PausedJobs(ctx)
	if err != nil {
		s.log.Warn("could not read the paused jobs for the API", "collection", record.PausesCollection, "error", err)
		return nil, err
	}
	out := make(map[string]httpapi.FailurePause, len(ps))
	for id, p := range ps {
		out[id] = httpapi.FailurePause{PausedAt: p.PausedAt, Note: p.Note, Failures: p.Failures, RunID: p.RunID}
	}
	return out, nil
}
