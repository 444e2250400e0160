package admin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/docfields"
	"github.com/cronswap/cronswap/internal/history"
	"github.com/cronswap/cronswap/internal/lifetime"
	"github.com/cronswap/cronswap/internal/schedfile"
	"github.com/cronswap/cronswap/schedule"
)

// The field `cronswap apply` writes beside a schedule's own and the edit's
// (updated_at, updated_by, update_message: Author). The daemons ignore it.
const (
	// FieldManagedBy marks a document apply created or updated
	// (ManagedByApply): `apply --prune` deletes only such documents.
	FieldManagedBy = docfields.ManagedBy
	// ManagedByApply is the value of FieldManagedBy.
	ManagedByApply = "cronswap apply"
)

// Op is what a Change does.
type Op string

// Ops of a plan.
const (
	OpCreate    Op = "create"
	OpUpdate    Op = "update"
	OpDelete    Op = "delete"
	OpAdopt     Op = "adopt" // unchanged, marked managed
	OpUnchanged Op = "unchanged"
)

// Change is what applying one entry of a file (or pruning one document)
// does to the schedules collection.
type Change struct {
	Op Op
	// ID is the job id.
	ID string
	// Line is the entry's line in the file; 0 for a delete.
	Line int
	// Before is the stored document the change was planned from; nil when
	// there was none. Every write is conditional on it.
	Before bson.Raw
	// After is the document the entry wants (_id and the format's fields);
	// nil for a delete.
	After bson.Raw
	// Fields are the format's fields that differ, before → after (a side
	// IsZero when the field is absent there).
	Fields []history.Change
}

// TimingChanged reports whether c changes when the job fires: its
// expression, zone, daylight-saving mode or enabled.
func (c Change) TimingChanged() bool {
	for _, f := range c.Fields {
		switch f.Field {
		case schedule.FieldCronExpr, schedule.FieldTimezone, schedule.FieldDST, schedule.FieldEnabled:
			return true
		}
	}
	return false
}

// PlanChange compares the stored document (nil: there is none) with the
// document after that an entry wants, both for job id. A field counts as
// changed when the daemons would read it differently (schedule.DecodeFields
// of both): `enabled: true` and no enabled are the same, `dst: shift` and
// no dst too, and args compare as the JSON an action receives. A stored
// document the daemons refuse is compared field by field as stored. An
// unchanged document not marked managed is OpAdopt when adopt is set.
func PlanChange(id string, line int, stored, after bson.Raw, adopt bool) Change {
	c := Change{ID: id, Line: line, Before: stored, After: after}
	if stored == nil {
		c.Op = OpCreate
		c.Fields = diffFields(nil, after, nil, nil)
		return c
	}
	sb, errB := schedule.DecodeFields(stored)
	sa, errA := schedule.DecodeFields(after)
	if errB != nil || errA != nil {
		c.Fields = diffFields(stored, after, nil, nil)
	} else {
		c.Fields = diffFields(stored, after, &sb, &sa)
	}
	switch {
	case len(c.Fields) > 0:
		c.Op = OpUpdate
	case adopt && !IsManaged(stored):
		c.Op = OpAdopt
	default:
		c.Op = OpUnchanged
	}
	return c
}

// PlanDelete is the deletion of the stored document of a managed job the
// file no longer names.
func PlanDelete(id string, stored bson.Raw) Change {
	return Change{Op: OpDelete, ID: id, Before: stored, Fields: diffFields(stored, nil, nil, nil)}
}

// IsManaged reports whether a stored document is marked as written by
// apply.
func IsManaged(doc bson.Raw) bool {
	v, ok := doc.Lookup(FieldManagedBy).StringValueOK()
	return ok && v == ManagedByApply
}

