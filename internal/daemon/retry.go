package daemon

import "github.com/cronswap/cronswap/schedule"

// lookup gives the runner the schedule armed for a job, for the retries
// other replicas left pending (jobs.RunnerOptions.Lookup); a job not
// armed here (deleted, disabled, not yet loaded) is not retried here.
func (d *Daemon) lookup(id string) (schedule.Schedule, bool) {
	st, ok := d.engine.Get(id)
	if !ok || !st.Armed {
		return schedule.Schedule{}, false
	}
	return st.Schedule, true
}
