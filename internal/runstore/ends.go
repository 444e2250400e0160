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

// endUpdate is the update writing a run's end on its running record.
func (s *Store) endUpdate(e record.LeaseEnd) bson.D {
	end := e.End
	if end.Status == record.StatusMissed {
		// The claimed slot did not start: its record becomes a missed
		// record of that one slot.
		set := s.missedFields(e.Lease.Slot, 1, end.Reason, end.EndedAt, end.TraceParent, end.TraceState)
		set = append(set, bson.E{Key: "ended_at", Value: end.EndedAt})
		set = append(set, outputFields(end, "error")...)
		set = append(set, observedFields(end)...)
		return missedUpdate(set)
	}
	set := bson.D{
		{Key: "status", Value: end.Status},
		{Key: "ended_at", Value: end.EndedAt},
		{Key: "expire_at", Value: end.EndedAt.Add(s.retention)},
	}
	set = withTracedNotice(set, end.Status, end.Reason, end.EndedAt, end.TraceParent, end.TraceState)
	set = append(set, outputFields(end, "error")...)
	set = append(set, observedFields(end)...)
	if end.Reason == record.ReasonReplaced {
		// Abandoned by design, not by a fault: the record says so.
		set = append(set, bson.E{Key: "reason", Value: record.ReasonReplaced})
	}
	if e.Lease.Attempt > 0 {
		return s.attemptEndUpdate(e, set)
	}
	return bson.D{{Key: "$set", Value: set}}
}

// observedFields mark an end that was only observed after the holder's
// process stalled: it ended after ended_after, and ended_at is when it was
// observed (docs/locks.md).
func observedFields(end record.RunEnd) bson.D {
	if !end.Observed {
		return nil
	}
	return bson.D{{Key: "end_observed", Value: true}, {Key: "ended_after", Value: end.After}}
}

// outputFields are the error, exit code, output tails and answer of an
// end.
func outputFields(end record.RunEnd, errorKey string) bson.D {
	var d bson.D
	if end.Error != "" {
		d = append(d, bson.E{Key: errorKey, Value: end.Error})
	}
	if end.ExitCode != nil {
		d = append(d, bson.E{Key: "exit_code", Value: *end.ExitCode})
	}
	if end.Stdout != "" {
		d = append(d, bson.E{Key: "stdout", Value: end.Stdout})
	}
	if end.Stderr != "" {
		d = append(d, bson.E{Key: "stderr", Value: end.Stderr})
	}
	if end.AnswerStatus != 0 {
		d = append(d, bson.E{Key: "answer_status", Value: end.AnswerStatus})
	}
	if end.Answer != "" {
		d = append(d, bson.E{Key: "answer", Value: end.Answer})
	}
	return d
}

