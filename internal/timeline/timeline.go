// Package timeline builds one job's timeline for a time range: the slots
// its schedule expected, what happened to each (ran, skipped, missed, or
// nothing on record), and the edits of its schedule and the operators'
// operations in between, in time order. It reads the schedules collection
// (the schedule as it is now), job_runs (runs, skips and missed-slot
// records), the edit history, from which it reconstructs the schedule that
// was in force before each edit, and the operations the job's history
// derives from other records (jobhistory.Read: run now, backfill, resume
// after failures). `cronswap explain` and the daemon's
// /api/schedules/{id}/timeline both serve what Build returns.
package timeline

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cronswap/cronswap/internal/jobhistory"
	"github.com/cronswap/cronswap/internal/record"
)

// Bounds of one timeline. A request for more is refused (window) or cut
// short with Truncated set and NextFrom saying where to continue.
const (
	// DefaultWindow is the range when only one end, or neither, is given:
	// to defaults to now, from to to minus DefaultWindow.
	DefaultWindow = 24 * time.Hour
	// MaxWindow is the longest range one timeline covers.
	MaxWindow = 31 * 24 * time.Hour
	// MaxEntries is the most entries one timeline holds (after
	// consecutive no-record slots are collapsed into one entry).
	MaxEntries = 1000
	// MaxSlots is the most expected slots one timeline computes; an
	// every-second job gets a little over two days.
	MaxSlots = 200_000
	// MaxEdits is the most edits read to reconstruct the schedules in
	// force: the newest MaxEdits since from. Before the oldest of them
	// the schedule counts as unknown (no expected slots).
	MaxEdits = 10_000
)

// Entry kinds.
const (
	KindRun      = "run"
	KindSkipped  = "skipped"
	KindMissed   = "missed"
	KindEdit     = "edit"
	KindNoRecord = "no_record"
	// KindOperation is an operator's operation that leaves the schedules
	// document alone (jobhistory.Operation): a run now, a backfill, a
	// resume after failures.
	KindOperation = "operation"
)

// Reasons of a no_record entry.
const (
	// NoRecordFuture is an expected slot after now: not due yet.
	NoRecordFuture = "future"
	// NoRecordUnrecorded is a past expected slot with no record at all:
	// no replica ran it, skipped it or recorded it as missed (or its
	// record has passed the runs retention).
	NoRecordUnrecorded = "unrecorded"
	// The lifetime's reasons (lifetime.Lifetime.Why: before start_at,
	// after end_at, paused until …) replace these for a slot outside the
	// schedule's lifetime, and lifetime.ReasonMaxRuns for a slot after
	// one skipped as max_runs reached: the daemons do not fire it.
)

// ErrNotFound is wrapped when a job has no schedule document, no record in
// job_runs and no edit in the history: nothing is known about it.
var ErrNotFound = errors.New("not found")

// ErrBadRange is wrapped by the errors of ParseWindow and ParseTime: the
// caller gave a range that cannot be served.
var ErrBadRange = errors.New("bad time range")

// Timeline is one job's timeline for [From, To].
type Timeline struct {
	// JobID is the job's id.
	JobID string `json:"job_id"`
	// From and To are the range, inclusive.
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// Schedule is the schedule as it is now; nil when the document does
	// not exist (deleted, or never there).
	Schedule *Timing `json:"schedule"`
	// Segments are the schedules in force over the range, oldest first,
	// each until the edit that changed its timing.
	Segments []Segment `json:"segments"`
	// Entries are in time order: slots (and slot ranges) by their slot,
	// edits by the time they were applied; at the same instant a slot
	// comes before an edit.
	Entries []Entry `json:"entries"`
	// Truncated is true when the range held more than the bounds allow:
	// Entries end before To, and a request from NextFrom continues.
	Truncated bool `json:"truncated"`
	// NextFrom is where the entries stop when Truncated.
	NextFrom *time.Time `json:"next_from,omitempty"`
	// FailurePause is set while the job is paused after consecutive
	// failed slots (job_pauses): its fires are recorded missed, reason
	// paused, until `cronswap schedules resume`.
	FailurePause *record.PauseDoc `json:"failure_pause,omitempty"`
	// FirstSeen is the job's first sighting, when the history has one:
	// no slot at or before it is expected.
	FirstSeen *FirstSeen `json:"first_seen,omitempty"`
}

