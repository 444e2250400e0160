package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readconcern"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"
)

// MongoStore is the LockStore on MongoDB: job_locks holds one lock document
// per job, job_runs one record per claimed or skipped fire. It needs no
// transactions or sessions: every step is a single-document conditional
// update (findAndModify with the expected state in the filter), and the
// unique (job_id, scheduled_at) index on job_runs backs exactly-once: a
// second record of the same fire is refused by the server.
type MongoStore struct {
	locks     *mongo.Collection
	runs      *mongo.Collection
	retention time.Duration
	instance  string
	log       *slog.Logger
}

// MongoStoreOptions configures a MongoStore.
type MongoStoreOptions struct {
	// Retention is how long run records are kept after they end (their
	// expire_at, which the TTL index reads); 0 means DefaultRetention.
	Retention time.Duration
	// Instance names this replica in repair records and logs.
	Instance string
	Logger   *slog.Logger
}

// DefaultRetention is how long run records are kept after they end when
// MongoStoreOptions.Retention (config runs.retention) is 0: 30 days.
const DefaultRetention = 720 * time.Hour

// Collections returns the fire path's collections of db, LocksCollection
// and RunsCollection, with write concern majority and read concern majority
// set on them whatever the connection string says: a claim or a run record
// acknowledged by a primary alone can be rolled back by a failover, and a
// rolled-back claim is a slot that runs twice. (A primary-secondary-arbiter
// replica set defaults to w: 1.)
func Collections(db *mongo.Database) (locks, runs *mongo.Collection) {
	opts := options.Collection().SetWriteConcern(writeconcern.Majority()).SetReadConcern(readconcern.Majority())
	return db.Collection(LocksCollection, opts), db.Collection(RunsCollection, opts)
}

