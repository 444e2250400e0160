package triggers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/batch"
	"github.com/cronswap/cronswap/internal/firepath"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/schedule"
)

// StatusAlreadyRan is the status of a backfill request whose slot had been
// decided before (ran, skipped, or another record of it): nothing ran; the
// error names the record.
const StatusAlreadyRan = "already_ran"

// Batching of the store's requests: the writes of many requests go out as
// one bulk write per status, the reads of many run records (and of many
// schedules, Schedules) as one find. A batch takes what arrived while
// earlier batches were out, up to the maximum; at most this many batches
// of each kind are out at once, so the bookkeeping holds a bounded number
// of the replica's connections (2 each for writes, record reads, schedule
// reads, the sink's first-sighting lookups and ForgetMissed's deletes),
// whatever the number of requests.
const (
	storeBatchMax      = 1000
	writeBatchesAtOnce = 2
	readBatchesAtOnce  = 2
)

// storeAttempts bounds how often a batch is sent when the database does
// not answer it (every write is conditional and every read idempotent, so
// sending one again is harmless); storeRetryWait is the first wait
// between two, doubling.
const (
	storeAttempts  = 3
	storeRetryWait = 500 * time.Millisecond
)

// Store writes outcomes on requests and reads the run records they refer
// to. Its operations are batched across callers (one bulk write or one
// find answers many requests); each attempt of a batch is bounded by
// firepath.DefaultOpTimeout. Every write is conditional on the request's
// status, so replicas that write the same outcome, or a late one, never
// overwrite a later state, and a write sent again changes nothing.
type Store struct {
	coll      *mongo.Collection
	runs      *mongo.Collection // read only: its writer is missed
	missed    MissedRecords
	retention time.Duration
	instance  string
	// outcome, if set, is called with each status but running that a
	// write of this store set (see WithOutcomes).
	outcome func(status string)

	writes *batch.Batcher[statusWrite, error]
	reads  *batch.Batcher[recordQuery, recordAnswer]
	// forgets bounds the deletes of missed records (ForgetMissed) at once.
	forgets chan struct{}
}

// statusWrite is one conditional write on a request: set applies where
// filter matches. status is the status set (counted unless running).
type statusWrite struct {
	filter bson.D
	set    bson.D
	status string
}

// recordQuery asks for the run record with _id runID, or, when runID is
// empty, the record of job at slot whatever its _id.
type recordQuery struct {
	runID string
	job   string
	slot  time.Time
}

// recordAnswer is the record asked for (nil when there is none).
type recordAnswer struct {
	rec *record.RunDoc
	err error
}

// MissedRecords gives a slot's one-slot missed record way to a backfilled
// run of the slot: runstore.Store, the writer of job_runs.
type MissedRecords interface {
	// ForgetMissed deletes rec when it is a missed record of its one slot
	// and reports whether it is gone.
	ForgetMissed(ctx context.Context, rec record.RunDoc) (bool, error)
}

