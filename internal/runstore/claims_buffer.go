package runstore

import (
	"context"
	"fmt"
	"strconv"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/jobs"
)

// bufferEmpty is the lock filter term of a claim under a policy that
// buffers: fires already waiting for the lock go first, so a claim takes
// the lock only when none waits.
func bufferEmpty() bson.E {
	return bson.E{Key: record.LockBufferField + ".0", Value: bson.D{{Key: "$exists", Value: false}}}
}

// toBuffer is a fire of a claim batch to put on its job's lock, with the
// lock as read.
type toBuffer struct {
	i int
	d record.ClaimDecision
}

// bufferAll puts the fires fs, whose records are this replica's, on their
// locks (held by a live run, or with fires already waiting), whatever
// their number in two requests: one bulkWrite setting their records
// buffered with what each fire names, then one appending each fire to its
// lock's buffer, conditional on the buffer having room, the fire not being
// there yet and (a cron fire) no later slot claimed — and under
// cancel_other on the same run still holding the lock, which the same
// write asks to stop. Its record keeps the fire's schedule as it was when
// the fire came due, for whichever replica runs it. It returns
// the fires to look at again: the next round reads their locks back and
// finds each either buffered (its run id in the buffer) or its lock
// changed in between (an off-schedule fire is only read back, see lock).
func (c *claimer) bufferAll(ctx context.Context, fs []toBuffer) (again []int) {
	var recs, pushes []mongo.WriteModel
	var sent []int
	for _, b := range fs {
		i, d := b.i, b.d
		l := c.leases[i]
		f := c.b.Fires[i]
		var category string
		if f.Schedule != nil {
			category = f.Schedule.Category
		}
		recs = append(recs, mongo.NewUpdateOneModel().
			SetFilter(bson.D{{Key: "_id", Value: l.RunID}, {Key: "claim", Value: l.Token},
				{Key: "status", Value: bson.D{{Key: "$in", Value: bson.A{record.StatusClaiming, record.StatusBuffered}}}}}).
			SetUpdate(bson.D{{Key: "$set", Value: bson.D{
				{Key: "status", Value: record.StatusBuffered},
				{Key: "reason", Value: d.Reason},
				{Key: record.RunScheduleField, Value: f.Schedule},
			}}}))
		limit := l.Overlap.BufferLimit()
		filter := bson.D{
			{Key: "_id", Value: l.JobID},
			{Key: record.LockBufferField + ".run_id", Value: bson.D{{Key: "$ne", Value: l.RunID}}},
			{Key: record.LockBufferField + "." + strconv.Itoa(limit-1), Value: bson.D{{Key: "$exists", Value: false}}},
		}
		if !l.OffSchedule {
			// A cron slot: none later claimed (one waits behind it).
			filter = append(filter, bson.E{Key: "last_slot", Value: bson.D{{Key: "$lt", Value: l.Slot}}})
		}
		set := bson.D{{Key: "updated_at", Value: c.b.Now}}
		if l.Overlap == jobs.OverlapCancelOther && d.HolderRunID != "" {
			// A live run holds the lock: this fire asks it to stop.
			filter = append(filter, bson.E{Key: "state", Value: record.LockRunning}, bson.E{Key: "run_id", Value: d.HolderRunID})
			set = append(set, bson.E{Key: record.LockCancelField, Value: bson.D{{Key: "run_id", Value: d.HolderRunID},
				{Key: "by", Value: l.RunID}, {Key: "at", Value: c.b.Now}}})
		}
		c.pushed[i] = true
		entry := record.BufferEntry{RunID: l.RunID, Slot: l.Slot, Category: category, At: c.b.Now, By: l.Instance, OffSchedule: l.OffSchedule}
		if !l.OffSchedule {
			entry.MaxRuns = f.MaxRuns
		}
		update := bson.D{{Key: "$push", Value: bson.D{{Key: record.LockBufferField, Value: entry}}}, {Key: "$set", Value: set}}
		if !l.OffSchedule {
			update = append(update, bson.E{Key: "$max", Value: bson.D{{Key: "last_slot", Value: l.Slot}}})
		}
		pushes = append(pushes, mongo.NewUpdateOneModel().SetFilter(filter).SetUpdate(update))
		sent = append(sent, i)
	}
	if len(sent) == 0 {
		return nil
	}
	for _, step := range []struct {
		coll   *mongo.Collection
		models []mongo.WriteModel
		what   string
	}{{c.s.runs, recs, "record the fire buffered"}, {c.s.locks, pushes, "buffer the fire on the lock"}} {
		// Ordered: two fires of one job in one batch join its buffer in
		// slot order (a write that matches nothing is no error).
		err := retrying(ctx, func() error {
			_, err := step.coll.BulkWrite(ctx, step.models, options.BulkWrite().SetOrdered(true))
			return err
		})
		if err == nil {
			continue
		}
		perOp, whole := splitBulkError(err)
		if whole != nil {
			for _, i := range sent {
				c.unknown(i, step.what, fmt.Errorf("in %s: %w", step.coll.Name(), whole))
			}
			return nil
		}
		// Refused one by one (a damaged document): those are claim errors.
		var left []int
		for k, i := range sent {
			if we, failed := perOp[k]; failed {
				c.out[i] = record.ClaimOutcome{Err: c.errf(i, step.what, we)}
				continue
			}
			left = append(left, i)
		}
		if step.coll == c.s.runs {
			// The pushes must go with their records only.
			var keep []mongo.WriteModel
			for k := range sent {
				if _, failed := perOp[k]; !failed {
					keep = append(keep, pushes[k])
				}
			}
			pushes = keep
		}
		sent = left
		if len(sent) == 0 {
			return nil
		}
	}
	return sent
}

// takenFromBuffer reports whether fire i's record was started by a taker
// of buffered fires (one find): its push landed and the fire left the
// buffer before the claim read the lock back.
func (c *claimer) takenFromBuffer(ctx context.Context, i int) bool {
	n, err := c.s.runs.CountDocuments(ctx, bson.D{{Key: "_id", Value: c.leases[i].RunID},
		{Key: "status", Value: bson.D{{Key: "$nin", Value: bson.A{record.StatusClaiming, record.StatusBuffered}}}}})
	return err == nil && n > 0
}
