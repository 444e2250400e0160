package timeline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/history"
	"github.com/cronswap/cronswap/internal/jobhistory"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/schedule"
)

// Options configure a Reader.
type Options struct {
	// Location is the zone of a schedule that names none (the daemon's
	// configured default); nil means UTC.
	Location *time.Location
	// Now is the clock that decides which slots are still to come; nil
	// means time.Now.
	Now func() time.Time
}

// Reader builds timelines from one database.
type Reader struct {
	db   *mongo.Database
	loc  *time.Location
	now  func() time.Time
	hist string
}

// NewReader returns a Reader over db.
func NewReader(db *mongo.Database, o Options) *Reader {
	if o.Location == nil {
		o.Location = time.UTC
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Reader{db: db, loc: o.Location, now: o.Now, hist: history.CollectionName}
}

// Now is the reader's clock, for resolving relative range ends.
func (r *Reader) Now() time.Time { return r.now() }

// Build returns the timeline of job id over [from, to]; zero ends take the
// defaults of Window, and a range outside its bounds is an error wrapping
// ErrBadRange. A job with no schedule document, no job_runs record and no
// edit is an error wrapping ErrNotFound.
func (r *Reader) Build(ctx context.Context, id string, from, to time.Time) (Timeline, error) {
	now := r.now()
	from, to, err := Window(from, to, now)
	if err != nil {
		return Timeline{}, err
	}
	in := Input{JobID: id, From: from, To: to, Now: now, Location: r.loc}
	if in.Current, err = r.current(ctx, id); err != nil {
		return Timeline{}, err
	}
	if in.Edits, in.EditsCutBefore, err = r.edits(ctx, id, bson.D{{Key: "$gte", Value: from}}); err != nil {
		return Timeline{}, err
	}
	if in.EditsCutBefore.IsZero() && r.refusedAtFrom(in) {
		// The schedule in force at from is the last valid one before it:
		// the edits before from reconstruct it.
		older, _, err := r.edits(ctx, id, bson.D{{Key: "$lt", Value: from}})
		if err != nil {
			return Timeline{}, err
		}
		in.Edits = append(in.Edits, older...)
	}
	if in.Records, in.Cut, err = r.records(ctx, id, from, to); err != nil {
		return Timeline{}, err
	}
	var opsCut time.Time
	if in.Operations, opsCut, err = r.operations(ctx, id, from, to); err != nil {
		return Timeline{}, err
	}
	if !opsCut.IsZero() && (in.Cut.IsZero() || opsCut.Before(in.Cut)) {
		in.Cut = opsCut
	}
	seen, ok, err := history.ReadFirstSeen(ctx, r.db.Collection(r.hist), id)
	if err != nil {
		return Timeline{}, err
	}
	if ok {
		in.FirstSeen = &FirstSeen{At: seen.At, Source: seen.Source}
	}
	if !in.Current.Exists && len(in.Edits) == 0 && len(in.Records) == 0 && len(in.Operations) == 0 {
		known, err := r.anything(ctx, id)
		if err != nil {
			return Timeline{}, err
		}
		if !known {
			return Timeline{}, fmt.Errorf("job %q: no schedule in %s, no record in %s and no edit in %s: %w",
				id, schedule.CollectionName, record.RunsCollection, r.hist, ErrNotFound)
		}
	}
	tl := Assemble(in)
	if tl.FailurePause, err = r.failurePause(ctx, id); err != nil {
		return Timeline{}, err
	}
	return tl, nil
}

// current reads the job's schedules document as it is now.
func (r *Reader) current(ctx context.Context, id string) (State, error) {
	raw, err := r.db.Collection(schedule.CollectionName).FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return State{Known: true}, nil
	}
	if err != nil {
		return State{}, fmt.Errorf("read schedule %q from %s: %w", id, schedule.CollectionName, err)
	}
	return StateOf(raw), nil
}

// historyDoc is one document of the edit history as this package reads it.
type historyDoc struct {
	ID            bson.RawValue `bson:"_id"`
	JobID         string        `bson:"job_id"`
	At            time.Time     `bson:"at"`
	Op            string        `bson:"op"`
	UpdatedBy     bson.RawValue `bson:"updated_by"`
	UpdateMessage bson.RawValue `bson:"update_message"`
	Changes       []struct {
		Field  string        `bson:"field"`
		Before bson.RawValue `bson:"before"`
		After  bson.RawValue `bson:"after"`
	} `bson:"changes"`
}

// refusedAtFrom reports whether the document of in's job at in.From, as
// the edits since then reconstruct it, is one the daemons refuse with no
// valid version before it among those edits.
func (r *Reader) refusedAtFrom(in Input) bool {
	segs := segments(in.JobID, in.Current, in.Edits, in.From, in.To, time.Time{}, r.loc)
	if len(segs) == 0 || !segs[0].Exists || segs[0].Refused != "" {
		return false
	}
	_, err := compile(in.JobID, segs[0].Timing, r.loc)
	return segs[0].Error != "" || err != nil
}

// edits reads the newest MaxEdits edits of job id whose time matches at
// (a condition on the field). cutBefore is the time of the oldest one
// read when there were more.
func (r *Reader) edits(ctx context.Context, id string, at bson.D) (out []Edit, cutBefore time.Time, err error) {
	coll := r.db.Collection(r.hist)
	cur, err := coll.Find(ctx,
		append(history.EditsOf(id), bson.E{Key: "at", Value: at}),
		options.Find().SetSort(bson.D{{Key: "at", Value: -1}, {Key: "_id", Value: -1}}).SetLimit(MaxEdits+1))
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("read edits of %q from %s: %w", id, r.hist, err)
	}
	var docs []historyDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, time.Time{}, fmt.Errorf("read edits of %q from %s: %w", id, r.hist, err)
	}
	if len(docs) > MaxEdits {
		docs = docs[:MaxEdits]
		cutBefore = docs[len(docs)-1].At
	}
	for _, d := range docs {
		out = append(out, d.edit())
	}
	return out, cutBefore, nil
}