// diffFields lists the format's fields (but _id) that differ between two
// documents. With both decoded schedules given, a field differs when its
// decoded value does; else when its stored BSON does.
func diffFields(before, after bson.Raw, sb, sa *schedule.Schedule) []history.Change {
	var out []history.Change
	for _, f := range schedfile.Fields()[1:] {
		var b, a bson.RawValue
		if before != nil {
			b = before.Lookup(f)
		}
		if after != nil {
			a = after.Lookup(f)
		}
		same := b.Type == a.Type && bytes.Equal(b.Value, a.Value)
		if sb != nil && sa != nil {
			same = decodedField(*sb, f) == decodedField(*sa, f)
		}
		if !same {
			out = append(out, history.Change{Field: f, Before: b, After: a})
		}
	}
	return out
}

// decodedField is the value of field f of a decoded schedule.
func decodedField(s schedule.Schedule, f string) any {
	switch f {
	case schedule.FieldCronExpr:
		return s.CronExpr
	case schedule.FieldTimezone:
		return s.Timezone
	case schedule.FieldDST:
		return s.DST
	case schedule.FieldEnabled:
		return s.Enabled
	case schedule.FieldJob:
		return s.Job
	case schedule.FieldCategory:
		return s.Category
	case schedule.FieldArgs:
		return s.Args
	case lifetime.FieldStartAt:
		return s.StartAt.UTC()
	case lifetime.FieldEndAt:
		return s.EndAt.UTC()
	case lifetime.FieldPausedUntil:
		return s.PausedUntil.UTC()
	case lifetime.FieldMaxRuns:
		return s.MaxRuns
	case schedule.FieldExclude:
		return s.Exclude
	}
	panic("admin: no decoded value for field " + f)
}

// idsPerRead is how many ids one read of SchedulesByID asks for ($in).
// The test server checks each document it finds against the whole $in
// list, so its cost per document grows with the list: 100 ids at a time
// read about seven times as many documents a second there as 1,000
// (BenchmarkReadByIDs, docs/BENCHMARKS.md); a server's index lookup does
// not care, and 100 keeps the round trips few.
const idsPerRead = 100

// SchedulesByID returns the stored documents of the ids that exist, read
// idsPerRead at a time.
func (s *Store) SchedulesByID(ctx context.Context, ids []string) (map[string]bson.Raw, error) {
	out := make(map[string]bson.Raw, len(ids))
	for len(ids) > 0 {
		n := min(len(ids), idsPerRead)
		docs, err := s.readIDs(ctx, ids[:n])
		if err != nil {
			return nil, err
		}
		ids = ids[n:]
		for _, doc := range docs {
			if id, ok := doc.Lookup(schedule.FieldID).StringValueOK(); ok {
				out[id] = doc
			}
		}
	}
	return out, nil
}

// readIDs reads the documents of ids in one query.
func (s *Store) readIDs(ctx context.Context, ids []string) ([]bson.Raw, error) {
	cur, err := s.db.Collection(schedule.CollectionName).Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}},
		options.Find().SetBatchSize(int32(len(ids))))
	if err != nil {
		return nil, fmt.Errorf("read %d documents of %s: %w", len(ids), schedule.CollectionName, err)
	}
	defer cur.Close(context.WithoutCancel(ctx))
	var out []bson.Raw
	for cur.Next(ctx) {
		out = append(out, append(bson.Raw(nil), cur.Current...))
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("read %d documents of %s: %w", len(ids), schedule.CollectionName, err)
	}
	return out, nil
}

// ScheduleFilter selects documents of schedules; the zero value selects
// all. Selects is the rule; export, plan and apply all select through it.
type ScheduleFilter struct {
	// Category, when set, selects the documents whose category is exactly
	// that string.
	Category string
	// IDPrefix, when set, selects the documents whose _id is a string
	// starting with exactly that text.
	IDPrefix string
	// Managed selects only the documents apply marked managed (IsManaged).
	Managed bool
}

// IsZero reports whether f selects every document.
func (f ScheduleFilter) IsZero() bool { return f == ScheduleFilter{} }

