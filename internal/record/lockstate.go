package record

import (
	"fmt"
	"math"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// LockState is a job_locks document as the fire path reads it: the fields
// a claim decides on, and what is wrong with the document (Damage). It is
// read leniently by InspectLock, so that a damaged document is described,
// not refused.
type LockState struct {
	// State is LockFree or LockRunning (empty when damaged).
	State string
	// Holder, Incarnation, RunID and Claim name the holding run: the
	// replica, its process, the run and the acquisition (its token).
	Holder, Incarnation, RunID, Claim string
	// LeaseUntil is when the holder's lease ends.
	LeaseUntil time.Time
	// Fence is the fence of the lock's last acquisition.
	Fence int64
	// LastSlot is the latest cron slot decided for the job (valid when
	// LastSlotOK).
	LastSlot   time.Time
	LastSlotOK bool
	// LastOutcome is the status the last run ended with.
	LastOutcome string
	// Runs is the job's run count (LockRunsField; 0 when absent).
	Runs int64
	// Waiting lists the run ids of the fires waiting on the lock
	// (LockBufferField), in order; an entry without a string run_id is
	// "". BufferOK is false when the field is there but not an array.
	Waiting  []string
	BufferOK bool
	// CancelRunID and CancelBy are the pending cancel request
	// (LockCancelField): the run asked to stop and the run replacing it.
	CancelRunID, CancelBy string
	// Damage lists what is wrong with the document (the state table in
	// docs/locks.md); a damaged document is repaired before a claim.
	Damage []string
}

// HeldLive reports whether the lock is held by a live run that a claim by
// instance (process incarnation) may not take it from at now: running,
// within its lease, and not left by a previous incarnation of instance.
func (l LockState) HeldLive(instance, incarnation string, now time.Time) bool {
	return l.State == LockRunning && !l.LeaseUntil.Before(now) &&
		(l.Holder != instance || l.Incarnation == incarnation)
}

// Waits reports whether the run runID waits on the lock.
func (l LockState) Waits(runID string) bool { return slices.Contains(l.Waiting, runID) }

// FarFuture is how far ahead of the local clock now a lease or last slot
// may lie before it counts as damage: a holder writes now+ttl, so anything
// beyond ttl plus a generous clock-skew allowance (ttl, at least a minute)
// was not written by a healthy replica.
func FarFuture(now time.Time, ttl time.Duration) time.Time {
	return now.Add(ttl + max(ttl, time.Minute))
}

// InspectLock reads a lock document leniently and lists its damage (the
// state table in docs/locks.md). It never fails: unreadable fields are
// damage.
func InspectLock(raw bson.Raw, now time.Time, ttl time.Duration) LockState {
	var v LockState
	bad := func(format string, a ...any) { v.Damage = append(v.Damage, fmt.Sprintf(format, a...)) }
	far := FarFuture(now, ttl)

	if val, err := raw.LookupErr("state"); err != nil {
		bad("state missing")
	} else if s, ok := val.StringValueOK(); !ok {
		bad("state has type %s", val.Type)
	} else if s != LockFree && s != LockRunning {
		bad("state %q unknown", s)
	} else {
		v.State = s
	}
	if val, err := raw.LookupErr("fence"); err != nil {
		bad("fence missing")
	} else if f, ok := Integer(val); !ok {
		bad("fence is not an integer (%s)", val.Type)
	} else if f < 0 {
		bad("fence %d negative", f)
	} else {
		v.Fence = f
	}
	if val, err := raw.LookupErr("last_slot"); err != nil {
		bad("last_slot missing")
	} else if t, ok := val.TimeOK(); !ok {
		bad("last_slot has type %s", val.Type)
	} else if t.After(far) {
		bad("last_slot %s far in the future", t.UTC().Format(time.RFC3339))
	} else {
		v.LastSlot, v.LastSlotOK = t, true
	}
	if val, err := raw.LookupErr("last_outcome"); err == nil {
		v.LastOutcome, _ = val.StringValueOK()
	}
	if val, err := raw.LookupErr(LockRunsField); err == nil {
		if n, ok := Count(val); !ok {
			bad("%s is not a count (%s %s)", LockRunsField, val.Type, val)
		} else {
			v.Runs = n
		}
	}
	v.Holder, _ = LookupString(raw, "holder")
	v.RunID, _ = LookupString(raw, "run_id")
	v.Incarnation, _ = LookupString(raw, "incarnation")
	v.Claim, _ = LookupString(raw, "claim")
	if val, err := raw.LookupErr("lease_until"); err == nil {
		v.LeaseUntil, _ = val.TimeOK()
	}
	v.Waiting, v.BufferOK = waiting(raw)
	if val, err := raw.LookupErr(LockCancelField); err == nil {
		v.CancelRunID, v.CancelBy = CancelOf(val)
	}
	if v.State != LockRunning {
		return v
	}
	// A running lock must say who runs it and until when.
	if h, ok := LookupString(raw, "holder"); !ok {
		bad("running with holder missing or not a string")
	} else if h == "" {
		bad("running without a holder")
	}
	if _, ok := LookupString(raw, "run_id"); !ok {
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

// waiting reads the run ids of the lock's buffer; ok is false when the
// field is there but is not an array.
func waiting(raw bson.Raw) (ids []string, ok bool) {
	val, err := raw.LookupErr(LockBufferField)
	if err != nil {
		return nil, true
	}
	arr, ok := val.ArrayOK()
	if !ok {
		return nil, false
	}
	vals, err := arr.Values()
	if err != nil {
		return nil, true
	}
	ids = make([]string, len(vals))
	for i, e := range vals {
		if d, ok := e.DocumentOK(); ok {
			ids[i], _ = LookupString(d, "run_id")
		}
	}
	return ids, true
}

// LookupString reads the string field key of raw; false when it is
// missing or not a string.
func LookupString(raw bson.Raw, key string) (string, bool) {
	val, err := raw.LookupErr(key)
	if err != nil {
		return "", false
	}
	return val.StringValueOK()
}

// Count reads a count: a non-negative int32, int64 or whole double (mongosh
// writes numbers as doubles, and $inc keeps a double one; unlike a fence,
// a count only compares, so a whole double is as good). false for
// anything else, which is damage.
func Count(v bson.RawValue) (int64, bool) {
	if i, ok := Integer(v); ok {
		return i, i >= 0
	}
	if d, ok := v.DoubleOK(); ok && d >= 0 && d == math.Trunc(d) && d < 1<<53 {
		return int64(d), true
	}
	return 0, false
}

// Integer reads a BSON integer (int32 or int64). A double is damage even
// when integral: $inc would keep it a double (and a fraction would make
// fences collide after rounding); a repair rewrites it as an int64.
func Integer(v bson.RawValue) (int64, bool) {
	if i, ok := v.Int64OK(); ok {
		return i, true
	}
	if i, ok := v.Int32OK(); ok {
		return int64(i), true
	}
	return 0, false
}
