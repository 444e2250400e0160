package runstore

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/record"
)

// repair resets a damaged lock document to free, keeping what can be
// trusted (a numeric fence, a sane last slot, the last outcome, the run
// count) and taking the rest from job_runs. The replacement is conditional on the document
// being exactly as inspected, so a concurrent repair or claim is never
// overwritten; the run a damaged running lock named is marked abandoned.
// It reports whether it replaced the document.
//
// except is the run id of the claim repairing it (its own record is not
// history).
func (s *Store) repair(ctx context.Context, jobID, except string, raw bson.Raw, v record.LockState, now time.Time) (bool, error) {
	fence, lastSlot, err := s.history(ctx, jobID, except)
	if err != nil {
		return false, err
	}
	if val, err := raw.LookupErr("fence"); err == nil {
		if f, ok := trustedFence(val); ok {
			fence = max(fence, f)
		}
	}
	if v.LastSlotOK && v.LastSlot.After(lastSlot) {
		lastSlot = v.LastSlot
	}
	reason := strings.Join(v.Damage, "; ")
	doc := freeLock(jobID, fence, lastSlot, v.LastOutcome, now)
	runs, err := s.trustedRuns(ctx, jobID, raw)
	if err != nil {
		return false, err
	}
	if runs > 0 {
		doc = append(doc, bson.E{Key: record.LockRunsField, Value: runs})
	}
	doc = append(doc, bson.E{Key: "repaired_at", Value: now}, bson.E{Key: "repair_reason", Value: reason})
	if v.BufferOK && v.Waiting != nil {
		doc = append(doc, bson.E{Key: record.LockBufferField, Value: raw.Lookup(record.LockBufferField)}) // fires still waiting
	}
	filter, err := sameDocFilter(raw)
	if err != nil {
		return false, fmt.Errorf("repair lock %s: %w", jobID, err)
	}
	res, err := s.locks.ReplaceOne(ctx, filter, doc)
	if err != nil {
		return false, fmt.Errorf("repair lock %s: %w: %w", jobID, record.ErrUnreachable, err)
	}
	if res.MatchedCount == 0 {
		return false, nil // changed since we looked; the caller looks again
	}
	s.log.Warn("lock document damaged; reset to free", "job_id", jobID, "instance_id", s.instance,
		"damage", reason, "fence", fence, "last_slot", lastSlot)
	if v.RunID != "" {
		s.abandonRun(ctx, jobID, v.RunID, now, "lock document damaged ("+reason+"); repaired by "+s.instance)
	}
	return true, nil
}

// knownLockFields are the fields a repair's compare-and-swap also checks
// for absence, so a concurrent writer that added one is not overwritten.
var knownLockFields = []string{"state", "holder", "run_id", "lease_until", "fence", "last_slot", record.LockRunsField}

// trustedRuns is the run count a repair keeps: the document's when it is
// a count (record.Count), the ceiling of a positive number that is not
// one; otherwise (a string, say) as many as the job's records in job_runs
// that started (running, ended or retrying: cron slots and backfilled
// slots alike, within the runs retention), so that a damaged count errs
// towards fewer runs, never one past max_runs.
func (s *Store) trustedRuns(ctx context.Context, jobID string, raw bson.Raw) (int64, error) {
	val, err := raw.LookupErr(record.LockRunsField)
	if err != nil {
		return 0, nil
	}
	if n, ok := record.Count(val); ok {
		return n, nil
	}
	if d, ok := val.DoubleOK(); ok && d > 0 && d < 1<<53 {
		return int64(math.Ceil(d)), nil
	}
	n, err := s.runs.CountDocuments(ctx, bson.D{{Key: "job_id", Value: jobID}, {Key: "status", Value: bson.D{{Key: "$in", Value: bson.A{
		record.StatusRunning, record.StatusSucceeded, record.StatusFailed, record.StatusAbandoned, record.StatusRetrying}}}}})
	if err != nil {
		return 0, fmt.Errorf("count the runs of %s in %s: %w: %w", jobID, s.runs.Name(), record.ErrUnreachable, err)
	}
	return n, nil
}

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

// trustedFence is the value of a damaged fence that can still be trusted
// as a lower bound (an integral double).
func trustedFence(v bson.RawValue) (int64, bool) {
	if i, ok := record.Integer(v); ok {
		return i, true
	}
	if d, ok := v.DoubleOK(); ok && d >= 0 && math.Abs(d) < 1<<53 {
		return int64(math.Ceil(d)), true
	}
	return 0, false
}
