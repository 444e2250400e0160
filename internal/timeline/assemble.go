package timeline

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/robfig/cron/v3"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/jobhistory"
	"github.com/cronswap/cronswap/internal/lifetime"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/schedule"
	"github.com/cronswap/cronswap/scheduler"
)

// Record is one document of job_runs: a run, a skip or a missed-slot
// record.
type Record struct {
	// ID is the record's _id (as relaxed extended JSON when not a string).
	ID          string    `bson:"-"`
	JobID       string    `bson:"job_id"`
	ScheduledAt time.Time `bson:"scheduled_at"`
	Status      string    `bson:"status"`
	Instance    string    `bson:"instance"`
	Fence       int64     `bson:"fence"`
	StartedAt   time.Time `bson:"started_at"`
	EndedAt     time.Time `bson:"ended_at"`
	Error       string    `bson:"error"`
	ExitCode    *int      `bson:"exit_code"`
	// AnswerStatus and Answer are an http action's answer.
	AnswerStatus int    `bson:"answer_status"`
	Answer       string `bson:"answer"`
	// Attempt is the slot's current or last attempt, for an action that
	// retries (jobs.FieldAttempt); 0 otherwise.
	Attempt int `bson:"attempt"`
	// LastScheduledAt, Count, Reason and RecordedAt are a missed record's:
	// its range of slots, why they were missed and when it was written.
	LastScheduledAt time.Time `bson:"last_scheduled_at"`
	Count           int64     `bson:"count"`
	Reason          string    `bson:"reason"`
	RecordedAt      time.Time `bson:"recorded_at"`
}

// Input is everything a timeline is assembled from.
type Input struct {
	JobID string
	// From, To: the range; Now decides which slots are in the future.
	From, To, Now time.Time
	// Location is the zone of a schedule that names none.
	Location *time.Location
	// Current is the job's state now.
	Current State
	// Edits are the edits since From (any order), also those after To.
	Edits []Edit
	// EditsCutBefore, when not zero, is the time of the oldest edit in
	// Edits when older edits since From were left unread.
	EditsCutBefore time.Time
	// Records are the job_runs documents of the range in scheduled_at
	// order (a missed range that starts before From but reaches into it
	// counts).
	Records []Record
	// Operations are the job's operations in [From, To]
	// (jobhistory.Read), any order.
	Operations []jobhistory.Operation
	// Cut, when not zero, ends the timeline before it (exclusive): the
	// range held more records, or more operations, than were read.
	Cut time.Time
	// FirstSeen, when set, is the job's first sighting: slots at or before
	// it are matched with records but never listed as no_record.
	FirstSeen *FirstSeen
}

// Assemble builds the timeline from its inputs; it reads nothing.
func Assemble(in Input) Timeline {
	if in.Location == nil {
		in.Location = time.UTC
	}
	tl := Timeline{JobID: in.JobID, From: in.From.UTC(), To: in.To.UTC(), FirstSeen: in.FirstSeen,
		Segments: segments(in.JobID, in.Current, in.Edits, in.From, in.To, in.EditsCutBefore, in.Location)}
	if in.Current.Exists {
		cur := in.Current.Timing
		if cur.Timezone == "" {
			cur.Timezone = in.Location.String()
		}
		tl.Schedule = &cur
	}
	for i := range tl.Segments {
		if tl.Segments[i].Exists && tl.Segments[i].Timezone == "" {
			tl.Segments[i].Timezone = in.Location.String()
		}
	}
	cut := in.Cut
	in.Records = append([]Record(nil), in.Records...)
	sort.SliceStable(in.Records, func(i, j int) bool { return in.Records[i].ScheduledAt.Before(in.Records[j].ScheduledAt) })

	// Breakpoints: the times of the records and edits, which end a run of
	// collapsed no-record slots.
	var edits []Edit
	for _, e := range in.Edits {
		if !e.At.Before(in.From) && !e.At.After(in.To) {
			edits = append(edits, e)
		}
	}
	sort.SliceStable(edits, func(i, j int) bool { return edits[i].At.Before(edits[j].At) })
	var breaks []time.Time
	bySlot := map[int64]int{}
	var missed []Record
	for i, r := range in.Records {
		breaks = append(breaks, r.ScheduledAt)
		bySlot[r.ScheduledAt.UnixMilli()] = i
		if r.Status == record.StatusMissed {
			missed = append(missed, r)
		}
	}
	for _, e := range edits {
		breaks = append(breaks, e.At)
	}
	var ops []jobhistory.Operation
	for _, o := range in.Operations {
		if !o.At.Before(in.From) && !o.At.After(in.To) {
			ops = append(ops, o)
			breaks = append(breaks, o.At)
		}
	}
	sort.Slice(breaks, func(i, j int) bool { return breaks[i].Before(breaks[j]) })

	matched := make([]bool, len(in.Records))
	slots, slotCut := expectedSlots(in, tl.Segments, bySlot, matched, missed, breaks, cut)
	if !slotCut.IsZero() && (cut.IsZero() || slotCut.Before(cut)) {
		cut = slotCut
	}

	entries := slots
	for i, r := range in.Records {
		if !cut.IsZero() && !r.ScheduledAt.Before(cut) {
			continue
		}
		e := recordEntry(r)
		e.OffSchedule = !matched[i] && r.Status != record.StatusMissed
		entries = append(entries, e)
	}
	for _, e := range edits {
		if !cut.IsZero() && !e.At.Before(cut) {
			continue
		}
		entries = append(entries, editEntry(e))
	}
	for _, o := range ops {
		if !cut.IsZero() && !o.At.Before(cut) {
			continue
		}
		entries = append(entries, operationEntry(o))
	}
	sort.SliceStable(entries, func(i, j int) bool {
		a, b := entries[i], entries[j]
		if !a.At.Equal(b.At) {
			return a.At.Before(b.At)
		}
		return kindOrder(a.Kind) < kindOrder(b.Kind)
	})
	if len(entries) > MaxEntries {
		c := entries[MaxEntries].At
		if cut.IsZero() || c.Before(cut) {
			cut = c
		}
		entries = entries[:MaxEntries]
	}
	if entries == nil {
		entries = []Entry{}
	}
	tl.Entries = entries
	if !cut.IsZero() {
		c := cut.UTC()
		tl.Truncated, tl.NextFrom = true, &c
	}
	return tl
}

