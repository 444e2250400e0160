package runstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/record"
)

// attemptEndUpdate is the end of an attempt of a job that retries (set
// holds the end's fields): the attempt number, the entry of the attempts
// list and, when another attempt follows, when it is due — also as
// lease_until, so that the (status, lease_until) index finds due retries.
func (s *Store) attemptEndUpdate(e record.LeaseEnd, set bson.D) bson.D {
	end := e.End
	entry := bson.D{{Key: "attempt", Value: e.Lease.Attempt}, {Key: "fence", Value: e.Lease.Fence},
		{Key: "instance", Value: e.Lease.Instance}}
	if !end.StartedAt.IsZero() {
		entry = append(entry, bson.E{Key: "started_at", Value: end.StartedAt})
	}
	entry = append(entry, bson.E{Key: "ended_at", Value: end.EndedAt}, bson.E{Key: "status", Value: end.Status})
	if end.Error != "" {
		entry = append(entry, bson.E{Key: "error", Value: end.Error})
	}
	if end.ExitCode != nil {
		entry = append(entry, bson.E{Key: "exit_code", Value: *end.ExitCode})
	}
	if end.AnswerStatus != 0 {
		entry = append(entry, bson.E{Key: "answer_status", Value: end.AnswerStatus})
	}
	set = append(set, bson.E{Key: record.FieldAttempt, Value: e.Lease.Attempt})
	if end.Status == record.StatusRetrying {
		set = append(set, bson.E{Key: record.FieldRetryAt, Value: end.RetryAt}, bson.E{Key: "lease_until", Value: end.RetryAt})
		if end.Schedule != nil {
			// The next attempt, on whichever replica, runs it as it came due.
			set = append(set, bson.E{Key: record.RunScheduleField, Value: end.Schedule})
		}
	}
	return bson.D{{Key: "$set", Value: set}, {Key: "$push", Value: bson.D{{Key: record.FieldAttempts, Value: entry}}}}
}

// holdForRetry is the lock write of an attempt that ended retrying under
// a policy that takes the lock: the slot's run keeps the lock (fenced by
// run_id) until the next attempt is due plus a lease, so later slots are
// skipped meanwhile as they are while a run lasts, and fences stay in
// slot order.
func holdForRetry(e record.LeaseEnd) mongo.WriteModel {
	l, end := e.Lease, e.End
	return mongo.NewUpdateOneModel().
		SetFilter(bson.D{{Key: "_id", Value: l.JobID}, {Key: "run_id", Value: l.RunID}, {Key: "claim", Value: l.Token},
			{Key: "state", Value: record.LockRunning}}).
		SetUpdate(bson.D{{Key: "$set", Value: bson.D{
			{Key: "lease_until", Value: end.HoldUntil}, {Key: "last_outcome", Value: record.StatusRetrying},
			{Key: "last_ended_at", Value: end.EndedAt}, {Key: "updated_at", Value: end.EndedAt},
		}}})
}

