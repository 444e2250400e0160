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

	"github.com/cronswap/cronswap/internal/notify"
)

// MongoStore is the BatchStore (and the MissedStore) on MongoDB: job_locks
// holds one lock document per job, job_runs one record per claimed or
// skipped fire. It needs no transactions or sessions: a claim batch is an
// unordered insertMany of run records whose _id, RunID(job, slot), admits
// one record per fire (the server refuses a second: exactly-once), then
// one unordered bulkWrite of conditional upserts on the locks of the fires
// won; renewals and ends are one write per collection. Every write is
// conditional on the state it expects, and an outcome that was lost on
// the way (connection cut, step-down, write concern) is read back, never
// guessed. See docs/locks.md.
type MongoStore struct {
	locks     *mongo.Collection
	runs      *mongo.Collection
	retention time.Duration
	instance  string
	log       *slog.Logger
	onNotice  func()
}

// MongoStoreOptions configures a MongoStore.
type MongoStoreOptions struct {
	// Retention is how long run records are kept after they end (their
	// expire_at, which the TTL index reads); 0 means DefaultRetention.
	Retention time.Duration
	// Instance names this replica in repair records and logs.
	Instance string
	Logger   *slog.Logger
	// OnNotice, when set, is called after a write that carried
	// notifications' notices (failed, abandoned, missed records): the
	// daemon wakes its notification relay with it.
	OnNotice func()
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
	return &MongoStore{locks: locks, runs: runs, retention: opts.Retention, instance: opts.Instance, log: opts.Logger,
		onNotice: opts.OnNotice}
}

// Index names on job_runs. They are the server's default names for the
// keys, so an index created by hand (mongosh createIndex) with the same keys
// is recognised instead of conflicting.
const (
	RunsUniqueIndex = "job_id_1_scheduled_at_1"
	RunsTTLIndex    = "expire_at_1"
	RunsLeaseIndex  = "status_1_lease_until_1"
)

// RunIndexes returns the indexes of job_runs (besides _id, RunID(job,
// slot), the arbiter of exactly-once): unique (job_id, scheduled_at), which
// keeps a missed record and a run of the same slot apart and serves the
// queries by job; a TTL index on expire_at, which each record sets to its
// end plus runs.retention (so a changed retention applies to new records
// without collMod); and (status, lease_until), which SweepExpired reads.
// The daemon and `cronswap init` both create exactly these, and
// VerifyIndexes recreates any that went missing.
func RunIndexes() []mongo.IndexModel {
	return []mongo.IndexModel{
		{Keys: bson.D{{Key: "job_id", Value: 1}, {Key: "scheduled_at", Value: 1}},
			Options: options.Index().SetUnique(true).SetName(RunsUniqueIndex)},
		{Keys: bson.D{{Key: "expire_at", Value: 1}},
			Options: options.Index().SetExpireAfterSeconds(0).SetName(RunsTTLIndex)},
		{Keys: bson.D{{Key: "status", Value: 1}, {Key: "lease_until", Value: 1}},
			Options: options.Index().SetName(RunsLeaseIndex)},
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

// history returns the highest fence and the latest slot recorded in
// job_runs for a job, so a lock document that is recreated or repaired
// never hands out a fence twice or re-runs a recorded slot.
//
// except, when not empty, is a record left out: the running record of the
// claim that repairs the lock (written before it takes the lock).
func (s *MongoStore) history(ctx context.Context, jobID, except string) (fence int64, lastSlot time.Time, err error) {
	// Buffered records have not run: their fences are not handed out yet.
	filter := bson.D{{Key: "job_id", Value: jobID}, {Key: "status", Value: bson.D{{Key: "$ne", Value: StatusBuffered}}}}
	if except != "" {
		filter = append(filter, bson.E{Key: "_id", Value: bson.D{{Key: "$ne", Value: except}}})
	}
	var byFence struct {
		Fence int64 `bson:"fence"`
	}
	err = s.runs.FindOne(ctx, filter,
		options.FindOne().SetSort(bson.D{{Key: "fence", Value: -1}})).Decode(&byFence)
	if err != nil && !errors.Is(err, mongo.ErrNoDocuments) {
		return 0, time.Time{}, fmt.Errorf("runs of %s in %s: %w: %w", jobID, s.runs.Name(), ErrUnreachable, err)
	}
	// A missed record covers its slots up to last_scheduled_at.
	var bySlot struct {
		ScheduledAt     time.Time `bson:"scheduled_at"`
		LastScheduledAt time.Time `bson:"last_scheduled_at"`
	}
	err = s.runs.FindOne(ctx, filter,
		options.FindOne().SetSort(bson.D{{Key: "scheduled_at", Value: -1}})).Decode(&bySlot)
	if err != nil && !errors.Is(err, mongo.ErrNoDocuments) {
		return 0, time.Time{}, fmt.Errorf("runs of %s in %s: %w: %w", jobID, s.runs.Name(), ErrUnreachable, err)
	}
	return byFence.Fence, laterOf(bySlot.ScheduledAt, bySlot.LastScheduledAt), nil
}

// initLock creates the free lock document of a job seen for the first time
// (or whose document was deleted). A concurrent insert wins just as well.
func (s *MongoStore) initLock(ctx context.Context, jobID string, now time.Time) error {
	fence, lastSlot, err := s.history(ctx, jobID, "")
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
//
// except is the run id of the claim repairing it (its own record is not
// history).
func (s *MongoStore) repair(ctx context.Context, jobID, except string, raw bson.Raw, v lockView, now time.Time) (bool, error) {
	fence, lastSlot, err := s.history(ctx, jobID, except)
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
	if arr, ok := bufferOf(raw); ok && arr != nil {
		doc = append(doc, bson.E{Key: LockBufferField, Value: raw.Lookup(LockBufferField)}) // fires still waiting
	}
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

// abandonRun marks a run that is still recorded running as abandoned
// (abandoned_at, not ended_at: the holder, if alive, writes its true end).
// Failures are logged: SweepExpired catches the record once its lease has
// passed anyway.
func (s *MongoStore) abandonRun(ctx context.Context, jobID, runID string, now time.Time, why string) {
	_, err := s.runs.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: runID}, {Key: "status", Value: StatusRunning}},
		bson.D{{Key: "$set", Value: bson.D{
			{Key: "status", Value: StatusAbandoned},
			{Key: "abandoned_at", Value: now},
			{Key: "error", Value: why},
			{Key: "expire_at", Value: now.Add(s.retention)},
			notify.Outbox(notify.KindAbandoned, now),
		}}})
	if err != nil {
		s.log.Warn("could not mark run abandoned", "job_id", jobID, "run_id", runID, "instance_id", s.instance, "error", err)
		return
	}
	s.noticed()
}

// lockView is a lock document as inspected: the fields the fire path
// reads, and what is wrong with it.
type lockView struct {
	state       string
	holder      string
	incarnation string
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
	v.incarnation, _ = lookupString(raw, "incarnation")
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
