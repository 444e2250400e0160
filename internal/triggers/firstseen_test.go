package triggers

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cronswap/cronswap/internal/history"
)

// Slots at or before the first sighting are refused, with the sighting's
// time, how it was made and how to ask anyway; later slots, and any slot
// of a job without a sighting, pass.
func TestCheckFirstSeen(t *testing.T) {
	seen := time.Date(2027, 3, 1, 10, 0, 30, 250e6, time.UTC)
	slot := func(s int) time.Time {
		return time.Date(2027, 3, 1, 10, 0, 0, 0, time.UTC).Add(time.Duration(s) * time.Second)
	}
	ins := history.Sighting{JobID: "j", At: seen, Source: history.SourceInsert}
	err := CheckFirstSeen("j", []time.Time{slot(0), slot(10), slot(20), slot(30), slot(40)}, ins, true)
	if !errors.Is(err, ErrBeforeFirstSeen) {
		t.Fatalf("slots before the sighting: %v", err)
	}
	for _, want := range []string{`job "j" was first seen at 2027-03-01T10:00:30.250Z (when its document was inserted)`,
		"4 slots, 2027-03-01T10:00:00Z to 2027-03-01T10:00:30Z, are not after it", "--before-first-seen", "before_first_seen: true"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q lacks %q", err, want)
		}
	}
	read := history.Sighting{JobID: "j", At: slot(40), Source: history.SourceRead}
	if err := CheckFirstSeen("j", []time.Time{slot(40)}, read, true); err == nil ||
		!strings.Contains(err.Error(), "slot 2027-03-01T10:00:40Z is not after it") || !strings.Contains(err.Error(), "the job may be older") {
		t.Errorf("a slot at the sighting: %v", err)
	}
	if err := CheckFirstSeen("j", []time.Time{slot(40), slot(50)}, ins, true); err != nil {
		t.Errorf("slots after the sighting: %v", err)
	}
	if err := CheckFirstSeen("j", []time.Time{slot(0)}, history.Sighting{}, false); err != nil {
		t.Errorf("no sighting: %v", err)
	}
}
