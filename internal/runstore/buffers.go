package runstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/lifetime"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/schedule"
)

// bufferOf returns the buffer array of a lock document; ok is false when
// the field is there but is not an array (damage: TakeBuffered clears it).
func bufferOf(raw bson.Raw) (bson.Raw, bool) {
	val, err := raw.LookupErr(record.LockBufferField)
	if err != nil {
		return nil, true
	}
	arr, ok := val.ArrayOK()
	return bson.Raw(arr), ok
}

// cancelBy returns the run the lock's cancel request (LockCancelField)
// asks to stop and the run that asked.
func cancelBy(raw bson.Raw) (runID, by string) {
	val, err := raw.LookupErr(record.LockCancelField)
	if err != nil {
		return "", ""
	}
	return record.CancelOf(val)
}

// maxTakeRounds bounds the entries one TakeBuffered call passes over
// (stale or no longer buffered) before it gives up until the next call.
const maxTakeRounds = 10

// TakeBuffered implements record.Store. Commands: one find of the lock;
// when a fire can be taken, one update of the lock, one findAndModify of
// the record, one update removing the fire from the buffer. A cron fire
// gets the fence FenceOf(its slot); an off-schedule run (a run-now request)
// the lock's fence plus one and keeps its own run id and scheduled_at. An
// entry whose
// record is no longer buffered (it ran, or was abandoned after a taker
// died between the two writes) or whose slot is older than the lock's
// fence (a later run took the lock first) is removed, its lock freed, and
// the next one tried. A cron fire is taken only while the job's run count
// is below the max_runs it came due under, and counts one more run in the
// lock's write; past it, it is recorded skipped (max_runs reached).
func (s *Store) TakeBuffered(ctx context.Context, jobID string, t record.BufferTake) (*record.BufferedRun, error) {
	for range maxTakeRounds {
		raw, err := s.locks.FindOne(ctx, bson.D{{Key: "_id", Value: jobID}}).Raw()
		now := t.Clock()
		if errors.Is(err, mongo.ErrNoDocuments) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read lock of %s in %s: %w", jobID, s.locks.Name(), err)
		}
		v := record.InspectLock(raw, now, t.TTL)
		if len(v.Damage) > 0 {
			return nil, nil // the next claim of the job repairs it
		}
		if v.HeldLive(t.Instance, t.Incarnation, now) {
			return nil, nil // the holder takes the next fire when it ends
		}
		arr, _ := bufferOf(raw)
		if !v.BufferOK {
			s.log.Error("lock document has a buffer that is not an array; cleared", "job_id", jobID,
				"collection", s.locks.Name(), "field", record.LockBufferField)
			_, err := s.locks.UpdateOne(ctx, bson.D{{Key: "_id", Value: jobID}, {Key: record.LockBufferField, Value: raw.Lookup(record.LockBufferField)}},
				bson.D{{Key: "$unset", Value: bson.D{{Key: record.LockBufferField, Value: ""}}}})
			if err != nil {
				return nil, fmt.Errorf("clear the buffer of %s in %s: %w", jobID, s.locks.Name(), err)
			}
			continue
		}
		if arr == nil {
			return nil, nil
		}
		vals, err := bson.RawArray(arr).Values()
		if err != nil || len(vals) == 0 {
			return nil, nil // empty
		}
		first := vals[0]
		var e record.BufferEntry
		if err := first.Unmarshal(&e); err != nil || e.RunID == "" || e.Slot.IsZero() {
			s.log.Error("lock document has a bad buffered fire; removed", "job_id", jobID, "collection", s.locks.Name(),
				"field", record.LockBufferField, "entry", first.String())
			if err := s.popFirst(ctx, jobID, first); err != nil {
				return nil, err
			}
			continue
		}
		e.Slot = e.Slot.UTC()
		fence, fenceTerm := record.FenceOf(e.Slot), bson.E{Key: "fence", Value: bson.D{{Key: "$lte", Value: record.FenceOf(e.Slot)}}}
		if e.OffSchedule {
			// Never stale: the next fence after the lock's, as read.
			fence, fenceTerm = offScheduleFence(v.Fence), bson.E{Key: "fence", Value: v.Fence}
		} else if fence < v.Fence {
			s.log.Warn("buffered fire older than the lock's last run; recorded skipped", "job_id", jobID,
				"scheduled_at", e.Slot, "run_id", e.RunID, "fence", v.Fence)
			if err := s.dropBuffered(ctx, jobID, e, now, "a later run took the lock before this buffered fire"); err != nil {
				return nil, err
			}
			continue
		} else if e.MaxRuns > 0 && v.Runs >= int64(e.MaxRuns) {
			s.log.Info("buffered fire not run: the job's run count reached its max_runs; recorded skipped", "job_id", jobID,
				"scheduled_at", e.Slot, "run_id", e.RunID, "runs", v.Runs, "max_runs", e.MaxRuns)
			if err := s.dropBuffered(ctx, jobID, e, now, lifetime.ReasonMaxRuns); err != nil {
				return nil, err
			}
			continue
		}
		// The lock, for the first fire waiting: a new acquisition, with a
		// token of its own.
		token := newToken()
		free := bson.A{
			bson.D{{Key: "state", Value: record.LockFree}},
			bson.D{{Key: "lease_until", Value: bson.D{{Key: "$lt", Value: now}}}},
			bson.D{{Key: "holder", Value: t.Instance}, {Key: "incarnation", Value: bson.D{{Key: "$ne", Value: t.Incarnation}}}},
		}
		update := bson.D{{Key: "$set", Value: bson.D{
			{Key: "state", Value: record.LockRunning}, {Key: "holder", Value: t.Instance}, {Key: "incarnation", Value: t.Incarnation},
			{Key: "run_id", Value: e.RunID}, {Key: "claim", Value: token}, {Key: "acquired_at", Value: now},
			{Key: "lease_until", Value: now.Add(t.TTL)},
			{Key: "fence", Value: fence}, {Key: "updated_at", Value: now},
		}}, {Key: "$unset", Value: bson.D{{Key: record.LockCancelField, Value: ""}}}}
		filter := bson.D{{Key: "_id", Value: jobID}, {Key: record.LockBufferField + ".0.run_id", Value: e.RunID},
			fenceTerm, {Key: "$or", Value: free}}
		if !e.OffSchedule {
			update = append(update, bson.E{Key: "$max", Value: bson.D{{Key: "last_slot", Value: e.Slot}}}, countRun())
			filter = append(filter, runsBelow(e.MaxRuns)...)
		}
		res, err := s.locks.UpdateOne(ctx, filter, update)
		if err != nil {
			return nil, fmt.Errorf("take lock of %s for buffered run %s in %s: %w", jobID, e.RunID, s.locks.Name(), err)
		}
		if res.MatchedCount == 0 {
			return nil, nil // taken by another replica, or the lock changed: its taker goes on
		}
		lease := record.Lease{JobID: jobID, Slot: e.Slot, Instance: t.Instance, Incarnation: t.Incarnation,
			RunID: e.RunID, Fence: fence, Overlap: t.Overlap, OffSchedule: e.OffSchedule, Token: token, Until: now.Add(t.TTL)}
		// The record, from buffered to running: exactly one taker wins it.
		started := t.Clock()
		rec, err := s.runs.FindOneAndUpdate(ctx,
			bson.D{{Key: "_id", Value: e.RunID}, {Key: "status", Value: record.StatusBuffered}},
			bson.D{{Key: "$set", Value: bson.D{
				{Key: "status", Value: record.StatusRunning}, {Key: "instance", Value: t.Instance}, {Key: "incarnation", Value: t.Incarnation},
				{Key: "claim", Value: token}, {Key: "fence", Value: fence}, {Key: "started_at", Value: started},
				{Key: "lease_until", Value: now.Add(t.TTL)},
				{Key: "expire_at", Value: started.Add(s.retention)},
			}}, {Key: "$unset", Value: bson.D{{Key: "reason", Value: ""}}}},
			options.FindOneAndUpdate().SetReturnDocument(options.After)).Raw()
		if errors.Is(err, mongo.ErrNoDocuments) {
			// Not buffered any more: the fire was decided before (a taker
			// died after starting it). Remove it and free the lock.
			s.log.Warn("buffered fire's record is no longer buffered; removed from the buffer", "job_id", jobID,
				"scheduled_at", e.Slot, "run_id", e.RunID)
			if err := s.pullBuffered(ctx, jobID, e.RunID); err != nil {
				return nil, err
			}
			if err := s.freeTaken(ctx, lease, now); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			// The lock is this replica's for the fire; its lease passes
			// and the fire is taken again (its record is still buffered).
			return nil, fmt.Errorf("start buffered run %s in %s: %w", e.RunID, s.runs.Name(), err)
		}
		if err := s.pullBuffered(ctx, jobID, e.RunID); err != nil {
			// Harmless: the entry is removed by the next take, which finds
			// its record no longer buffered.
			s.log.Warn("could not remove a started fire from the buffer", "job_id", jobID, "run_id", e.RunID, "error", err)
		}
		return &record.BufferedRun{Lease: lease, Schedule: bufferedSchedule(jobID, rec)}, nil
	}
	return nil, nil
}

