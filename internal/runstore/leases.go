package runstore

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/record"
)

// RenewBatch implements record.Store: one updateMany on job_runs and, when
// some leases take the lock, one on job_locks, each matching the
// acquisitions' tokens (claim), so that a renewal never extends a later
// acquisition of the same run id; a matched count short of the leases sent
// is followed by one find per short collection to name the leases lost.
func (s *Store) RenewBatch(ctx context.Context, leases []record.Lease, now time.Time, ttl time.Duration) ([]record.Lease, error) {
	if len(leases) == 0 {
		return nil, nil
	}
	until := now.Add(ttl)
	ids := make(bson.A, 0, len(leases))
	tokens := make(bson.A, 0, len(leases))
	var lockJobs, lockRuns, lockTokens bson.A
	for _, l := range leases {
		ids = append(ids, l.RunID)
		tokens = append(tokens, l.Token)
		if l.Overlap.TakesLock() {
			lockJobs = append(lockJobs, l.JobID)
			lockRuns = append(lockRuns, l.RunID)
			lockTokens = append(lockTokens, l.Token)
		}
	}
	res, err := s.runs.UpdateMany(ctx,
		bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}, {Key: "status", Value: record.StatusRunning},
			{Key: "claim", Value: bson.D{{Key: "$in", Value: tokens}}}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "lease_until", Value: until}}}})
	if err != nil {
		return nil, fmt.Errorf("renew %d runs in %s: %w", len(ids), s.runs.Name(), err)
	}
	runsShort := res.MatchedCount < int64(len(ids))
	locksShort := false
	if len(lockJobs) > 0 {
		res, err := s.locks.UpdateMany(ctx,
			bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: lockJobs}}},
				{Key: "run_id", Value: bson.D{{Key: "$in", Value: lockRuns}}}, {Key: "state", Value: record.LockRunning},
				{Key: "claim", Value: bson.D{{Key: "$in", Value: lockTokens}}}},
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
			bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}, {Key: "status", Value: record.StatusRunning}},
			options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: "claim", Value: 1}}))
		if err != nil {
			return nil, fmt.Errorf("find lost runs in %s: %w", s.runs.Name(), err)
		}
		var docs []record.RunDoc
		if err := cur.All(ctx, &docs); err != nil {
			return nil, fmt.Errorf("find lost runs in %s: %w", s.runs.Name(), err)
		}
		for _, d := range docs {
			running[d.ID+"\x00"+d.Claim] = true
		}
		for _, l := range leases {
			if !running[l.RunID+"\x00"+l.Token] {
				lostSet[l.RunID] = true
			}
		}
	}
	if locksShort {
		held := map[string]bool{}
		cur, err := s.locks.Find(ctx,
			bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: lockJobs}}}, {Key: "state", Value: record.LockRunning}},
			options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: "run_id", Value: 1}, {Key: "claim", Value: 1}}))
		if err != nil {
			return nil, fmt.Errorf("find lost locks in %s: %w", s.locks.Name(), err)
		}
		var docs []record.LockDoc
		if err := cur.All(ctx, &docs); err != nil {
			return nil, fmt.Errorf("find lost locks in %s: %w", s.locks.Name(), err)
		}
		for _, d := range docs {
			held[d.JobID+"\x00"+d.RunID+"\x00"+d.Claim] = true
		}
		for _, l := range leases {
			if l.Overlap.TakesLock() && !held[l.JobID+"\x00"+l.RunID+"\x00"+l.Token] {
				lostSet[l.RunID] = true
			}
		}
	}
	var lost []record.Lease
	for _, l := range leases {
		if lostSet[l.RunID] {
			lost = append(lost, l)
		}
	}
	return lost, nil
}
