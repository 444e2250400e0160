package jobs

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// bufferEmpty is the lock filter term of a claim under a policy that
// buffers: fires already waiting for the lock go first, so a claim takes
// the lock only when none waits.
func bufferEmpty() bson.E {
	return bson.E{Key: LockBufferField + ".0", Value: bson.D{{Key: "$exists", Value: false}}}
}

// bufferEntry is one fire waiting on a job's lock (LockBufferField): a
// cron slot, or an off-schedule run (OffSchedule).
type bufferEntry struct {
	RunID    string    `bson:"run_id"`
	Slot     time.Time `bson:"slot"`
	Category string    `bson:"category,omitempty"`
	At       time.Time `bson:"at"`
	By       string    `bson:"by"`
	// OffSchedule marks an off-schedule run (a run-now request): Slot is
	// its scheduled_at, not a cron slot; it neither moves the lock's last
	// slot nor is stale by its fence, which is offScheduleFence's.
	OffSchedule bool `bson:"off_schedule,omitempty"`
}

// bufferOf returns the buffer array of a lock document; ok is false when
// the field is there but is not an array (damage: TakeBuffered clears it).
func bufferOf(raw bson.Raw) (bson.Raw, bool) {
	val, err := raw.LookupErr(LockBufferField)
	if err != nil {
		return nil, true
	}
	arr, ok := val.ArrayOK()
	return bson.Raw(arr), ok
}

// bufferLen is the number of fires waiting on a lock document.
func bufferLen(raw bson.Raw) int {
	arr, _ := bufferOf(raw)
	if arr == nil {
		return 0
	}
	vals, err := bson.RawArray(arr).Values()
	if err != nil {
		return 0
	}
	return len(vals)
}

// bufferHas reports whether the run runID waits on a lock document.
func bufferHas(raw bson.Raw, runID string) bool {
	arr, _ := bufferOf(raw)
	if arr == nil {
		return false
	}
	vals, _ := bson.RawArray(arr).Values()
	for _, v := range vals {
		if d, ok := v.DocumentOK(); ok {
			if id, ok := lookupString(d, "run_id"); ok && id == runID {
				return true
			}
		}
	}
	return false
}

// cancelBy returns the run the lock's cancel request (LockCancelField)
// asks to stop and the run that asked.
func cancelBy(raw bson.Raw) (runID, by string) {
	val, err := raw.LookupErr(LockCancelField)
	if err != nil {
		return "", ""
	}
	return cancelOf(val)
}

// cancelOf reads a cancel request (LockCancelField's value).
func cancelOf(val bson.RawValue) (runID, by string) {
	d, ok := val.DocumentOK()
	if !ok {
		return "", ""
	}
	runID, _ = lookupString(d, "run_id")
	by, _ = lookupString(d, "by")
	return runID, by
}

// WaitingFire is a fire waiting on a job's lock (LockBufferField), as
// operators see it.
type WaitingFire struct {
	// RunID and ScheduledAt are the fire's (a run-now request's own, when
	// OffSchedule).
	RunID       string    `json:"run_id"`
	ScheduledAt time.Time `json:"scheduled_at"`
	// By is the replica that buffered it, At when.
	By          string    `json:"by"`
	At          time.Time `json:"at"`
	OffSchedule bool      `json:"off_schedule,omitempty"`
}

// Waiting returns how many fires wait on the lock and the first of them
// (nil when none does, or its entry is damaged).
func (l LockDoc) Waiting() (int, *WaitingFire) {
	arr, ok := l.Buffer.ArrayOK()
	if !ok {
		return 0, nil
	}
	vals, err := arr.Values()
	if err != nil || len(vals) == 0 {
		return 0, nil
	}
	var e bufferEntry
	if err := vals[0].Unmarshal(&e); err != nil || e.RunID == "" {
		return len(vals), nil
	}
	return len(vals), &WaitingFire{RunID: e.RunID, ScheduledAt: e.Slot.UTC(), By: e.By, At: e.At.UTC(), OffSchedule: e.OffSchedule}
}

// PendingCancel returns the run the lock's cancel request (cancel_other)
// asks to stop and the run replacing it; empty when none is pending.
func (l LockDoc) PendingCancel() (runID, by string) { return cancelOf(l.Cancel) }

// heldLive reports whether the lock seen as v is held by a live run that
// fire i may not take it from: running, within its lease, and not left by
// a previous incarnation of this instance.
func (c *claimer) heldLive(i int, v lockView) bool {
	l := c.leases[i]
	return v.state == LockRunning && !v.leaseUntil.Before(c.b.Now) &&
		(v.holder != l.Instance || v.incarnation == l.Incarnation)
}

// bufferedOutcome answers fire i, which waits on the lock seen as raw.
func (c *claimer) bufferedOutcome(i int, v lockView, raw bson.Raw, repaired []string) ClaimOutcome {
	l := c.leases[i]
	o := ClaimOutcome{Result: Buffered, Lease: l, Repaired: repaired, Reason: waitReason(v, l.Overlap)}
	if v.state == LockRunning {
		o.Holder, o.HolderRunID = v.holder, v.runID
	}
	if run, by := cancelBy(raw); by == l.RunID {
		o.CancelRunID = run
	}
	return o
}

