package triggers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/internal/firepath"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/schedule"
)

// StatusAlreadyRan: a backfill request whose slot had been decided before
// (ran, skipped, or another record of it): nothing ran; the error names
// the record.
const StatusAlreadyRan = "already_ran"

// Store writes outcomes on requests and reads the run records they refer
// to; each operation is bounded by jobs.DefaultOpTimeout. Every write is
// conditional on the request's status, so replicas that write the same
// outcome, or a late one, never overwrite a later state.
type Store struct {
	coll      *mongo.Collection
	runs      *mongo.Collection
	retention time.Duration
	instance  string
	// outcome, if set, is called with each status but running that a
	// write of this store set (see WithOutcomes).
	outcome func(status string)
}

// NewStore returns the store over the requests coll and the run records
// runs; retention is how long an ended request is kept (the runs'
// retention), instance names this replica in what it writes.
func NewStore(coll, runs *mongo.Collection, retention time.Duration, instance string) *Store {
	return &Store{coll: coll, runs: runs, retention: retention, instance: instance}
}

// WithOutcomes makes s call count with the status each of its writes set
// on a request (buffered and the final ones; not running), once per write
// that changed the request: every write is conditional on the request's
// status, so summed over the replicas each request's outcome counts once.
// Call it before s is used; it returns s.
func (s *Store) WithOutcomes(count func(status string)) *Store {
	s.outcome = count
	return s
}

// Collection returns the requests collection of db.
func Collection(db *mongo.Database) *mongo.Collection { return db.Collection(CollectionName) }

// pending matches request id while no daemon has written on it.
func pending(id bson.RawValue) bson.D {
	return bson.D{{Key: FieldID, Value: id}, {Key: FieldStatus, Value: nil}}
}

func (s *Store) update(ctx context.Context, filter, set bson.D) error {
	ctx, cancel := context.WithTimeout(ctx, firepath.DefaultOpTimeout)
	defer cancel()
	res, err := s.coll.UpdateOne(ctx, filter, bson.D{{Key: "$set", Value: set}})
	if err != nil {
		return fmt.Errorf("write the outcome of trigger %v in %s: %w", filter[0].Value, s.coll.Name(), err)
	}
	if res.ModifiedCount > 0 && s.outcome != nil {
		for _, e := range set {
			if st, ok := e.Value.(string); ok && e.Key == FieldStatus && st != StatusRunning {
				s.outcome(st)
			}
		}
	}
	return nil
}

func (s *Store) final(status, errMsg string, now time.Time) bson.D {
	d := bson.D{{Key: FieldStatus, Value: status}, {Key: FieldUpdatedAt, Value: now},
		{Key: FieldExpireAt, Value: now.Add(s.retention)}, {Key: FieldInstance, Value: s.instance}}
	if errMsg != "" {
		d = append(d, bson.E{Key: FieldError, Value: errMsg})
	}
	return d
}

// Reject marks a pending request bad, with why.
func (s *Store) Reject(ctx context.Context, id bson.RawValue, why string, now time.Time) error {
	return s.update(ctx, pending(id), s.final(StatusRejected, why, now))
}

// NotRun marks a pending request not run, with why.
func (s *Store) NotRun(ctx context.Context, id bson.RawValue, why string, now time.Time) error {
	return s.update(ctx, pending(id), s.final(StatusNotRun, why, now))
}

// runnable matches request id while it is pending, running or refused
// for an action another replica did not have: a run's own outcome wins
// over such a refusal.
func runnable(id bson.RawValue, also ...string) bson.D {
	in := bson.A{nil, StatusRejected}
	for _, a := range also {
		in = append(in, a)
	}
	return bson.D{{Key: FieldID, Value: id}, {Key: FieldStatus, Value: bson.D{{Key: "$in", Value: in}}}}
}

// Started marks a request running under lease (this replica won its
// claim).
func (s *Store) Started(ctx context.Context, id bson.RawValue, l record.Lease, now time.Time) error {
	return s.update(ctx, runnable(id), bson.D{{Key: FieldStatus, Value: StatusRunning}, {Key: FieldRunID, Value: l.RunID},
		{Key: FieldInstance, Value: l.Instance}, {Key: FieldFence, Value: l.Fence}, {Key: FieldStartedAt, Value: now},
		{Key: FieldUpdatedAt, Value: now}})
}

