package record

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readconcern"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"
)

// DefaultRetention is how long run records are kept after they end when
// runstore.Options.Retention (config runs.retention) is 0: 30 days.
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

// PausesCollection holds one document per job paused after consecutive
// failed slots (jobs.Policy.PauseAfterFailures): the daemons write the pause, an
// operator clears it (`cronswap schedules resume ID`). It is apart from
// schedules, which the daemon never writes, and from job_locks, whose
// repair would drop it. docs/retry.md has its fields.
const PausesCollection = "job_pauses"

// PausesCollectionOf returns db's job_pauses with the fire path's
// concerns (majority writes and reads, as Collections).
func PausesCollectionOf(db *mongo.Database) *mongo.Collection {
	return db.Collection(PausesCollection,
		options.Collection().SetWriteConcern(writeconcern.Majority()).SetReadConcern(readconcern.Majority()))
}

// Collection names of the fire path's records: one lock document per job,
// one run record per claimed or skipped fire. Every package that reads or
// writes them (the daemon, `cronswap init`, the command line) names them
// through these constants.
const (
	LocksCollection = "job_locks"
	RunsCollection  = "job_runs"
)
