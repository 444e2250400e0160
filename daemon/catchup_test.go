package daemon

import (
	"slices"
	"testing"
	"time"

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
		"disarmed":   now.Add(-5 * time.Second),
		"never":      {},
		"per_action": now.Add(-50 * time.Second),
	}
	windows := map[string]time.Duration{"default": time.Minute, "long": 10 * time.Minute, "off": 0}
	status := func(id, job string, armed bool, updated time.Time) scheduler.Status {
		return scheduler.Status{Schedule: schedule.Schedule{ID: id, CronExpr: "* * * * *", Enabled: true, Job: job,
			Category: "c-" + id, UpdatedAt: updated}, Armed: armed, Delay: time.Duration(len(id)) * time.Second}
	}
	jobs := []scheduler.Status{
		status("inside", "default", true, time.Time{}),
		status("outside", "default", true, time.Time{}),
		status("no_window", "off", true, time.Time{}),
		// written after its last slot: the schedule was not in force then.
		status("new_doc", "default", true, now.Add(-5*time.Second)),
		status("disarmed", "default", false, time.Time{}),
		status("never", "default", true, time.Time{}),
		status("per_action", "long", true, now.Add(-time.Hour)),
	}
	got := catchUpSlots(slices.Values(jobs), now, func(a string) time.Duration { return windows[a] },
		func(id string, _ time.Time) (time.Time, bool) { s := slots[id]; return s, !s.IsZero() })
	// Each fire carries the job's armed schedule and its jitter delay.
	want := []schedule.Due{
		{Schedule: jobs[0].Schedule, Slot: slots["inside"], Delay: jobs[0].Delay},
		{Schedule: jobs[6].Schedule, Slot: slots["per_action"], Delay: jobs[6].Delay},
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
