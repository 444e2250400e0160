package timeline

import (
	"fmt"
	"sort"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/history"
	"github.com/cronswap/cronswap/internal/lifetime"
	"github.com/cronswap/cronswap/schedule"
)

// Edit is one document of the edit history.
type Edit struct {
	// ID is the document's _id (unique to the change event).
	ID string
	// At is when the change was applied.
	At time.Time
	// Op is insert, update, replace or delete.
	Op string
	// Changes are the fields it changed; Before and After are absent
	// (Type 0) or null when the field was or became absent.
	Changes []FieldChange
	// UpdatedBy is who made the change, when the document said.
	UpdatedBy string
	// UpdateMessage is why, when the document said.
	UpdateMessage string
}

// FieldChange is one element of an edit's changes.
type FieldChange struct {
	Field         string
	Before, After bson.RawValue
}

// Edit operations as the history records them.
const (
	opInsert = "insert"
	opDelete = "delete"
)

// State is a job's schedules document at one moment: whether it existed
// and, if so, its Timing as the daemon decodes it. Known is false for a
// moment older than the history read.
type State struct {
	Exists bool
	Known  bool
	Timing Timing
	// doc is the document (as read, or as reconstructed from the edits);
	// nil for a State built from a Timing alone.
	doc bson.Raw
}

// StateOf is the state of an existing schedules document: its Timing and,
// when the daemon would refuse the document, Timing.Error with the
// daemon's own words (schedule.DecodeFields, the decoder the daemon arms
// jobs with).
func StateOf(doc bson.Raw) State {
	return State{Exists: true, Known: true, Timing: timingOf(doc), doc: doc}
}

// same reports whether two states expect the same slots and say the same.
func same(a, b State) bool {
	return a.Exists == b.Exists && a.Known == b.Known && a.Timing == b.Timing
}

// document is the state's document; for a State that has none, one built
// from its Timing (a State made from a Timing alone), or only the _id when
// the document does not exist (the base on which a delete's before values,
// or those of an edit of a document thought absent, are put back).
func (st State) document(jobID string) bson.Raw {
	if st.doc != nil {
		return st.doc
	}
	d := bson.D{{Key: schedule.FieldID, Value: jobID}}
	if st.Exists {
		t := st.Timing
		d = append(d, bson.E{Key: schedule.FieldCronExpr, Value: t.CronExpr})
		if t.Timezone != "" {
			d = append(d, bson.E{Key: schedule.FieldTimezone, Value: t.Timezone})
		}
		if t.DST != "" {
			d = append(d, bson.E{Key: schedule.FieldDST, Value: t.DST})
		}
		if !t.Enabled {
			d = append(d, bson.E{Key: schedule.FieldEnabled, Value: false})
		}
		for _, f := range []struct {
			name string
			at   time.Time
		}{{lifetime.FieldStartAt, t.StartAt}, {lifetime.FieldEndAt, t.EndAt}, {lifetime.FieldPausedUntil, t.PausedUntil}} {
			if !f.at.IsZero() {
				d = append(d, bson.E{Key: f.name, Value: f.at})
			}
		}
		if t.MaxRuns > 0 {
			d = append(d, bson.E{Key: lifetime.FieldMaxRuns, Value: t.MaxRuns})
		}
	}
	raw, err := bson.Marshal(d)
	if err != nil {
		return nil
	}
	return raw
}