// NewStore returns the store over the requests coll and the run records
// runs, which it reads; missed deletes a missed record a backfill replaces
// (ForgetMissed). retention is how long an ended request is kept (the
// runs' retention), instance names this replica in what it writes.
func NewStore(coll, runs *mongo.Collection, missed MissedRecords, retention time.Duration, instance string) *Store {
	s := &Store{coll: coll, runs: runs, missed: missed, retention: retention, instance: instance,
		forgets: make(chan struct{}, writeBatchesAtOnce)}
	s.writes = batch.New(storeBatchMax, writeBatchesAtOnce, s.writeBatch)
	s.reads = batch.New(storeBatchMax, readBatchesAtOnce, s.readBatch)
	return s
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

// attempt runs op up to storeAttempts times, each bounded by
// firepath.DefaultOpTimeout, until it succeeds; it returns the last error.
func attempt(op func(ctx context.Context) error) error {
	wait := storeRetryWait
	var err error
	for i := range storeAttempts {
		if i > 0 {
			time.Sleep(wait)
			wait *= 2
		}
		ctx, cancel := context.WithTimeout(context.Background(), firepath.DefaultOpTimeout)
		err = op(ctx)
		cancel()
		if err == nil {
			return nil
		}
	}
	return err
}

// writeBatch sends ws as one unordered bulk write per status (so that
// the count of changed requests is the count of each status set) and
// returns one error per write.
func (s *Store) writeBatch(ws []statusWrite) []error {
	errs := make([]error, len(ws))
	var order []string
	groups := map[string][]int{}
	for i, w := range ws {
		if _, ok := groups[w.status]; !ok {
			order = append(order, w.status)
		}
		groups[w.status] = append(groups[w.status], i)
	}
	for _, status := range order {
		idx := groups[status]
		models := make([]mongo.WriteModel, len(idx))
		for k, i := range idx {
			models[k] = mongo.NewUpdateOneModel().SetFilter(ws[i].filter).SetUpdate(bson.D{{Key: "$set", Value: ws[i].set}})
		}
		var modified int64
		err := attempt(func(ctx context.Context) error {
			res, err := s.coll.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
			if res != nil {
				modified += res.ModifiedCount
			}
			var bwe mongo.BulkWriteException
			if errors.As(err, &bwe) && bwe.WriteConcernError == nil && len(bwe.WriteErrors) > 0 {
				// Writes the server refused one by one: sending them again
				// would not help; the others landed.
				for _, we := range bwe.WriteErrors {
					i := idx[we.Index]
					errs[i] = fmt.Errorf("write the outcome of trigger %v in %s: %w", ws[i].filter[0].Value, s.coll.Name(), we)
				}
				return nil
			}
			return err
		})
		if err != nil {
			for _, i := range idx {
				errs[i] = fmt.Errorf("write the outcome of trigger %v in %s (%d requests in the batch): %w",
					ws[i].filter[0].Value, s.coll.Name(), len(idx), err)
			}
		}
		if s.outcome != nil && status != "" && status != StatusRunning {
			for range modified {
				s.outcome(status)
			}
		}
	}
	return errs
}

// readBatch answers qs with one find by _id and one by (job_id,
// scheduled_at).
func (s *Store) readBatch(qs []recordQuery) []recordAnswer {
	out := make([]recordAnswer, len(qs))
	var ids bson.A
	var at bson.A
	for _, q := range qs {
		if q.runID != "" {
			ids = append(ids, q.runID)
		} else {
			at = append(at, bson.D{{Key: "job_id", Value: q.job}, {Key: "scheduled_at", Value: q.slot}})
		}
	}
	byID := map[string]*record.RunDoc{}
	type jobSlot struct {
		job  string
		slot int64
	}
	byAt := map[jobSlot]*record.RunDoc{}
	read := func(filter bson.D, put func(*record.RunDoc)) error {
		return attempt(func(ctx context.Context) error {
			cur, err := s.runs.Find(ctx, filter)
			if err != nil {
				return err
			}
			var recs []record.RunDoc
			if err := cur.All(ctx, &recs); err != nil {
				return err
			}
			for i := range recs {
				put(&recs[i])
			}
			return nil
		})
	}
	var idErr, atErr error
	if len(ids) > 0 {
		idErr = read(bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}}, func(r *record.RunDoc) { byID[r.ID] = r })
		if idErr != nil {
			idErr = fmt.Errorf("read %d run records in %s: %w", len(ids), s.runs.Name(), idErr)
		}
	}
	if len(at) > 0 {
		atErr = read(bson.D{{Key: "$or", Value: at}}, func(r *record.RunDoc) {
			byAt[jobSlot{r.JobID, r.ScheduledAt.UnixMilli()}] = r
		})
		if atErr != nil {
			atErr = fmt.Errorf("read the records of %d slots in %s: %w", len(at), s.runs.Name(), atErr)
		}
	}
	for i, q := range qs {
		if q.runID != "" {
			out[i] = recordAnswer{rec: byID[q.runID], err: idErr}
		} else {
			out[i] = recordAnswer{rec: byAt[jobSlot{q.job, q.slot.UnixMilli()}], err: atErr}
		}
	}
	return out
}

