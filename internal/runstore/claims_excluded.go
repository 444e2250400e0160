package runstore

import (
	"context"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/record"
)

// skipExcluded records skipped the fires of todo that are excluded (in a
// blackout window, on a date of a calendar their schedule excludes: one
// unordered insertMany for all of them, with deterministic _ids, like the
// runs: whoever inserts first has the slot) and returns the other fires. A fire whose record another replica wrote first (a run, a
// skip, a missed record of the slot) is AlreadyFired. An answer lost on
// the way is read back and the missing records inserted again while ctx
// allows; a record that landed unknown to this replica is a correct skip,
// so nothing is left to disown.
func (c *claimer) skipExcluded(ctx context.Context, todo []int) []int {
	var skips, rest []int
	for _, i := range todo {
		if c.b.Fires[i].Exclusion != nil {
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
				c.out[i].Err = c.errf(i, "record the skip", fmt.Errorf("duplicate key but no record to be read: %w", lastErr))
			}
			return
		}
		docs := make([]any, len(todo))
		for k, i := range todo {
			l, x := c.leases[i], c.b.Fires[i].Exclusion
			docs[k] = record.RunDoc{ID: l.RunID, JobID: l.JobID, ScheduledAt: l.Slot,
				Instance: l.Instance, Incarnation: l.Incarnation, Status: record.StatusSkipped, StartedAt: c.b.Now,
				EndedAt: c.b.Now, Reason: x.Reason, Error: x.Error, ExpireAt: c.b.Now.Add(c.s.retention),
				BlackoutID: x.BlackoutID, Calendar: x.Calendar, Claim: l.Token}
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
			c.out[i].Err = c.errf(i, "record the skip", we)
		}
		todo = nil
		if len(look) == 0 {
			return
		}
		if wholeErr != nil {
			if !transient(wholeErr) {
				for _, i := range look {
					c.out[i].Err = c.errf(i, "record the skip", wholeErr)
				}
				return
			}
			if !sleepCtx(ctx, wait) {
				for _, i := range look {
					c.out[i].Err = c.errf(i, "record the skip", fmt.Errorf("%w: %w", record.ErrUnreachable, wholeErr))
				}
				return
			}
			wait = min(2*wait, retryMax)
		}
		found, err := c.readRuns(ctx, look, true)
		if err != nil {
			for _, i := range look {
				c.out[i].Err = c.errf(i, "record the skip", fmt.Errorf("%w: %w", record.ErrUnreachable, err))
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
				c.out[i] = record.ClaimOutcome{Result: record.AlreadyFired, Reason: recordedReason(r)}
			}
		}
	}
}

// skipped answers fire i as recorded skipped for its exclusion.
func (c *claimer) skipped(i int) {
	c.out[i] = record.ClaimOutcome{Result: record.Skipped, Reason: c.b.Fires[i].Exclusion.Error}
}