// NewMongoStore returns a store on the given collections (normally
// Collections of the daemon's database).
func NewMongoStore(locks, runs *mongo.Collection, opts MongoStoreOptions) *MongoStore {
	if opts.Retention <= 0 {
		opts.Retention = DefaultRetention
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &MongoStore{locks: locks, runs: runs, retention: opts.Retention, instance: opts.Instance, log: opts.Logger}
}

// Index names on job_runs. They are the server's default names for the
// keys, so an index created by hand (mongosh createIndex) with the same keys
// is recognised instead of conflicting.
const (
	RunsUniqueIndex = "job_id_1_scheduled_at_1"
	RunsTTLIndex    = "expire_at_1"
)

// RunIndexes returns the indexes of job_runs: unique (job_id, scheduled_at),
// the last line of exactly-once (the server refuses a second record of the
// same fire), and a TTL index on expire_at, which each record sets to its end plus
// runs.retention (so a changed retention applies to new records without
// collMod). The daemon and `cronswap init` both create exactly these.
func RunIndexes() []mongo.IndexModel {
	return []mongo.IndexModel{
		{Keys: bson.D{{Key: "job_id", Value: 1}, {Key: "scheduled_at", Value: 1}},
			Options: options.Index().SetUnique(true).SetName(RunsUniqueIndex)},
		{Keys: bson.D{{Key: "expire_at", Value: 1}},
			Options: options.Index().SetExpireAfterSeconds(0).SetName(RunsTTLIndex)},
	}
}

// EnsureIndexes creates RunIndexes on runs. Creating existing indexes is a
// no-op.
func EnsureIndexes(ctx context.Context, runs *mongo.Collection) error {
	if _, err := runs.Indexes().CreateMany(ctx, RunIndexes()); err != nil {
		return fmt.Errorf("create indexes on %s: %w", runs.Name(), err)
	}
	return nil
}

// maxClaimAttempts bounds the claim loop: each turn either wins, decides,
// or changed the document (repair, initial insert), so a few suffice.
const maxClaimAttempts = 5

// Claim implements LockStore.
func (s *MongoStore) Claim(ctx context.Context, req ClaimRequest) (Claim, error) {
	var repaired []string
	var lastErr error
	for range maxClaimAttempts {
		c, won, err := s.tryClaim(ctx, req)
		if err == nil && won {
			c.Repaired = repaired
			return c, nil
		}
		if err != nil {
			if !serverAnswered(err) {
				return Claim{}, fmt.Errorf("claim %s at %s: %w: %w", req.JobID, req.Slot.UTC().Format(time.RFC3339), ErrUnreachable, err)
			}
			// The server refused the update (say, $inc on a fence that
			// is not a number): look at the document.
			lastErr = err
		}
		raw, err := s.locks.FindOne(ctx, bson.D{{Key: "_id", Value: req.JobID}}).Raw()
		if errors.Is(err, mongo.ErrNoDocuments) {
			if err := s.initLock(ctx, req.JobID, req.Now); err != nil {
				return Claim{}, err
			}
			continue
		}
		if err != nil {
			return Claim{}, fmt.Errorf("read lock %s: %w: %w", req.JobID, ErrUnreachable, err)
		}
		v := inspectLock(raw, req.Now, req.TTL)
		switch {
		case len(v.damage) > 0:
			done, err := s.repair(ctx, req.JobID, raw, v, req.Now)
			if err != nil {
				return Claim{}, err
			}
			if done {
				repaired = append(repaired, v.damage...)
			}
			continue
		case !v.lastSlot.Before(req.Slot):
			return Claim{Result: AlreadyFired, Repaired: repaired}, nil
		case req.Overlap.takesLock() && v.state == LockRunning && !v.leaseUntil.Before(req.Now) &&
			v.holder == req.Instance && req.Running != nil && !req.Running(v.runID):
			c, won, err := s.reclaim(ctx, req, v)
			if err != nil {
				return Claim{}, err
			}
			if won {
				c.Repaired = repaired
				return c, nil
			}
		case req.Overlap.takesLock() && v.state == LockRunning && !v.leaseUntil.Before(req.Now):
			// A live run holds the lock. Under OverlapForbid (the only
			// policy taking the lock so far) the fire is skipped; a policy
			// that does something else while the lock is held says so here.
			c, won, err := s.skip(ctx, req)
			if err != nil {
				return Claim{}, err
			}
			if won {
				c.Repaired = repaired
				return c, nil
			}
			// The document changed under us: look again.
		}
	}
	if lastErr != nil {
		return Claim{}, fmt.Errorf("claim %s: %w", req.JobID, lastErr)
	}
	return Claim{}, fmt.Errorf("claim %s: lock document kept changing (%d attempts)", req.JobID, maxClaimAttempts)
}

// tryClaim is the one atomic conditional update that wins a fire. For a
// policy that takes the lock its filter reads "slot not yet fired, and the
// lock free or past its lease"; otherwise only the slot counts.
func (s *MongoStore) tryClaim(ctx context.Context, req ClaimRequest) (Claim, bool, error) {
	filter := bson.D{
		{Key: "_id", Value: req.JobID},
		{Key: "last_slot", Value: bson.D{{Key: "$lt", Value: req.Slot}}},
		// A fence that is not an integer would make $inc fail or hand
		// out a fraction or, when missing, restart at 1: repair first.
		{Key: "fence", Value: bson.D{{Key: "$type", Value: bson.A{"int", "long"}}, {Key: "$gte", Value: 0}}},
		{Key: "state", Value: bson.D{{Key: "$in", Value: bson.A{LockFree, LockRunning}}}},
	}
	set := bson.D{{Key: "last_slot", Value: req.Slot}, {Key: "updated_at", Value: req.Now}}
	locks := req.Overlap.takesLock()
	if locks {
		filter = append(filter, bson.E{Key: "$or", Value: bson.A{
			bson.D{{Key: "state", Value: LockFree}},
			bson.D{{Key: "lease_until", Value: bson.D{{Key: "$lt", Value: req.Now}}}},
		}})
		set = append(set,
			bson.E{Key: "state", Value: LockRunning},
			bson.E{Key: "holder", Value: req.Instance},
			bson.E{Key: "run_id", Value: req.RunID},
			bson.E{Key: "acquired_at", Value: req.Now},
			bson.E{Key: "lease_until", Value: req.Now.Add(req.TTL)},
		)
	}
	update := bson.D{{Key: "$set", Value: set}, {Key: "$inc", Value: bson.D{{Key: "fence", Value: int64(1)}}}}
	raw, err := s.locks.FindOneAndUpdate(ctx, filter, update,
		options.FindOneAndUpdate().SetReturnDocument(options.Before)).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return Claim{}, false, nil
	}
	if err != nil {
		return Claim{}, false, err
	}
	before := inspectLock(raw, req.Now, req.TTL)
	c := Claim{Result: Acquired, Lease: Lease{
		JobID: req.JobID, Slot: req.Slot, Instance: req.Instance, RunID: req.RunID,
		Fence: before.fence + 1, Overlap: req.Overlap,
	}}
	if locks && before.state != LockFree && before.runID != "" {
		// The previous holder's lease ran out: its run is over for us.
		c.Result = TakenOver
		c.Holder, c.HolderRunID = before.holder, before.runID
		s.abandonRun(ctx, req.JobID, before.runID, req.Now,
			fmt.Sprintf("lease expired at %s; taken over by %s", before.leaseUntil.UTC().Format(time.RFC3339Nano), req.Instance))
	}
	s.sweepRuns(ctx, req.JobID, req.RunID, req.Now)
	return c, true, nil
}

