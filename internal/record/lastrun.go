package record

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// lastRunReads bounds the reads LastRuns has in flight at once.
const lastRunReads = 8

// RanStatuses returns the statuses of a run record whose action started:
// running, retrying (an attempt ended and another is due), succeeded,
// failed and abandoned. A claiming, buffered, skipped or missed record did
// not run.
func RanStatuses() []string {
	return []string{StatusRunning, StatusRetrying, StatusSucceeded, StatusFailed, StatusAbandoned}
}

// Ran reports whether a record of status is one whose action started
// (RanStatuses).
func Ran(status string) bool { return slices.Contains(RanStatuses(), status) }

// LastRun returns the last run of job id in runs (job_runs): of the job's
// records whose action started (RanStatuses) — a cron slot, a run-now, a
// backfilled slot, a retried slot alike — the one with the latest
// scheduled_at (a cron or backfilled slot's slot, a run-now's request
// time), which is the order of the job's timeline and of `cronswap runs
// list`. ok is false when the job has none. It is the one definition of a
// job's last run: the status page, /api/schedule-rows, the job page and
// `cronswap schedules list` and `get` all read it here. It reads the
// (job_id, scheduled_at) index from its newest end and stops at the first
// record that ran.
func LastRun(ctx context.Context, runs *mongo.Collection, id string) (r RunDoc, ok bool, err error) {
	err = runs.FindOne(ctx,
		bson.D{{Key: "job_id", Value: id}, {Key: "status", Value: bson.D{{Key: "$in", Value: RanStatuses()}}}},
		options.FindOne().SetSort(bson.D{{Key: "scheduled_at", Value: -1}})).Decode(&r)
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		return RunDoc{}, false, nil
	case err != nil:
		return RunDoc{}, false, fmt.Errorf("read the last run of %s from %s: %w", id, runs.Name(), err)
	}
	return r, true, nil
}

// LastRuns returns LastRun of each of ids that has one, by job id, with at
// most lastRunReads reads in flight at once (one read per job: each stops
// at its job's newest run, however many records the job has).
func LastRuns(ctx context.Context, runs *mongo.Collection, ids []string) (map[string]RunDoc, error) {
	out := make(map[string]RunDoc, len(ids))
	var (
		mu    sync.Mutex
		wg    sync.WaitGroup
		first error
	)
	sem := make(chan struct{}, lastRunReads)
	for _, id := range ids {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			r, ok, err := LastRun(ctx, runs, id)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil && first == nil:
				first = err
			case ok:
				out[id] = r
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return nil, first
	}
	return out, nil
}