// update writes set where filter matches, in the next write batch, and
// waits for it.
func (s *Store) update(ctx context.Context, filter, set bson.D) error {
	err, cerr := s.writes.Submit(ctx, newWrite(filter, set))
	if cerr != nil {
		return fmt.Errorf("write the outcome of trigger %v in %s: %w", filter[0].Value, s.coll.Name(), cerr)
	}
	return err
}

func newWrite(filter, set bson.D) statusWrite {
	w := statusWrite{filter: filter, set: set}
	for _, e := range set {
		if st, ok := e.Value.(string); ok && e.Key == FieldStatus {
			w.status = st
		}
	}
	return w
}

func (s *Store) final(status, errMsg string, now time.Time) bson.D {
	d := bson.D{{Key: FieldStatus, Value: status}, {Key: FieldUpdatedAt, Value: now},
		{Key: FieldExpireAt, Value: now.Add(s.retention)}, {Key: FieldInstance, Value: s.instance}}
	if errMsg != "" {
		d = append(d, bson.E{Key: FieldError, Value: errMsg})
	}
	return d
}

// pending matches request id while no daemon has written a status on
// it: also when its status is not a string (the request is malformed,
// and Reject is to write on it).
func pending(id bson.RawValue) bson.D {
	return bson.D{{Key: FieldID, Value: id}, {Key: FieldStatus, Value: bson.D{{Key: "$not", Value: bson.D{{Key: "$type", Value: "string"}}}}}}
}

// Reject marks a pending request bad, with why.
func (s *Store) Reject(ctx context.Context, id bson.RawValue, why string, now time.Time) error {
	return s.update(ctx, pending(id), s.final(StatusRejected, why, now))
}

// NotRun marks a pending request not run, with why.
func (s *Store) NotRun(ctx context.Context, id bson.RawValue, why string, now time.Time) error {
	return s.update(ctx, pending(id), s.final(StatusNotRun, why, now))
}

// openTo lists the statuses a run of a request may still write over:
// none (pending), and those a replica writes on a request it could not
// run — refused for an action it lacks (rejected), not run, or a
// backfilled slot found decided (already_ran). Another replica may still
// have run the request (it had the action, it saw the request later, the
// record found was the request's own run): the run's own outcome replaces
// them. also are more statuses to list.
func openTo(also ...string) bson.A {
	in := bson.A{nil, StatusRejected, StatusNotRun, StatusAlreadyRan}
	for _, a := range also {
		in = append(in, a)
	}
	return in
}

// runnable matches request id while a run may write over its status
// (openTo), or it is one of also.
func runnable(id bson.RawValue, also ...string) bson.D {
	return bson.D{{Key: FieldID, Value: id}, {Key: FieldStatus, Value: bson.D{{Key: "$in", Value: openTo(also...)}}}}
}

func startedSet(l record.Lease, now time.Time) bson.D {
	return bson.D{{Key: FieldStatus, Value: StatusRunning}, {Key: FieldRunID, Value: l.RunID},
		{Key: FieldInstance, Value: l.Instance}, {Key: FieldFence, Value: l.Fence}, {Key: FieldStartedAt, Value: now},
		{Key: FieldUpdatedAt, Value: now}}
}

// Started marks a request running under lease (this replica won its
// claim).
func (s *Store) Started(ctx context.Context, id bson.RawValue, l record.Lease, now time.Time) error {
	return s.update(ctx, runnable(id), startedSet(l, now))
}

