package daemon

import (
	"log/slog"
	"time"

	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/schedule"
)

// A stall of this process longer than a job's period (SIGSTOP, a paused
// VM, a long stop-the-world pause) makes the engine fire the job once for
// its latest slot when the process runs again; the slots it skipped come
// to fireAfterStall (scheduler.Options.Stalled). They go the way the
// start-up's gap goes (missed.go): the catch-up window offers them to the
// fire path, the others are recorded missed (record.MissedStalled). The
// claim keeps an offered slot another replica ran from running again, and
// a missed record is written only for the slots no replica decided.

// maxStallOffers bounds the skipped slots of one stall offered to the fire
// path: the newest within the job's catch-up window; older ones are
// recorded missed.
const maxStallOffers = 100

// fireAfterStall decides the slots of d's job that its timer skipped
// (those after after and before d.Slot), then fires d. It is the engine's
// Stalled callback, on the fire's own goroutine: the offered slots are
// claimed, oldest first, before d is, as a claim takes no slot older than
// one already claimed.
func (s *Service) fireAfterStall(d schedule.Due, after time.Time) {
	if next, ok := s.engine.NextFunc(d.Schedule.ID); ok {
		s.stallGap(d, after, time.Now(), record.NextFunc(next))
	}
	s.runner.Submit(d)
}

// stallGap records missed, and offers, the slots of d's job after after
// and before d.Slot, as seen at now.
func (s *Service) stallGap(d schedule.Due, after, now time.Time, next record.NextFunc) {
	window := s.catchupFor(d.Schedule.ActionName())
	offers, missed := stallPlan(d, after, window, now, next, s.log)
	var count int64
	for _, m := range missed {
		count += m.Count
	}
	s.log.Info("stall: this replica's timer skipped slots of the job; offering those within its catch-up window, recording the others missed",
		"job_id", d.Schedule.ID, "scheduled_at", d.Slot, "last_fired_slot", after, "offered", len(offers),
		"missed", count, "catchup", window)
	for _, m := range missed {
		s.runner.RecordMissed(d.Schedule, d.Delay, m)
	}
	for _, slot := range offers {
		s.runner.Offer(schedule.Due{Schedule: d.Schedule, Slot: slot, Delay: d.Delay}, window)
	}
}

// stallPlan splits the slots of d's job after after and before d.Slot:
// those the catch-up window offers (stallOffers), oldest first, and the
// others, as missed ranges of reason stalled (startupGaps: the rule of the
// start-up's gap).
func stallPlan(d schedule.Due, after time.Time, window time.Duration, now time.Time, next record.NextFunc,
	log *slog.Logger) (offers []time.Time, missed []record.MissedRange) {
	offers = stallOffers(after, d.Slot, window, now, next)
	in := gapInput{decided: after, firesFrom: d.Slot.Add(d.Delay - time.Nanosecond), delay: d.Delay,
		now: now, next: next, reason: record.MissedStalled}
	if len(offers) > 0 {
		in.catchUp = offers[0]
	}
	return offers, startupGaps(d.Schedule.ID, in, log)
}

// stallOffers returns the slots of next strictly after after and before
// slot that are at most window old at now, at most maxStallOffers of them
// (the newest), oldest first; none without a window.
func stallOffers(after, slot time.Time, window time.Duration, now time.Time, next record.NextFunc) []time.Time {
	if window <= 0 {
		return nil
	}
	lo := after
	if b := now.Add(-window).Add(-time.Nanosecond); b.After(lo) {
		lo = b
	}
	var out []time.Time
	for t := next(lo); !t.IsZero() && t.Before(slot); t = next(t) {
		if len(out) == maxStallOffers {
			out = append(out[:0], out[1:]...)
		}
		out = append(out, t)
	}
	return out
}