// Selects reports whether f selects doc: a stored document, or the
// document an entry of a file makes.
func (f ScheduleFilter) Selects(doc bson.Raw) bool {
	if f.IDPrefix != "" {
		id, ok := doc.Lookup(schedule.FieldID).StringValueOK()
		if !ok || !strings.HasPrefix(id, f.IDPrefix) {
			return false
		}
	}
	if f.Category != "" {
		c, ok := doc.Lookup(schedule.FieldCategory).StringValueOK()
		if !ok || c != f.Category {
			return false
		}
	}
	return !f.Managed || IsManaged(doc)
}

// query narrows what EachSchedule reads to at least every document
// Selects selects (MongoDB's equality also matches an array holding the
// value, which Selects does not: EachSchedule asks Selects of each).
func (f ScheduleFilter) query() bson.D {
	q := bson.D{}
	if f.IDPrefix != "" {
		q = append(q, bson.E{Key: schedule.FieldID, Value: bson.D{{Key: "$regex", Value: "^" + regexp.QuoteMeta(f.IDPrefix)}}})
	}
	if f.Category != "" {
		q = append(q, bson.E{Key: schedule.FieldCategory, Value: f.Category})
	}
	if f.Managed {
		q = append(q, bson.E{Key: FieldManagedBy, Value: ManagedByApply})
	}
	return q
}

// fields are the fields Selects reads besides _id.
func (f ScheduleFilter) fields() []string {
	var out []string
	if f.Category != "" {
		out = append(out, schedule.FieldCategory)
	}
	if f.Managed {
		out = append(out, FieldManagedBy)
	}
	return out
}

// EachSchedule calls fn with every document f selects (Selects), in _id
// order, reading them in batches (memory does not grow with the
// collection); fields, when given, are the only fields read (and _id, and
// those f reads). A document whose _id is not a string is passed too
// unless f has an IDPrefix. fn must not keep the document it is given past
// its call; its error stops the walk and is returned.
func (s *Store) EachSchedule(ctx context.Context, f ScheduleFilter, fields []string, fn func(bson.Raw) error) error {
	opts := options.Find().SetSort(bson.D{{Key: schedule.FieldID, Value: 1}}).SetBatchSize(1000)
	if len(fields) > 0 {
		proj, seen := bson.D{}, map[string]bool{}
		for _, list := range [][]string{fields, f.fields()} {
			for _, name := range list {
				if !seen[name] {
					seen[name] = true
					proj = append(proj, bson.E{Key: name, Value: 1})
				}
			}
		}
		opts.SetProjection(proj)
	}
	cur, err := s.db.Collection(schedule.CollectionName).Find(ctx, f.query(), opts)
	if err != nil {
		return fmt.Errorf("read %s: %w", schedule.CollectionName, err)
	}
	defer cur.Close(context.WithoutCancel(ctx))
	for cur.Next(ctx) {
		if !f.Selects(cur.Current) {
			continue
		}
		if err := fn(cur.Current); err != nil {
			return err
		}
	}
	if err := cur.Err(); err != nil {
		return fmt.Errorf("read %s: %w", schedule.CollectionName, err)
	}
	return nil
}

// WriteMeta is what every write of an apply carries.
type WriteMeta struct {
	// Author names who applied (updated_by; required) and why
	// (update_message; "" removes an earlier one).
	Author
	// At is updated_at of every document written; the store's clock when
	// zero. An apply gives all its writes one time, which also tells its
	// own writes from others.
	At time.Time
	// Force writes without the condition on the planned state: a document
	// changed (or deleted, or created) since it was planned is overwritten
	// (re-created, updated) instead of reported as a conflict.
	Force bool
}

// Result is what happened to one Change.
type Result int

// Results of ApplyChanges.
const (
	// Applied: written as planned.
	Applied Result = iota
	// Conflict: the document changed since it was planned; left alone.
	Conflict
	// Gone: a delete whose document someone else deleted already.
	Gone
	// Failed: the server refused the write (Outcome.Err says why).
	Failed
)

