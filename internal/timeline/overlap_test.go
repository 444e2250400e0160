package timeline

import (
	"testing"
	"time"

	"github.com/cronswap/cronswap/internal/record"
)

// A fire waiting for its job's lock (a buffering overlap policy) shows as
// a run whose status is buffered, with the run it waits for as reason.
func TestBufferedRecordShowsWhatItWaitsFor(t *testing.T) {
	slot := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	e := recordEntry(Record{ID: "j@x", JobID: "j", ScheduledAt: slot, Status: record.StatusBuffered,
		Reason: "waiting for the lock held by run j@y of r1 (overlap buffer_one)"})
	if e.Kind != KindRun || e.Status != record.StatusBuffered || e.Reason == "" {
		t.Fatalf("entry %+v: want a buffered run with its reason", e)
	}
	if e := recordEntry(Record{ID: "j@x", JobID: "j", ScheduledAt: slot, Status: record.StatusSucceeded, Reason: "old"}); e.Reason != "" {
		t.Fatalf("entry %+v: a run that ran has no reason", e)
	}
}