// Buffered marks a pending request buffered: its run runID waits on the
// job's lock (why says for what). The replica that takes it from the
// lock's buffer writes the rest (BufferedStarted, BufferedEnded).
func (s *Store) Buffered(ctx context.Context, id bson.RawValue, runID, why string, now time.Time) error {
	return s.update(ctx, runnable(id), bson.D{{Key: FieldStatus, Value: StatusBuffered}, {Key: FieldRunID, Value: runID},
		{Key: FieldReason, Value: why}, {Key: FieldUpdatedAt, Value: now}})
}

// ofRun matches the run-now request whose run is l (run id RunIDOf(its
// key)) while its status is one of those given; ok is false when l is not
// a run-now request's run.
func ofRun(l record.Lease, statuses ...any) (bson.D, bool) {
	key, ok := strings.CutPrefix(l.RunID, RunIDPrefix)
	if !ok || key == "" {
		return nil, false
	}
	ids := bson.A{key}
	if oid, err := bson.ObjectIDFromHex(key); err == nil {
		ids = append(ids, oid) // mongosh's default _id, rendered in hex
	}
	return bson.D{{Key: FieldID, Value: bson.D{{Key: "$in", Value: ids}}}, {Key: FieldJobID, Value: l.JobID},
		{Key: FieldStatus, Value: bson.D{{Key: "$in", Value: bson.A(statuses)}}}}, true
}

// BufferedStarted implements jobs.RequestReporter: the request of the
// buffered run l, whichever replica buffered it, says running under this
// replica (also while still pending: the replica that buffered it may not
// have written buffered yet).
func (s *Store) BufferedStarted(ctx context.Context, l record.Lease, at time.Time) error {
	filter, ok := ofRun(l, nil, StatusRejected, StatusBuffered)
	if !ok {
		return nil
	}
	return s.update(ctx, filter, bson.D{{Key: FieldStatus, Value: StatusRunning}, {Key: FieldRunID, Value: l.RunID},
		{Key: FieldInstance, Value: l.Instance}, {Key: FieldFence, Value: l.Fence}, {Key: FieldStartedAt, Value: at},
		{Key: FieldUpdatedAt, Value: at}})
}

// BufferedEnded implements jobs.RequestReporter: the request of the
// buffered run l gets the run's outcome.
func (s *Store) BufferedEnded(ctx context.Context, l record.Lease, res firepath.OffScheduleResult, at time.Time) error {
	filter, ok := ofRun(l, nil, StatusRejected, StatusBuffered, StatusRunning)
	if !ok {
		return nil
	}
	errMsg := res.Error
	if res.NotRun != "" {
		errMsg = res.NotRun + ": " + errMsg
	}
	set := append(s.final(res.Status, errMsg, at), bson.E{Key: FieldRunID, Value: l.RunID},
		bson.E{Key: FieldFence, Value: l.Fence}, bson.E{Key: FieldEndedAt, Value: at})
	return s.update(ctx, filter, set)
}

// Finish writes the end of the run this replica ran (or skipped) for
// request id: status and error as recorded on the run.
func (s *Store) Finish(ctx context.Context, id bson.RawValue, runID, status, errMsg string, now time.Time) error {
	set := append(s.final(status, errMsg, now), bson.E{Key: FieldRunID, Value: runID}, bson.E{Key: FieldEndedAt, Value: now})
	return s.update(ctx, runnable(id, StatusRunning), set)
}

// FromRecord copies the outcome of run record rec onto request id when
// the request is this run's: running under rec's id, or, when mine says
// the record can only be this request's (a run-now request's own run id),
// also while pending. A record still buffered makes such a pending request
// buffered; otherwise it does nothing while rec is not ended.
func (s *Store) FromRecord(ctx context.Context, id bson.RawValue, rec record.RunDoc, mine bool, now time.Time) error {
	if rec.Status == record.StatusBuffered && mine {
		return s.Buffered(ctx, id, rec.ID, "its run record "+rec.ID+" waits on the job's lock", now)
	}
	if !recordEnded(rec.Status) {
		return nil
	}
	filter := bson.D{{Key: FieldID, Value: id}, {Key: FieldStatus, Value: bson.D{{Key: "$in", Value: bson.A{StatusRunning, StatusBuffered}}}},
		{Key: FieldRunID, Value: rec.ID}}
	if mine {
		filter = runnable(id, StatusRunning)
	}
	ended := rec.EndedAt
	if ended.IsZero() {
		ended = rec.AbandonedAt
	}
	set := append(s.final(rec.Status, rec.Error, now), bson.E{Key: FieldRunID, Value: rec.ID}, bson.E{Key: FieldFence, Value: rec.Fence})
	// The outcome is the record's, so is the instance: the replica that
	// ran it, not this one copying it (whose copy may land before the
	// runner's own end write, which then finds the request ended).
	if rec.Instance != "" {
		for i := range set {
			if set[i].Key == FieldInstance {
				set[i].Value = rec.Instance
			}
		}
	}
	if !ended.IsZero() {
		set = append(set, bson.E{Key: FieldEndedAt, Value: ended})
	}
	return s.update(ctx, filter, set)
}

