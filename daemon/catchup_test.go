package daemon

import (
	"testing"
	"time"

	"github.com/cronswap/cronswap/internal/actions"
	"github.com/cronswap/cronswap/jobs"
	"github.com/cronswap/cronswap/schedule"
	"github.com/cronswap/cronswap/scheduler"
)

func TestCatchUpSlots(t *testing.T) {
	now := time.Date(2026, 11, 30, 10, 0, 30, 0, time.UTC)
	slots := map[string]time.Time{
		"inside":     now.Add(-20 * time.Second),
		"outside":    now.Add(-2 * time.Minute),
		"no_window":  now.Add(-5 * time.Second),
		"new_doc":    now.Add(-10 * time.Second),
		"never":      {},
		"per_action": now.Add(-50 * time.Second),
	}
	windows := map[string]time.Duration{"default": time.Minute, "long": 10 * time.Minute, "off": 0}
	// The armed jobs, as Engine.Armed yields them (it leaves out the
	// others: scheduler's TestArmedYieldsOnlyArmedJobs).
	armed := func(id, job string, updated time.Time) scheduler.Status {
		return scheduler.Status{Schedule: schedule.Schedule{ID: id, CronExpr: "* * * * *", Enabled: true, Job: job,
			Category: "c-" + id, UpdatedAt: updated}, Armed: true, Delay: time.Duration(len(id)) * time.Second}
	}
	jobs := []scheduler.Status{
		armed("inside", "default", time.Time{}),
		armed("outside", "default", time.Time{}),
		armed("no_window", "off", time.Time{}),
		// written after its last slot: the schedule was not in force then.
		armed("new_doc", "default", now.Add(-5*time.Second)),
		armed("never", "default", time.Time{}),
		armed("per_action", "long", now.Add(-time.Hour)),
	}
	seq := func(yield func(schedule.Schedule, time.Duration) bool) {
		for _, j := range jobs {
			if !yield(j.Schedule, j.Delay) {
				return
			}
		}
	}
	got := catchUpSlots(seq, now, func(a string) time.Duration { return windows[a] },
		func(id string, _ time.Time) (time.Time, bool) { s := slots[id]; return s, !s.IsZero() })
	// Each fire carries the job's armed schedule and its jitter delay.
	want := []schedule.Due{
		{Schedule: jobs[0].Schedule, Slot: slots["inside"], Delay: jobs[0].Delay},
		{Schedule: jobs[5].Schedule, Slot: slots["per_action"], Delay: jobs[5].Delay},
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i].Schedule != want[i].Schedule || !got[i].Slot.Equal(want[i].Slot) || got[i].Delay != want[i].Delay {
			t.Errorf("fire %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

// The start-up catch-up walks the armed jobs only when the jobs of some
// handler have a window: the default's, or a handler's own (a handler's 0
// turns the default off for its jobs only).
func TestCatchupAnywhere(t *testing.T) {
	hour, off := time.Hour, time.Duration(0)
	for _, c := range []struct {
		name     string
		def      time.Duration
		handlers map[string]*time.Duration
		want     bool
	}{
		{"no window anywhere", 0, map[string]*time.Duration{"a": nil, "b": &off}, false},
		{"no handler, no default", 0, nil, false},
		{"the default", time.Minute, map[string]*time.Duration{"a": &off, "b": nil}, true},
		{"the default, off for every handler", time.Minute, map[string]*time.Duration{"a": &off, "b": &off}, false},
		{"one handler's own", 0, map[string]*time.Duration{"a": nil, "b": &hour}, true},
	} {
		s := &Service{opts: Options{Catchup: c.def}, registry: actions.NewRegistry()}
		for name, w := range c.handlers {
			s.registry.Register(name, actions.Action{Policy: jobs.Policy{Catchup: w}})
		}
		if got := s.catchupAnywhere(); got != c.want {
			t.Errorf("%s: catchupAnywhere = %v, want %v", c.name, got, c.want)
		}
	}
}