// Timing is the part of a schedules document that decides its slots.
type Timing struct {
	// CronExpr is the expression as the daemon reads it; empty when the
	// document had none. A value that is not a string is shown as relaxed
	// extended JSON (a number 5 as "5"), with Error saying why the daemon
	// refuses it.
	CronExpr string `json:"cron_expr"`
	// Timezone is the document's zone, or the daemon's default zone when
	// the document names none.
	Timezone string `json:"timezone"`
	// Enabled is false for a paused job.
	Enabled bool `json:"enabled"`
	// DST is the document's daylight-saving mode ("plain", or empty for
	// the default shift).
	DST string `json:"dst,omitempty"`
	// StartAt, EndAt, PausedUntil and MaxRuns are the schedule's lifetime
	// (package lifetime); zero when not set. A slot outside it is listed
	// with the lifetime's reason, not as unrecorded.
	StartAt     time.Time `json:"start_at,omitzero"`
	EndAt       time.Time `json:"end_at,omitzero"`
	PausedUntil time.Time `json:"paused_until,omitzero"`
	MaxRuns     int       `json:"max_runs,omitempty"`
	// Error says why this schedule expects no slots: the error the daemon
	// reports for the document (schedule.DecodeFields, then
	// scheduler.Check in its zone), or, on a segment, that the schedule is
	// older than the edit history read.
	Error string `json:"error,omitempty"`

	// exprNotString is true when CronExpr is the rendering of a value
	// that is not a string.
	exprNotString bool
}

// ExprText is CronExpr for people: quoted when it is a string, as stored
// otherwise (5, not "5").
func (t Timing) ExprText() string {
	if t.exprNotString {
		return t.CronExpr
	}
	return strconv.Quote(t.CronExpr)
}

// Segment is a stretch of the range with one schedule in force.
type Segment struct {
	// From and To bound the segment: slots after From (at or after it for
	// the first segment) up to and including To.
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// Exists is false while the job had no document (before it was
	// inserted, after it was deleted) or its schedule is unknown.
	Exists bool `json:"exists"`
	// Timing is the schedule in force, when Exists; its Error says why
	// the segment expects no slots though the document existed (the
	// daemon refuses it and no valid version came before it) or that its
	// schedule is unknown.
	Timing
	// Refused, when set, is why the daemons refuse the document of the
	// segment: Timing is then the last valid schedule before it, which
	// stays in force (last known good).
	Refused string `json:"refused,omitempty"`
}

// FirstSeen is where a job's timeline begins: the job's first sighting in
// the edit history (history.Sighting). No slot at or before it is listed
// as expected (unrecorded, future); records and edits are listed as ever.
type FirstSeen struct {
	// At is when a replica first saw the job's document.
	At time.Time `json:"at"`
	// Source is "insert" (At is when the document was inserted) or
	// "read" (At is the first full read that found it; the job may be
	// older).
	Source string `json:"source"`
}

