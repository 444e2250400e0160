package jobs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/notify"
)

// RenewBatch implements BatchStore: one updateMany on job_runs and, when
// some leases take the lock, one on job_locks; a matched count short of
// the leases sent is followed by one find per short collection to name
// the leases lost.
func (s *MongoStore) RenewBatch(ctx context.Context, leases []Lease, now time.Time, ttl time.Duration) ([]Lease, error) {
	if len(leases) == 0 {
		return nil, nil
	}
	until := now.Add(ttl)
	ids := make(bson.A, 0, len(leases))
	var lockJobs, lockRuns bson.A
	for _, l := range leases {
		ids = append(ids, l.RunID)
		if l.Overlap.takesLock() {
			lockJobs = append(lockJobs, l.JobID)
			lockRuns = append(lockRuns, l.RunID)
		}
	}
	res, err := s.runs.UpdateMany(ctx,
		bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}, {Key: "status", Value: StatusRunning}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "lease_until", Value: until}}}})
	if err != nil {
		return nil, fmt.Errorf("renew %d runs in %s: %w", len(ids), s.runs.Name(), err)
	}
	runsShort := res.MatchedCount < int64(len(ids))
	locksShort := false
	if len(lockJobs) > 0 {
		res, err := s.locks.UpdateMany(ctx,
			bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: lockJobs}}},
				{Key: "run_id", Value: bson.D{{Key: "$in", Value: lockRuns}}}, {Key: "state", Value: LockRunning}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "lease_until", Value: until}, {Key: "updated_at", Value: now}}}})
		if err != nil {
			return nil, fmt.Errorf("renew %d locks in %s: %w", len(lockJobs), s.locks.Name(), err)
		}
		locksShort = res.MatchedCount < int64(len(lockJobs))
	}
	if !runsShort && !locksShort {
		return nil, nil
	}
	lostSet := map[string]bool{}
	if runsShort {
		running := map[string]bool{}
		cur, err := s.runs.Find(ctx,
			bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}, {Key: "status", Value: StatusRunning}},
			options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: "instance", Value: 1}, {Key: "incarnation", Value: 1}}))
		if err != nil {
			return nil, fmt.Errorf("find lost runs in %s: %w", s.runs.Name(), err)
		}
		var docs []RunDoc
		if err := cur.All(ctx, &docs); err != nil {
			return nil, fmt.Errorf("find lost runs in %s: %w", s.runs.Name(), err)
		}
		for _, d := range docs {
			running[d.ID] = true
		}
		for _, l := range leases {
			if !running[l.RunID] {
				lostSet[l.RunID] = true
			}
		}
	}
	if locksShort {
		held := map[string]bool{}
		cur, err := s.locks.Find(ctx,
			bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: lockJobs}}}, {Key: "state", Value: LockRunning}},
			options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: "run_id", Value: 1}}))
		if err != nil {
			return nil, fmt.Errorf("find lost locks in %s: %w", s.locks.Name(), err)
		}
		var docs []LockDoc
		if err := cur.All(ctx, &docs); err != nil {
			return nil, fmt.Errorf("find lost locks in %s: %w", s.locks.Name(), err)
		}
		for _, d := range docs {
			held[d.JobID+"\x00"+d.RunID] = true
		}
		for _, l := range leases {
			if l.Overlap.takesLock() && !held[l.JobID+"\x00"+l.RunID] {
				lostSet[l.RunID] = true
			}
		}
	}
	var lost []Lease
	for _, l := range leases {
		if lostSet[l.RunID] {
			lost = append(lost, l)
		}
	}
	return lost, nil
}

// endUpdate is the update writing a run's end on its running record.
func (s *MongoStore) endUpdate(e LeaseEnd) bson.D {
	end := e.End
	set := bson.D{
		{Key: "status", Value: end.Status},
		{Key: "ended_at", Value: end.EndedAt},
		{Key: "expire_at", Value: end.EndedAt.Add(s.retention)},
	}
	set = withNotice(set, end.Status, end.Reason, end.EndedAt)
	set = append(set, outputFields(end, "error")...)
	if end.Reason == ReasonReplaced {
		// Abandoned by design, not by a fault: the record says so.
		set = append(set, bson.E{Key: "reason", Value: ReasonReplaced})
	}
	if end.Status == StatusMissed {
		// The claimed slot did not start: its record becomes a missed
		// record of that one slot.
		set = append(set,
			bson.E{Key: "last_scheduled_at", Value: e.Lease.Slot},
			bson.E{Key: "count", Value: int64(1)},
			bson.E{Key: "reason", Value: end.Reason},
			bson.E{Key: "recorded_at", Value: end.EndedAt})
		return bson.D{{Key: "$set", Value: set},
			{Key: "$unset", Value: bson.D{{Key: "started_at", Value: ""}, {Key: "lease_until", Value: ""}}}}
	}
	if e.Lease.Attempt > 0 {
		return s.attemptEndUpdate(e, set)
	}
	return bson.D{{Key: "$set", Value: set}}
}