// expectedSlots walks the expected slots of every segment, matching them
// with records (matched[i] set for record i) and skipping those a missed
// range covers, and returns the no-record entries: consecutive ones with
// the same reason and no daylight-saving note collapse into one entry
// unless a record or an edit lies between them. It stops before cut, or
// after MaxSlots slots (returning where it stopped).
func expectedSlots(in Input, segs []Segment, bySlot map[int64]int, matched []bool, missed []Record, breaks []time.Time, cut time.Time) ([]Entry, time.Time) {
	var out []Entry
	var run *Entry // the no-record entry being extended
	bi := 0        // next breakpoint not yet passed
	mi := 0        // next missed range not yet passed
	seen := 0
	flush := func() {
		if run != nil {
			if run.Count > 1 {
				l := run.Last.UTC()
				run.Last = &l
			} else {
				run.Last = nil
			}
			out = append(out, *run)
			run = nil
		}
	}
	var notBefore time.Time // slots at or before it are not expected
	if in.FirstSeen != nil {
		notBefore = in.FirstSeen.At
	}
	for si, seg := range segs {
		if !seg.Exists || !seg.Enabled || seg.Error != "" {
			continue
		}
		sched, err := compile(in.JobID, seg.Timing, in.Location)
		if err != nil {
			segs[si].Error = err.Error()
			continue
		}
		life := seg.lifetimeOf()
		// capped: a slot of the segment was skipped as max_runs reached;
		// the slots after it are not fired (until max_runs changes, which
		// starts another segment).
		capped := false
		t := seg.From
		if si == 0 {
			t = t.Add(-time.Nanosecond) // the first segment includes From
		}
	walk:
		for {
			fires := schedule.Upcoming(sched, t, 256)
			if len(fires) == 0 {
				break
			}
			for _, f := range fires {
				at := f.At.UTC()
				if at.After(seg.To) || (!cut.IsZero() && !at.Before(cut)) {
					break walk
				}
				t = f.At
				if seen++; seen > MaxSlots {
					flush()
					return out, at
				}
				if i, ok := bySlot[at.UnixMilli()]; ok {
					matched[i] = true
					if life.MaxRuns > 0 && in.Records[i].Status == record.StatusSkipped && in.Records[i].Reason == lifetime.ReasonMaxRuns {
						capped = true // the daemons disarmed the job there
					}
					flush()
					continue
				}
				for mi < len(missed) && lastOf(missed[mi]).Before(at) {
					mi++
				}
				if mi < len(missed) && !at.Before(missed[mi].ScheduledAt) {
					// A missed range holds this slot: go on after its end.
					flush()
					t = lastOf(missed[mi])
					continue walk
				}
				if !at.After(notBefore) {
					continue // before the job was first seen: not expected
				}
				reason := NoRecordUnrecorded
				if at.After(in.Now) {
					reason = NoRecordFuture
				}
				if why := life.Why(at); why != "" {
					reason = why // the daemon does not fire it
				} else if capped {
					reason = lifetime.ReasonMaxRuns
				}
				for bi < len(breaks) && breaks[bi].Before(at) {
					if run != nil && breaks[bi].After(*run.Last) {
						flush()
					}
					bi++
				}
				if run != nil && run.Reason == reason && f.Note == "" {
					run.Count++
					run.Last = &at
				} else {
					flush()
					e := Entry{Kind: KindNoRecord, At: at, Count: 1, Reason: reason, Shifted: f.Shifted, DSTNote: f.Note}
					e.Last = &at
					run = &e
				}
				if f.Note != "" || (bi < len(breaks) && breaks[bi].Equal(at)) {
					// A slot with a note stands alone; something else
					// at this instant ends the run.
					flush()
				}
			}
		}
		// A segment ends at an edit, which ends any run.
		flush()
	}
	flush()
	return out, time.Time{}
}

