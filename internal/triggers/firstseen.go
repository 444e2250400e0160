package triggers

import (
	"errors"
	"fmt"
	"time"

	"github.com/cronswap/cronswap/internal/history"
)

// FieldBeforeFirstSeen is the field that, true on a backfill request, lets
// it run a slot at or before the job's first sighting (CheckFirstSeen);
// `cronswap backfill --before-first-seen` sets it.
const FieldBeforeFirstSeen = "before_first_seen"

// ErrBeforeFirstSeen is wrapped by CheckFirstSeen's refusal.
var ErrBeforeFirstSeen = errors.New("before the job was first seen")

// CheckFirstSeen is the one rule for backfilling slots from before a job
// existed, applied by `cronswap backfill` to the slots it would request
// and by the daemons to every backfill request: a slot at or before the
// job's first sighting (history.Sighting; ok false when the history has
// none, and then nothing is refused) is refused unless the request says
// FieldBeforeFirstSeen. slots are in time order. The error names the
// sighting's time and how to ask anyway.
func CheckFirstSeen(job string, slots []time.Time, seen history.Sighting, ok bool) error {
	before := SlotsBeforeFirstSeen(slots, seen, ok)
	if len(before) == 0 {
		return nil
	}
	what := "slot " + before[0].UTC().Format(time.RFC3339) + " is"
	if len(before) > 1 {
		what = fmt.Sprintf("%d slots, %s to %s, are", len(before), before[0].UTC().Format(time.RFC3339), before[len(before)-1].UTC().Format(time.RFC3339))
	}
	return fmt.Errorf("%w: job %q was first seen at %s (%s), and %s not after it: "+
		"backfill from after that time, or ask with --before-first-seen (%s: true on a request) to run them anyway",
		ErrBeforeFirstSeen, job, seen.At.UTC().Format("2006-01-02T15:04:05.000Z07:00"), history.HowSeen(seen.Source), what, FieldBeforeFirstSeen)
}

// SlotsBeforeFirstSeen returns the slots CheckFirstSeen refuses: those at
// or before the sighting (none when ok is false), in the order given.
func SlotsBeforeFirstSeen(slots []time.Time, seen history.Sighting, ok bool) []time.Time {
	if !ok {
		return nil
	}
	var before []time.Time
	for _, s := range slots {
		if !s.After(seen.At) {
			before = append(before, s)
		}
	}
	return before
}