// ClaimRetry implements record.Store.
func (s *Store) ClaimRetry(ctx context.Context, c record.RetryClaim) (record.Lease, error) {
	runID := c.RunID
	if runID == "" {
		runID = record.RunID(c.JobID, c.Slot)
	}
	// Each attempt is an acquisition of its own, with a token of its own.
	l := record.Lease{JobID: c.JobID, Slot: c.Slot.UTC(), Instance: c.Instance, Incarnation: c.Incarnation,
		RunID: runID, Fence: record.AttemptFence(c.Slot, c.Attempt), Overlap: c.Overlap, Attempt: c.Attempt,
		Token: newToken(), Until: c.Now.Add(c.TTL)}
	until := l.Until
	filter := bson.D{{Key: "_id", Value: runID}, {Key: "status", Value: record.StatusRetrying}, {Key: record.FieldAttempt, Value: c.Attempt - 1}}
	update := bson.D{
		{Key: "$set", Value: bson.D{
			{Key: "status", Value: record.StatusRunning}, {Key: record.FieldAttempt, Value: c.Attempt}, {Key: "fence", Value: l.Fence},
			{Key: "instance", Value: c.Instance}, {Key: "incarnation", Value: c.Incarnation}, {Key: "claim", Value: l.Token},
			{Key: "started_at", Value: c.Now}, {Key: "lease_until", Value: until},
			{Key: "expire_at", Value: until.Add(s.retention)},
		}},
		{Key: "$unset", Value: bson.D{{Key: "ended_at", Value: ""}, {Key: "error", Value: ""}, {Key: "exit_code", Value: ""},
			{Key: "stdout", Value: ""}, {Key: "stderr", Value: ""}, {Key: "answer_status", Value: ""}, {Key: "answer", Value: ""},
			{Key: record.FieldRetryAt, Value: ""}, {Key: "end_observed", Value: ""}, {Key: "ended_after", Value: ""}}},
	}
	for wait := retryFirst; ; wait = min(2*wait, retryMax) {
		res, err := s.runs.UpdateOne(ctx, filter, update)
		if err == nil && res.MatchedCount == 0 {
			return record.Lease{}, fmt.Errorf("attempt %d of run %s: %w", c.Attempt, runID, record.ErrRetryTaken)
		}
		if err == nil {
			break
		}
		if !transient(err) {
			return record.Lease{}, fmt.Errorf("claim attempt %d of run %s in %s: %w", c.Attempt, runID, s.runs.Name(), err)
		}
		// The answer was lost: the record tells whether the update landed,
		// and whether it may be sent again (still retrying, at the attempt
		// before).
		mine, pending, rerr := s.retryLanded(ctx, l)
		switch {
		case rerr != nil:
			return record.Lease{}, fmt.Errorf("claim attempt %d of run %s in %s: %w (read back: %w)", c.Attempt, runID, s.runs.Name(), err, rerr)
		case mine:
		case !pending:
			return record.Lease{}, fmt.Errorf("attempt %d of run %s: %w", c.Attempt, runID, record.ErrRetryTaken)
		case !sleepCtx(ctx, wait):
			return record.Lease{}, fmt.Errorf("claim attempt %d of run %s in %s: %w", c.Attempt, runID, s.runs.Name(), err)
		default:
			continue
		}
		break
	}
	if !c.Overlap.TakesLock() {
		return l, nil
	}
	var matched int64
	err := retrying(ctx, func() error {
		res, err := s.locks.UpdateOne(ctx,
			bson.D{{Key: "_id", Value: c.JobID}, {Key: "run_id", Value: runID}, {Key: "state", Value: record.LockRunning},
				{Key: record.LockCancelField + ".run_id", Value: bson.D{{Key: "$ne", Value: runID}}}},
			bson.D{{Key: "$set", Value: bson.D{
				{Key: "holder", Value: c.Instance}, {Key: "incarnation", Value: c.Incarnation}, {Key: "claim", Value: l.Token},
				{Key: "fence", Value: l.Fence}, {Key: "acquired_at", Value: c.Now},
				{Key: "lease_until", Value: until}, {Key: "updated_at", Value: c.Now},
			}}})
		if res != nil {
			matched = res.MatchedCount
		}
		return err
	})
	if err == nil && matched == 1 {
		return l, nil
	}
	if err == nil {
		if by, replaced := s.replacedInBackoff(ctx, c.JobID, runID); replaced {
			return record.Lease{}, s.endReplaced(ctx, c, l, by)
		}
	}
	// The lock is not the slot's run's any more (or could not be
	// written): the attempt is recorded failed and not run, or left to
	// the sweep when even that cannot be written.
	why := record.ErrRetryLockLost.Error() + ": taken over after its lease or released by an operator"
	if err != nil {
		why = "could not take the job's lock for the attempt: " + err.Error()
	}
	_, uerr := s.runs.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: runID}, {Key: "status", Value: record.StatusRunning}, {Key: record.FieldAttempt, Value: c.Attempt},
			{Key: "claim", Value: l.Token}},
		bson.D{{Key: "$set", Value: withNotice(bson.D{{Key: "status", Value: record.StatusFailed}, {Key: "ended_at", Value: c.Now},
			{Key: "error", Value: why}, {Key: "expire_at", Value: c.Now.Add(s.retention)}}, record.StatusFailed, "", c.Now)},
			{Key: "$unset", Value: bson.D{{Key: "lease_until", Value: ""}}}})
	if uerr != nil {
		return record.Lease{}, fmt.Errorf("attempt %d of run %s: %w; recording it failed: %w", c.Attempt, runID, record.ErrRetryLockLost, uerr)
	}
	s.noticed()
	return record.Lease{}, fmt.Errorf("attempt %d of run %s: %w", c.Attempt, runID, record.ErrRetryLockLost)
}

// retryLanded reads l's record back after a lost answer: mine, it is
// running at l's attempt under l's token; pending, it
// is still retrying at the attempt before (the claim may be sent again).
func (s *Store) retryLanded(ctx context.Context, l record.Lease) (mine, pending bool, err error) {
	var d record.RunDoc
	err = retrying(ctx, func() error {
		d = record.RunDoc{}
		return s.runs.FindOne(ctx, bson.D{{Key: "_id", Value: l.RunID}}).Decode(&d)
	})
	if errors.Is(err, mongo.ErrNoDocuments) {
		return false, false, nil
	}
	if err != nil {
		return false, false, err
	}
	mine = d.Status == record.StatusRunning && d.Attempt == l.Attempt && d.Claim == l.Token
	return mine, d.Status == record.StatusRetrying && d.Attempt == l.Attempt-1, nil
}

