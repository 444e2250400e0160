package jobs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/schedule"
)

// FieldBlackoutID is the job_runs field naming the blackout window a
// skipped record's slot fell in.
const FieldBlackoutID = "blackout_id"

// Blackout names the blackout window a fire falls in: the fire is not run,
// and its slot is recorded skipped with the window's id and reason.
type Blackout struct {
	ID     string
	Reason string
}

// skipError is the error a blackout's skipped record carries (what
// `cronswap runs list` shows of a skipped record).
func (b Blackout) skipError() string {
	return fmt.Sprintf("blackout %s: %s", b.ID, b.Reason)
}

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
		r.runEnded(id, StatusSkipped)
		return true
	}
	fc := claimRequest{FireClaim: FireClaim{JobID: id, Slot: slot, Check: check, Blackout: &b},
		startBy: d.At().Add(deadline)}
	o, queued := r.claims.submitBounded(fc, r.opts.QueueLimit)
	switch {
	case !queued:
		r.drop(d, deadline, NotRunQueueFull, "fire in a blackout window not recorded: the queue of fires waiting for a claim is full")
	case o.Err != nil:
		reason := NotRunClaimError
		switch {
		case errors.Is(o.Err, ErrUnreachable):
			reason = NotRunUnreachable
		case errors.Is(o.Err, errClaimTooLate):
			reason = NotRunStartingDeadline
		}
		reason = r.dropReason(d, deadline, reason)
		log.Warn("fire in a blackout window not run, and its skip not recorded", "reason", reason, "error", o.Err)
		r.drop(d, deadline, reason, "")
	case o.Result == Skipped:
		r.dbAnswered.Store(true)
		log.Info("fire skipped: inside a blackout window", "reason", b.Reason)
		r.runEnded(id, StatusSkipped)
	default:
		r.dbAnswered.Store(true)
		log.Debug("fire in a blackout window already recorded elsewhere", "recorded", o.Reason)
	}
	return true
}

// blackoutRun is the skipped record of a fire in a blackout window: a
// RunDoc with the window's id and the claim's nonce (see claimedRun).
type blackoutRun struct {
	RunDoc `bson:",inline"`
	Claim  string `bson:"claim"`
}

// skipBlackouts records skipped the fires of todo that fall in a blackout
// window (one unordered insertMany for all of them, with deterministic
// _ids, like the runs: whoever inserts first has the slot) and returns the
// other fires. A fire whose record another replica wrote first (a run, a
// skip, a missed record of the slot) is AlreadyFired. An answer lost on
// the way is read back and the missing records inserted again while ctx
// allows; a record that landed unknown to this replica is a correct skip,
// so nothing is left to disown.
func (c *claimer) skipBlackouts(ctx context.Context, todo []int) []int {
	var skips, rest []int
	for _, i := range todo {
		if c.b.Fires[i].Blackout != nil {
			skips = append(skips, i)
		} else {
			rest = append(rest, i)
		}
	}
	if len(skips) == 0 {
		return todo
	}
	c.insertSkips(ctx, skips)
	return rest
}

func (c *claimer) insertSkips(ctx context.Context, todo []int) {
	wait := retryFirst
	var lastErr error
	for round := 0; len(todo) > 0; round++ {
		if round > maxClaimRounds {
			for _, i := range todo {
				c.out[i].Err = c.errf(i, "record the blackout skip", fmt.Errorf("duplicate key but no record to be read: %w", lastErr))
			}
			return
		}
		docs := make([]any, len(todo))
		for k, i := range todo {
			l, b := c.leases[i], c.b.Fires[i].Blackout
			docs[k] = blackoutRun{RunDoc: RunDoc{ID: l.RunID, JobID: l.JobID, ScheduledAt: l.Slot,
				Instance: l.Instance, Incarnation: l.Incarnation, Status: StatusSkipped, StartedAt: c.b.Now,
				EndedAt: c.b.Now, Reason: b.Reason, Error: b.skipError(), ExpireAt: c.b.Now.Add(c.s.retention),
				BlackoutID: b.ID}, Claim: c.nonce}
		}
		_, err := c.s.runs.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
		sp := splitInserts(todo, err)
		wholeErr, look := sp.whole, sp.look
		if sp.last != nil {
			lastErr = sp.last
		}
		for _, i := range sp.inserted {
			c.skipped(i)
		}
		for i, we := range sp.refused {
			c.out[i].Err = c.errf(i, "record the blackout skip", we)
		}
		todo = nil
		if len(look) == 0 {
			return
		}
		if wholeErr != nil {
			if !transient(wholeErr) {
				for _, i := range look {
					c.out[i].Err = c.errf(i, "record the blackout skip", wholeErr)
				}
				return
			}
			if !sleepCtx(ctx, wait) {
				for _, i := range look {
					c.out[i].Err = c.errf(i, "record the blackout skip", fmt.Errorf("%w: %w", ErrUnreachable, wholeErr))
				}
				return
			}
			wait = min(2*wait, retryMax)
		}
		found, err := c.readRuns(ctx, look, true)
		if err != nil {
			for _, i := range look {
				c.out[i].Err = c.errf(i, "record the blackout skip", fmt.Errorf("%w: %w", ErrUnreachable, err))
			}
			return
		}
		for _, i := range look {
			switch r := found[i]; {
			case r == nil:
				todo = append(todo, i) // not there: insert again
			case c.mine(i, r):
				c.skipped(i) // this call's insert landed, its answer lost
			default:
				c.out[i] = ClaimOutcome{Result: AlreadyFired, Reason: recordedReason(r)}
			}
		}
	}
}

// skipped answers fire i as recorded skipped by its blackout window.
func (c *claimer) skipped(i int) {
	c.out[i] = ClaimOutcome{Result: Skipped, Reason: c.b.Fires[i].Blackout.skipError()}
}
