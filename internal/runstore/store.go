package runstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/notify"
	"github.com/cronswap/cronswap/internal/record"
)

// Store is record.Store on MongoDB: job_locks
// holds one lock document per job, job_runs one record per claimed or
// skipped fire. It needs no transactions or sessions: a claim batch is an
// unordered insertMany of run records whose _id, RunID(job, slot), admits
// one record per fire (the server refuses a second: exactly-once), then
// one unordered bulkWrite of conditional upserts on the locks of the fires
// won; renewals and ends are one write per collection. Every write is
// conditional on the state it expects, and an outcome that was lost on
// the way (connection cut, step-down, write concern) is read back, never
// guessed. See docs/locks.md.
type Store struct {
	locks     *mongo.Collection
	runs      *mongo.Collection
	retention time.Duration
	instance  string
	log       *slog.Logger
	onNotice  func()
}

// Options configures a Store.
type Options struct {
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

// New returns a store on the given collections (normally
// record.Collections of the daemon's database).
func New(locks, runs *mongo.Collection, opts Options) *Store {
	if opts.Retention <= 0 {
		opts.Retention = record.DefaultRetention
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Store{locks: locks, runs: runs, retention: opts.Retention, instance: opts.Instance, log: opts.Logger,
		onNotice: opts.OnNotice}
}

// history returns the highest fence and the latest slot recorded in
// job_runs for a job, so a lock document that is recreated or repaired
// never hands out a fence twice or re-runs a recorded slot.
//
// except, when not empty, is a record left out: the running record of the
// claim that repairs the lock (written before it takes the lock).
func (s *Store) history(ctx context.Context, jobID, except string) (fence int64, lastSlot time.Time, err error) {
	// Buffered records have not run: their fences are not handed out yet.
	filter := bson.D{{Key: "job_id", Value: jobID}, {Key: "status", Value: bson.D{{Key: "$ne", Value: record.StatusBuffered}}}}
	if except != "" {
		filter = append(filter, bson.E{Key: "_id", Value: bson.D{{Key: "$ne", Value: except}}})
	}
	var byFence struct {
		Fence int64 `bson:"fence"`
	}
	err = s.runs.FindOne(ctx, filter,
		options.FindOne().SetSort(bson.D{{Key: "fence", Value: -1}})).Decode(&byFence)
	if err != nil && !errors.Is(err, mongo.ErrNoDocuments) {
		return 0, time.Time{}, fmt.Errorf("runs of %s in %s: %w: %w", jobID, s.runs.Name(), record.ErrUnreachable, err)
	}
	// A missed record covers its slots up to last_scheduled_at.
	var bySlot struct {
		ScheduledAt     time.Time `bson:"scheduled_at"`
		LastScheduledAt time.Time `bson:"last_scheduled_at"`
	}
	err = s.runs.FindOne(ctx, filter,
		options.FindOne().SetSort(bson.D{{Key: "scheduled_at", Value: -1}})).Decode(&bySlot)
	if err != nil && !errors.Is(err, mongo.ErrNoDocuments) {
		return 0, time.Time{}, fmt.Errorf("runs of %s in %s: %w: %w", jobID, s.runs.Name(), record.ErrUnreachable, err)
	}
	return byFence.Fence, laterOf(bySlot.ScheduledAt, bySlot.LastScheduledAt), nil
}

// initLock creates the free lock document of a job seen for the first time
// (or whose document was deleted). A concurrent insert wins just as well.
func (s *Store) initLock(ctx context.Context, jobID string, now time.Time) error {
	fence, lastSlot, err := s.history(ctx, jobID, "")
	if err != nil {
		return err
	}
	_, err = s.locks.InsertOne(ctx, freeLock(jobID, fence, lastSlot, "", now))
	if err != nil && !mongo.IsDuplicateKeyError(err) {
		return fmt.Errorf("create lock %s: %w: %w", jobID, record.ErrUnreachable, err)
	}
	return nil
}

func freeLock(jobID string, fence int64, lastSlot time.Time, lastOutcome string, now time.Time) bson.D {
	d := bson.D{
		{Key: "_id", Value: jobID},
		{Key: "state", Value: record.LockFree},
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

// abandonRun marks a run that is still recorded running as abandoned
// (abandoned_at, not ended_at: the holder, if alive, writes its true end).
// Failures are logged: SweepExpired catches the record once its lease has
// passed anyway.
func (s *Store) abandonRun(ctx context.Context, jobID, runID string, now time.Time, why string) {
	_, err := s.runs.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: runID}, {Key: "status", Value: record.StatusRunning}},
		bson.D{{Key: "$set", Value: bson.D{
			{Key: "status", Value: record.StatusAbandoned},
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
