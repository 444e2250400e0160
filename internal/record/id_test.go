package record

import (
	"testing"
	"time"
)

// base is a fixed instant the store tests count from (second resolution,
// like cron slots).
var base = time.Date(2030, 1, 2, 3, 4, 0, 0, time.UTC)

func TestRunIDAndFence(t *testing.T) {
	t.Parallel()
	slot := time.Date(2030, 1, 2, 3, 4, 5, 600_000_000, time.FixedZone("x", 3600))
	if got, want := RunID("a@b", slot), "a@b@2030-01-02T02:04:05.6Z"; got != want {
		t.Errorf("RunID = %q, want %q", got, want)
	}
	if got := FenceOf(slot); got != slot.UnixMilli() {
		t.Errorf("FenceOf = %d, want %d", got, slot.UnixMilli())
	}
	if RunID("a", base) == RunID("a", base.Add(time.Second)) || RunID("a@"+base.Format(time.RFC3339Nano), base) == RunID("a", base) {
		t.Error("run ids collide")
	}
}