// outputFields are the error, exit code and output tails of an end.
func outputFields(end RunEnd, errorKey string) bson.D {
	var d bson.D
	if end.Error != "" {
		d = append(d, bson.E{Key: errorKey, Value: end.Error})
	}
	if end.ExitCode != nil {
		d = append(d, bson.E{Key: "exit_code", Value: *end.ExitCode})
	}
	if end.Output.Stdout != "" {
		d = append(d, bson.E{Key: "stdout", Value: end.Output.Stdout})
	}
	if end.Output.Stderr != "" {
		d = append(d, bson.E{Key: "stderr", Value: end.Output.Stderr})
	}
	return d
}

// EndBatch implements BatchStore. Commands: one bulkWrite on job_locks
// (forbid: free the lock fenced by run_id; allow: the last outcome, and
// last_slot moved up, upserting a free lock) and one on job_runs (the end
// of each still running record). When fewer records matched than ends
// sent, one find tells which were not running, and for those marked
// abandoned meanwhile one more bulkWrite writes the true end (ended_at and
// end_status, what the holder saw) next to the abandonment.
func (s *MongoStore) EndBatch(ctx context.Context, ends []LeaseEnd) []error {
	errs := make([]error, len(ends))
	if len(ends) == 0 {
		return errs
	}
	locks := make([]mongo.WriteModel, 0, len(ends))
	for _, e := range ends {
		l, end := e.Lease, e.End
		if l.Overlap.takesLock() && end.Status == StatusRetrying {
			locks = append(locks, holdForRetry(e))
			continue
		}
		if l.Overlap.takesLock() {
			locks = append(locks, mongo.NewUpdateOneModel().
				SetFilter(bson.D{{Key: "_id", Value: l.JobID}, {Key: "run_id", Value: l.RunID}, {Key: "state", Value: LockRunning}}).
				SetUpdate(bson.D{{Key: "$set", Value: bson.D{
					{Key: "state", Value: LockFree}, {Key: "holder", Value: ""}, {Key: "incarnation", Value: ""},
					{Key: "run_id", Value: ""}, {Key: "lease_until", Value: end.EndedAt},
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
				{Key: "$setOnInsert", Value: bson.D{{Key: "state", Value: LockFree}, {Key: "holder", Value: ""},
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
			SetFilter(bson.D{{Key: "_id", Value: e.Lease.RunID}, {Key: "status", Value: StatusRunning}}).
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
func (s *MongoStore) endLeftovers(ctx context.Context, ends []LeaseEnd, errs []error) []error {
	ids := make(bson.A, 0, len(ends))
	for k, e := range ends {
		if errs[k] == nil {
			ids = append(ids, e.Lease.RunID)
		}
	}
	var docs []RunDoc
	err := retrying(ctx, func() error {
		cur, err := s.runs.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}},
			options.Find().SetProjection(bson.D{{Key: "status", Value: 1}, {Key: "ended_at", Value: 1},
				{Key: "end_status", Value: 1}, {Key: "abandoned_at", Value: 1}}))
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
	byID := make(map[string]*RunDoc, len(docs))
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
			errs[k] = fmt.Errorf("record end of run %s: no record: %w", e.Lease.RunID, ErrLockLost)
		case d.Status == e.End.Status && d.EndedAt.Equal(e.End.EndedAt):
			// Written (by a try whose answer was lost).
		case d.Status == StatusAbandoned && d.EndedAt.Equal(e.End.EndedAt) && d.EndStatus == e.End.Status:
			errs[k] = fmt.Errorf("run %s of %s was abandoned at %s; its true end is recorded: %w",
				e.Lease.RunID, e.Lease.JobID, d.AbandonedAt.UTC().Format(time.RFC3339Nano), ErrLockLost)
		case d.Status == StatusAbandoned && d.EndedAt.IsZero():
			set := bson.D{{Key: "ended_at", Value: e.End.EndedAt}, {Key: "end_status", Value: e.End.Status},
				{Key: "expire_at", Value: e.End.EndedAt.Add(s.retention)}}
			set = append(set, outputFields(e.End, "end_error")...)
			late = append(late, mongo.NewUpdateOneModel().
				SetFilter(bson.D{{Key: "_id", Value: e.Lease.RunID}, {Key: "status", Value: StatusAbandoned},
					{Key: "ended_at", Value: bson.D{{Key: "$exists", Value: false}}}}).
				SetUpdate(bson.D{{Key: "$set", Value: set}}))
			lateIdx = append(lateIdx, k)
			errs[k] = fmt.Errorf("run %s of %s was abandoned at %s; its true end is recorded: %w",
				e.Lease.RunID, e.Lease.JobID, d.AbandonedAt.UTC().Format(time.RFC3339Nano), ErrLockLost)
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

// Disown implements BatchStore: one bulkWrite on job_runs converting the
// records (this instance and incarnation, still running) into missed
// records of their slot, and one on job_locks freeing the locks they may
// hold (fenced by run_id, holder and incarnation).
func (s *MongoStore) Disown(ctx context.Context, leases []Lease, reason string, now time.Time) error {
	if len(leases) == 0 {
		return nil
	}
	runs := make([]mongo.WriteModel, 0, len(leases))
	var locks []mongo.WriteModel
	for _, l := range leases {
		runs = append(runs, mongo.NewUpdateOneModel().
			SetFilter(bson.D{{Key: "_id", Value: l.RunID}, {Key: "status", Value: bson.D{{Key: "$in", Value: bson.A{StatusRunning, StatusClaiming, StatusBuffered}}}},
				{Key: "instance", Value: l.Instance}, {Key: "incarnation", Value: l.Incarnation}}).
			SetUpdate(bson.D{
				{Key: "$set", Value: withNotice(bson.D{
					{Key: "status", Value: StatusMissed}, {Key: "last_scheduled_at", Value: l.Slot},
					{Key: "count", Value: int64(1)}, {Key: "reason", Value: reason},
					{Key: "recorded_at", Value: now}, {Key: "expire_at", Value: now.Add(s.retention)},
				}, StatusMissed, reason, now)},
				{Key: "$unset", Value: bson.D{{Key: "started_at", Value: ""}, {Key: "lease_until", Value: ""}}},
			}))
		if l.Overlap.takesLock() {
			locks = append(locks, mongo.NewUpdateOneModel().
				SetFilter(bson.D{{Key: "_id", Value: l.JobID}, {Key: "run_id", Value: l.RunID}, {Key: "state", Value: LockRunning},
					{Key: "holder", Value: l.Instance}, {Key: "incarnation", Value: l.Incarnation}}).
				SetUpdate(bson.D{{Key: "$set", Value: bson.D{
					{Key: "state", Value: LockFree}, {Key: "holder", Value: ""}, {Key: "incarnation", Value: ""},
					{Key: "run_id", Value: ""}, {Key: "lease_until", Value: now},
					{Key: "last_outcome", Value: StatusMissed}, {Key: "updated_at", Value: now},
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

// SweepExpired implements BatchStore: one find on {status, lease_until}
// (index RunsLeaseIndex); when it finds some, one updateMany marking them
// abandoned (still conditional on running and the lease passed) and one
// find of those it marked.
func (s *MongoStore) SweepExpired(ctx context.Context, now time.Time, limit int) ([]RunDoc, error) {
	expired := bson.D{{Key: "status", Value: bson.D{{Key: "$in", Value: bson.A{StatusRunning, StatusClaiming}}}},
		{Key: "lease_until", Value: bson.D{{Key: "$lt", Value: now}}}}
	return s.sweep(ctx, expired, "lease expired: the holder stopped renewing (swept by "+s.instance+")",
		"run abandoned: its lease passed without a renewal", now, limit)
}

// SweepPreviousLives implements BatchStore: the running records of
// instance written under another incarnation belong to a previous life
// of this instance (a second live one is refused by the membership), so
// they are abandoned at once instead of when their lease passes. One find
// on {status} (index RunsLeaseIndex), and when it finds some, one
// updateMany and one find.
func (s *MongoStore) SweepPreviousLives(ctx context.Context, instance, incarnation string, now time.Time) ([]RunDoc, error) {
	previous := bson.D{{Key: "status", Value: bson.D{{Key: "$in", Value: bson.A{StatusRunning, StatusClaiming}}}}, {Key: "instance", Value: instance},
		{Key: "incarnation", Value: bson.D{{Key: "$ne", Value: incarnation}}}}
	return s.sweep(ctx, previous, "left by a previous life of "+instance+"; abandoned on restart",
		"run left by a previous life of this instance; abandoned", now, 0)
}

// sweep marks the running records matching match abandoned (at most
// limit; <= 0: 1000), logging each with msg.
func (s *MongoStore) sweep(ctx context.Context, match bson.D, why, msg string, now time.Time, limit int) ([]RunDoc, error) {
	if limit <= 0 {
		limit = 1000
	}
	cur, err := s.runs.Find(ctx, match, options.Find().SetLimit(int64(limit)).SetProjection(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("find runs to abandon in %s: %w", s.runs.Name(), err)
	}
	var cand []RunDoc
	if err := cur.All(ctx, &cand); err != nil {
		return nil, fmt.Errorf("find runs to abandon in %s: %w", s.runs.Name(), err)
	}
	if len(cand) == 0 {
		return nil, nil
	}
	ids := make(bson.A, len(cand))
	for i, d := range cand {
		ids[i] = d.ID
	}
	filter := append(bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}}, match...)
	_, err = s.runs.UpdateMany(ctx, filter, bson.D{{Key: "$set", Value: bson.D{
		{Key: "status", Value: StatusAbandoned},
		{Key: "abandoned_at", Value: now},
		{Key: "error", Value: why},
		{Key: "expire_at", Value: now.Add(s.retention)},
		notify.Outbox(notify.KindAbandoned, now),
	}}})
	if err != nil {
		return nil, fmt.Errorf("mark runs abandoned in %s: %w", s.runs.Name(), err)
	}
	s.noticed()
	cur, err = s.runs.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}},
		{Key: "status", Value: StatusAbandoned}, {Key: "abandoned_at", Value: now}})
	if err != nil {
		return nil, fmt.Errorf("read abandoned runs in %s: %w", s.runs.Name(), err)
	}
	var out []RunDoc
	if err := cur.All(ctx, &out); err != nil {
		return nil, fmt.Errorf("read abandoned runs in %s: %w", s.runs.Name(), err)
	}
	for _, d := range out {
		s.log.Warn(msg, "job_id", d.JobID, "scheduled_at", d.ScheduledAt,
			"run_id", d.ID, "holder", d.Instance, "instance_id", s.instance, "lease_until", d.LeaseUntil)
	}
	return out, nil
}

// VerifyIndexes implements BatchStore: one listIndexes; when an index of
// RunIndexes is missing (dropped, or the collection was dropped), one
// createIndexes recreates them.
func (s *MongoStore) VerifyIndexes(ctx context.Context) (bool, error) {
	have := map[string]bool{}
	cur, err := s.runs.Indexes().List(ctx)
	var se mongo.ServerError
	switch {
	case err != nil && errors.As(err, &se) && se.HasErrorCode(26): // NamespaceNotFound: no collection
	case err != nil:
		return false, fmt.Errorf("list indexes of %s: %w", s.runs.Name(), err)
	default:
		var specs []struct {
			Name string `bson:"name"`
		}
		if err := cur.All(ctx, &specs); err != nil {
			return false, fmt.Errorf("list indexes of %s: %w", s.runs.Name(), err)
		}
		for _, sp := range specs {
			have[sp.Name] = true
		}
	}
	var missing []string
	for _, m := range RunIndexes() {
		n := indexName(m)
		if !have[n] {
			missing = append(missing, n)
		}
	}
	if len(missing) == 0 {
		return false, nil
	}
	if err := EnsureIndexes(ctx, s.runs); err != nil {
		return true, err
	}
	s.log.Warn("job_runs indexes were missing; recreated", "instance_id", s.instance, "collection", s.runs.Name(), "indexes", missing)
	return true, nil
}

// indexName is the name RunIndexes gives m.
func indexName(m mongo.IndexModel) string {
	var o options.IndexOptions
	if m.Options != nil {
		for _, set := range m.Options.List() {
			_ = set(&o)
		}
	}
	if o.Name != nil {
		return *o.Name
	}
	return ""
}
