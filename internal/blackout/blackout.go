// Package blackout reads the blackouts collection: windows during which the
// fires of all jobs, or of the jobs of some categories, are not run but
// recorded skipped with the window's id and reason. A window is one-off
// ({_id, from, to, categories?, reason}) or recurring ({_id, cron_expr,
// duration, timezone?, categories?, reason}: open from each fire of the
// expression for the duration).
//
// A window is matched against a fire's cron slot, not the wall clock, so
// that replicas agree on it; the claim path records the skip once per
// (job, slot) whichever replica records it. The daemon keeps a Set equal to
// the collection through a change stream (Set is a changestream.Sink).
package blackout

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/robfig/cron/v3"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/refusal"
	"github.com/cronswap/cronswap/schedule"
)

// CollectionName is the collection of the blackout windows.
const CollectionName = "blackouts"

// Fields of a blackouts document.
const (
	FieldID         = "_id"
	FieldFrom       = "from"
	FieldTo         = "to"
	FieldCronExpr   = "cron_expr"
	FieldDuration   = "duration"
	FieldTimezone   = "timezone"
	FieldCategories = "categories"
	FieldReason     = "reason"
	// FieldUpdatedAt and FieldUpdatedBy are informational, as on schedules.
	FieldUpdatedAt = "updated_at"
	FieldUpdatedBy = "updated_by"
)

// knownFields are the fields a window may have. Any other field is refused:
// a misspelt "categories" would otherwise black out every job.
var knownFields = []string{FieldID, FieldFrom, FieldTo, FieldCronExpr, FieldDuration, FieldTimezone,
	FieldCategories, FieldReason, FieldUpdatedAt, FieldUpdatedBy}

// Limits of a window document.
const (
	// MaxDocumentBytes bounds a blackouts document.
	MaxDocumentBytes = 16 << 10
	// MaxReasonBytes bounds the reason, which is copied into every run
	// record the window skips.
	MaxReasonBytes = 1024
	// MaxCategories bounds the categories of one window.
	MaxCategories = 100
	// MaxDuration bounds a recurring window's duration.
	MaxDuration = 366 * 24 * time.Hour
)

// ErrInvalid is wrapped by every validation error of a window.
var ErrInvalid = errors.New("invalid blackout window")

// Error is a validation error about one window document.
type Error struct {
	// ID is the window's _id, or a rendering of it; empty when unknown.
	ID string
	// Field is the offending field; empty for the whole document.
	Field string
	// Reason says what is wrong.
	Reason string
}

// Error implements error: "blackout window "<id>": field <f>: <reason>".
func (e *Error) Error() string {
	return refusal.Message("blackout window", e.ID, e.Field, e.Reason)
}

// Unwrap makes errors.Is(err, ErrInvalid) true.
func (e *Error) Unwrap() error { return ErrInvalid }

func invalid(id, field, format string, a ...any) *Error {
	return &Error{ID: id, Field: field, Reason: fmt.Sprintf(format, a...)}
}

// Window is one validated blackout window.
type Window struct {
	// ID is the document's _id.
	ID string
	// From and To bound a one-off window: slots at or after From and
	// before To. Zero for a recurring window.
	From time.Time
	To   time.Time
	// CronExpr, Duration and Timezone define a recurring window: open
	// from each fire of CronExpr (in Timezone, else the zone Decode was
	// given) for Duration.
	CronExpr string
	Duration time.Duration
	Timezone string
	// Categories limits the window to the jobs of these categories; empty
	// means every job.
	Categories []string
	// Reason says why, as recorded on the skipped runs.
	Reason string

	sched cron.Schedule
}

// Recurring reports whether w is a recurring window.
func (w Window) Recurring() bool { return w.CronExpr != "" }

// Applies reports whether w covers the jobs of category (empty: a job
// without one).
func (w Window) Applies(category string) bool {
	return len(w.Categories) == 0 || slices.Contains(w.Categories, category)
}

// Covers reports whether slot falls inside w (for any category): in
// [From, To) for a one-off window, within Duration after a fire of the
// expression (at or after it) for a recurring one.
func (w Window) Covers(slot time.Time) bool {
	if !w.Recurring() {
		return !slot.Before(w.From) && slot.Before(w.To)
	}
	if w.sched == nil {
		return false
	}
	// The first fire after slot-Duration opens the window covering slot
	// when it is not later than slot.
	start := w.sched.Next(slot.Add(-w.Duration))
	return !start.IsZero() && !start.After(slot)
}

