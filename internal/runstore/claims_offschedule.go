package runstore

import (
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/record"
)

// Off-schedule runs are runs that are not the job's next cron slot: a run
// requested through the triggers collection, or an earlier slot offered
// again by a backfill. They go through the same claim batch as cron fires
// (FireClaim.OffSchedule); what differs is kept here.

// offScheduleFilter matches the lock of off-schedule fire i when the fire
// may take it: the document is sane, and, under a policy that takes the
// lock, the lock is free (or, taking it over, past its lease or a previous
// life's: holderFilter) and its fence below the fire's, so that fences still increase. The lock's last
// slot is neither required nor moved: the job's cron slots keep their
// order whatever runs in between.
func (c *claimer) offScheduleFilter(i int) bson.D {
	l := c.leases[i]
	f := bson.D{
		{Key: "_id", Value: l.JobID},
		{Key: "last_slot", Value: bson.D{{Key: "$type", Value: "date"}}},
	}
	if !l.Overlap.TakesLock() {
		return append(f, bson.E{Key: "state", Value: bson.D{{Key: "$in", Value: bson.A{record.LockFree, record.LockRunning}}}},
			bson.E{Key: "fence", Value: bson.D{{Key: "$type", Value: bson.A{"int", "long"}}, {Key: "$gte", Value: 0}}})
	}
	if l.Overlap.Buffers() {
		// Fires already waiting for the lock go first.
		f = append(f, bufferEmpty())
	}
	f = append(f, bson.E{Key: "fence", Value: bson.D{{Key: "$type", Value: bson.A{"int", "long"}}, {Key: "$gte", Value: 0}, {Key: "$lt", Value: l.Fence}}})
	return append(f, c.holderFilter(i)...)
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
			{Key: "claim", Value: l.Token},
			{Key: "acquired_at", Value: c.b.Now},
			{Key: "lease_until", Value: c.b.Now.Add(c.b.TTL)},
			{Key: "fence", Value: l.Fence},
			{Key: "updated_at", Value: c.b.Now},
		}},
		{Key: "$setOnInsert", Value: bson.D{{Key: "last_slot", Value: time.Time{}}}},
	}
}

// offScheduleFence is the fence of an off-schedule fire taken from its
// lock's buffer, whose fence is lockFence: the next one, above the run it
// waited for and not above the cron fires waiting behind it (each of which
// takes FenceOf(its slot), a slot that came while that run held the lock).
func offScheduleFence(lockFence int64) int64 { return lockFence + 1 }
