package runstore

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/record"
)

// The writes of job_locks, job_runs and job_pauses that operators and
// requests ask for, beside the fire path's own: the CLI (internal/admin),
// the status page and the triggers sink call these instead of writing the
// collections themselves.

// ReleaseLock forces the lock of jobID free, an operator's override
// (`cronswap locks release`): only while it is still held with fence (the
// acquisition the operator confirmed), else record.ErrLockChanged. The
// holder's next renewal finds the lock no longer its own and cancels its
// action (docs/locks.md).
func (s *Store) ReleaseLock(ctx context.Context, jobID string, fence int64, now time.Time) error {
	res, err := s.locks.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: jobID}, {Key: "state", Value: record.LockRunning}, {Key: "fence", Value: fence}},
		bson.D{{Key: "$set", Value: bson.D{
			{Key: "state", Value: record.LockFree},
			{Key: "holder", Value: ""},
			{Key: "run_id", Value: ""},
			{Key: "lease_until", Value: now},
			{Key: "updated_at", Value: now},
		}}})
	if err != nil {
		return fmt.Errorf("release lock %q in %s: %w", jobID, s.locks.Name(), err)
	}
	if res.MatchedCount == 0 {
		return fmt.Errorf("lock %q: %w", jobID, record.ErrLockChanged)
	}
	return nil
}

// ResumePaused clears the pause of job jobID after consecutive failed
// slots (job_pauses): state resumed, with when and by whom. It reports
// whether the job was paused.
func (s *Store) ResumePaused(ctx context.Context, jobID, by string, now time.Time) (bool, error) {
	res, err := s.pausesColl().UpdateOne(ctx,
		bson.D{{Key: "_id", Value: jobID}, {Key: "state", Value: record.PauseStatePaused}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "state", Value: record.PauseStateResumed}, {Key: "resumed_at", Value: now},
			{Key: "resumed_by", Value: by}, {Key: "updated_at", Value: now}}}})
	if err != nil {
		return false, fmt.Errorf("resume job %s in %s: %w", jobID, record.PausesCollection, err)
	}
	return res.ModifiedCount > 0, nil
}

// ForgetMissed deletes the missed record rec when it covers its one slot
// only, so that the slot can be backfilled under its own run id (the
// unique (job_id, scheduled_at) index would refuse the run's record beside
// it); the backfilled run's record then accounts for the slot. The delete
// is conditional on the record being that one-slot missed record still. It
// reports whether the record is gone.
func (s *Store) ForgetMissed(ctx context.Context, rec record.RunDoc) (bool, error) {
	if rec.Status != record.StatusMissed || rec.Count != 1 {
		return false, nil
	}
	res, err := s.runs.DeleteOne(ctx, bson.D{{Key: "_id", Value: rec.ID}, {Key: "status", Value: record.StatusMissed},
		{Key: "count", Value: int64(1)}})
	if err != nil {
		return false, fmt.Errorf("delete missed record %s of job %s in %s: %w", rec.ID, rec.JobID, s.runs.Name(), err)
	}
	return res.DeletedCount == 1, nil
}
