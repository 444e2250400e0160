package timeline

import (
	"sort"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

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

// State is a job's timing at one moment: whether its document existed and,
// if so, its Timing. Known is false for a moment older than the history
// read.
type State struct {
	Exists bool
	Known  bool
	Timing Timing
}

// timingFields are the document fields that decide the slots.
var timingFields = map[string]bool{
	schedule.FieldCronExpr: true,
	schedule.FieldTimezone: true,
	schedule.FieldEnabled:  true,
	schedule.FieldDST:      true,
}

// Segments reconstructs the schedules in force over [from, to], oldest
// first, from the schedule as it is now (current) and the edits since from
// (any order; edits after to count too, since current is as of now). It
// walks backwards from current: the schedule before an edit is the one
// after it with the edit's "before" values put back; an insert had no
// document before it; a delete had the document its "before" values
// describe. Edits that change no timing field do not split a segment.
// truncatedBefore, when not zero, is the time of the oldest edit read when
// older ones were left unread: before it the schedule is unknown.
func Segments(current State, edits []Edit, from, to time.Time, truncatedBefore time.Time) []Segment {
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
		before := stateBefore(state, e)
		if before == state {
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
func stateBefore(after State, e Edit) State {
	switch e.Op {
	case opInsert:
		return State{Known: true}
	case opDelete:
		st := State{Exists: true, Known: true, Timing: Timing{Enabled: true}}
		applyBefore(&st.Timing, e.Changes)
		return st
	}
	st := after
	if !st.Exists {
		// An update of a document thought absent: the history is
		// incomplete; take the edit's before values on a fresh document.
		st = State{Exists: true, Known: after.Known, Timing: Timing{Enabled: true}}
	}
	applyBefore(&st.Timing, e.Changes)
	return st
}

// applyBefore puts the before values of the timing fields of changes into t.
func applyBefore(t *Timing, changes []FieldChange) {
	for _, c := range changes {
		if !timingFields[c.Field] {
			continue
		}
		v := c.Before
		absent := v.Type == 0 || v.Type == bson.TypeNull
		switch c.Field {
		case schedule.FieldCronExpr:
			t.CronExpr = ""
			if s, ok := v.StringValueOK(); ok {
				t.CronExpr = s
			}
		case schedule.FieldTimezone:
			t.Timezone = ""
			if s, ok := v.StringValueOK(); ok {
				t.Timezone = s
			}
		case schedule.FieldDST:
			t.DST = ""
			if s, ok := v.StringValueOK(); ok {
				t.DST = s
			}
		case schedule.FieldEnabled:
			t.Enabled = true
			if b, ok := v.BooleanOK(); ok {
				t.Enabled = b
			} else if !absent {
				t.Enabled = false // not a boolean: the decoder refuses it, nothing is armed
			}
		}
	}
}