// reclaim takes over a lock this instance holds under a run it does not
// know: one left by a previous life of the process. The filter pins the
// exact holder, run and fence that were inspected.
func (s *MongoStore) reclaim(ctx context.Context, req ClaimRequest, v lockView) (Claim, bool, error) {
	filter := bson.D{
		{Key: "_id", Value: req.JobID},
		{Key: "last_slot", Value: bson.D{{Key: "$lt", Value: req.Slot}}},
		{Key: "state", Value: LockRunning},
		{Key: "holder", Value: req.Instance},
		{Key: "run_id", Value: v.runID},
		{Key: "fence", Value: v.fence},
	}
	update := bson.D{
		{Key: "$set", Value: bson.D{
			{Key: "run_id", Value: req.RunID},
			{Key: "acquired_at", Value: req.Now},
			{Key: "lease_until", Value: req.Now.Add(req.TTL)},
			{Key: "last_slot", Value: req.Slot},
			{Key: "updated_at", Value: req.Now},
		}},
		{Key: "$inc", Value: bson.D{{Key: "fence", Value: int64(1)}}},
	}
	res, err := s.locks.UpdateOne(ctx, filter, update)
	if err != nil {
		return Claim{}, false, fmt.Errorf("reclaim %s: %w: %w", req.JobID, ErrUnreachable, err)
	}
	if res.MatchedCount == 0 {
		return Claim{}, false, nil
	}
	s.log.Warn("lock held by a previous run of this instance; taken over", "job_id", req.JobID,
		"instance_id", req.Instance, "previous_run_id", v.runID)
	s.abandonRun(ctx, req.JobID, v.runID, req.Now, "lock left by a previous life of "+req.Instance+"; taken over on restart")
	s.sweepRuns(ctx, req.JobID, req.RunID, req.Now)
	return Claim{Result: TakenOver, Holder: req.Instance, HolderRunID: v.runID, Lease: Lease{
		JobID: req.JobID, Slot: req.Slot, Instance: req.Instance, RunID: req.RunID,
		Fence: v.fence + 1, Overlap: req.Overlap,
	}}, true, nil
}

// skip consumes the slot while a live run holds the lock, so that exactly
// one replica records it skipped and no replica runs it later.
func (s *MongoStore) skip(ctx context.Context, req ClaimRequest) (Claim, bool, error) {
	filter := bson.D{
		{Key: "_id", Value: req.JobID},
		{Key: "last_slot", Value: bson.D{{Key: "$lt", Value: req.Slot}}},
		{Key: "state", Value: LockRunning},
		{Key: "lease_until", Value: bson.D{{Key: "$gte", Value: req.Now}}},
	}
	update := bson.D{{Key: "$set", Value: bson.D{{Key: "last_slot", Value: req.Slot}, {Key: "updated_at", Value: req.Now}}}}
	raw, err := s.locks.FindOneAndUpdate(ctx, filter, update,
		options.FindOneAndUpdate().SetReturnDocument(options.Before)).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return Claim{}, false, nil
	}
	if err != nil {
		return Claim{}, false, fmt.Errorf("skip %s: %w: %w", req.JobID, ErrUnreachable, err)
	}
	v := inspectLock(raw, req.Now, req.TTL)
	return Claim{Result: Skipped, Holder: v.holder, HolderRunID: v.runID}, true, nil
}

