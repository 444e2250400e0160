// Package jobhistory is one job's history as operators read it: the
// edits of its schedules document (package history, schedule_history)
// together with the operations that leave that document alone and are
// recorded elsewhere, each with who did it and when:
//
//   - run now: a request in triggers without a slot (requested_by,
//     requested_at), with its outcome;
//   - backfill: the requests in triggers with a slot that one `cronswap
//     backfill` wrote (the same requested_at and requested_by), as one
//     operation over their slots, with their outcomes counted;
//   - resume after failures: the job's document in job_pauses
//     (resumed_by, resumed_at; the last resume only, as the document keeps
//     it).
//
// Nothing is written for it: the records of these operations already say
// who and when, and the daemons never write schedules. The operations are
// derived when read, here, once for every reader: `cronswap schedules
// history` (List), and the timeline of `cronswap explain` and the
// daemon's /api/schedules/{id}/timeline (Read).
package jobhistory

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/history"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/internal/triggers"
)

// Operations, as Operation.Op says them.
const (
	// OpRunNow is a run-now request (`cronswap run-now`, the page's Run
	// now, a triggers insert without a slot).
	OpRunNow = "run_now"
	// OpBackfill is the backfill requests of one `cronswap backfill`.
	OpBackfill = "backfill"
	// OpResumeAfterFailures is a resume of a job paused after consecutive
	// failed slots (`cronswap schedules resume`, the page's Resume after
	// failures, a job_pauses update).
	OpResumeAfterFailures = "resume_after_failures"
)

// Operation is one thing an operator did to a job that its schedules
// document does not record.
type Operation struct {
	// Op is OpRunNow, OpBackfill or OpResumeAfterFailures.
	Op string `json:"op"`
	// At is when it was done: the request's requested_at (a run-now
	// request without one: its ObjectId's time), the pause's resumed_at.
	At time.Time `json:"at"`
	// By names who did it: requested_by, resumed_by; empty when the
	// record names no one.
	By string `json:"by,omitempty"`
	// TriggerID is a run-now request's _id (an ObjectId in hex).
	TriggerID string `json:"trigger_id,omitempty"`
	// RunID is a run-now's run id (its job_runs _id), as the daemon wrote
	// it or, before it did, triggers.RunIDOf the request; empty for a
	// rejected request.
	RunID string `json:"run_id,omitempty"`
	// Status is a run-now request's status, triggers.StatusPending while
	// it has none.
	Status string `json:"status,omitempty"`
	// Error is a run-now request's error (rejected, not run, failed).
	Error string `json:"error,omitempty"`
	// Args are the args a run-now request handed the action instead of
	// the schedule's (relaxed extended JSON), when it did.
	Args json.RawMessage `json:"args,omitempty"`
	// Slots are a backfill's slots and what became of them.
	Slots *Slots `json:"slots,omitempty"`
}

// Slots are the slots of one backfill.
type Slots struct {
	// Count is how many slots were asked for.
	Count int64 `json:"count"`
	// First and Last are the first and the last of them.
	First time.Time `json:"first"`
	Last  time.Time `json:"last"`
	// Statuses counts the requests by status (triggers.StatusPending for
	// those no replica has taken yet).
	Statuses map[string]int64 `json:"statuses"`
}

// Details describes the operation for people, without its time, Op and
// By: `trigger 65f0…, run trigger/65f0… succeeded, args {"region":"eu"}`
// for a run now, `3 slots 2026-03-01T07:00:00Z .. 2026-03-01T09:00:00Z: 2
// pending, 1 succeeded` for a backfill, "" for a resume.
func (o Operation) Details() string {
	var parts []string
	if o.TriggerID != "" {
		parts = append(parts, "trigger "+o.TriggerID)
	}
	switch {
	case o.RunID != "":
		parts = append(parts, "run "+o.RunID+" "+o.Status)
	case o.Status != "":
		parts = append(parts, o.Status)
	}
	if len(o.Args) > 0 {
		parts = append(parts, "args "+string(o.Args))
	}
	if s := o.Slots; s != nil {
		var counts []string
		for _, st := range slices.Sorted(maps.Keys(s.Statuses)) {
			counts = append(counts, fmt.Sprintf("%d %s", s.Statuses[st], st))
		}
		parts = append(parts, fmt.Sprintf("%d slots %s .. %s: %s", s.Count,
			s.First.UTC().Format(time.RFC3339), s.Last.UTC().Format(time.RFC3339), strings.Join(counts, ", ")))
	}
	if o.Error != "" {
		parts = append(parts, "error: "+o.Error)
	}
	return strings.Join(parts, ", ")
}