// toBuffer is a fire of a claim batch to put on its job's lock, with the
// lock as read.
type toBuffer struct {
	i        int
	v        lockView
	raw      bson.Raw
	repaired []string
}

// bufferAll puts the fires fs, whose records are this replica's, on their
// locks (held by a live run, or with fires already waiting), whatever
// their number in two requests: one bulkWrite setting their records
// buffered with what each fire names, then one appending each fire to its
// lock's buffer, conditional on the buffer having room, the fire not being
// there yet and (a cron fire) no later slot claimed — and under
// cancel_other on the same run still holding the lock, which the same
// write asks to stop. A fire whose buffer is full is skipped. It returns
// the fires to look at again: the next round reads their locks back and
// finds each either buffered (its run id in the buffer) or its lock
// changed in between (an off-schedule fire is only read back, see lock).
func (c *claimer) bufferAll(ctx context.Context, fs []toBuffer) (again []int) {
	var recs, pushes []mongo.WriteModel
	var sent []int
	for _, b := range fs {
		i, v := b.i, b.v
		l := c.leases[i]
		f := c.b.Fires[i]
		limit := l.Overlap.bufferLimit()
		if n := bufferLen(b.raw); n >= limit {
			o := ClaimOutcome{Result: Skipped, Repaired: b.repaired,
				Reason: fmt.Sprintf("%d fire(s) already waiting for the lock (overlap %s, at most %d)", n, l.Overlap, limit)}
			if c.heldLive(i, v) {
				// Without a live holder the outcome names none: the caller
				// then takes up the waiting fires itself.
				o.Holder, o.HolderRunID = v.holder, v.runID
				o.Reason = fmt.Sprintf("%d fire(s) already waiting for the lock held by run %s of %s (overlap %s, at most %d)",
					n, v.runID, v.holder, l.Overlap, limit)
			}
			c.out[i] = o
			continue
		}
		recs = append(recs, mongo.NewUpdateOneModel().
			SetFilter(bson.D{{Key: "_id", Value: l.RunID}, {Key: "instance", Value: l.Instance}, {Key: "incarnation", Value: l.Incarnation},
				{Key: "status", Value: bson.D{{Key: "$in", Value: bson.A{StatusClaiming, StatusBuffered}}}}}).
			SetUpdate(bson.D{{Key: "$set", Value: bson.D{
				{Key: "status", Value: StatusBuffered},
				{Key: "reason", Value: waitReason(v, l.Overlap)},
				{Key: RunBufferedActionField, Value: f.Action},
				{Key: RunBufferedArgsField, Value: f.Args},
				{Key: RunBufferedCategoryField, Value: f.Category},
			}}}))
		filter := bson.D{
			{Key: "_id", Value: l.JobID},
			{Key: LockBufferField + ".run_id", Value: bson.D{{Key: "$ne", Value: l.RunID}}},
			{Key: LockBufferField + "." + strconv.Itoa(limit-1), Value: bson.D{{Key: "$exists", Value: false}}},
		}
		if !l.OffSchedule {
			// A cron slot: none later claimed (one waits behind it).
			filter = append(filter, bson.E{Key: "last_slot", Value: bson.D{{Key: "$lt", Value: l.Slot}}})
		}
		set := bson.D{{Key: "updated_at", Value: c.b.Now}}
		if l.Overlap == OverlapCancelOther && c.heldLive(i, v) {
			filter = append(filter, bson.E{Key: "state", Value: LockRunning}, bson.E{Key: "run_id", Value: v.runID})
			set = append(set, bson.E{Key: LockCancelField, Value: bson.D{{Key: "run_id", Value: v.runID},
				{Key: "by", Value: l.RunID}, {Key: "at", Value: c.b.Now}}})
		}
		c.pushed[i] = true
		entry := bufferEntry{RunID: l.RunID, Slot: l.Slot, Category: f.Category, At: c.b.Now, By: l.Instance, OffSchedule: l.OffSchedule}
		update := bson.D{{Key: "$push", Value: bson.D{{Key: LockBufferField, Value: entry}}}, {Key: "$set", Value: set}}
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
				c.out[i] = ClaimOutcome{Err: c.errf(i, step.what, we)}
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

// waitReason is the reason on the record of a fire waiting on the lock
// seen as v.
func waitReason(v lockView, o Overlap) string {
	if v.state == LockRunning {
		return fmt.Sprintf("waiting for run %s of %s to end (overlap %s)", v.runID, v.holder, o)
	}
	return fmt.Sprintf("waiting behind the fires buffered before it (overlap %s)", o)
}

// takenFromBuffer reports whether fire i's record was started by a taker
// of buffered fires (one find): its push landed and the fire left the
// buffer before the claim read the lock back.
func (c *claimer) takenFromBuffer(ctx context.Context, i int) bool {
	n, err := c.s.runs.CountDocuments(ctx, bson.D{{Key: "_id", Value: c.leases[i].RunID},
		{Key: "status", Value: bson.D{{Key: "$nin", Value: bson.A{StatusClaiming, StatusBuffered}}}}})
	return err == nil && n > 0
}