// AlreadyRan marks a pending backfill request whose slot was decided
// before by record rec.
func (s *Store) AlreadyRan(ctx context.Context, id bson.RawValue, rec record.RunDoc, now time.Time) error {
	why := fmt.Sprintf("slot already recorded %s (%s)", rec.Status, rec.ID)
	set := append(s.final(StatusAlreadyRan, why, now), bson.E{Key: FieldRunID, Value: rec.ID})
	return s.update(ctx, pending(id), set)
}

func recordEnded(status string) bool {
	switch status {
	case record.StatusRunning, record.StatusClaiming, record.StatusBuffered, "":
		return false
	}
	return true
}

// Record reads the run record with _id runID; nil, nil when there is none.
func (s *Store) Record(ctx context.Context, runID string) (*record.RunDoc, error) {
	ctx, cancel := context.WithTimeout(ctx, firepath.DefaultOpTimeout)
	defer cancel()
	var rec record.RunDoc
	err := s.runs.FindOne(ctx, bson.D{{Key: "_id", Value: runID}}).Decode(&rec)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read run %s in %s: %w", runID, s.runs.Name(), err)
	}
	return &rec, nil
}

// RecordAt reads the record of job at slot whatever its _id (a missed
// range starting at slot); nil, nil when there is none.
func (s *Store) RecordAt(ctx context.Context, job string, slot time.Time) (*record.RunDoc, error) {
	ctx, cancel := context.WithTimeout(ctx, firepath.DefaultOpTimeout)
	defer cancel()
	var rec record.RunDoc
	err := s.runs.FindOne(ctx, bson.D{{Key: "job_id", Value: job}, {Key: "scheduled_at", Value: slot}}).Decode(&rec)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the record of %s at %s in %s: %w", job, slot.Format(time.RFC3339), s.runs.Name(), err)
	}
	return &rec, nil
}

// ForgetMissed deletes the missed record rec when it covers its one slot
// only, so that the slot can be backfilled under its own run id (the
// unique (job_id, scheduled_at) index would refuse the run's record beside
// it); the backfilled run's record then accounts for the slot. It reports
// whether the record is gone.
func (s *Store) ForgetMissed(ctx context.Context, rec record.RunDoc) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, firepath.DefaultOpTimeout)
	defer cancel()
	if rec.Status != record.StatusMissed || rec.Count != 1 {
		return false, nil
	}
	res, err := s.runs.DeleteOne(ctx, bson.D{{Key: "_id", Value: rec.ID}, {Key: "status", Value: record.StatusMissed}, {Key: "count", Value: int64(1)}})
	if err != nil {
		return false, fmt.Errorf("delete missed record %s in %s: %w", rec.ID, s.runs.Name(), err)
	}
	return res.DeletedCount == 1, nil
}

// Schedules returns the Options.Schedules lookup over the schedules
// collection coll: the job's document, decoded and validated (a disabled
// job's too).
func Schedules(coll *mongo.Collection) func(ctx context.Context, jobID string) (schedule.Schedule, error) {
	return func(ctx context.Context, jobID string) (schedule.Schedule, error) {
		raw, err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: jobID}}).Raw()
		if errors.Is(err, mongo.ErrNoDocuments) {
			return schedule.Schedule{}, fmt.Errorf("job %q has no schedule in %s: %w", jobID, coll.Name(), ErrNoJob)
		}
		if err != nil {
			return schedule.Schedule{}, fmt.Errorf("read the schedule of job %q in %s: %w", jobID, coll.Name(), err)
		}
		s, err := schedule.Decode(raw)
		if err != nil {
			return s, fmt.Errorf("the schedule of job %q: %w", jobID, err)
		}
		return s, nil
	}
}