// Query selects operations of one job.
type Query struct {
	// From and To bound At, inclusive; a zero end is open.
	From, To time.Time
	// Limit is the most operations returned (<= 0: all): the oldest
	// ones, or the newest with NewestFirst.
	Limit int
	// NewestFirst orders the operations newest first; else oldest first.
	NewestFirst bool
}

// Read returns the operations of job jobID that q selects, in q's order
// (ties by Op, then TriggerID). It reads triggers (two finds of run-now
// requests, one aggregation of backfill requests, served by
// triggers.JobIndex) and the job's document in job_pauses. A backfill
// request without requested_at is not listed, nor is a run-now request
// with neither requested_at nor an ObjectId _id: neither says when.
func Read(ctx context.Context, db *mongo.Database, jobID string, q Query) ([]Operation, error) {
	coll := triggers.Collection(db)
	out, err := runNows(ctx, coll, jobID, q)
	if err != nil {
		return nil, err
	}
	bf, err := backfills(ctx, coll, jobID, q)
	if err != nil {
		return nil, err
	}
	out = append(out, bf...)
	res, ok, err := resume(ctx, db, jobID, q)
	if err != nil {
		return nil, err
	}
	if ok {
		out = append(out, res)
	}
	sortOps(out, q.NewestFirst)
	if q.Limit > 0 && len(out) > q.Limit {
		out = out[:q.Limit]
	}
	return out, nil
}

// sortOps orders ops by At (newest first when newest), ties by Op, then
// TriggerID.
func sortOps(ops []Operation, newest bool) {
	sort.SliceStable(ops, func(i, j int) bool {
		a, b := ops[i], ops[j]
		if !a.At.Equal(b.At) {
			return a.At.Before(b.At) != newest
		}
		if a.Op != b.Op {
			return a.Op < b.Op
		}
		return a.TriggerID < b.TriggerID
	})
}

// timeRange is the filter of a field between q's ends (nil: no bound).
func (q Query) timeRange() bson.D {
	r := bson.D{}
	if !q.From.IsZero() {
		r = append(r, bson.E{Key: "$gte", Value: q.From})
	}
	if !q.To.IsZero() {
		r = append(r, bson.E{Key: "$lte", Value: q.To})
	}
	return r
}

// contains reports whether t is within q's ends.
func (q Query) contains(t time.Time) bool {
	return (q.From.IsZero() || !t.Before(q.From)) && (q.To.IsZero() || !t.After(q.To))
}

// order is the sort direction of q: 1 oldest first, -1 newest first.
func (q Query) order() int {
	if q.NewestFirst {
		return -1
	}
	return 1
}

// requestDoc is what Read reads of a request.
type requestDoc struct {
	ID          bson.RawValue `bson:"_id"`
	RequestedAt bson.RawValue `bson:"requested_at"`
	RequestedBy bson.RawValue `bson:"requested_by"`
	Args        bson.RawValue `bson:"args"`
	Status      bson.RawValue `bson:"status"`
	RunID       bson.RawValue `bson:"run_id"`
	Error       bson.RawValue `bson:"error"`
}

// requestFields is the projection of requestDoc.
func requestFields() bson.D {
	return bson.D{
		{Key: triggers.FieldRequestedAt, Value: 1}, {Key: triggers.FieldRequestedBy, Value: 1}, {Key: triggers.FieldArgs, Value: 1},
		{Key: triggers.FieldStatus, Value: 1}, {Key: triggers.FieldRunID, Value: 1}, {Key: triggers.FieldError, Value: 1},
	}
}