// history returns the highest fence and the latest slot recorded in
// job_runs for a job, so a lock document that is recreated or repaired
// never hands out a fence twice or re-runs a recorded slot.
func (s *MongoStore) history(ctx context.Context, jobID string) (fence int64, lastSlot time.Time, err error) {
	var byFence struct {
		Fence int64 `bson:"fence"`
	}
	err = s.runs.FindOne(ctx, bson.D{{Key: "job_id", Value: jobID}},
		options.FindOne().SetSort(bson.D{{Key: "fence", Value: -1}})).Decode(&byFence)
	if err != nil && !errors.Is(err, mongo.ErrNoDocuments) {
		return 0, time.Time{}, fmt.Errorf("runs of %s in %s: %w: %w", jobID, s.runs.Name(), ErrUnreachable, err)
	}
	// A missed record covers its slots up to last_scheduled_at.
	var bySlot struct {
		ScheduledAt     time.Time `bson:"scheduled_at"`
		LastScheduledAt time.Time `bson:"last_scheduled_at"`
	}
	err = s.runs.FindOne(ctx, bson.D{{Key: "job_id", Value: jobID}},
		options.FindOne().SetSort(bson.D{{Key: "scheduled_at", Value: -1}})).Decode(&bySlot)
	if err != nil && !errors.Is(err, mongo.ErrNoDocuments) {
		return 0, time.Time{}, fmt.Errorf("runs of %s in %s: %w: %w", jobID, s.runs.Name(), ErrUnreachable, err)
	}
	return byFence.Fence, laterOf(bySlot.ScheduledAt, bySlot.LastScheduledAt), nil
}

// initLock creates the free lock document of a job seen for the first time
// (or whose document was deleted). A concurrent insert wins just as well.
func (s *MongoStore) initLock(ctx context.Context, jobID string, now time.Time) error {
	fence, lastSlot, err := s.history(ctx, jobID)
	if err != nil {
		return err
	}
	_, err = s.locks.InsertOne(ctx, freeLock(jobID, fence, lastSlot, "", now))
	if err != nil && !mongo.IsDuplicateKeyError(err) {
		return fmt.Errorf("create lock %s: %w: %w", jobID, ErrUnreachable, err)
	}
	return nil
}

func freeLock(jobID string, fence int64, lastSlot time.Time, lastOutcome string, now time.Time) bson.D {
	d := bson.D{
		{Key: "_id", Value: jobID},
		{Key: "state", Value: LockFree},
		{Key: "holder", Value: ""},
		{Key: "run_id", Value: ""},
		{Key: "acquired_at", Value: time.Time{}},
		{Key: "lease_until", Value: now},
		{Key: "fence", Value: fence},
		{Key: "last_slot", Value: lastSlot},
		{Key: "updated_at", Value: now},
	}
	if lastOutcome != "" {
		d = append(d, bson.E{Key: "last_outcome", Value: lastOutcome})
	}
	return d
}

// repair resets a damaged lock document to free, keeping what can be
// trusted (a numeric fence, a sane last slot, the last outcome) and taking
// the rest from job_runs. The replacement is conditional on the document
// being exactly as inspected, so a concurrent repair or claim is never
// overwritten; the run a damaged running lock named is marked abandoned.
// It reports whether it replaced the document.
func (s *MongoStore) repair(ctx context.Context, jobID string, raw bson.Raw, v lockView, now time.Time) (bool, error) {
	fence, lastSlot, err := s.history(ctx, jobID)
	if err != nil {
		return false, err
	}
	if val, err := raw.LookupErr("fence"); err == nil {
		if f, ok := trustedFence(val); ok {
			fence = max(fence, f)
		}
	}
	if v.lastSlotOK && v.lastSlot.After(lastSlot) {
		lastSlot = v.lastSlot
	}
	reason := strings.Join(v.damage, "; ")
	doc := freeLock(jobID, fence, lastSlot, v.lastOutcome, now)
	doc = append(doc, bson.E{Key: "repaired_at", Value: now}, bson.E{Key: "repair_reason", Value: reason})
	filter, err := sameDocFilter(raw)
	if err != nil {
		return false, fmt.Errorf("repair lock %s: %w", jobID, err)
	}
	res, err := s.locks.ReplaceOne(ctx, filter, doc)
	if err != nil {
		return false, fmt.Errorf("repair lock %s: %w: %w", jobID, ErrUnreachable, err)
	}
	if res.MatchedCount == 0 {
		return false, nil // changed since we looked; the caller looks again
	}
	s.log.Warn("lock document damaged; reset to free", "job_id", jobID, "instance_id", s.instance,
		"damage", reason, "fence", fence, "last_slot", lastSlot)
	if v.runID != "" {
		s.abandonRun(ctx, jobID, v.runID, now, "lock document damaged ("+reason+"); repaired by "+s.instance)
	}
	return true, nil
}