// bufferedSchedule is the schedule a buffered fire's record rec says it
// came due under (RunScheduleField); a record written by an earlier
// version keeps only its action, args and category.
func bufferedSchedule(jobID string, rec bson.Raw) schedule.Schedule {
	var d struct {
		Schedule *schedule.Schedule `bson:"schedule"`
		Action   string             `bson:"overlap_action"`
		Args     string             `bson:"overlap_args"`
		Category string             `bson:"overlap_category"`
	}
	if err := bson.Unmarshal(rec, &d); err == nil && d.Schedule != nil {
		return *d.Schedule
	}
	return schedule.Schedule{ID: jobID, Enabled: true, Job: d.Action, Args: d.Args, Category: d.Category}
}

// popFirst removes the first buffered entry of jobID if it is still val.
func (s *Store) popFirst(ctx context.Context, jobID string, val bson.RawValue) error {
	_, err := s.locks.UpdateOne(ctx, bson.D{{Key: "_id", Value: jobID}, {Key: record.LockBufferField + ".0", Value: val}},
		bson.D{{Key: "$pop", Value: bson.D{{Key: record.LockBufferField, Value: -1}}}})
	if err != nil {
		return fmt.Errorf("remove a bad buffered fire of %s in %s: %w", jobID, s.locks.Name(), err)
	}
	return nil
}

