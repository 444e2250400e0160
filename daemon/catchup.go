package daemon

import (
	"context"
	"iter"
	"log/slog"
	"time"

	"github.com/cronswap/cronswap/schedule"
	"github.com/cronswap/cronswap/scheduler"
)

// catchUpSlots picks, among the armed jobs, the ones whose most recent slot
// (at or before now) is younger than their catch-up window, and returns
// that one slot per job, as a fire of the job's armed schedule with its
// jitter delay — never more than one, however long the downtime. A slot
// from before the job's document was last written is skipped: the schedule
// was not in force then. Whether the slot was really missed is not decided
// here but by the lock claim (last fire < slot), so a slot that ran, here
// or on another replica, is never run again.
func catchUpSlots(armed iter.Seq2[schedule.Schedule, time.Duration], now time.Time, window func(action string) time.Duration,
	lastSlot func(id string, now time.Time) (time.Time, bool)) []schedule.Due {
	var out []schedule.Due
	for sched, delay := range armed {
		w := window(sched.ActionName())
		if w <= 0 {
			continue
		}
		slot, ok := lastSlot(sched.ID, now)
		if !ok || now.Sub(slot) > w {
			continue
		}
		if !sched.UpdatedAt.IsZero() && slot.Before(sched.UpdatedAt) {
			continue
		}
		out = append(out, schedule.Due{Schedule: sched, Slot: slot, Delay: delay})
	}
	return out
}

// runCatchUp waits until ready reports the first full sync, hands the
// catch-up slots to gaps (which records the slots since each job's last
// decided one that neither it nor the engine will run; may be nil), then
// hands each job's missed slot (catchUpSlots) to fire, concurrently, and
// returns when they are done or ctx ends. The fire path's claim keeps it
// exactly-once. someWindow false says no job has a catch-up window: there
// is then no slot to offer, and the armed jobs are not walked.
func runCatchUp(ctx context.Context, engine *scheduler.Engine, ready func() bool, someWindow bool, window func(action string) time.Duration,
	fire scheduler.FireFunc, log *slog.Logger, gaps func(ctx context.Context, now time.Time, catchUp []schedule.Due)) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !ready() {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
	now := time.Now()
	var fires []schedule.Due
	if someWindow {
		fires = catchUpSlots(engine.Armed(), now, window, engine.LastSlot)
	}
	if gaps != nil {
		gaps(ctx, now, fires)
	}
	if len(fires) == 0 {
		return
	}
	log.Info("catch-up: offering the latest slot of jobs with a catch-up window", "jobs", len(fires))
	done := make(chan struct{}, len(fires))
	for _, d := range fires {
		log.Info("catch-up: claiming a slot from before start-up", "job_id", d.Schedule.ID, "scheduled_at", d.Slot, "late_by", now.Sub(d.Slot))
		go func() {
			defer func() { done <- struct{}{} }()
			fire(d)
		}()
	}
	for range fires {
		select {
		case <-ctx.Done():
			return
		case <-done:
		}
	}
}