// lastOf is the last slot of a missed record's range.
func lastOf(r Record) time.Time {
	if r.LastScheduledAt.After(r.ScheduledAt) {
		return r.LastScheduledAt
	}
	return r.ScheduledAt
}

// compile parses job jobID's schedule of a segment as the daemon arms it
// (scheduler.Check, with the engine's error; no action policy: the
// timeline does not know the daemons' configuration), in loc when it names
// no zone.
func compile(jobID string, t Timing, loc *time.Location) (cron.Schedule, error) {
	s := schedule.Schedule{ID: jobID, CronExpr: t.CronExpr, Timezone: t.Timezone, Enabled: t.Enabled, DST: schedule.DSTMode(t.DST)}
	return scheduler.Check(s, loc, nil)
}

func recordEntry(r Record) Entry {
	e := Entry{At: r.ScheduledAt.UTC(), Count: 1, Status: r.Status, RunID: r.ID, Instance: r.Instance}
	switch r.Status {
	case record.StatusSkipped:
		e.Kind = KindSkipped
		e.Reason = r.Error
		if r.Reason != "" {
			e.Reason = r.Reason
		}
	case record.StatusMissed:
		e.Kind = KindMissed
		e.Reason = r.Reason
		if r.Count > 1 {
			e.Count = r.Count
		}
		if !r.LastScheduledAt.IsZero() && r.LastScheduledAt.After(r.ScheduledAt) {
			l := r.LastScheduledAt.UTC()
			e.Last = &l
		}
		e.RecordedAt = timePtr(r.RecordedAt)
	default:
		e.Kind = KindRun
		f := r.Fence
		e.Fence = &f
		e.StartedAt, e.EndedAt = timePtr(r.StartedAt), timePtr(r.EndedAt)
		if !r.StartedAt.IsZero() && !r.EndedAt.IsZero() {
			d := r.EndedAt.Sub(r.StartedAt).Milliseconds()
			e.DurationMS = &d
		}
		e.Error, e.ExitCode = r.Error, r.ExitCode
		e.AnswerStatus, e.Answer = r.AnswerStatus, r.Answer
		e.Attempt = r.Attempt
		if r.Status == record.StatusBuffered {
			e.Reason = r.Reason // which run it waits for
		}
	}
	return e
}

// kindOrder orders the entries of one instant: slots first, then edits,
// then operations.
func kindOrder(kind string) int {
	switch kind {
	case KindEdit:
		return 1
	case KindOperation:
		return 2
	}
	return 0
}

func operationEntry(o jobhistory.Operation) Entry {
	return Entry{Kind: KindOperation, At: o.At.UTC(), Op: o.Op, By: o.By, TriggerID: o.TriggerID, RunID: o.RunID,
		Status: o.Status, Error: o.Error, Args: o.Args, Slots: o.Slots}
}

func editEntry(ed Edit) Entry {
	e := Entry{Kind: KindEdit, At: ed.At.UTC(), EditID: ed.ID, Op: ed.Op, UpdatedBy: ed.UpdatedBy, UpdateMessage: ed.UpdateMessage}
	for _, c := range ed.Changes {
		e.Changes = append(e.Changes, Change{Field: c.Field, Before: jsonValue(c.Before), After: jsonValue(c.After)})
	}
	return e
}

// jsonValue is v as a JSON value (relaxed extended JSON for BSON types
// JSON lacks); nil when absent or null.
func jsonValue(v bson.RawValue) any {
	if v.Type == 0 || v.Type == bson.TypeNull {
		return nil
	}
	b, err := bson.MarshalExtJSON(bson.D{{Key: "v", Value: v}}, false, false)
	if err != nil {
		return v.String()
	}
	var m struct {
		V any `json:"v"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return v.String()
	}
	return m.V
}

func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}