// DueRetries implements record.Store: one find on {status: retrying,
// lease_until < before} (index RunsLeaseIndex; lease_until is retry_at
// on such a record).
func (s *Store) DueRetries(ctx context.Context, before time.Time, limit int) ([]record.RunDoc, error) {
	cur, err := s.runs.Find(ctx,
		bson.D{{Key: "status", Value: record.StatusRetrying}, {Key: "lease_until", Value: bson.D{{Key: "$lt", Value: before}}}},
		options.Find().SetLimit(int64(limit)).SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: "job_id", Value: 1},
			{Key: "scheduled_at", Value: 1}, {Key: "status", Value: 1}, {Key: record.FieldAttempt, Value: 1}, {Key: record.FieldRetryAt, Value: 1},
			{Key: record.RunScheduleField, Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("find due retries in %s: %w", s.runs.Name(), err)
	}
	var docs []record.RunDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, fmt.Errorf("find due retries in %s: %w", s.runs.Name(), err)
	}
	return docs, nil
}

// GiveUpRetry implements record.Store: one conditional update of the record
// (still retrying, at attempt when positive) to failed.
func (s *Store) GiveUpRetry(ctx context.Context, runID string, attempt int, why string, now time.Time) error {
	filter := bson.D{{Key: "_id", Value: runID}, {Key: "status", Value: record.StatusRetrying}}
	if attempt > 0 {
		filter = append(filter, bson.E{Key: record.FieldAttempt, Value: attempt})
	}
	res, err := s.runs.UpdateOne(ctx, filter, bson.D{
		{Key: "$set", Value: withNotice(bson.D{{Key: "status", Value: record.StatusFailed}, {Key: "error", Value: why},
			{Key: "ended_at", Value: now}, {Key: "expire_at", Value: now.Add(s.retention)}}, record.StatusFailed, "", now)},
		{Key: "$unset", Value: bson.D{{Key: "lease_until", Value: ""}, {Key: record.FieldRetryAt, Value: ""}}}})
	if err != nil {
		return fmt.Errorf("give up the retry of run %s in %s: %w", runID, s.runs.Name(), err)
	}
	if res.ModifiedCount > 0 {
		s.noticed()
	}
	return nil
}

// replacedInBackoff reports whether the lock of jobID, still the run's,
// asks it to stop (cancel_other), and by which run.
func (s *Store) replacedInBackoff(ctx context.Context, jobID, runID string) (by string, replaced bool) {
	raw, err := s.locks.FindOne(ctx, bson.D{{Key: "_id", Value: jobID}, {Key: "run_id", Value: runID}}).Raw()
	if err != nil {
		return "", false
	}
	cancel, by := cancelBy(raw)
	return by, cancel == runID
}

// endReplaced records the slot of c abandoned, replaced by run by, and
// frees the lock for the replacing fire (which takes it up from the
// buffer). It returns ErrRetryReplaced, or what failed.
func (s *Store) endReplaced(ctx context.Context, c record.RetryClaim, l record.Lease, by string) error {
	runID := l.RunID
	why := fmt.Sprintf("%s by run %s (cancel_other); attempt %d not run", record.ErrRetryReplaced.Error(), by, c.Attempt)
	_, err := s.runs.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: runID}, {Key: "status", Value: record.StatusRunning}, {Key: record.FieldAttempt, Value: c.Attempt},
			{Key: "claim", Value: l.Token}},
		bson.D{{Key: "$set", Value: withNotice(bson.D{{Key: "status", Value: record.StatusAbandoned}, {Key: "ended_at", Value: c.Now},
			{Key: "abandoned_at", Value: c.Now}, {Key: "error", Value: why}, {Key: "reason", Value: record.ReasonReplaced},
			// Notified as failed: the slot failed, and no attempt will
			// follow (a run replaced while it was running is not notified).
			{Key: "expire_at", Value: c.Now.Add(s.retention)}}, record.StatusFailed, "", c.Now)},
			{Key: "$unset", Value: bson.D{{Key: "lease_until", Value: ""}}}})
	if err != nil {
		return fmt.Errorf("attempt %d of run %s: %w; recording it abandoned: %w", c.Attempt, runID, record.ErrRetryReplaced, err)
	}
	s.noticed()
	_, err = s.locks.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: c.JobID}, {Key: "run_id", Value: runID}, {Key: "state", Value: record.LockRunning}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "state", Value: record.LockFree}, {Key: "holder", Value: ""}, {Key: "incarnation", Value: ""},
			{Key: "run_id", Value: ""}, {Key: "lease_until", Value: c.Now}, {Key: "last_outcome", Value: record.StatusAbandoned},
			{Key: "last_ended_at", Value: c.Now}, {Key: "updated_at", Value: c.Now}}}})
	if err != nil {
		return fmt.Errorf("attempt %d of run %s: %w; freeing the lock of %s: %w", c.Attempt, runID, record.ErrRetryReplaced, c.JobID, err)
	}
	return fmt.Errorf("attempt %d of run %s: %w", c.Attempt, runID, record.ErrRetryReplaced)
}
