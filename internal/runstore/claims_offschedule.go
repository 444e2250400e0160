package runstore

import (
	"context"
	"fmt"
	"time"

	"github.com/cronswap/cronswap/internal/record"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// Off-schedule runs are runs that are not the job's next cron slot: a run
// requested through the triggers collection, or an earlier slot offered
// again by a backfill. They go through the same claim batch as cron fires
// (FireClaim.OffSchedule); what differs is kept here.

// offScheduleFilter matches the lock of off-schedule fire i when the fire
// may take it: the document is sane, and, under a policy that takes the
// lock, the lock is free (or past its lease, or a previous life's) and its
// fence below the fire's, so that fences still increase. The lock's last
// slot is neither required nor moved: the job's cron slots keep their
// order whatever runs in between.
func (c *claimer) offScheduleFilter(i int) bson.D {
	l := c.leases[i]
	f := bson.D{
		{Key: "_id", Value: l.JobID},
		{Key: "state", Value: bson.D{{Key: "$in", Value: bson.A{record.LockFree, record.LockRunning}}}},
		{Key: "last_slot", Value: bson.D{{Key: "$type", Value: "date"}}},
	}
	if !l.Overlap.TakesLock() {
		return append(f, bson.E{Key: "fence", Value: bson.D{{Key: "$type", Value: bson.A{"int", "long"}}, {Key: "$gte", Value: 0}}})
	}
	if l.Overlap.Buffers() {
		// Fires already waiting for the lock go first.
		f = append(f, bufferEmpty())
	}
	return append(f,
		bson.E{Key: "fence", Value: bson.D{{Key: "$type", Value: bson.A{"int", "long"}}, {Key: "$gte", Value: 0}, {Key: "$lt", Value: l.Fence}}},
		bson.E{Key: "$or", Value: bson.A{
			bson.D{{Key: "state", Value: record.LockFree}},
			bson.D{{Key: "lease_until", Value: bson.D{{Key: "$lt", Value: c.b.Now}}}},
			bson.D{{Key: "holder", Value: c.b.Instance}, {Key: "incarnation", Value: bson.D{{Key: "$ne", Value: c.b.Incarnation}}}},
		}})
}

// offScheduleUpdate takes the lock for off-schedule fire i (or, under
// allow, only touches it); a job without a lock document gets one whose
// last slot is the zero time, so that no cron slot is refused for it.
func (c *claimer) offScheduleUpdate(i int) bson.D {
	l := c.leases[i]
	if !l.Overlap.TakesLock() {
		return bson.D{
			{Key: "$set", Value: bson.D{{Key: "updated_at", Value: c.b.Now}}},
			{Key: "$setOnInsert", Value: bson.D{
				{Key: "state", Value: record.LockFree}, {Key: "holder", Value: ""}, {Key: "run_id", Value: ""},
				{Key: "acquired_at", Value: time.Time{}}, {Key: "lease_until", Value: c.b.Now}, {Key: "fence", Value: int64(0)},
				{Key: "last_slot", Value: time.Time{}},
			}},
		}
	}
	return bson.D{
		{Key: "$set", Value: bson.D{
			{Key: "state", Value: record.LockRunning},
			{Key: "holder", Value: l.Instance},
			{Key: "incarnation", Value: l.Incarnation},
			{Key: "run_id", Value: l.RunID},
			{Key: "acquired_at", Value: c.b.Now},
			{Key: "lease_until", Value: c.b.Now.Add(c.b.TTL)},
			{Key: "fence", Value: l.Fence},
			{Key: "updated_at", Value: c.b.Now},
		}},
		{Key: "$setOnInsert", Value: bson.D{{Key: "last_slot", Value: time.Time{}}}},
	}
}

// offDecision is what the read-back of an off-schedule fire's lock
// decided.
type offDecision int

const (
	// offDecided: the fire's outcome is set.
	offDecided offDecision = iota
	// offAgain: the lock changed in between: take it again.
	offAgain
	// offBuffer: the fire is to wait on the lock (bufferAll).
	offBuffer
)

// decideOffSchedule answers off-schedule fire i from its sane lock
// document v (raw as read) read back after its upsert did not match (or
// its answer was lost, or its fire was put on the lock's buffer). Under a
// policy that buffers, a fire that may wait (FireClaim.Buffer) waits on a
// lock held by a live run or with fires waiting, like a cron fire; one
// that may not is skipped then.
func (c *claimer) decideOffSchedule(ctx context.Context, i int, v lockView, raw bson.Raw, repaired []string) offDecision {
	l := c.leases[i]
	waits := l.Overlap.Buffers() && c.b.Fires[i].Buffer
	switch {
	case !l.Overlap.TakesLock():
		// The update only touches a sane document: whether it landed or
		// not, nothing else decides the fire.
		c.out[i] = record.ClaimOutcome{Result: record.Acquired, Lease: l, Repaired: repaired}
	case v.runID == l.RunID && v.state == record.LockRunning && v.holder == l.Instance && v.incarnation == l.Incarnation:
		c.out[i] = record.ClaimOutcome{Result: record.Acquired, Lease: l, Repaired: repaired} // landed, answer lost
	case waits && bufferHas(raw, l.RunID):
		c.out[i] = c.bufferedOutcome(i, v, raw, repaired) // on the lock
	case waits && c.pushed[i] && c.takenFromBuffer(ctx, i):
		c.out[i] = record.ClaimOutcome{Result: record.Buffered, Lease: l, Repaired: repaired,
			Reason: fmt.Sprintf("buffered and taken up at once (overlap %s)", l.Overlap)}
	case waits && (c.heldLive(i, v) || bufferLen(raw) > 0):
		return offBuffer
	case c.heldLive(i, v):
		c.out[i] = record.ClaimOutcome{Result: record.Skipped, Holder: v.holder, HolderRunID: v.runID, Repaired: repaired,
			Reason: fmt.Sprintf("run %s of %s still holds the lock", v.runID, v.holder)}
	case l.Overlap.Buffers() && bufferLen(raw) > 0:
		// No live holder: the caller takes up the waiting fires.
		c.out[i] = record.ClaimOutcome{Result: record.Skipped, Repaired: repaired,
			Reason: fmt.Sprintf("%d fire(s) waiting for the lock (overlap %s)", bufferLen(raw), l.Overlap)}
	case v.fence >= l.Fence:
		// This replica's clock is behind the fence of the lock's last
		// acquisition (another replica's claim time, or a slot): the run
		// takes the next fence instead, which its record gets when it is
		// set running (closeUnrun).
		c.leases[i].Fence = v.fence + 1
		c.pushed[i] = false
		return offAgain
	default:
		c.pushed[i] = false // its push did not land: free by now
		return offAgain
	}
	return offDecided
}

// offScheduleFence is the fence of an off-schedule fire taken from its
// lock's buffer, whose fence is lockFence: the next one, above the run it
// waited for and not above the cron fires waiting behind it (each of which
// takes FenceOf(its slot), a slot that came while that run held the lock).
func offScheduleFence(lockFence int64) int64 { return lockFence + 1 }