// Matches reports whether a fire of a job of category at slot is inside w.
func (w Window) Matches(category string, slot time.Time) bool {
	return w.Applies(category) && w.Covers(slot)
}

// Next returns the next opening of w at or after t and when it closes; ok is
// false when w opens no more (a one-off window that has ended). A window
// open at t yields its current opening.
func (w Window) Next(t time.Time) (open, close time.Time, ok bool) {
	if !w.Recurring() {
		if !t.Before(w.To) {
			return time.Time{}, time.Time{}, false
		}
		return w.From, w.To, true
	}
	if w.sched == nil {
		return time.Time{}, time.Time{}, false
	}
	start := w.sched.Next(t.Add(-w.Duration))
	if start.IsZero() {
		return time.Time{}, time.Time{}, false
	}
	return start, start.Add(w.Duration), true
}

// DurationString renders the duration of a recurring window ("" for a
// one-off one).
func (w Window) DurationString() string {
	if !w.Recurring() {
		return ""
	}
	return w.Duration.String()
}

// Decode validates a raw blackouts document. The id is filled in whenever
// it could be read (also on error), so the caller can name the document.
// loc is the zone of a recurring window that names none (nil: UTC).
func Decode(raw bson.Raw, loc *time.Location) (w Window, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = invalid(w.ID, "", "malformed document: %v", r)
		}
	}()
	if err := raw.Validate(); err != nil {
		return w, invalid("", "", "malformed BSON: %v", err)
	}
	w.ID, err = DecodeID(raw.Lookup(FieldID))
	if err != nil {
		return w, err
	}
	if len(raw) > MaxDocumentBytes {
		return w, invalid(w.ID, "", "document is %d bytes, more than %d", len(raw), MaxDocumentBytes)
	}
	elems, err := raw.Elements()
	if err != nil {
		return w, invalid(w.ID, "", "malformed BSON: %v", err)
	}
	for _, e := range elems {
		if !slices.Contains(knownFields, e.Key()) {
			return w, invalid(w.ID, e.Key(), "unknown field (a window has %s)", strings.Join(knownFields, ", "))
		}
	}
	if w.Reason, err = stringField(raw, w.ID, FieldReason, true); err != nil {
		return w, err
	}
	if w.Reason == "" {
		return w, invalid(w.ID, FieldReason, "must not be empty (it is recorded on every run the window skips)")
	}
	if len(w.Reason) > MaxReasonBytes {
		return w, invalid(w.ID, FieldReason, "is %d bytes, more than %d", len(w.Reason), MaxReasonBytes)
	}
	if w.Categories, err = decodeCategories(raw, w.ID); err != nil {
		return w, err
	}
	_, hasFrom := lookup(raw, FieldFrom)
	_, hasTo := lookup(raw, FieldTo)
	_, hasExpr := lookup(raw, FieldCronExpr)
	_, hasDur := lookup(raw, FieldDuration)
	switch {
	case (hasFrom || hasTo) && (hasExpr || hasDur):
		return w, invalid(w.ID, "", "has both from/to (a one-off window) and cron_expr/duration (a recurring one); want one kind")
	case hasFrom || hasTo:
		return w, decodeOneOff(raw, &w)
	case hasExpr || hasDur:
		return w, decodeRecurring(raw, &w, loc)
	}
	return w, invalid(w.ID, "", "has neither from and to (a one-off window) nor cron_expr and duration (a recurring one)")
}

func decodeOneOff(raw bson.Raw, w *Window) error {
	var err error
	if w.From, err = dateField(raw, w.ID, FieldFrom); err != nil {
		return err
	}
	if w.To, err = dateField(raw, w.ID, FieldTo); err != nil {
		return err
	}
	if _, ok := lookup(raw, FieldTimezone); ok {
		return invalid(w.ID, FieldTimezone, "belongs to a recurring window (from and to are instants)")
	}
	if !w.To.After(w.From) {
		return invalid(w.ID, FieldTo, "must be later than from (%s)", w.From.Format(time.RFC3339))
	}
	return nil
}

