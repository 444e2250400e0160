package runstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/notify"
	"github.com/cronswap/cronswap/internal/record"
)

// SweepExpired implements record.Store: one find on {status, lease_until}
// (index RunsLeaseIndex); when it finds some, one updateMany marking them
// abandoned (still conditional on running and the lease passed) and one
// find of those it marked.
func (s *Store) SweepExpired(ctx context.Context, now time.Time, limit int) ([]record.RunDoc, error) {
	expired := bson.D{{Key: "status", Value: bson.D{{Key: "$in", Value: bson.A{record.StatusRunning, record.StatusClaiming}}}},
		{Key: "lease_until", Value: bson.D{{Key: "$lt", Value: now}}}}
	return s.sweep(ctx, expired, "lease expired: the holder stopped renewing (swept by "+s.instance+")",
		"run abandoned: its lease passed without a renewal", now, limit)
}

// SweepPreviousLives implements record.Store: the running records of
// instance written under another incarnation belong to a previous life
// of this instance (a second live one is refused by the membership), so
// they are abandoned at once instead of when their lease passes. One find
// on {status} (index RunsLeaseIndex), and when it finds some, one
// updateMany and one find.
func (s *Store) SweepPreviousLives(ctx context.Context, instance, incarnation string, now time.Time) ([]record.RunDoc, error) {
	previous := bson.D{{Key: "status", Value: bson.D{{Key: "$in", Value: bson.A{record.StatusRunning, record.StatusClaiming}}}}, {Key: "instance", Value: instance},
		{Key: "incarnation", Value: bson.D{{Key: "$ne", Value: incarnation}}}}
	return s.sweep(ctx, previous, "left by a previous life of "+instance+"; abandoned on restart",
		"run left by a previous life of this instance; abandoned", now, 0)
}

// sweep marks the running records matching match abandoned (at most
// limit; <= 0: 1000), logging each with msg.
func (s *Store) sweep(ctx context.Context, match bson.D, why, msg string, now time.Time, limit int) ([]record.RunDoc, error) {
	if limit <= 0 {
		limit = 1000
	}
	cur, err := s.runs.Find(ctx, match, options.Find().SetLimit(int64(limit)).SetProjection(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("find runs to abandon in %s: %w", s.runs.Name(), err)
	}
	var cand []record.RunDoc
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
		{Key: "status", Value: record.StatusAbandoned},
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
		{Key: "status", Value: record.StatusAbandoned}, {Key: "abandoned_at", Value: now}})
	if err != nil {
		return nil, fmt.Errorf("read abandoned runs in %s: %w", s.runs.Name(), err)
	}
	var out []record.RunDoc
	if err := cur.All(ctx, &out); err != nil {
		return nil, fmt.Errorf("read abandoned runs in %s: %w", s.runs.Name(), err)
	}
	for _, d := range out {
		s.log.Warn(msg, "job_id", d.JobID, "scheduled_at", d.ScheduledAt,
			"run_id", d.ID, "holder", d.Instance, "instance_id", s.instance, "lease_until", d.LeaseUntil)
	}
	return out, nil
}

// VerifyIndexes implements record.Store: one listIndexes; when an index of
// RunIndexes is missing (dropped, or the collection was dropped), one
// createIndexes recreates them.
func (s *Store) VerifyIndexes(ctx context.Context) (bool, error) {
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
	for _, m := range record.RunIndexes() {
		n := indexName(m)
		if !have[n] {
			missing = append(missing, n)
		}
	}
	if len(missing) == 0 {
		return false, nil
	}
	if err := record.EnsureIndexes(ctx, s.runs); err != nil {
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
