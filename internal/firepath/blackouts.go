package firepath

import (
	"errors"
	"time"

	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/schedule"
)

// blackedOut handles a fire that falls in a blackout window
// (RunnerOptions.Blackout): its slot is recorded skipped through the claim
// batch, once across replicas (the record's _id decides, as for a run),
// without waiting for admission, and nothing runs. It reports whether the
// fire was in a window (and so is handled); check says this replica does
// not own the job (the owner records first).
func (r *Runner) blackedOut(d schedule.Due, deadline time.Duration, check bool) bool {
	if r.opts.Blackout == nil {
		return false
	}
	id, slot := d.Schedule.ID, d.Slot.UTC()
	b, ok := r.opts.Blackout(id, d.Schedule.Category, slot)
	if !ok {
		return false
	}
	log := r.log.With("job_id", id, "scheduled_at", slot, "blackout_id", b.ID)
	if r.opts.Store == nil {
		log.Info("fire skipped: inside a blackout window", "reason", b.Reason)
		r.skipped(id, SkipBlackout)
		return true
	}
	fc := claimRequest{FireClaim: record.FireClaim{JobID: id, Slot: slot, Check: check, Blackout: &b},
		startBy: d.At().Add(deadline)}
	o, queued := r.claims.submitBounded(fc, r.opts.QueueLimit)
	switch {
	case !queued:
		r.drop(d, deadline, NotRunQueueFull, "fire in a blackout window not recorded: the queue of fires waiting for a claim is full")
	case o.Err != nil:
		reason := NotRunClaimError
		switch {
		case errors.Is(o.Err, record.ErrUnreachable):
			reason = NotRunUnreachable
		case errors.Is(o.Err, errClaimTooLate):
			reason = NotRunStartingDeadline
		}
		reason = r.dropReason(d, deadline, reason)
		log.Warn("fire in a blackout window not run, and its skip not recorded", "reason", reason, "error", o.Err)
		r.drop(d, deadline, reason, "")
	case o.Result == record.Skipped:
		r.dbAnswered.Store(true)
		log.Info("fire skipped: inside a blackout window", "reason", b.Reason)
		r.skipped(id, SkipBlackout)
	default:
		r.dbAnswered.Store(true)
		log.Debug("fire in a blackout window already recorded elsewhere", "recorded", o.Reason)
	}
	return true
}
