package jobs

import (
	"fmt"
	"time"

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
		{Key: "state", Value: bson.D{{Key: "$in", Value: bson.A{LockFree, LockRunning}}}},
		{Key: "last_slot", Value: bson.D{{Key: "$type", Value: "date"}}},
	}
	if !l.Overlap.takesLock() {
		return append(f, bson.E{Key: "fence", Value: bson.D{{Key: "$type", Value: bson.A{"int", "long"}}, {Key: "$gte", Value: 0}}})
	}
	return append(f,
		bson.E{Key: "fence", Value: bson.D{{Key: "$type", Value: bson.A{"int", "long"}}, {Key: "$gte", Value: 0}, {Key: "$lt", Value: l.Fence}}},
		bson.E{Key: "$or", Value: bson.A{
			bson.D{{Key: "state", Value: LockFree}},
			bson.D{{Key: "lease_until", Value: bson.D{{Key: "$lt", Value: c.b.Now}}}},
			bson.D{{Key: "holder", Value: c.b.Instance}, {Key: "incarnation", Value: bson.D{{Key: "$ne", Value: c.b.Incarnation}}}},
		}})
}

// offScheduleUpdate takes the lock for off-schedule fire i (or, under
// allow, only touches it); a job without a lock document gets one whose
// last slot is the zero time, so that no cron slot is refused for it.
func (c *claimer) offScheduleUpdate(i int) bson.D {
	l := c.leases[i]
	if !l.Overlap.takesLock() {
		return bson.D{
			{Key: "$set", Value: bson.D{{Key: "updated_at", Value: c.b.Now}}},
			{Key: "$setOnInsert", Value: bson.D{
				{Key: "state", Value: LockFree}, {Key: "holder", Value: ""}, {Key: "run_id", Value: ""},
				{Key: "acquired_at", Value: time.Time{}}, {Key: "lease_until", Value: c.b.Now}, {Key: "fence", Value: int64(0)},
				{Key: "last_slot", Value: time.Time{}},
			}},
		}
	}
	return bson.D{
		{Key: "$set", Value: bson.D{
			{Key: "state", Value: LockRunning},
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

// decideOffSchedule answers off-schedule fire i from its sane lock
// document v read back after its upsert did not match (or its answer was
// lost); false means "changed in between: try again".
func (c *claimer) decideOffSchedule(i int, v lockView, repaired []string) bool {
	l := c.leases[i]
	switch {
	case !l.Overlap.takesLock():
		// The update only touches a sane document: whether it landed or
		// not, nothing else decides the fire.
		c.out[i] = ClaimOutcome{Result: Acquired, Lease: l, Repaired: repaired}
	case v.runID == l.RunID && v.state == LockRunning && v.holder == l.Instance && v.incarnation == l.Incarnation:
		c.out[i] = ClaimOutcome{Result: Acquired, Lease: l, Repaired: repaired} // landed, answer lost
	case v.state == LockRunning && !v.leaseUntil.Before(c.b.Now) &&
		(v.holder != l.Instance || v.incarnation == l.Incarnation):
		c.out[i] = ClaimOutcome{Result: Skipped, Holder: v.holder, HolderRunID: v.runID, Repaired: repaired,
			Reason: fmt.Sprintf("run %s of %s still holds the lock", v.runID, v.holder)}
	case v.fence >= l.Fence:
		// This replica's clock is behind the fence of the lock's last
		// acquisition (another replica's claim time, or a slot): the run
		// takes the next fence instead, which its record gets when it is
		// set running (closeUnrun).
		c.leases[i].Fence = v.fence + 1
		return false
	default:
		return false
	}
	return true
}
