package jobs

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// bufferEmpty is the lock filter term of a claim under a policy that
// buffers: fires already waiting for the lock go first, so a claim takes
// the lock only when none waits.
var bufferEmpty = bson.E{Key: LockBufferField + ".0", Value: bson.D{{Key: "$exists", Value: false}}}

// bufferEntry is one fire waiting on a job's lock (LockBufferField).
type bufferEntry struct {
	RunID    string    `bson:"run_id"`
	Slot     time.Time `bson:"slot"`
	Category string    `bson:"category,omitempty"`
	At       time.Time `bson:"at"`
	By       string    `bson:"by"`
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
	d, ok := val.DocumentOK()
	if !ok {
		return "", ""
	}
	runID, _ = lookupString(d, "run_id")
	by, _ = lookupString(d, "by")
	return runID, by
}

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
	o := ClaimOutcome{Result: Buffered, Lease: l, Repaired: repaired}
	if v.state == LockRunning {
		o.Holder, o.HolderRunID = v.holder, v.runID
		o.Reason = fmt.Sprintf("waiting for run %s of %s to end (overlap %s)", v.runID, v.holder, l.Overlap)
	} else {
		o.Reason = fmt.Sprintf("waiting behind the fires buffered before it (overlap %s)", l.Overlap)
	}
	if run, by := cancelBy(raw); by == l.RunID {
		o.CancelRunID = run
	}
	return o
}

// buffer puts fire i, whose record is this replica's, on the lock seen as
// raw (held by a live run, or with fires already waiting): its record is
// set buffered with what the fire names, then the fire is appended to the
// lock's buffer, conditional on the buffer having room, the fire not being
// there yet and no later slot claimed — and under cancel_other, on the
// same run still holding the lock, which the same write asks to stop. A
// full buffer makes the fire skipped. again: the lock changed in between;
// the claim tries again.
func (c *claimer) buffer(ctx context.Context, i int, v lockView, raw bson.Raw, repaired []string) (again bool) {
	l := c.leases[i]
	f := c.b.Fires[i]
	limit := l.Overlap.bufferLimit()
	if n := bufferLen(raw); n >= limit {
		o := ClaimOutcome{Result: Skipped, Repaired: repaired,
			Reason: fmt.Sprintf("%d fire(s) already waiting for the lock (overlap %s, at most %d)", n, l.Overlap, limit)}
		if c.heldLive(i, v) {
			// Without a live holder the outcome names none: the caller
			// then takes up the waiting fires itself.
			o.Holder, o.HolderRunID = v.holder, v.runID
			o.Reason = fmt.Sprintf("%d fire(s) already waiting for the lock held by run %s of %s (overlap %s, at most %d)",
				n, v.runID, v.holder, l.Overlap, limit)
		}
		c.out[i] = o
		return false
	}
	reason := fmt.Sprintf("waiting for the lock held by run %s of %s (overlap %s)", v.runID, v.holder, l.Overlap)
	rec := bson.D{{Key: "$set", Value: bson.D{
		{Key: "status", Value: StatusBuffered},
		{Key: "reason", Value: reason},
		{Key: RunBufferedActionField, Value: f.Action},
		{Key: RunBufferedArgsField, Value: f.Args},
		{Key: RunBufferedCategoryField, Value: f.Category},
	}}}
	mine := bson.D{{Key: "_id", Value: l.RunID}, {Key: "instance", Value: l.Instance}, {Key: "incarnation", Value: l.Incarnation},
		{Key: "status", Value: bson.D{{Key: "$in", Value: bson.A{StatusClaiming, StatusBuffered}}}}}
	if err := retrying(ctx, func() error {
		_, err := c.s.runs.UpdateOne(ctx, mine, rec)
		return err
	}); err != nil {
		c.unknown(i, "record the fire buffered", fmt.Errorf("in %s: %w", c.s.runs.Name(), err))
		return false
	}
	filter := bson.D{
		{Key: "_id", Value: l.JobID},
		{Key: "last_slot", Value: bson.D{{Key: "$lt", Value: l.Slot}}},
		{Key: LockBufferField + ".run_id", Value: bson.D{{Key: "$ne", Value: l.RunID}}},
		{Key: LockBufferField + "." + strconv.Itoa(limit-1), Value: bson.D{{Key: "$exists", Value: false}}},
	}
	set := bson.D{{Key: "updated_at", Value: c.b.Now}}
	cancel := l.Overlap == OverlapCancelOther && c.heldLive(i, v)
	if cancel {
		filter = append(filter, bson.E{Key: "state", Value: LockRunning}, bson.E{Key: "run_id", Value: v.runID})
		set = append(set, bson.E{Key: LockCancelField, Value: bson.D{{Key: "run_id", Value: v.runID},
			{Key: "by", Value: l.RunID}, {Key: "at", Value: c.b.Now}}})
	}
	entry := bufferEntry{RunID: l.RunID, Slot: l.Slot, Category: f.Category, At: c.b.Now, By: l.Instance}
	update := bson.D{{Key: "$push", Value: bson.D{{Key: LockBufferField, Value: entry}}},
		{Key: "$max", Value: bson.D{{Key: "last_slot", Value: l.Slot}}}, {Key: "$set", Value: set}}
	var matched int64
	err := retrying(ctx, func() error {
		res, err := c.s.locks.UpdateOne(ctx, filter, update, options.UpdateOne())
		if res != nil {
			matched = res.MatchedCount
		}
		return err
	})
	switch {
	case err != nil && transient(err):
		c.unknown(i, "buffer the fire on the lock", fmt.Errorf("in %s: %w", c.s.locks.Name(), err))
		return false
	case err != nil:
		c.out[i] = ClaimOutcome{Err: c.errf(i, "buffer the fire on the lock", err)}
		return false
	case matched == 0:
		return true // read the lock again: the push may have landed, or the lock changed
	}
	o := ClaimOutcome{Result: Buffered, Lease: l, Repaired: repaired, Holder: v.holder, HolderRunID: v.runID, Reason: reason}
	if cancel {
		o.CancelRunID = v.runID
	}
	c.out[i] = o
	return false
}