// StartedLater is Started without waiting: the write goes with the next
// batch and done is called with its error, on the goroutine that sent the
// batch (it must not block).
func (s *Store) StartedLater(id bson.RawValue, l record.Lease, now time.Time, done func(error)) {
	s.writes.Enqueue(newWrite(runnable(id), startedSet(l, now)), done)
}

// Buffered marks a pending request buffered: its run runID waits on the
// job's lock (why says for what). The replica that takes it from the
// lock's buffer writes the rest (BufferedStarted, BufferedEnded).
func (s *Store) Buffered(ctx context.Context, id bson.RawValue, runID, why string, now time.Time) error {
	return s.update(ctx, runnable(id), bson.D{{Key: FieldStatus, Value: StatusBuffered}, {Key: FieldRunID, Value: runID},
		{Key: FieldReason, Value: why}, {Key: FieldUpdatedAt, Value: now}})
}

// ofRun matches the run-now request whose run is l (run id RunIDOf(its
// key)) while a run may write over its status (openTo), or it is one of
// statuses; ok is false when l is not a run-now request's run.
func ofRun(l record.Lease, statuses ...string) (bson.D, bool) {
	key, ok := strings.CutPrefix(l.RunID, RunIDPrefix)
	if !ok || key == "" {
		return nil, false
	}
	ids := bson.A{key}
	if oid, err := bson.ObjectIDFromHex(key); err == nil {
		ids = append(ids, oid) // mongosh's default _id, rendered in hex
	}
	return bson.D{{Key: FieldID, Value: bson.D{{Key: "$in", Value: ids}}}, {Key: FieldJobID, Value: l.JobID},
		{Key: FieldStatus, Value: bson.D{{Key: "$in", Value: openTo(statuses...)}}}}, true
}

// BufferedStarted implements firepath.RequestReporter: the request of the
// buffered run l, whichever replica buffered it, says running under this
// replica (also while still pending: the replica that buffered it may not
// have written buffered yet).
func (s *Store) BufferedStarted(ctx context.Context, l record.Lease, at time.Time) error {
	filter, ok := ofRun(l, StatusBuffered)
	if !ok {
		return nil
	}
	return s.update(ctx, filter, startedSet(l, at))
}