// EndBatch implements record.Store. Commands: one bulkWrite on job_locks
// (forbid: free the lock fenced by run_id; allow: the last outcome, and
// last_slot moved up, upserting a free lock) and one on job_runs (the end
// of each still running record). When fewer records matched than ends
// sent, one find tells which were not running, and for those marked
// abandoned meanwhile one more bulkWrite writes the true end (ended_at and
// end_status, what the holder saw) next to the abandonment.
func (s *Store) EndBatch(ctx context.Context, ends []record.LeaseEnd) []error {
	errs := make([]error, len(ends))
	if len(ends) == 0 {
		return errs
	}
	locks := make([]mongo.WriteModel, 0, len(ends))
	for _, e := range ends {
		l, end := e.Lease, e.End
		if l.Overlap.TakesLock() && end.Status == record.StatusRetrying {
			locks = append(locks, holdForRetry(e))
			continue
		}
		if l.Overlap.TakesLock() {
			locks = append(locks, mongo.NewUpdateOneModel().
				SetFilter(bson.D{{Key: "_id", Value: l.JobID}, {Key: "run_id", Value: l.RunID}, {Key: "claim", Value: l.Token},
					{Key: "state", Value: record.LockRunning}}).
				SetUpdate(bson.D{{Key: "$set", Value: bson.D{
					{Key: "state", Value: record.LockFree}, {Key: "holder", Value: ""}, {Key: "incarnation", Value: ""},
					{Key: "run_id", Value: ""}, {Key: "claim", Value: ""}, {Key: "lease_until", Value: end.EndedAt},
					{Key: "last_outcome", Value: end.Status}, {Key: "last_ended_at", Value: end.EndedAt},
					{Key: "updated_at", Value: end.EndedAt},
				}}}))
			continue
		}
		lastSlot := l.Slot
		if l.OffSchedule {
			lastSlot = time.Time{} // not a cron slot: the last slot stays
		}
		locks = append(locks, mongo.NewUpdateOneModel().
			SetFilter(bson.D{{Key: "_id", Value: l.JobID}}).
			SetUpdate(bson.D{
				{Key: "$set", Value: bson.D{{Key: "last_outcome", Value: end.Status},
					{Key: "last_ended_at", Value: end.EndedAt}, {Key: "updated_at", Value: end.EndedAt}}},
				{Key: "$max", Value: bson.D{{Key: "last_slot", Value: lastSlot}}},
				{Key: "$setOnInsert", Value: bson.D{{Key: "state", Value: record.LockFree}, {Key: "holder", Value: ""},
					{Key: "run_id", Value: ""}, {Key: "acquired_at", Value: time.Time{}},
					{Key: "lease_until", Value: end.EndedAt}, {Key: "fence", Value: l.Fence}}},
			}).SetUpsert(true))
	}
	// The locks first: a run whose lock is freed but whose end is not
	// written yet is only a record still running for a moment; the
	// reverse would show an ended run whose lock still blocks the job.
	err := retrying(ctx, func() error {
		_, err := s.locks.BulkWrite(ctx, locks, options.BulkWrite().SetOrdered(false))
		return err
	})
	if err != nil {
		s.log.Warn("could not free locks", "instance_id", s.instance, "ends", len(ends), "error", err)
	}

	runs := make([]mongo.WriteModel, len(ends))
	for k, e := range ends {
		runs[k] = mongo.NewUpdateOneModel().
			SetFilter(bson.D{{Key: "_id", Value: e.Lease.RunID}, {Key: "status", Value: record.StatusRunning},
				{Key: "claim", Value: e.Lease.Token}}).
			SetUpdate(s.endUpdate(e))
	}
	var matched int64
	err = retrying(ctx, func() error {
		res, err := s.runs.BulkWrite(ctx, runs, options.BulkWrite().SetOrdered(false))
		if res != nil {
			matched = res.MatchedCount
		}
		return err
	})
	if err != nil && !transient(err) {
		if perOp, whole := splitBulkError(err); whole == nil {
			for k, we := range perOp {
				errs[k] = fmt.Errorf("record end of run %s: %w", ends[k].Lease.RunID, we)
			}
			err = nil
		}
	}
	if err != nil {
		for k, e := range ends {
			errs[k] = fmt.Errorf("record end of run %s in %s: %w", e.Lease.RunID, s.runs.Name(), err)
		}
		return errs
	}
	s.noticedEnds(ends)
	if matched >= int64(len(ends)) {
		return errs
	}
	// Some records were not running: read them all back (the retried
	// bulk may have matched nothing for ends its lost first try wrote).
	return s.endLeftovers(ctx, ends, errs)
}

// endLeftovers classifies the ends whose record was not running when the
// end came, and writes the true end of those abandoned meanwhile.
func (s *Store) endLeftovers(ctx context.Context, ends []record.LeaseEnd, errs []error) []error {
	ids := make(bson.A, 0, len(ends))
	for k, e := range ends {
		if errs[k] == nil {
			ids = append(ids, e.Lease.RunID)
		}
	}
	var docs []record.RunDoc
	err := retrying(ctx, func() error {
		cur, err := s.runs.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}},
			options.Find().SetProjection(bson.D{{Key: "status", Value: 1}, {Key: "ended_at", Value: 1},
				{Key: "end_status", Value: 1}, {Key: "abandoned_at", Value: 1}, {Key: "claim", Value: 1}}))
		if err != nil {
			return err
		}
		docs = docs[:0]
		return cur.All(ctx, &docs)
	})
	if err != nil {
		for k, e := range ends {
			if errs[k] == nil {
				errs[k] = fmt.Errorf("read back end of run %s in %s: %w", e.Lease.RunID, s.runs.Name(), err)
			}
		}
		return errs
	}
	byID := make(map[string]*record.RunDoc, len(docs))
	for i := range docs {
		byID[docs[i].ID] = &docs[i]
	}
	var late []mongo.WriteModel
	var lateIdx []int
	for k, e := range ends {
		if errs[k] != nil {
			continue
		}
		d := byID[e.Lease.RunID]
		switch {
		case d == nil:
			errs[k] = fmt.Errorf("record end of run %s: no record: %w", e.Lease.RunID, record.ErrLockLost)
		case d.Claim != e.Lease.Token:
			// A later acquisition of the same run id (its records were
			// dropped in between): not this run's record to write.
			errs[k] = fmt.Errorf("record end of run %s of %s: the record is another acquisition's (%s, %s): %w",
				e.Lease.RunID, e.Lease.JobID, d.Status, d.Claim, record.ErrLockLost)
		case d.Status == e.End.Status && d.EndedAt.Equal(e.End.EndedAt):
			// Written (by a try whose answer was lost).
		case d.Status == record.StatusAbandoned && d.EndedAt.Equal(e.End.EndedAt) && d.EndStatus == e.End.Status:
			errs[k] = fmt.Errorf("run %s of %s was abandoned at %s; its true end is recorded: %w",
				e.Lease.RunID, e.Lease.JobID, d.AbandonedAt.UTC().Format(time.RFC3339Nano), record.ErrLockLost)
		case d.Status == record.StatusAbandoned && d.EndedAt.IsZero():
			set := bson.D{{Key: "ended_at", Value: e.End.EndedAt}, {Key: "end_status", Value: e.End.Status},
				{Key: "expire_at", Value: e.End.EndedAt.Add(s.retention)}}
			set = append(set, outputFields(e.End, "end_error")...)
			set = append(set, observedFields(e.End)...)
			late = append(late, mongo.NewUpdateOneModel().
				SetFilter(bson.D{{Key: "_id", Value: e.Lease.RunID}, {Key: "status", Value: record.StatusAbandoned},
					{Key: "claim", Value: e.Lease.Token},
					{Key: "ended_at", Value: bson.D{{Key: "$exists", Value: false}}}}).
				SetUpdate(bson.D{{Key: "$set", Value: set}}))
			lateIdx = append(lateIdx, k)
			errs[k] = fmt.Errorf("run %s of %s was abandoned at %s; its true end is recorded: %w",
				e.Lease.RunID, e.Lease.JobID, d.AbandonedAt.UTC().Format(time.RFC3339Nano), record.ErrLockLost)
		default:
			errs[k] = fmt.Errorf("record end of run %s of %s: the record is %s, not running: %w",
				e.Lease.RunID, e.Lease.JobID, d.Status, errNotWritten)
		}
	}
	if len(late) == 0 {
		return errs
	}
	err = retrying(ctx, func() error {
		_, err := s.runs.BulkWrite(ctx, late, options.BulkWrite().SetOrdered(false))
		return err
	})
	if err != nil {
		for _, k := range lateIdx {
			errs[k] = fmt.Errorf("record the true end of abandoned run %s in %s: %w", ends[k].Lease.RunID, s.runs.Name(), err)
		}
	}
	return errs
}