// Segments reconstructs the schedules in force over [from, to], oldest
// first, from job jobID's document as it is now (current) and the edits
// since from (any order; edits after to count too, since current is as of
// now). It walks backwards from current: the document before an edit is
// the one after it with the edit's "before" values put back (every field,
// so a document the daemon refused is refused here too); an insert had no
// document before it; a delete had the document its "before" values
// describe. Edits that change neither the timing nor whether the daemon
// accepts the document do not split a segment. truncatedBefore, when not
// zero, is the time of the oldest edit read when older ones were left
// unread: before it the schedule is unknown.
func Segments(jobID string, current State, edits []Edit, from, to time.Time, truncatedBefore time.Time) []Segment {
	sorted := append([]Edit(nil), edits...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].At.After(sorted[j].At) })

	type span struct {
		start time.Time // exclusive, but inclusive for the oldest
		state State
	}
	var spans []span // newest first
	state := current
	for _, e := range sorted {
		if !e.At.After(from) {
			break
		}
		before := stateBefore(jobID, state, e)
		if same(before, state) {
			state.doc = before.doc // the fields other than the timing changed
			continue
		}
		spans = append(spans, span{start: e.At, state: state})
		state = before
	}
	if !truncatedBefore.IsZero() && truncatedBefore.After(from) {
		spans = append(spans, span{start: truncatedBefore, state: state})
		state = State{}
	}
	spans = append(spans, span{start: from, state: state})

	var out []Segment
	end := to
	for _, sp := range spans {
		start := sp.start
		if start.Before(from) {
			start = from
		}
		if start.After(to) {
			continue
		}
		out = append(out, newSegment(start, end, sp.state))
		end = start
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

func newSegment(from, to time.Time, st State) Segment {
	seg := Segment{From: from.UTC(), To: to.UTC(), Exists: st.Exists && st.Known}
	if seg.Exists {
		seg.Timing = st.Timing
	}
	if !st.Known {
		seg.Error = "schedule unknown: older than the edit history read"
	}
	return seg
}

// stateBefore is the state before edit e, given the state after it.
func stateBefore(jobID string, after State, e Edit) State {
	if e.Op == opInsert {
		return State{Known: true}
	}
	base := after
	if e.Op == opDelete || !after.Exists {
		// A delete's before values are the whole document; an update of a
		// document thought absent means the history is incomplete: take
		// the edit's before values on a fresh document.
		base = State{Known: after.Known || e.Op == opDelete}
	}
	changes := make([]history.Change, len(e.Changes))
	for i, c := range e.Changes {
		changes[i] = history.Change{Field: c.Field, Before: c.Before, After: c.After}
	}
	doc, err := history.Revert(base.document(jobID), changes)
	if err != nil {
		st := after
		st.Timing.Error = fmt.Sprintf("schedule unknown: the edit %s cannot be reverted: %v", e.ID, err)
		return st
	}
	st := StateOf(doc)
	st.Known = base.Known || after.Known
	return st
}

// timingOf reads the timing fields of a schedules document with the
// daemon's decoder. A document it refuses keeps its values as stored (a
// string as it is, any other value as relaxed extended JSON, so a number
// shows as 5, not as "") and the decoder's error.
func timingOf(doc bson.Raw) Timing {
	s, err := schedule.DecodeFields(doc)
	if err == nil {
		return Timing{CronExpr: s.CronExpr, Timezone: s.Timezone, Enabled: s.Enabled, DST: string(s.DST),
			StartAt: utc(s.StartAt), EndAt: utc(s.EndAt), PausedUntil: utc(s.PausedUntil), MaxRuns: s.MaxRuns}
	}
	t := Timing{Enabled: true, Error: err.Error()}
	field := func(name string) (string, bool) {
		v, err := doc.LookupErr(name)
		if err != nil || v.Type == bson.TypeNull {
			return "", true
		}
		if str, ok := v.StringValueOK(); ok {
			return str, true
		}
		return valueText(v), false
	}
	var isString bool
	t.CronExpr, isString = field(schedule.FieldCronExpr)
	t.exprNotString = !isString
	t.Timezone, _ = field(schedule.FieldTimezone)
	t.DST, _ = field(schedule.FieldDST)
	if v, err := doc.LookupErr(schedule.FieldEnabled); err == nil {
		b, ok := v.BooleanOK()
		t.Enabled = ok && b
	}
	return t
}

// utc is t in UTC, the zero time kept zero (Timing compares with ==).
func utc(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC()
}

// lifetimeOf is the lifetime of a segment's schedule.
func (t Timing) lifetimeOf() lifetime.Lifetime {
	return lifetime.Lifetime{StartAt: t.StartAt, EndAt: t.EndAt, MaxRuns: t.MaxRuns, PausedUntil: t.PausedUntil}
}