// BufferedEnded implements firepath.RequestReporter: the request of the
// buffered run l gets the run's outcome.
func (s *Store) BufferedEnded(ctx context.Context, l record.Lease, res firepath.OffScheduleResult, at time.Time) error {
	filter, ok := ofRun(l, StatusBuffered, StatusRunning)
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

// RunStart is the start of a request's run as the run's Started
// callback saw it: the lease it won and when its action started. The
// zero RunStart is a run whose action never started (skipped).
type RunStart struct {
	Lease record.Lease
	At    time.Time
}

// Finish writes the end of the run this replica ran (or skipped) for
// request id: status and error as recorded on the run, and its start
// (fence, started_at) again: the running write goes beside the action
// (StartedLater) and may land after this one, when it matches nothing.
func (s *Store) Finish(ctx context.Context, id bson.RawValue, runID string, start RunStart, status, errMsg string, now time.Time) error {
	set := append(s.final(status, errMsg, now), bson.E{Key: FieldRunID, Value: runID}, bson.E{Key: FieldEndedAt, Value: now})
	if !start.At.IsZero() {
		set = append(set, bson.E{Key: FieldFence, Value: start.Lease.Fence}, bson.E{Key: FieldStartedAt, Value: start.At})
	}
	return s.update(ctx, runnable(id, StatusRunning), set)
}

// FromRecord copies the outcome of run record rec onto request id when
// the request is this run's: running under rec's id, or, when mine says
// the record can only be this request's (a run-now request's own run id,
// a backfilled slot's record made after the request), also while its
// status is open to a run (openTo). A record still buffered makes such a
// pending request buffered; otherwise it does nothing while rec is not
// ended.
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

// record asks the next read batch for q and waits for it.
func (s *Store) record(ctx context.Context, q recordQuery) (*record.RunDoc, error) {
	a, err := s.reads.Submit(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("read a run record in %s: %w", s.runs.Name(), err)
	}
	return a.rec, a.err
}

// Record reads the run record with _id runID; nil, nil when there is none.
func (s *Store) Record(ctx context.Context, runID string) (*record.RunDoc, error) {
	return s.record(ctx, recordQuery{runID: runID})
}

// RecordAt reads the record of job at slot whatever its _id (a missed
// range starting at slot); nil, nil when there is none.
func (s *Store) RecordAt(ctx context.Context, job string, slot time.Time) (*record.RunDoc, error) {
	return s.record(ctx, recordQuery{job: job, slot: slot.UTC()})
}

// ForgetMissed deletes the missed record rec when it covers its one slot
// only, so that the slot can be backfilled under its own run id
// (MissedRecords.ForgetMissed). It reports whether the record is gone. At
// most writeBatchesAtOnce such deletes are out at once (they are rare: no
// batch is worth it), each bounded by firepath.DefaultOpTimeout.
func (s *Store) ForgetMissed(ctx context.Context, rec record.RunDoc) (bool, error) {
	if rec.Status != record.StatusMissed || rec.Count != 1 {
		return false, nil
	}
	select {
	case s.forgets <- struct{}{}:
		defer func() { <-s.forgets }()
	case <-ctx.Done():
		return false, fmt.Errorf("delete missed record %s in %s: %w", rec.ID, s.runs.Name(), ctx.Err())
	}
	ctx, cancel := context.WithTimeout(ctx, firepath.DefaultOpTimeout)
	defer cancel()
	return s.missed.ForgetMissed(ctx, rec)
}

// scheduleAnswer is one job's schedule as read by a Schedules batch.
type scheduleAnswer struct {
	sched schedule.Schedule
	err   error
}

// Schedules returns the Options.Schedules lookup over the schedules
// collection coll: the job's document, decoded and validated (a disabled
// job's too). Lookups are batched across callers: one find answers every
// job asked for meanwhile.
func Schedules(coll *mongo.Collection) func(ctx context.Context, jobID string) (schedule.Schedule, error) {
	b := batch.New(storeBatchMax, readBatchesAtOnce, func(jobIDs []string) []scheduleAnswer {
		out := make([]scheduleAnswer, len(jobIDs))
		ids := bson.A{}
		asked := map[string]bool{}
		for _, id := range jobIDs {
			if !asked[id] {
				asked[id] = true
				ids = append(ids, id)
			}
		}
		docs := map[string]bson.Raw{}
		err := attempt(func(ctx context.Context) error {
			cur, err := coll.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}})
			if err != nil {
				return err
			}
			defer cur.Close(ctx)
			for cur.Next(ctx) {
				raw := append(bson.Raw(nil), cur.Current...)
				if id, ok := raw.Lookup("_id").StringValueOK(); ok {
					docs[id] = raw
				}
			}
			return cur.Err()
		})
		for i, id := range jobIDs {
			raw, ok := docs[id]
			switch {
			case err != nil:
				out[i].err = fmt.Errorf("read the schedule of job %q in %s: %w", id, coll.Name(), err)
			case !ok:
				out[i].err = fmt.Errorf("job %q has no schedule in %s: %w", id, coll.Name(), ErrNoJob)
			default:
				s, derr := schedule.Decode(raw)
				if derr != nil {
					derr = fmt.Errorf("the schedule of job %q: %w", id, derr)
				}
				out[i] = scheduleAnswer{sched: s, err: derr}
			}
		}
		return out
	})
	return func(ctx context.Context, jobID string) (schedule.Schedule, error) {
		a, err := b.Submit(ctx, jobID)
		if err != nil {
			return schedule.Schedule{}, fmt.Errorf("read the schedule of job %q in %s: %w", jobID, coll.Name(), err)
		}
		return a.sched, a.err
	}
}
