package timeline

import (
	"fmt"
	"sort"
	"strings"
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
// (any order; edits after to count too, since current is as of now, and
// edits at or before from only to find the schedule in force at from). It
// walks backwards from current: the document before an edit is the one
// after it with the edit's "before" values put back (every field, so a
// document the daemon refuses is refused here too); an insert had no
// document before it; a delete had the document its "before" values
// describe. Edits that change neither the timing nor whether the daemon
// accepts the document do not split a segment. While a document is
// refused, the schedule in force is the last valid one before it (the
// daemons keep firing on it: last known good): such a segment has that
// schedule's timing and Refused set; a job refused since its insert has
// none, and its segment expects no slots. truncatedBefore, when not zero,
// is the time of the oldest edit read when older ones were left unread:
// before it the schedule is unknown. Schedules that name no zone are
// checked in UTC (Assemble checks them in its Location).
func Segments(jobID string, current State, edits []Edit, from, to time.Time, truncatedBefore time.Time) []Segment {
	return segments(jobID, current, edits, from, to, truncatedBefore, time.UTC)
}

// segments is Segments with loc the zone of a schedule that names none.
func segments(jobID string, current State, edits []Edit, from, to time.Time, truncatedBefore time.Time, loc *time.Location) []Segment {
	sorted := newestFirst(edits)
	type span struct {
		start time.Time // exclusive, but inclusive for the oldest
		state State
	}
	var spans []span // newest first
	state := current
	i := 0
	for ; i < len(sorted); i++ {
		e := sorted[i]
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
	refused := func(st State) string { return refusal(jobID, st, loc) }
	// lastValid is the schedule in force while a span's document is
	// refused: the last valid one before it, nil when there is none.
	var lastValid *State
	if !truncatedBefore.IsZero() && truncatedBefore.After(from) {
		spans = append(spans, span{start: truncatedBefore, state: state})
		state = State{}
	} else if refused(state) != "" {
		// The document at from is refused: the schedule in force is the
		// last valid one before it, found further back.
		if v, _, ok := walkToValid(jobID, state, sorted[i:], func(st State) bool { return refused(st) == "" }); ok {
			lastValid = &v
		}
	}
	spans = append(spans, span{start: from, state: state})

	var out []Segment
	for k := len(spans) - 1; k >= 0; k-- { // oldest first
		sp := spans[k]
		start, end := sp.start, to
		if k > 0 {
			end = spans[k-1].start
		}
		if start.Before(from) {
			start = from
		}
		if end.After(to) {
			end = to
		}
		if start.After(to) {
			continue
		}
		st := sp.state
		why := ""
		switch {
		case !st.Exists || !st.Known:
			lastValid = nil // deleted, or unknown: nothing is kept
		case refused(st) == "":
			lastValid = &st
		case lastValid != nil:
			why = refused(st)
			st = *lastValid
		}
		seg := newSegment(start, end, st)
		seg.Refused = why
		out = append(out, seg)
	}
	return out
}

// newestFirst is edits sorted newest first (stable: edits of one instant
// keep their order).
func newestFirst(edits []Edit) []Edit {
	sorted := append([]Edit(nil), edits...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].At.After(sorted[j].At) })
	return sorted
}

// refusal is why the daemons refuse state's document (its decoder's error,
// else scheduler.Check's in loc), "" when they accept it or when there is
// no known document.
func refusal(jobID string, st State, loc *time.Location) string {
	if !st.Exists || !st.Known {
		return ""
	}
	if st.Timing.Error != "" {
		return st.Timing.Error
	}
	if _, err := compile(jobID, st.Timing, loc); err != nil {
		return err.Error()
	}
	return ""
}

// walkToValid walks job jobID's document back from st through edits
// (newest first, all older than st) to the newest state valid accepts. It
// returns that state and the index in edits of the edit that replaced it;
// false when it meets an insert (no document before it), an edit it
// cannot revert, or the end of edits first.
func walkToValid(jobID string, st State, edits []Edit, valid func(State) bool) (State, int, bool) {
	for k, e := range edits {
		before, err := revertEdit(jobID, st, e)
		if err != nil || !before.Exists || !before.Known {
			return State{}, k, false
		}
		if valid(before) {
			return before, k, true
		}
		st = before
	}
	return State{}, len(edits), false
}

// Version is a version of a job's document the edit history reconstructs
// (LastValid).
type Version struct {
	// Doc is the document.
	Doc bson.Raw
	// ReplacedAt is when the edit that replaced it was made.
	ReplacedAt time.Time
	// WrittenAt is when the edit that made it was made; zero when that
	// edit is not among the edits given (expired, or never recorded).
	WrittenAt time.Time
}

// LastValid is the newest version of job jobID's document that accept
// takes, walking back from current (the document as it is now) through
// edits (any order) as the schedules in force are reconstructed
// (Segments): the document before an edit is the one after it with the
// edit's "before" values put back. The newest edits whose "after" values
// current does not hold are passed over (made after current was read). It
// is false when the walk meets an insert (no document before it), an edit
// it cannot revert, or the end of the edits first.
func LastValid(jobID string, current bson.Raw, edits []Edit, accept func(bson.Raw) bool) (Version, bool) {
	sorted := newestFirst(edits)
	for len(sorted) > 0 && !holds(current, sorted[0]) {
		sorted = sorted[1:]
	}
	st, k, ok := walkToValid(jobID, StateOf(current), sorted, func(st State) bool { return accept(st.doc) })
	if !ok {
		return Version{}, false
	}
	v := Version{Doc: st.doc, ReplacedAt: sorted[k].At}
	if k+1 < len(sorted) {
		v.WrittenAt = sorted[k+1].At
	}
	return v, true
}

// holds reports whether doc has every value edit e left (a field it
// removed absent).
func holds(doc bson.Raw, e Edit) bool {
	for _, c := range e.Changes {
		v, err := doc.LookupErr(strings.Split(c.Field, ".")...)
		if err != nil {
			if c.After.Type != 0 {
				return false
			}
			continue
		}
		if !v.Equal(c.After) {
			return false
		}
	}
	return true
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

// stateBefore is the state before edit e, given the state after it; when
// e cannot be reverted, the state after it with an error saying so.
func stateBefore(jobID string, after State, e Edit) State {
	st, err := revertEdit(jobID, after, e)
	if err != nil {
		st = after
		st.Timing.Error = fmt.Sprintf("schedule unknown: the edit %s cannot be reverted: %v", e.ID, err)
	}
	return st
}

// revertEdit is the state before edit e, given the state after it.
func revertEdit(jobID string, after State, e Edit) (State, error) {
	if e.Op == opInsert {
		return State{Known: true}, nil
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
		return State{}, err
	}
	st := StateOf(doc)
	st.Known = base.Known || after.Known
	return st, nil
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
