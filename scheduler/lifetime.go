package scheduler

import (
	"context"
	"slices"

	"github.com/cronswap/cronswap/internal/lifetime"
	"github.com/cronswap/cronswap/schedule"
)

// lifetimeOf is the lifetime a schedule's fields bound.
func lifetimeOf(s schedule.Schedule) lifetime.Lifetime {
	return lifetime.Lifetime{StartAt: s.StartAt, EndAt: s.EndAt, MaxRuns: s.MaxRuns, PausedUntil: s.PausedUntil}
}

// End disarms job id because it fires no more for reason (the fire path
// found its run count at max_runs: lifetime.ReasonMaxRuns), provided s,
// the schedule the finding was made under, has the timing the job is
// armed with: a job whose timing changed since (max_runs raised, say) is
// left armed, and its next claim decides again. The job stays known, with
// Status.Ended set, until its timing changes (which arms it again) or it
// is removed. It reports whether the job was disarmed.
func (e *Engine) End(id string, s schedule.Schedule, reason string) bool {
	sh := e.shardOf(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	old := e.load(id)
	if old == nil || !old.valid || old.fire == nil || old.schedule(id).Timing() != s.Timing() {
		return false
	}
	st := old.state()
	st.ended = reason
	r := old.withState(st)
	e.retire(sh, old, false)
	r.fire = nil
	e.store(sh, id, &r)
	e.log.Info("scheduler: job ended, disarmed", "job_id", id, "reason", reason)
	return true
}

// Recheck applies again the schedule of every job whose latest schedule
// match accepts — the one refused last (while no later document came), or
// else the one in force — as Reload would: for when the answer of
// Options.Policy about them may have changed though their documents did
// not (a calendar they exclude appeared, or was deleted). A refused one
// that passes now is armed; one in force that no longer passes keeps its
// timer (last known good) with the policy's error. It returns how many
// jobs it applied again.
func (e *Engine) Recheck(match func(schedule.Schedule) bool) int {
	e.mu.RLock()
	ids := make([]string, 0, e.jobs.Len())
	e.jobs.all(func(id string, r *record) {
		if latest, ok := r.latest(id); ok && match(latest) {
			ids = append(ids, id)
		}
	})
	e.mu.RUnlock()
	slices.Sort(ids)
	n := 0
	for _, id := range ids {
		sh := e.shardOf(id)
		sh.mu.Lock()
		// Read again under the shard's lock: a Reload in between wins.
		if r := e.load(id); r != nil {
			if latest, ok := r.latest(id); ok && match(latest) {
				e.reloadLocked(sh, latest, applyOne)
				n++
			}
		}
		sh.mu.Unlock()
	}
	if n > 0 {
		e.log.Log(context.Background(), applyOne.lvl, "scheduler: schedules checked again", "jobs", n)
	}
	return n
}

// latest is the job's latest decoded schedule: the refused one pending,
// else the one in force; false when there is neither (the latest document
// could not be decoded).
func (r *record) latest(id string) (schedule.Schedule, bool) {
	switch {
	case r.state().pending != nil:
		return *r.state().pending, true
	case r.valid:
		return r.schedule(id), true
	}
	return schedule.Schedule{}, false
}