// edit is the Edit d records.
func (d historyDoc) edit() Edit {
	e := Edit{ID: valueText(d.ID), At: d.At.UTC(), Op: d.Op, UpdatedBy: valueText(d.UpdatedBy), UpdateMessage: valueText(d.UpdateMessage)}
	for _, c := range d.Changes {
		e.Changes = append(e.Changes, FieldChange{Field: c.Field, Before: c.Before, After: c.After})
	}
	return e
}

// ReadEdits reads the edits of the jobs ids from coll (the edit history),
// by job, newest first, in one query: at most limit in all, taken in job
// id order, so that when there are more, cut is the first job whose edits
// were not all read (those of the jobs after it in id order neither); ""
// when every edit was read.
func ReadEdits(ctx context.Context, coll *mongo.Collection, ids []string, limit int64) (edits map[string][]Edit, cut string, err error) {
	filter := bson.D{{Key: "job_id", Value: bson.D{{Key: "$in", Value: ids}}}, {Key: "op", Value: bson.D{{Key: "$ne", Value: history.OpFirstSeen}}}}
	cur, err := coll.Find(ctx, filter,
		options.Find().SetSort(bson.D{{Key: "job_id", Value: 1}, {Key: "at", Value: -1}, {Key: "_id", Value: -1}}).SetLimit(limit+1))
	if err != nil {
		return nil, "", fmt.Errorf("read the edits of %d jobs from %s: %w", len(ids), coll.Name(), err)
	}
	var docs []historyDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, "", fmt.Errorf("read the edits of %d jobs from %s: %w", len(ids), coll.Name(), err)
	}
	if int64(len(docs)) > limit {
		cut = docs[limit].JobID
		docs = docs[:limit]
	}
	edits = make(map[string][]Edit)
	for _, d := range docs {
		edits[d.JobID] = append(edits[d.JobID], d.edit())
	}
	return edits, cut, nil
}

// operations reads the job's operations in [from, to], oldest first
// (jobhistory.Read). When there are more than MaxEntries, the rest is
// left for a later request: cut is the time of the first one not
// returned.
func (r *Reader) operations(ctx context.Context, id string, from, to time.Time) (out []jobhistory.Operation, cut time.Time, err error) {
	out, err = jobhistory.Read(ctx, r.db, id, jobhistory.Query{From: from, To: to, Limit: MaxEntries + 1})
	if err != nil {
		return nil, time.Time{}, err
	}
	if len(out) > MaxEntries {
		cut = out[MaxEntries].At
		out = out[:MaxEntries]
	}
	return out, cut, nil
}

// valueText is a string value as it is, anything else as relaxed extended
// JSON; "" when absent or null.
func valueText(v bson.RawValue) string {
	if s, ok := v.StringValueOK(); ok {
		return s
	}
	if x := jsonValue(v); x != nil {
		return jsonText(x)
	}
	return ""
}

// records reads the job_runs documents of job id in [from, to] in slot
// order, with a missed range that begins before from and reaches into it.
// When there are more than MaxEntries, the rest is left for a later
// request: cut is the slot of the first one not returned.
func (r *Reader) records(ctx context.Context, id string, from, to time.Time) (out []Record, cut time.Time, err error) {
	coll := r.db.Collection(record.RunsCollection)
	filter := bson.D{{Key: "job_id", Value: id}, {Key: "$or", Value: bson.A{
		bson.D{{Key: "scheduled_at", Value: bson.D{{Key: "$gte", Value: from}, {Key: "$lte", Value: to}}}},
		bson.D{
			{Key: "status", Value: record.StatusMissed},
			{Key: "scheduled_at", Value: bson.D{{Key: "$lt", Value: from}}},
			{Key: "last_scheduled_at", Value: bson.D{{Key: "$gte", Value: from}}},
		},
	}}}
	cur, err := coll.Find(ctx, filter, options.Find().SetSort(bson.D{{Key: "scheduled_at", Value: 1}}).SetLimit(MaxEntries+1))
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("read runs of %q from %s: %w", id, coll.Name(), err)
	}
	var docs []struct {
		RawID  bson.RawValue `bson:"_id"`
		Record `bson:",inline"`
	}
	if err := cur.All(ctx, &docs); err != nil {
		return nil, time.Time{}, fmt.Errorf("read runs of %q from %s: %w", id, coll.Name(), err)
	}
	for _, d := range docs {
		d.Record.ID = valueText(d.RawID)
		out = append(out, d.Record)
	}
	if len(out) > MaxEntries {
		cut = out[MaxEntries].ScheduledAt
		out = out[:MaxEntries]
	}
	return out, cut, nil
}

// anything reports whether job id has any record or edit at all, outside
// the range too.
func (r *Reader) anything(ctx context.Context, id string) (bool, error) {
	for _, name := range []string{record.RunsCollection, r.hist} {
		err := r.db.Collection(name).FindOne(ctx, bson.D{{Key: "job_id", Value: id}}, options.FindOne().SetProjection(bson.D{{Key: "_id", Value: 1}})).Err()
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, mongo.ErrNoDocuments) {
			return false, fmt.Errorf("look up job %q in %s: %w", id, name, err)
		}
	}
	return false, nil
}