// Entry is one line of a timeline.
type Entry struct {
	// Kind is run, skipped, missed, edit, operation or no_record.
	Kind string `json:"kind"`
	// At is the slot (the scheduled time) of a run, skip, missed record
	// or no-record slot, the first slot of a range; for an edit, when it
	// was applied; for an operation, when it was done.
	At time.Time `json:"at"`
	// Last is the last slot of a range of more than one slot.
	Last *time.Time `json:"last,omitempty"`
	// Count is the number of slots the entry stands for (1 for one
	// slot); zero for an edit.
	Count int64 `json:"count,omitempty"`

	// Status is the job_runs status of a run, skip or missed record; the
	// request's status of a run-now operation.
	Status string `json:"status,omitempty"`
	// RunID is the record's _id; a run-now operation's run id.
	RunID string `json:"run_id,omitempty"`
	// Instance is the replica that ran, skipped or recorded the slot.
	Instance string `json:"instance,omitempty"`
	// Fence is the lock fence of a run.
	Fence *int64 `json:"fence,omitempty"`
	// StartedAt, EndedAt and DurationMS say when a run started, ended
	// and how long it took (ended runs only).
	StartedAt  *time.Time `json:"started_at,omitempty"`
	EndedAt    *time.Time `json:"ended_at,omitempty"`
	DurationMS *int64     `json:"duration_ms,omitempty"`
	// Attempt is a run's current or last attempt when its action retries
	// (the status retrying: the next one is pending).
	Attempt int `json:"attempt,omitempty"`
	// Error and ExitCode are a failed or abandoned run's; Error also a
	// run-now operation's (its request's error).
	Error    string `json:"error,omitempty"`
	ExitCode *int   `json:"exit_code,omitempty"`
	// AnswerStatus and Answer are an http action's answer: its status and
	// the first bytes of its body, secrets redacted.
	AnswerStatus int    `json:"answer_status,omitempty"`
	Answer       string `json:"answer,omitempty"`
	// Reason says why a slot did not run: the skip's reason (which run
	// held the lock), the missed record's reason, or a no-record reason
	// (future, unrecorded, or the lifetime's: before start_at, after
	// end_at, paused until …).
	Reason string `json:"reason,omitempty"`
	// RecordedAt is when a missed record was written.
	RecordedAt *time.Time `json:"recorded_at,omitempty"`
	// OffSchedule is true for a record whose slot is not one the schedule
	// in force expected (as far as the history tells).
	OffSchedule bool `json:"off_schedule,omitempty"`
	// Shifted and DSTNote say what daylight saving did to the slot (see
	// schedule.Fire).
	Shifted bool   `json:"shifted,omitempty"`
	DSTNote string `json:"dst_note,omitempty"`

	// EditID, Op, Changes, UpdatedBy and UpdateMessage describe an edit:
	// the history entry's id, operation, changed fields, author and
	// message (why it was made). Op is also an operation's
	// (jobhistory.Operation.Op).
	EditID        string   `json:"edit_id,omitempty"`
	Op            string   `json:"op,omitempty"`
	Changes       []Change `json:"changes,omitempty"`
	UpdatedBy     string   `json:"updated_by,omitempty"`
	UpdateMessage string   `json:"update_message,omitempty"`

	// By, TriggerID, Args and Slots describe an operation (with Op,
	// Status, RunID and Error): who did it, a run-now's request and the
	// args it handed the action, a backfill's slots.
	By        string            `json:"by,omitempty"`
	TriggerID string            `json:"trigger_id,omitempty"`
	Args      json.RawMessage   `json:"args,omitempty"`
	Slots     *jobhistory.Slots `json:"slots,omitempty"`
}

// Change is one field an edit changed. Before and After are the values as
// relaxed extended JSON, null when the field was (or became) absent.
type Change struct {
	Field  string `json:"field"`
	Before any    `json:"before"`
	After  any    `json:"after"`
}

// Summary renders the entry's details as one line for people (without its
// time and kind), e.g. `cron_expr "0 * * * *" → "30 * * * *" (by alice)`.
func (e Entry) Summary() string {
	var parts []string
	add := func(format string, a ...any) { parts = append(parts, fmt.Sprintf(format, a...)) }
	switch e.Kind {
	case KindRun:
		add("%s", e.Status)
		if e.Instance != "" {
			add("on %s", e.Instance)
		}
		if e.Fence != nil {
			add("fence %d", *e.Fence)
		}
		if e.Attempt > 0 {
			add("attempt %d", e.Attempt)
		}
		if e.DurationMS != nil {
			add("took %s", (time.Duration(*e.DurationMS) * time.Millisecond).String())
		}
		if e.ExitCode != nil {
			add("exit %d", *e.ExitCode)
		}
		if e.AnswerStatus != 0 {
			add("answered %d", e.AnswerStatus)
		}
		if e.Error != "" {
			add("error: %s", e.Error)
		}
	case KindSkipped:
		add("%s", orDash(e.Reason))
		if e.Instance != "" {
			add("on %s", e.Instance)
		}
	case KindMissed:
		add("%s", orDash(e.Reason))
		if e.Count > 1 {
			add("%d slots to %s", e.Count, e.Last.Format(time.RFC3339))
		}
		if e.Instance != "" {
			add("recorded by %s", e.Instance)
		}
	case KindNoRecord:
		add("%s", e.Reason)
		if e.Count > 1 {
			add("%d slots to %s", e.Count, e.Last.Format(time.RFC3339))
		}
	case KindEdit:
		var cs []string
		for _, c := range e.Changes {
			if c.Field == "updated_at" && len(e.Changes) > 1 {
				continue // the stamp of every edit; shown in JSON
			}
			cs = append(cs, fmt.Sprintf("%s %s → %s", c.Field, renderValue(c.Before), renderValue(c.After)))
		}
		line := e.Op
		if len(cs) > 0 {
			line += " " + strings.Join(cs, ", ")
		}
		add("%s", line)
		if e.UpdatedBy != "" {
			add("by %s", e.UpdatedBy)
		}
		if e.UpdateMessage != "" {
			add("message %s", strconv.Quote(e.UpdateMessage))
		}
	case KindOperation:
		add("%s", e.operationText())
	}
	if e.OffSchedule {
		add("not a slot of the schedule in force")
	}
	if e.DSTNote != "" {
		add("(%s)", e.DSTNote)
	}
	return strings.Join(parts, ", ")
}