// pullBuffered removes the run runID from the buffer of jobID.
func (s *Store) pullBuffered(ctx context.Context, jobID, runID string) error {
	_, err := s.locks.UpdateOne(ctx, bson.D{{Key: "_id", Value: jobID}},
		bson.D{{Key: "$pull", Value: bson.D{{Key: record.LockBufferField, Value: bson.D{{Key: "run_id", Value: runID}}}}}})
	if err != nil {
		return fmt.Errorf("remove buffered run %s of %s in %s: %w", runID, jobID, s.locks.Name(), err)
	}
	return nil
}

// freeTaken frees the lock taken for a buffered fire that is not run.
func (s *Store) freeTaken(ctx context.Context, l record.Lease, now time.Time) error {
	_, err := s.locks.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: l.JobID}, {Key: "run_id", Value: l.RunID}, {Key: "state", Value: record.LockRunning},
			{Key: "claim", Value: l.Token}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "state", Value: record.LockFree}, {Key: "holder", Value: ""},
			{Key: "incarnation", Value: ""}, {Key: "run_id", Value: ""}, {Key: "lease_until", Value: now},
			{Key: "updated_at", Value: now}}}})
	if err != nil {
		return fmt.Errorf("free lock of %s in %s: %w", l.JobID, s.locks.Name(), err)
	}
	return nil
}

// dropBuffered removes a buffered fire that cannot run any more and
// records it skipped with why.
func (s *Store) dropBuffered(ctx context.Context, jobID string, e record.BufferEntry, now time.Time, why string) error {
	_, err := s.runs.UpdateOne(ctx, bson.D{{Key: "_id", Value: e.RunID}, {Key: "status", Value: record.StatusBuffered}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: record.StatusSkipped}, {Key: "reason", Value: why},
			{Key: "error", Value: why}, {Key: "fence", Value: int64(0)}, {Key: "ended_at", Value: now},
			{Key: "expire_at", Value: now.Add(s.retention)}}},
			{Key: "$unset", Value: bson.D{{Key: "lease_until", Value: ""}}}})
	if err != nil {
		return fmt.Errorf("record buffered run %s skipped in %s: %w", e.RunID, s.runs.Name(), err)
	}
	return s.pullBuffered(ctx, jobID, e.RunID)
}

// PendingBuffers implements record.Store: one find on job_locks.
func (s *Store) PendingBuffers(ctx context.Context, now time.Time, limit int) ([]string, error) {
	cur, err := s.locks.Find(ctx, bson.D{
		{Key: record.LockBufferField + ".0", Value: bson.D{{Key: "$exists", Value: true}}},
		{Key: "$or", Value: bson.A{bson.D{{Key: "state", Value: record.LockFree}}, bson.D{{Key: "lease_until", Value: bson.D{{Key: "$lt", Value: now}}}}}},
	}, options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}).SetLimit(int64(limit)))
	if err != nil {
		return nil, fmt.Errorf("find locks with buffered fires in %s: %w", s.locks.Name(), err)
	}
	var docs []struct {
		ID string `bson:"_id"`
	}
	if err := cur.All(ctx, &docs); err != nil {
		return nil, fmt.Errorf("find locks with buffered fires in %s: %w", s.locks.Name(), err)
	}
	ids := make([]string, len(docs))
	for i, d := range docs {
		ids[i] = d.ID
	}
	return ids, nil
}

// CancelRequests implements record.Store: one find on job_locks by _id.
func (s *Store) CancelRequests(ctx context.Context, leases []record.Lease) (map[string]string, error) {
	if len(leases) == 0 {
		return nil, nil
	}
	jobs, runs := bson.A{}, bson.A{}
	for _, l := range leases {
		jobs = append(jobs, l.JobID)
		runs = append(runs, l.RunID)
	}
	cur, err := s.locks.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: jobs}}},
		{Key: record.LockCancelField + ".run_id", Value: bson.D{{Key: "$in", Value: runs}}}},
		options.Find().SetProjection(bson.D{{Key: record.LockCancelField, Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("read cancel requests in %s: %w", s.locks.Name(), err)
	}
	defer cur.Close(ctx)
	out := map[string]string{}
	for cur.Next(ctx) {
		if run, by := cancelBy(cur.Current); run != "" {
			out[run] = by
		}
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("read cancel requests in %s: %w", s.locks.Name(), err)
	}
	return out, nil
}