// knownLockFields are the fields a repair's compare-and-swap also checks
// for absence, so a concurrent writer that added one is not overwritten.
var knownLockFields = []string{"state", "holder", "run_id", "lease_until", "fence", "last_slot"}

// sameDocFilter matches the document raw exactly as it was read.
func sameDocFilter(raw bson.Raw) (bson.D, error) {
	elems, err := raw.Elements()
	if err != nil {
		return nil, err
	}
	f := bson.D{}
	seen := map[string]bool{}
	for _, e := range elems {
		k := e.Key()
		seen[k] = true
		if k == "_id" {
			f = append(f, bson.E{Key: k, Value: e.Value()})
			continue
		}
		f = append(f, bson.E{Key: k, Value: bson.D{{Key: "$eq", Value: e.Value()}}})
	}
	for _, k := range knownLockFields {
		if !seen[k] {
			f = append(f, bson.E{Key: k, Value: bson.D{{Key: "$exists", Value: false}}})
		}
	}
	return f, nil
}

// abandonRun marks a run that is still recorded running as abandoned.
// Failures are logged: the next claim's sweep catches the record anyway.
func (s *MongoStore) abandonRun(ctx context.Context, jobID, runID string, now time.Time, why string) {
	_, err := s.runs.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: runID}, {Key: "status", Value: StatusRunning}},
		bson.D{{Key: "$set", Value: bson.D{
			{Key: "status", Value: StatusAbandoned},
			{Key: "ended_at", Value: now},
			{Key: "error", Value: why},
			{Key: "expire_at", Value: now.Add(s.retention)},
		}}})
	if err != nil {
		s.log.Warn("could not mark run abandoned", "job_id", jobID, "run_id", runID, "error", err)
	}
}

// sweepRuns marks abandoned the running records of a job whose lease has
// run out (their holder died without anyone taking its lock over: an allow
// job whose policy takes no lock, or a lock an operator released by hand).
func (s *MongoStore) sweepRuns(ctx context.Context, jobID, except string, now time.Time) {
	_, err := s.runs.UpdateMany(ctx,
		bson.D{
			{Key: "job_id", Value: jobID},
			{Key: "status", Value: StatusRunning},
			{Key: "lease_until", Value: bson.D{{Key: "$lt", Value: now}}},
			{Key: "_id", Value: bson.D{{Key: "$ne", Value: except}}},
		},
		bson.D{{Key: "$set", Value: bson.D{
			{Key: "status", Value: StatusAbandoned},
			{Key: "ended_at", Value: now},
			{Key: "error", Value: "lease expired: the holder stopped renewing"},
			{Key: "expire_at", Value: now.Add(s.retention)},
		}}})
	if err != nil {
		s.log.Warn("could not sweep expired runs", "job_id", jobID, "error", err)
	}
}

// StartRun implements LockStore.
func (s *MongoStore) StartRun(ctx context.Context, l Lease, now time.Time, ttl time.Duration) error {
	_, err := s.runs.InsertOne(ctx, RunDoc{
		ID: l.RunID, JobID: l.JobID, ScheduledAt: l.Slot, Instance: l.Instance, Fence: l.Fence,
		Status: StatusRunning, StartedAt: now, LeaseUntil: now.Add(ttl), ExpireAt: now.Add(s.retention),
	})
	if mongo.IsDuplicateKeyError(err) {
		return fmt.Errorf("run of %s at %s already recorded: %w", l.JobID, l.Slot.UTC().Format(time.RFC3339), ErrLockLost)
	}
	if err != nil {
		return fmt.Errorf("record run of %s in %s: %w", l.JobID, s.runs.Name(), err)
	}
	return nil
}

// Renew implements LockStore.
func (s *MongoStore) Renew(ctx context.Context, l Lease, now time.Time, ttl time.Duration) error {
	until := now.Add(ttl)
	if l.Overlap.takesLock() {
		res, err := s.locks.UpdateOne(ctx, holderFilter(l),
			bson.D{{Key: "$set", Value: bson.D{{Key: "lease_until", Value: until}, {Key: "updated_at", Value: now}}}})
		if err != nil {
			return fmt.Errorf("renew lock %s: %w", l.JobID, err)
		}
		if res.MatchedCount == 0 {
			return fmt.Errorf("renew lock %s (fence %d): %w", l.JobID, l.Fence, ErrLockLost)
		}
	}
	res, err := s.runs.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: l.RunID}, {Key: "status", Value: StatusRunning}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "lease_until", Value: until}}}})
	if err != nil {
		return fmt.Errorf("renew run %s of %s: %w", l.RunID, l.JobID, err)
	}
	if res.MatchedCount == 0 {
		return fmt.Errorf("renew run %s of %s: no longer running: %w", l.RunID, l.JobID, ErrLockLost)
	}
	return nil
}

