package record

import (
	"time"
)

// MissedID is the _id of the missed record whose first slot is from: the
// same on every replica, so a record is written once however many replicas
// record it.
func MissedID(jobID string, from time.Time) string {
	return "missed/" + jobID + "/" + from.UTC().Format(time.RFC3339Nano)
}

// AttemptFence is the fence of attempt (1 the first) of the run at slot:
// FenceOf(slot)+attempt-1, increasing with each attempt and below the
// fence of any later slot (MaxRetryAttempts).
func AttemptFence(slot time.Time, attempt int) int64 {
	return FenceOf(slot) + int64(max(attempt, 1)-1)
}

// RunID is the id of the run of job jobID at slot: job_runs' _id, the
// lock's run_id and the CRONSWAP_RUN_ID an action sees. It is the same on
// every replica, so the always-present _id index admits one record per
// (job, slot); the part after the last "@" is a time, so distinct
// (job, slot) pairs never share an id.
func RunID(jobID string, slot time.Time) string {
	return jobID + "@" + slot.UTC().Format(time.RFC3339Nano)
}

// FenceOf is the fence of the run at slot: the slot in Unix milliseconds.
// A lock is acquired only for a slot later than its last slot, so the
// fences a job's lock hands out strictly increase; an action passes
// CRONSWAP_FENCE to a resource that refuses writes with a lower fence.
func FenceOf(slot time.Time) int64 { return slot.UnixMilli() }