// errNotWritten is wrapped by an EndBatch error when the end was not
// written because the record was neither running nor abandoned.
var errNotWritten = errors.New("end not written")

// Disown implements record.Store: one bulkWrite on job_runs converting the
// records (this instance and incarnation, still running) into missed
// records of their slot, and one on job_locks freeing the locks they may
// hold (fenced by run_id, holder and incarnation).
func (s *Store) Disown(ctx context.Context, leases []record.Lease, reason string, now time.Time) error {
	if len(leases) == 0 {
		return nil
	}
	runs := make([]mongo.WriteModel, 0, len(leases))
	var locks []mongo.WriteModel
	for _, l := range leases {
		runs = append(runs, mongo.NewUpdateOneModel().
			SetFilter(bson.D{{Key: "_id", Value: l.RunID}, {Key: "status", Value: bson.D{{Key: "$in", Value: bson.A{record.StatusRunning, record.StatusClaiming, record.StatusBuffered}}}},
				{Key: "instance", Value: l.Instance}, {Key: "incarnation", Value: l.Incarnation}, {Key: "claim", Value: l.Token}}).
			SetUpdate(missedUpdate(s.missedFields(l.Slot, 1, reason, now, "", ""))))
		if l.Overlap.TakesLock() {
			locks = append(locks, mongo.NewUpdateOneModel().
				SetFilter(bson.D{{Key: "_id", Value: l.JobID}, {Key: "run_id", Value: l.RunID}, {Key: "state", Value: record.LockRunning},
					{Key: "holder", Value: l.Instance}, {Key: "incarnation", Value: l.Incarnation}, {Key: "claim", Value: l.Token}}).
				SetUpdate(bson.D{{Key: "$set", Value: bson.D{
					{Key: "state", Value: record.LockFree}, {Key: "holder", Value: ""}, {Key: "incarnation", Value: ""},
					{Key: "run_id", Value: ""}, {Key: "claim", Value: ""}, {Key: "lease_until", Value: now},
					{Key: "last_outcome", Value: record.StatusMissed}, {Key: "updated_at", Value: now},
				}}}))
		}
	}
	err := retrying(ctx, func() error {
		_, err := s.runs.BulkWrite(ctx, runs, options.BulkWrite().SetOrdered(false))
		return err
	})
	if err != nil {
		return fmt.Errorf("disown %d runs in %s: %w", len(runs), s.runs.Name(), err)
	}
	s.noticed()
	if len(locks) > 0 {
		err := retrying(ctx, func() error {
			_, err := s.locks.BulkWrite(ctx, locks, options.BulkWrite().SetOrdered(false))
			return err
		})
		if err != nil {
			return fmt.Errorf("free %d disowned locks in %s: %w", len(locks), s.locks.Name(), err)
		}
	}
	return nil
}