func decodeRecurring(raw bson.Raw, w *Window, loc *time.Location) error {
	var err error
	if w.CronExpr, err = stringField(raw, w.ID, FieldCronExpr, true); err != nil {
		return err
	}
	d, err := stringField(raw, w.ID, FieldDuration, true)
	if err != nil {
		return err
	}
	w.Duration, err = time.ParseDuration(d)
	if err != nil || w.Duration <= 0 || w.Duration > MaxDuration {
		return invalid(w.ID, FieldDuration, "%q is not a duration from 1s to %s (want e.g. \"2h\" or \"90m\")", d, MaxDuration)
	}
	if w.Timezone, err = stringField(raw, w.ID, FieldTimezone, false); err != nil {
		return err
	}
	if w.Timezone != "" {
		if loc, err = schedule.LoadLocation(w.Timezone); err != nil {
			return invalid(w.ID, FieldTimezone, "%v", err)
		}
	}
	if w.sched, err = schedule.ParseExprWith(w.CronExpr, loc, schedule.ParseOptions{}); err != nil {
		return invalid(w.ID, FieldCronExpr, "%v", err)
	}
	return nil
}

// DecodeID reads a window id: a non-empty UTF-8 string of at most
// schedule.MaxIDBytes. On error the id is a rendering of the _id, or empty
// when there is none.
func DecodeID(v bson.RawValue) (string, error) {
	if v.Type != bson.TypeString {
		if v.Type == 0 {
			return "", invalid("", FieldID, "missing")
		}
		r := v.String()
		if len(r) > 64 {
			r = r[:64] + "…"
		}
		r = "_id " + r // not taken for a window id that reads the same
		return r, invalid(r, FieldID, "must be a string, not %s (e.g. _id: \"year-end-freeze\")", v.Type)
	}
	id, ok := v.StringValueOK()
	switch {
	case !ok:
		return "", invalid("", FieldID, "is a malformed BSON string")
	case id == "":
		return "", invalid("", FieldID, "must not be empty")
	case !utf8.ValidString(id):
		return "", invalid("", FieldID, "is not valid UTF-8")
	case len(id) > schedule.MaxIDBytes:
		return id[:32] + "…", invalid(id[:32]+"…", FieldID, "is %d bytes, more than %d", len(id), schedule.MaxIDBytes)
	}
	return id, nil
}

func lookup(raw bson.Raw, field string) (bson.RawValue, bool) {
	v, err := raw.LookupErr(field)
	if err != nil || v.Type == bson.TypeNull {
		return bson.RawValue{}, false
	}
	return v, true
}

func stringField(raw bson.Raw, id, field string, required bool) (string, error) {
	v, ok := lookup(raw, field)
	if !ok {
		if required {
			return "", invalid(id, field, "missing")
		}
		return "", nil
	}
	s, ok := v.StringValueOK()
	if !ok {
		return "", invalid(id, field, "must be a string, not %s", v.Type)
	}
	return strings.TrimSpace(s), nil
}

func dateField(raw bson.Raw, id, field string) (time.Time, error) {
	v, ok := lookup(raw, field)
	if !ok {
		return time.Time{}, invalid(id, field, "missing (a one-off window has from and to, both dates)")
	}
	t, ok := v.TimeOK()
	if !ok {
		return time.Time{}, invalid(id, field, "must be a date, not %s (e.g. %s: ISODate(\"2026-12-24T00:00:00Z\"))", v.Type, field)
	}
	return t.UTC(), nil
}

func decodeCategories(raw bson.Raw, id string) ([]string, error) {
	v, ok := lookup(raw, FieldCategories)
	if !ok {
		return nil, nil
	}
	arr, ok := v.ArrayOK()
	if !ok {
		return nil, invalid(id, FieldCategories, "must be an array of category names, not %s (omit it for every job)", v.Type)
	}
	vals, err := arr.Values()
	if err != nil {
		return nil, invalid(id, FieldCategories, "malformed array: %v", err)
	}
	if len(vals) == 0 {
		return nil, invalid(id, FieldCategories, "is empty (omit it for every job)")
	}
	if len(vals) > MaxCategories {
		return nil, invalid(id, FieldCategories, "has %d names, more than %d", len(vals), MaxCategories)
	}
	out := make([]string, 0, len(vals))
	for i, e := range vals {
		s, ok := e.StringValueOK()
		if !ok || strings.TrimSpace(s) == "" || len(s) > schedule.MaxNameBytes {
			return nil, invalid(id, FieldCategories, "entry %d must be a non-empty string of at most %d bytes", i, schedule.MaxNameBytes)
		}
		out = append(out, strings.TrimSpace(s))
	}
	return out, nil
}