func holderFilter(l Lease) bson.D {
	return bson.D{
		{Key: "_id", Value: l.JobID},
		{Key: "state", Value: LockRunning},
		{Key: "holder", Value: l.Instance},
		{Key: "fence", Value: l.Fence},
	}
}

// Release implements LockStore.
func (s *MongoStore) Release(ctx context.Context, l Lease, outcome string, now time.Time) error {
	set := bson.D{{Key: "last_outcome", Value: outcome}, {Key: "last_ended_at", Value: now}, {Key: "updated_at", Value: now}}
	filter := bson.D{{Key: "_id", Value: l.JobID}}
	if l.Overlap.takesLock() {
		filter = holderFilter(l)
		set = append(set,
			bson.E{Key: "state", Value: LockFree},
			bson.E{Key: "holder", Value: ""},
			bson.E{Key: "run_id", Value: ""},
			bson.E{Key: "lease_until", Value: now},
		)
	}
	res, err := s.locks.UpdateOne(ctx, filter, bson.D{{Key: "$set", Value: set}})
	if err != nil {
		return fmt.Errorf("release lock %s: %w", l.JobID, err)
	}
	if res.MatchedCount == 0 && l.Overlap.takesLock() {
		return fmt.Errorf("release lock %s (fence %d): %w", l.JobID, l.Fence, ErrLockLost)
	}
	return nil
}

// FinishRun implements LockStore.
func (s *MongoStore) FinishRun(ctx context.Context, l Lease, end RunEnd) error {
	set := bson.D{
		{Key: "status", Value: end.Status},
		{Key: "ended_at", Value: end.EndedAt},
		{Key: "expire_at", Value: end.EndedAt.Add(s.retention)},
	}
	if end.Error != "" {
		set = append(set, bson.E{Key: "error", Value: end.Error})
	}
	if end.ExitCode != nil {
		set = append(set, bson.E{Key: "exit_code", Value: *end.ExitCode})
	}
	if end.Output.Stdout != "" {
		set = append(set, bson.E{Key: "stdout", Value: end.Output.Stdout})
	}
	if end.Output.Stderr != "" {
		set = append(set, bson.E{Key: "stderr", Value: end.Output.Stderr})
	}
	update := bson.D{{Key: "$set", Value: set}}
	if end.Status == StatusMissed {
		// The claimed slot did not start: its record becomes a missed
		// record of that one slot.
		set = append(set,
			bson.E{Key: "last_scheduled_at", Value: l.Slot},
			bson.E{Key: "count", Value: int64(1)},
			bson.E{Key: "reason", Value: end.Reason},
			bson.E{Key: "recorded_at", Value: end.EndedAt})
		update = bson.D{{Key: "$set", Value: set},
			{Key: "$unset", Value: bson.D{{Key: "started_at", Value: ""}, {Key: "lease_until", Value: ""}}}}
	}
	res, err := s.runs.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: l.RunID}, {Key: "status", Value: StatusRunning}}, update)
	if err != nil {
		return fmt.Errorf("record end of run %s of %s: %w", l.RunID, l.JobID, err)
	}
	if res.MatchedCount == 0 {
		return fmt.Errorf("record end of run %s of %s: no longer running: %w", l.RunID, l.JobID, ErrLockLost)
	}
	return nil
}

// RecordSkip implements LockStore.
func (s *MongoStore) RecordSkip(ctx context.Context, jobID string, slot time.Time, instance, runID, reason string, now time.Time) error {
	_, err := s.runs.InsertOne(ctx, RunDoc{
		ID: runID, JobID: jobID, ScheduledAt: slot, Instance: instance,
		Status: StatusSkipped, StartedAt: now, EndedAt: now, Error: reason, ExpireAt: now.Add(s.retention),
	})
	if err != nil && !mongo.IsDuplicateKeyError(err) {
		return fmt.Errorf("record skipped run of %s in %s: %w", jobID, s.runs.Name(), err)
	}
	return nil
}