// runNows reads the run-now requests of job jobID that q selects: those
// with requested_at by it, and those without by their ObjectId's time.
func runNows(ctx context.Context, coll *mongo.Collection, jobID string, q Query) ([]Operation, error) {
	runNow := bson.D{{Key: triggers.FieldJobID, Value: jobID}, {Key: triggers.FieldSlot, Value: nil}}
	dated := append(append(bson.D{}, runNow...), bson.E{Key: triggers.FieldRequestedAt, Value: append(bson.D{{Key: "$type", Value: "date"}}, q.timeRange()...)})
	ids := bson.D{{Key: "$type", Value: "objectId"}}
	if !q.From.IsZero() {
		ids = append(ids, bson.E{Key: "$gte", Value: firstObjectIDAt(q.From)})
	}
	if !q.To.IsZero() {
		ids = append(ids, bson.E{Key: "$lt", Value: firstObjectIDAt(q.To.Add(time.Second))})
	}
	undated := append(append(bson.D{}, runNow...), bson.E{Key: triggers.FieldRequestedAt, Value: nil}, bson.E{Key: triggers.FieldID, Value: ids})

	var out []Operation
	for _, f := range []struct {
		filter bson.D
		sort   string
	}{{dated, triggers.FieldRequestedAt}, {undated, triggers.FieldID}} {
		opts := options.Find().SetProjection(requestFields()).SetSort(bson.D{{Key: f.sort, Value: q.order()}})
		if q.Limit > 0 {
			opts.SetLimit(int64(q.Limit))
		}
		cur, err := coll.Find(ctx, f.filter, opts)
		if err != nil {
			return nil, fmt.Errorf("read the run-now requests of job %q in %s: %w", jobID, coll.Name(), err)
		}
		var docs []requestDoc
		if err := cur.All(ctx, &docs); err != nil {
			return nil, fmt.Errorf("read the run-now requests of job %q in %s: %w", jobID, coll.Name(), err)
		}
		for _, d := range docs {
			if op, ok := runNowOf(d); ok && q.contains(op.At) {
				out = append(out, op)
			}
		}
	}
	return out, nil
}

// firstObjectIDAt is the least ObjectId of t's second: its time, and
// zeros.
func firstObjectIDAt(t time.Time) bson.ObjectID {
	var id bson.ObjectID
	binary.BigEndian.PutUint32(id[:4], uint32(t.Unix()))
	return id
}

// runNowOf is the operation of one run-now request; false when it does
// not say when it was made.
func runNowOf(d requestDoc) (Operation, bool) {
	key, ok := triggers.KeyOf(d.ID)
	if !ok {
		return Operation{}, false
	}
	op := Operation{Op: OpRunNow, TriggerID: key, Status: triggers.StatusPending}
	if t, ok := d.RequestedAt.TimeOK(); ok {
		op.At = t.UTC()
	} else if oid, ok := d.ID.ObjectIDOK(); ok {
		op.At = oid.Timestamp().UTC()
	} else {
		return Operation{}, false
	}
	op.By, _ = d.RequestedBy.StringValueOK()
	if s, ok := d.Status.StringValueOK(); ok && s != "" {
		op.Status = s
	}
	op.Error, _ = d.Error.StringValueOK()
	op.RunID, _ = d.RunID.StringValueOK()
	if op.RunID == "" && op.Status != triggers.StatusRejected {
		op.RunID = triggers.RunIDOf(key)
	}
	if args, ok := d.Args.DocumentOK(); ok {
		if js, err := bson.MarshalExtJSON(args, false, false); err == nil {
			op.Args = js
		}
	}
	return op, true
}