// operationText is an operation entry's details, e.g. `run_now by alice,
// trigger 65f0…, run trigger/65f0… succeeded` (jobhistory.Operation.Details).
func (e Entry) operationText() string {
	line := e.Op
	if e.By != "" {
		line += " by " + e.By
	}
	o := jobhistory.Operation{Op: e.Op, TriggerID: e.TriggerID, RunID: e.RunID, Status: e.Status, Error: e.Error, Args: e.Args, Slots: e.Slots}
	if d := o.Details(); d != "" {
		line += ", " + d
	}
	return line
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// renderValue shows a change's value: strings quoted, absent as "unset",
// anything else as JSON.
func renderValue(v any) string {
	switch x := v.(type) {
	case nil:
		return "unset"
	case string:
		return strconv.Quote(x)
	default:
		return jsonText(x)
	}
}

// ParseTime reads one end of a range: RFC 3339 ("2026-03-01T09:00:00Z"),
// "now", or a signed duration relative to now ("-2h", "-90m", "+1h",
// "-7d"; a day is 24 hours). Empty returns the zero time (the default).
func ParseTime(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "":
		return time.Time{}, nil
	case s == "now":
		return now, nil
	case s[0] == '-' || s[0] == '+':
		d, err := parseRelative(s)
		if err != nil {
			return time.Time{}, fmt.Errorf("%w: %q: %v", ErrBadRange, s, err)
		}
		return now.Add(d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		if _, derr := time.ParseDuration(s); derr == nil {
			return time.Time{}, fmt.Errorf("%w: %q: a relative time needs a sign: -%s (that long ago) or +%s (from now)", ErrBadRange, s, s, s)
		}
		return time.Time{}, fmt.Errorf("%w: %q: want RFC 3339 (2026-03-01T09:00:00Z), a relative duration (-2h, -30m, -7d) or now", ErrBadRange, s)
	}
	return t, nil
}

func parseRelative(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseInt(days, 10, 32)
		if err != nil {
			return 0, fmt.Errorf("want a whole number of days like -7d")
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("want a duration like -2h, -30m or -7d")
	}
	return d, nil
}

// ParseWindow reads a range from its two ends as ParseTime does and applies
// the defaults (to: now; from: to minus DefaultWindow; a from alone gets
// to = now) and the bounds: from not after to, at most MaxWindow apart.
func ParseWindow(fromS, toS string, now time.Time) (from, to time.Time, err error) {
	if from, err = ParseTime(fromS, now); err != nil {
		return from, to, fmt.Errorf("from: %w", err)
	}
	if to, err = ParseTime(toS, now); err != nil {
		return from, to, fmt.Errorf("to: %w", err)
	}
	return Window(from, to, now)
}

// Window applies the defaults and bounds of ParseWindow to a range whose
// zero ends are unset.
func Window(from, to, now time.Time) (time.Time, time.Time, error) {
	if to.IsZero() {
		to = now
	}
	if from.IsZero() {
		from = to.Add(-DefaultWindow)
	}
	from, to = from.UTC(), to.UTC()
	if from.After(to) {
		return from, to, fmt.Errorf("%w: from %s is after to %s", ErrBadRange, from.Format(time.RFC3339), to.Format(time.RFC3339))
	}
	if to.Sub(from) > MaxWindow {
		return from, to, fmt.Errorf("%w: from %s to %s is %s, more than the %s one timeline covers (use a shorter range)",
			ErrBadRange, from.Format(time.RFC3339), to.Format(time.RFC3339), to.Sub(from), MaxWindow)
	}
	return from, to, nil
}
