package httpapi

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/internal/record"
)

// Records reads the fire path's records (job_runs, job_locks) for the
// overview, the schedules table and the job page (*MongoRecords is one).
type Records interface {
	// LastRuns returns the last run (record.LastRun) of each of ids that
	// has one, by job id.
	LastRuns(ctx context.Context, ids []string) (map[string]LastRun, error)
	// MissedSince returns, by job id, how many slots the missed records
	// of jobs (all of them when ids is nil) with scheduled_at at or after
	// since cover; jobs with none are absent.
	MissedSince(ctx context.Context, ids []string, since time.Time) (map[string]int64, error)
	// FiresSince counts the run records with scheduled_at at or after
	// since, by status.
	FiresSince(ctx context.Context, since time.Time) (map[string]int64, error)
	// Lock returns the lock document of job id; nil when it has none.
	Lock(ctx context.Context, id string) (*record.LockDoc, error)
}

// LastRun is a job's last run (record.LastRun: of its records whose action
// started, the one with the latest scheduled_at), as the schedules table
// and the job page show it.
type LastRun struct {
	// RunID is the run's id: record.RunID of the job and slot, or
	// trigger/<request id> for a run-now.
	RunID string `json:"run_id"`
	// ScheduledAt is the run's slot (a run-now's: its request time).
	ScheduledAt time.Time `json:"scheduled_at"`
	// Status is the run record's status (jobs.StatusSucceeded, ...).
	Status string `json:"status"`
	// StartedAt and EndedAt are when it started and ended; nil when not
	// (yet) known.
	StartedAt *time.Time `json:"started_at"`
	EndedAt   *time.Time `json:"ended_at"`
	// InstanceID is the replica that ran it.
	InstanceID string `json:"instance_id"`
}

// MongoRecords is Records on the daemon's database.
type MongoRecords struct {
	locks *mongo.Collection
	runs  *mongo.Collection
}

// NewMongoRecords returns the records of db (jobs.Collections).
func NewMongoRecords(db *mongo.Database) *MongoRecords {
	locks, runs := record.Collections(db)
	return &MongoRecords{locks: locks, runs: runs}
}

// LastRuns implements Records with record.LastRuns, the one definition of
// a job's last run.
func (m *MongoRecords) LastRuns(ctx context.Context, ids []string) (map[string]LastRun, error) {
	runs, err := record.LastRuns(ctx, m.runs, ids)
	if err != nil {
		return nil, err
	}
	out := make(map[string]LastRun, len(runs))
	for id, r := range runs {
		out[id] = lastRunOf(r)
	}
	return out, nil
}

func lastRunOf(r record.RunDoc) LastRun {
	return LastRun{RunID: r.ID, ScheduledAt: r.ScheduledAt.UTC(), Status: r.Status,
		StartedAt: utcPtr(r.StartedAt), EndedAt: utcPtr(r.EndedAt), InstanceID: r.Instance}
}

// MissedSince implements Records. With ids it reads through the (job_id,
// scheduled_at) index; without, through (status, lease_until).
func (m *MongoRecords) MissedSince(ctx context.Context, ids []string, since time.Time) (map[string]int64, error) {
	match := bson.D{}
	if ids != nil {
		if len(ids) == 0 {
			return map[string]int64{}, nil
		}
		match = append(match, bson.E{Key: "job_id", Value: bson.D{{Key: "$in", Value: ids}}})
	}
	match = append(match,
		bson.E{Key: "scheduled_at", Value: bson.D{{Key: "$gte", Value: since}}},
		bson.E{Key: "status", Value: record.StatusMissed})
	return m.sumBy(ctx, match, "$job_id", bson.D{{Key: "$ifNull", Value: bson.A{"$count", 1}}})
}

// FiresSince implements Records. No index has scheduled_at first: this
// reads the whole collection, so callers cache it (see overview).
func (m *MongoRecords) FiresSince(ctx context.Context, since time.Time) (map[string]int64, error) {
	return m.sumBy(ctx, bson.D{{Key: "scheduled_at", Value: bson.D{{Key: "$gte", Value: since}}}}, "$status", 1)
}

// sumBy groups the run records matching match by key, summing sum.
func (m *MongoRecords) sumBy(ctx context.Context, match bson.D, key string, sum any) (map[string]int64, error) {
	cur, err := m.runs.Aggregate(ctx, mongo.Pipeline{
		{{Key: "$match", Value: match}},
		{{Key: "$group", Value: bson.D{{Key: "_id", Value: key}, {Key: "n", Value: bson.D{{Key: "$sum", Value: sum}}}}}},
	})
	if err != nil {
		return nil, fmt.Errorf("count %s: %w", m.runs.Name(), err)
	}
	var rows []struct {
		Key string `bson:"_id"`
		N   int64  `bson:"n"`
	}
	if err := cur.All(ctx, &rows); err != nil {
		return nil, fmt.Errorf("count %s: %w", m.runs.Name(), err)
	}
	out := make(map[string]int64, len(rows))
	for _, r := range rows {
		out[r.Key] += r.N
	}
	return out, nil
}

// Lock implements Records.
func (m *MongoRecords) Lock(ctx context.Context, id string) (*record.LockDoc, error) {
	var l record.LockDoc
	err := m.locks.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&l)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the lock of %s in %s: %w", id, m.locks.Name(), err)
	}
	return &l, nil
}

func utcPtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}