// Outcome is the result of one Change.
type Outcome struct {
	Result Result
	// Err says why the change was not applied (Conflict, Failed).
	Err error
}

// ErrConflict is wrapped by an Outcome.Err of Conflict.
var ErrConflict = errors.New("changed since it was planned")

// ApplyChanges writes changes (OpUnchanged ones are skipped) in one
// unordered bulk write, each conditional on its Before: a create inserts
// (a document created meanwhile is a duplicate key), an update, an
// adoption or a delete matches the document only while the format's
// fields and updated_at, updated_by, managed_by and update_message are as
// planned. Writes that match nothing are then told apart by reading those
// documents again. It returns one Outcome per change, in order; the error
// is for the database failing as a whole.
func (s *Store) ApplyChanges(ctx context.Context, changes []Change, m WriteMeta) ([]Outcome, error) {
	if m.By == "" {
		return nil, errors.New("apply: no updated_by to write")
	}
	at := m.At
	if at.IsZero() {
		at = s.now()
	}
	m.At = at.UTC().Truncate(time.Millisecond)
	out := make([]Outcome, len(changes))
	var models []mongo.WriteModel
	var index []int // index[model] = change
	for i, c := range changes {
		model := writeModel(c, m)
		if model == nil {
			continue
		}
		models = append(models, model)
		index = append(index, i)
	}
	if len(models) == 0 {
		return out, nil
	}
	coll := s.db.Collection(schedule.CollectionName)
	res, err := coll.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
	errored := map[int]bool{}
	if err != nil {
		var bwe mongo.BulkWriteException
		if !errors.As(err, &bwe) || bwe.WriteConcernError != nil || len(bwe.WriteErrors) == 0 {
			return nil, fmt.Errorf("write %d changes to %s: %w", len(models), schedule.CollectionName, err)
		}
		for _, we := range bwe.WriteErrors {
			ci := index[we.Index]
			errored[ci] = true
			c := changes[ci]
			if c.Op == OpCreate && mongo.IsDuplicateKeyError(we) {
				out[ci] = Outcome{Result: Conflict, Err: fmt.Errorf("schedule %q: created by someone else since it was planned: %w", c.ID, ErrConflict)}
				continue
			}
			out[ci] = Outcome{Result: Failed, Err: fmt.Errorf("schedule %q: the server refused the %s: %s", c.ID, c.Op, we.Message)}
		}
	}
	if m.Force {
		return out, nil
	}
	// Which conditional writes matched nothing: only when some did not.
	var updates, deletes []int
	for _, ci := range index {
		if errored[ci] {
			continue
		}
		switch changes[ci].Op {
		case OpUpdate, OpAdopt:
			updates = append(updates, ci)
		case OpDelete:
			deletes = append(deletes, ci)
		}
	}
	if res == nil {
		res = &mongo.BulkWriteResult{}
	}
	if int(res.MatchedCount) < len(updates) {
		if err := s.findUnmatched(ctx, changes, updates, out, func(c Change, doc bson.Raw) Outcome {
			if doc == nil {
				return Outcome{Result: Conflict, Err: fmt.Errorf("schedule %q: deleted by someone else since it was planned: %w", c.ID, ErrConflict)}
			}
			if v, ok := doc.Lookup(schedule.FieldUpdatedAt).TimeOK(); ok && v.Equal(m.At) {
				return Outcome{Result: Applied}
			}
			return Outcome{Result: Conflict, Err: fmt.Errorf("schedule %q: %w", c.ID, ErrConflict)}
		}); err != nil {
			return nil, err
		}
	}
	if int(res.DeletedCount) < len(deletes) {
		if err := s.findUnmatched(ctx, changes, deletes, out, func(c Change, doc bson.Raw) Outcome {
			if doc == nil {
				return Outcome{Result: Gone}
			}
			return Outcome{Result: Conflict, Err: fmt.Errorf("schedule %q: %w", c.ID, ErrConflict)}
		}); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// findUnmatched reads the documents of changes[which] again and sets their
// outcomes with judge (doc nil: no such document).
func (s *Store) findUnmatched(ctx context.Context, changes []Change, which []int, out []Outcome, judge func(Change, bson.Raw) Outcome) error {
	ids := make([]string, len(which))
	for i, ci := range which {
		ids[i] = changes[ci].ID
	}
	docs, err := s.SchedulesByID(ctx, ids)
	if err != nil {
		return err
	}
	for _, ci := range which {
		out[ci] = judge(changes[ci], docs[changes[ci].ID])
	}
	return nil
}

// writeModel is the conditional write of c, nil when c writes nothing.
func writeModel(c Change, m WriteMeta) mongo.WriteModel {
	byID := bson.D{{Key: schedule.FieldID, Value: c.ID}}
	switch c.Op {
	case OpCreate, OpUpdate:
		set, unset := bson.D{}, bson.D{}
		present := map[string]bool{}
		elems, _ := c.After.Elements()
		for _, e := range elems {
			if e.Key() == schedule.FieldID {
				continue
			}
			present[e.Key()] = true
			set = append(set, bson.E{Key: e.Key(), Value: e.Value()})
		}
		for _, f := range schedfile.Fields()[1:] {
			if !present[f] {
				unset = append(unset, bson.E{Key: f, Value: ""})
			}
		}
		meta, metaUnset := metaFields(m)
		set = append(set, meta...)
		unset = append(unset, metaUnset...)
		if c.Op == OpCreate && !m.Force {
			return mongo.NewInsertOneModel().SetDocument(append(append(bson.D{}, byID...), set...))
		}
		update := setUnset(set, unset)
		if m.Force {
			return mongo.NewUpdateOneModel().SetFilter(byID).SetUpdate(update).SetUpsert(true)
		}
		return mongo.NewUpdateOneModel().SetFilter(condition(c.ID, c.Before)).SetUpdate(update)
	case OpAdopt:
		update := setUnset(metaFields(m))
		filter := condition(c.ID, c.Before)
		if m.Force {
			filter = byID
		}
		return mongo.NewUpdateOneModel().SetFilter(filter).SetUpdate(update)
	case OpDelete:
		filter := condition(c.ID, c.Before)
		if m.Force {
			filter = append(byID, bson.E{Key: FieldManagedBy, Value: ManagedByApply})
		}
		return mongo.NewDeleteOneModel().SetFilter(filter)
	}
	return nil
}

// metaFields are the fields every write of an apply sets and removes: the
// stamp of its Author at its time, and the managed marker.
func metaFields(m WriteMeta) (set, unset bson.D) {
	set, unset = m.Author.stamp(m.At)
	return append(set, bson.E{Key: FieldManagedBy, Value: ManagedByApply}), unset
}

// conditionFields are the fields a conditional write requires to be as
// planned: the format's and the edit's own (updated_at, which every tool
// sets, catches most edits by itself).
func conditionFields() []string {
	return append(schedfile.Fields()[1:], schedule.FieldUpdatedAt, schedule.FieldUpdatedBy, FieldManagedBy, schedule.FieldUpdateMessage)
}

// condition is the filter that matches job id's document only while its
// conditionFields are as in planned: each one equal ($eq, so that a value
// is never read as an operator or a pattern) or absent.
func condition(id string, planned bson.Raw) bson.D {
	q := bson.D{{Key: schedule.FieldID, Value: id}}
	for _, f := range conditionFields() {
		v, err := planned.LookupErr(f)
		if err != nil {
			q = append(q, bson.E{Key: f, Value: bson.D{{Key: "$exists", Value: false}}})
			continue
		}
		q = append(q, bson.E{Key: f, Value: bson.D{{Key: "$eq", Value: v}}})
	}
	return q
}