// serverAnswered reports whether err is the server's answer to the
// command (so the document can be looked at), as opposed to the server not
// being reached in time.
func serverAnswered(err error) bool {
	var se mongo.ServerError
	return errors.As(err, &se) && !mongo.IsNetworkError(err) && !mongo.IsTimeout(err)
}

// lockView is a lock document as inspected: the fields the fire path
// reads, and what is wrong with it.
type lockView struct {
	state       string
	holder      string
	runID       string
	leaseUntil  time.Time
	fence       int64
	lastSlot    time.Time
	lastSlotOK  bool
	lastOutcome string
	damage      []string
}

// farFuture is how far ahead of the local clock a lease or last slot may
// lie before it counts as damaged: a holder writes now+ttl, so anything
// beyond ttl plus a generous clock-skew allowance (ttl, at least a minute)
// was not written by a healthy replica.
func farFuture(now time.Time, ttl time.Duration) time.Time {
	return now.Add(ttl + max(ttl, time.Minute))
}

// inspectLock decodes a lock document leniently and lists its damage (the
// the state table in docs/locks.md). It never fails: unreadable fields are damage.
func inspectLock(raw bson.Raw, now time.Time, ttl time.Duration) lockView {
	var v lockView
	bad := func(format string, a ...any) { v.damage = append(v.damage, fmt.Sprintf(format, a...)) }
	far := farFuture(now, ttl)

	if val, err := raw.LookupErr("state"); err != nil {
		bad("state missing")
	} else if s, ok := val.StringValueOK(); !ok {
		bad("state has type %s", val.Type)
	} else if s != LockFree && s != LockRunning {
		bad("state %q unknown", s)
	} else {
		v.state = s
	}
	if val, err := raw.LookupErr("fence"); err != nil {
		bad("fence missing")
	} else if f, ok := integer(val); !ok {
		bad("fence is not an integer (%s)", val.Type)
	} else if f < 0 {
		bad("fence %d negative", f)
	} else {
		v.fence = f
	}
	if val, err := raw.LookupErr("last_slot"); err != nil {
		bad("last_slot missing")
	} else if t, ok := val.TimeOK(); !ok {
		bad("last_slot has type %s", val.Type)
	} else if t.After(far) {
		bad("last_slot %s far in the future", t.UTC().Format(time.RFC3339))
	} else {
		v.lastSlot, v.lastSlotOK = t, true
	}
	if val, err := raw.LookupErr("last_outcome"); err == nil {
		v.lastOutcome, _ = val.StringValueOK()
	}
	v.holder, _ = lookupString(raw, "holder")
	v.runID, _ = lookupString(raw, "run_id")
	if val, err := raw.LookupErr("lease_until"); err == nil {
		v.leaseUntil, _ = val.TimeOK()
	}
	if v.state != LockRunning {
		return v
	}
	// A running lock must say who runs it and until when.
	if h, ok := lookupString(raw, "holder"); !ok {
		bad("running with holder missing or not a string")
	} else if h == "" {
		bad("running without a holder")
	}
	if _, ok := lookupString(raw, "run_id"); !ok {
		bad("running with run_id missing or not a string")
	}
	if val, err := raw.LookupErr("lease_until"); err != nil {
		bad("running with lease_until missing")
	} else if t, ok := val.TimeOK(); !ok {
		bad("running with lease_until of type %s", val.Type)
	} else if t.After(far) {
		bad("lease_until %s far in the future", t.UTC().Format(time.RFC3339))
	}
	return v
}

func lookupString(raw bson.Raw, key string) (string, bool) {
	val, err := raw.LookupErr(key)
	if err != nil {
		return "", false
	}
	return val.StringValueOK()
}

// integer reads a BSON integer (int32 or int64). A double is damage even
// when integral: $inc would keep it a double (and a fraction would make
// fences collide after rounding); a repair rewrites it as an int64.
func integer(v bson.RawValue) (int64, bool) {
	if i, ok := v.Int64OK(); ok {
		return i, true
	}
	if i, ok := v.Int32OK(); ok {
		return int64(i), true
	}
	return 0, false
}

// trustedFence is the value of a damaged fence that can still be trusted
// as a lower bound (an integral double).
func trustedFence(v bson.RawValue) (int64, bool) {
	if i, ok := integer(v); ok {
		return i, true
	}
	if d, ok := v.DoubleOK(); ok && d >= 0 && math.Abs(d) < 1<<53 {
		return int64(math.Ceil(d)), true
	}
	return 0, false
}