// backfills reads the backfill requests of job jobID that q selects, one
// operation per (requested_at, requested_by): what one `cronswap
// backfill` wrote. The server counts them by status in one aggregation.
func backfills(ctx context.Context, coll *mongo.Collection, jobID string, q Query) ([]Operation, error) {
	match := bson.D{{Key: triggers.FieldJobID, Value: jobID}, {Key: triggers.FieldSlot, Value: bson.D{{Key: "$type", Value: "date"}}},
		{Key: triggers.FieldRequestedAt, Value: append(bson.D{{Key: "$type", Value: "date"}}, q.timeRange()...)}}
	cur, err := coll.Aggregate(ctx, mongo.Pipeline{
		{{Key: "$match", Value: match}},
		{{Key: "$group", Value: bson.D{
			{Key: "_id", Value: bson.D{{Key: "at", Value: "$" + triggers.FieldRequestedAt}, {Key: "by", Value: "$" + triggers.FieldRequestedBy},
				{Key: "status", Value: "$" + triggers.FieldStatus}}},
			{Key: "n", Value: bson.D{{Key: "$sum", Value: 1}}},
			{Key: "first", Value: bson.D{{Key: "$min", Value: "$" + triggers.FieldSlot}}},
			{Key: "last", Value: bson.D{{Key: "$max", Value: "$" + triggers.FieldSlot}}},
		}}},
	})
	if err != nil {
		return nil, fmt.Errorf("count the backfill requests of job %q in %s: %w", jobID, coll.Name(), err)
	}
	var groups []struct {
		Key struct {
			At     time.Time     `bson:"at"`
			By     bson.RawValue `bson:"by"`
			Status bson.RawValue `bson:"status"`
		} `bson:"_id"`
		N     int64     `bson:"n"`
		First time.Time `bson:"first"`
		Last  time.Time `bson:"last"`
	}
	if err := cur.All(ctx, &groups); err != nil {
		return nil, fmt.Errorf("count the backfill requests of job %q in %s: %w", jobID, coll.Name(), err)
	}
	type key struct {
		at int64
		by string
	}
	byKey := map[key]*Operation{}
	var out []Operation
	var order []key
	for _, g := range groups {
		by, _ := g.Key.By.StringValueOK()
		k := key{g.Key.At.UnixNano(), by}
		op := byKey[k]
		if op == nil {
			op = &Operation{Op: OpBackfill, At: g.Key.At.UTC(), By: by,
				Slots: &Slots{First: g.First.UTC(), Last: g.Last.UTC(), Statuses: map[string]int64{}}}
			byKey[k] = op
			order = append(order, k)
		}
		status, _ := g.Key.Status.StringValueOK()
		if status == "" {
			status = triggers.StatusPending
		}
		s := op.Slots
		s.Count += g.N
		s.Statuses[status] += g.N
		if g.First.Before(s.First) {
			s.First = g.First.UTC()
		}
		if g.Last.After(s.Last) {
			s.Last = g.Last.UTC()
		}
	}
	for _, k := range order {
		out = append(out, *byKey[k])
	}
	return out, nil
}

// resume reads the last resume of job jobID after failures, when q
// selects it.
func resume(ctx context.Context, db *mongo.Database, jobID string, q Query) (Operation, bool, error) {
	coll := db.Collection(record.PausesCollection)
	var p struct {
		ResumedAt bson.RawValue `bson:"resumed_at"`
		ResumedBy bson.RawValue `bson:"resumed_by"`
	}
	err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: jobID}},
		options.FindOne().SetProjection(bson.D{{Key: "resumed_at", Value: 1}, {Key: "resumed_by", Value: 1}})).Decode(&p)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return Operation{}, false, nil
	}
	if err != nil {
		return Operation{}, false, fmt.Errorf("read the pause of job %q in %s: %w", jobID, coll.Name(), err)
	}
	at, ok := p.ResumedAt.TimeOK()
	if !ok || !q.contains(at) {
		return Operation{}, false, nil
	}
	op := Operation{Op: OpResumeAfterFailures, At: at.UTC()}
	op.By, _ = p.ResumedBy.StringValueOK()
	return op, true, nil
}

// Item is one line of a job's history: an edit of its schedules document
// or an operation; exactly one of Edit and Operation is set.
type Item struct {
	Edit      *history.Entry
	Operation *Operation
}

// At is when the item's edit or operation was made.
func (i Item) At() time.Time {
	if i.Edit != nil {
		return i.Edit.At
	}
	return i.Operation.At
}

// List returns the newest limit items of job jobID (<= 0: all), newest
// first: its edits (history.List) and its operations (Read) merged. At the
// same instant an operation is listed before an edit: in time order it
// comes after it, as in a timeline.
func List(ctx context.Context, db *mongo.Database, jobID string, limit int) ([]Item, error) {
	edits, err := history.List(ctx, db.Collection(history.CollectionName), jobID, int64(limit))
	if err != nil {
		return nil, err
	}
	ops, err := Read(ctx, db, jobID, Query{Limit: limit, NewestFirst: true})
	if err != nil {
		return nil, err
	}
	out := make([]Item, 0, len(edits)+len(ops))
	ei, oi := 0, 0
	for ei < len(edits) || oi < len(ops) {
		if oi < len(ops) && (ei == len(edits) || !ops[oi].At.Before(edits[ei].At)) {
			out = append(out, Item{Operation: &ops[oi]})
			oi++
		} else {
			out = append(out, Item{Edit: &edits[ei]})
			ei++
		}
	}
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}
