package runstore

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/cronswap/cronswap/internal/record"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// repair resets a damaged lock document to free, keeping what can be
// trusted (a numeric fence, a sane last slot, the last outcome) and taking
// the rest from job_runs. The replacement is conditional on the document
// being exactly as inspected, so a concurrent repair or claim is never
// overwritten; the run a damaged running lock named is marked abandoned.
// It reports whether it replaced the document.
//
// except is the run id of the claim repairing it (its own record is not
// history).
func (s *Store) repair(ctx context.Context, jobID, except string, raw bson.Raw, v lockView, now time.Time) (bool, error) {
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
	} else if s != record.LockFree && s != record.LockRunning {
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
	if v.state != record.LockRunning {
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
