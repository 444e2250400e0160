package daemon

import (
	"testing"
	"time"

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
	jobs := []scheduler.Status{
		{ID: "inside", Action: "default", Armed: true},
		{ID: "outside", Action: "default", Armed: true},
		{ID: "no_window", Action: "off", Armed: true},
		// written after its last slot: the schedule was not in force then.
		{ID: "new_doc", Action: "default", Armed: true, UpdatedAt: now.Add(-5 * time.Second)},
		{ID: "disarmed", Action: "default", Armed: false},
		{ID: "never", Action: "default", Armed: true},
		{ID: "per_action", Action: "long", Armed: true, UpdatedAt: now.Add(-time.Hour)},
	}
	got := catchUpSlots(jobs, now, func(a string) time.Duration { return windows[a] },
		func(id string, _ time.Time) (time.Time, bool) { s := slots[id]; return s, !s.IsZero() })
	want := []catchUpFire{{"inside", slots["inside"]}, {"per_action", slots["per_action"]}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i].JobID != want[i].JobID || !got[i].Slot.Equal(want[i].Slot) {
			t.Errorf("fire %d: got %v, want %v", i, got[i], want[i])
		}
	}
}
