// Package schedule is the typed, validated form of one document of the
// schedules collection. Decoding, validation, normalisation and comparison
// live here so that the watcher, the engine, the CLI and the HTTP API all
// agree on what a valid schedule is.
package schedule

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/robfig/cron/v3"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/cronswap/cronswap/internal/lifetime"
	"github.com/cronswap/cronswap/internal/refusal"
)

// Limits on what a schedules document may hold. Anything larger is not a
// schedule and is rejected instead of being parsed.
const (
	MaxDocumentBytes = 64 << 10
	MaxIDBytes       = 256
	MaxExprBytes     = 256
	MaxNameBytes     = 256
	// MaxArgsJSONBytes bounds the JSON of a document's args object (relaxed
	// extended JSON, as actions receive it). An exec action gets it in one
	// environment variable, CRONSWAP_ARGS=<json>, and Linux refuses to
	// start a program with any environment string longer than
	// MAX_ARG_STRLEN (131072 bytes, counting the name, the '=' and the
	// terminating NUL). Escapes make JSON longer than the BSON it comes
	// from (a control character becomes \u0001, binary becomes base64), so
	// a document under MaxDocumentBytes can still exceed it; such args are
	// refused at decode for every action kind, so that no action kind
	// accepts a document another one could not run.
	MaxArgsJSONBytes = 131072 - len(EnvArgs) - len("=") - 1
)

// EnvArgs is the environment variable in which an exec action receives a
// fire's args as JSON.
const EnvArgs = "CRONSWAP_ARGS"

// CollectionName is the MongoDB collection holding one document per
// schedule; every package that reads or writes schedules uses this name.
const CollectionName = "schedules"

// Field names of a schedules document.
const (
	FieldID        = "_id"
	FieldCronExpr  = "cron_expr"
	FieldUpdatedAt = "updated_at"
	FieldEnabled   = "enabled"
	FieldTimezone  = "timezone"
	FieldJob       = "job"
	FieldArgs      = "args"
	FieldCategory  = "category"
	// FieldUpdatedBy optionally names who made the last edit (a string);
	// the daemon ignores it, the edit history records it.
	FieldUpdatedBy = "updated_by"
	// FieldUpdateMessage optionally says why the last edit was made (a
	// string, `cronswap apply --message`); like FieldUpdatedBy it is not a
	// field of the schedule: the daemon ignores it, the edit history
	// records it as the edit's message.
	FieldUpdateMessage = "update_message"
	// FieldDST chooses the daylight-saving semantics: "shift" (the
	// default) or "plain".
	FieldDST = "dst"
	// FieldExclude names calendars (an array of calendar names) whose
	// dates the job's slots skip: each such slot is recorded skipped
	// (docs/calendars.md). The lifetime fields (start_at, end_at,
	// max_runs, paused_until) are package lifetime's.
	FieldExclude = "exclude"
)

// maxExclude bounds the calendars one schedule excludes.
const maxExclude = 32

// ErrInvalid is wrapped by every validation error, so callers can tell a bad
// document from a failure to talk to the server.
var ErrInvalid = errors.New("invalid schedule")

// Schedule is one validated job schedule.
type Schedule struct {
	// ID is the job id (the document's _id).
	ID string
	// CronExpr is the expression as written, trimmed of surrounding space.
	CronExpr string
	// Timezone is the IANA zone from the document; empty means the default.
	Timezone string
	// DST is how the expression treats the wall times a change of the
	// zone's UTC offset skips or repeats: DSTPlain, or empty for DSTShift,
	// the default. A document's "shift" decodes to empty, so both ways of
	// writing the default are the same timing.
	DST DSTMode
	// Enabled is false when the document disarms the job.
	Enabled bool
	// Job names the action in config; empty means ID.
	Job string
	// Category is the dispatch category; may be empty.
	Category string
	// Args is the JSON (relaxed extended JSON) of the args object; empty when absent.
	Args string
	// UpdatedAt is informational; zero when absent or not a date.
	UpdatedAt time.Time
	// StartAt, EndAt, MaxRuns and PausedUntil bound the job's lifetime
	// (docs/time.md#lifetimes): zero when absent. They are part of the
	// timing: the engine arms only the slots they let run.
	StartAt, EndAt time.Time
	MaxRuns        int
	PausedUntil    time.Time
	// Exclude is the JSON array of the calendars whose dates the job's
	// slots skip, as Args is JSON (so that Schedule stays comparable);
	// empty when none. Excludes returns the names.
	Exclude string
}

// ActionName returns the name of the configured action this job runs.
func (s Schedule) ActionName() string {
	if s.Job != "" {
		return s.Job
	}
	return s.ID
}

// Excludes returns the names of the calendars whose dates the job's slots
// skip, in the document's order; nil when none (or when Exclude is not a
// JSON array of strings, which Decode never makes).
func (s Schedule) Excludes() []string {
	if s.Exclude == "" {
		return nil
	}
	var names []string
	if err := json.Unmarshal([]byte(s.Exclude), &names); err != nil {
		return nil
	}
	return names
}

// Zone returns the name of the IANA zone the expression's wall times are
// read in: a CRON_TZ= (or TZ=) prefix of the expression, else the
// timezone field; "" when neither names one (the default zone). A
// calendar without a zone of its own reads a slot's date in it.
func (s Schedule) Zone() string {
	if name, _, ok := cutTZPrefix(s.CronExpr); ok && name != "" {
		return name
	}
	return s.Timezone
}

// SameExceptTiming reports whether s and o agree on every field but their
// timing (the fields of Timing) and UpdatedAt, which is
// informational. It compares whole copies, so a field added to Schedule
// counts without being listed here; Schedule must therefore stay comparable
// with ==.
func (s Schedule) SameExceptTiming(o Schedule) bool {
	return s.withoutTiming() == o.withoutTiming()
}

// withoutTiming is s with its timing and UpdatedAt zeroed.
func (s Schedule) withoutTiming() Schedule {
	s.CronExpr, s.Timezone, s.DST, s.Enabled, s.UpdatedAt = "", "", "", false, time.Time{}
	s.StartAt, s.EndAt, s.MaxRuns, s.PausedUntil = time.Time{}, time.Time{}, 0, time.Time{}
	return s
}

// Timing is the part of a schedule that decides when the timer fires. Two
// schedules with equal Timing keep the same armed timer. The lifetime is
// part of it: it bounds the slots the timer fires (start_at, end_at,
// paused_until), and a job ended at max_runs is armed again when its
// max_runs changes.
type Timing struct {
	CronExpr       string
	Timezone       string
	DST            DSTMode
	Enabled        bool
	StartAt, EndAt time.Time
	MaxRuns        int
	PausedUntil    time.Time
}

// Timing returns the timer-relevant part of s.
func (s Schedule) Timing() Timing {
	return Timing{CronExpr: s.CronExpr, Timezone: s.Timezone, DST: s.DST, Enabled: s.Enabled,
		StartAt: s.StartAt, EndAt: s.EndAt, MaxRuns: s.MaxRuns, PausedUntil: s.PausedUntil}
}

// Error is a validation error about one job.
type Error struct {
	// ID is the job id, or a rendering of a non-string _id; may be empty.
	ID string
	// Field is the offending field; may be empty for whole-document errors.
	Field string
	// Reason says what is wrong.
	Reason string
}

// Error renders the refusal as `schedule "<id>": field <field>: <reason>`,
// leaving out the parts that are empty.
func (e *Error) Error() string {
	return refusal.Message("schedule", e.ID, e.Field, e.Reason)
}

// Unwrap makes errors.Is(err, ErrInvalid) true.
func (e *Error) Unwrap() error { return ErrInvalid }

func invalid(id, field, format string, a ...any) *Error {
	return &Error{ID: id, Field: field, Reason: fmt.Sprintf(format, a...)}
}

// Decode turns a raw schedules document into a validated Schedule. The
// returned id is the job id whenever it could be read (also on error), so the
// caller can attribute the error to a job. Unknown fields are ignored.
func Decode(raw bson.Raw) (Schedule, error) {
	s, err := DecodeFields(raw)
	if err != nil {
		return s, err
	}
	if err := s.Validate(); err != nil {
		return s, err
	}
	return s, nil
}

// DecodeFields is Decode without Validate: every field is read and checked
// by type and size, but the expression and time zone are not parsed. It is
// for a caller that parses them itself right after (the engine does, for
// every schedule it arms), so the hot path parses once; anyone else wants
// Decode.
func DecodeFields(raw bson.Raw) (s Schedule, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = invalid(s.ID, "", "malformed document: %v", r)
		}
	}()
	if len(raw) > MaxDocumentBytes {
		s.ID = idOf(raw)
		return s, invalid(s.ID, "", "document is %d bytes, more than the %d a schedule may have", len(raw), MaxDocumentBytes)
	}
	if err := raw.Validate(); err != nil {
		return s, invalid("", "", "malformed BSON: %v", err)
	}
	f := readFields(raw)
	id, err := DecodeID(f.id)
	s.ID = id
	if err != nil {
		return s, err
	}
	s.Enabled = true

	v := f.cronExpr
	switch {
	case v.Type == 0:
		return s, invalid(id, FieldCronExpr, "missing (want a string like \"0 9 * * *\")")
	case v.Type != bson.TypeString:
		return s, invalid(id, FieldCronExpr, "must be a string, not %s (want a string like \"0 9 * * *\")", typeName(v.Type))
	}
	expr, ok := v.StringValueOK()
	if !ok {
		return s, invalid(id, FieldCronExpr, "is a malformed BSON string")
	}
	if s.CronExpr, err = trimExpr(expr); err != nil {
		return s, invalid(id, FieldCronExpr, "%v", err)
	}

	// Unlike the other optional fields, enabled may not be null: a null
	// left by a script that meant to pause the job must not arm it.
	if v := f.enabled; v.Type != 0 {
		if v.Type != bson.TypeBoolean {
			return s, invalid(id, FieldEnabled, "must be a boolean true or false, or absent (meaning true), not %s "+
				"(e.g. {enabled: false} pauses the job, as `cronswap schedules pause %s` does)", typeName(v.Type), id)
		}
		b, ok := v.BooleanOK()
		if !ok {
			return s, invalid(id, FieldEnabled, "is a malformed BSON boolean")
		}
		s.Enabled = b
	}
	if s.Timezone, err = optionalString(f.timezone, id, FieldTimezone); err != nil {
		return s, err
	}
	if s.DST, err = decodeDST(f.dst, id); err != nil {
		return s, err
	}
	if s.Job, err = optionalString(f.job, id, FieldJob); err != nil {
		return s, err
	}
	if s.Category, err = optionalString(f.category, id, FieldCategory); err != nil {
		return s, err
	}
	if v := f.args; v.Type != 0 {
		switch v.Type {
		case bson.TypeEmbeddedDocument:
			doc, ok := v.DocumentOK()
			if !ok {
				return s, invalid(id, FieldArgs, "is a malformed BSON document")
			}
			// Sized once for the usual args, strings, whose JSON is
			// shorter than their BSON (numbers may grow it once).
			js, ok := appendRelaxedJSON(make([]byte, 0, min(len(doc), MaxArgsJSONBytes+1)), doc, false)
			if !ok {
				if js, err = bson.MarshalExtJSON(doc, false, false); err != nil {
					return s, invalid(id, FieldArgs, "cannot be turned into JSON: %v", err)
				}
			}
			if len(js) > MaxArgsJSONBytes {
				return s, invalid(id, FieldArgs, "is %d bytes as JSON, more than the %d an action can be handed "+
					"(an exec action gets them in the environment variable %s, which Linux limits to 128 KiB); "+
					"keep args small, e.g. {\"region\": \"eu\", \"report\": \"r-2024\"}, and pass large data by reference",
					len(js), MaxArgsJSONBytes, EnvArgs)
			}
			s.Args = string(js)
		case bson.TypeNull:
		default:
			return s, invalid(id, FieldArgs, "must be an object, not %s", typeName(v.Type))
		}
	}
	if err := decodeLifetime(&f, &s); err != nil {
		return s, err
	}
	if s.Exclude, err = decodeExclude(f.exclude, id); err != nil {
		return s, err
	}
	if v := f.updatedAt; v.Type == bson.TypeDateTime {
		if t, ok := v.TimeOK(); ok {
			s.UpdatedAt = t.UTC()
		}
	}
	return s, nil
}

// DecodeID reads a job id from an _id value: it must be a non-empty UTF-8
// string of at most MaxIDBytes. When the _id is present but not a job id (a
// non-string, or a string too long), the returned string is its
// RefusedKey, under which the refused document is tracked, and the error
// (which names a readable rendering of the _id) says why it was refused. It
// returns "" for an _id that cannot be attributed at all: missing, empty,
// malformed or not UTF-8.
func DecodeID(v bson.RawValue) (string, error) {
	switch v.Type {
	case bson.TypeString:
		id, ok := v.StringValueOK()
		switch {
		case !ok:
			return "", invalid("", FieldID, "is a malformed BSON string")
		case id == "":
			return "", invalid("", FieldID, "must not be empty")
		case len(id) > MaxIDBytes:
			shown := fmt.Sprintf("%q (%d bytes)", truncateUTF8(id, 32)+"…", len(id))
			return RefusedKey(shown), invalid(truncateUTF8(id, 32)+"…", FieldID, "is %d bytes, more than %d", len(id), MaxIDBytes)
		case !utf8.ValidString(id):
			return "", invalid("", FieldID, "is not valid UTF-8")
		}
		return id, nil
	case 0:
		return "", invalid("", FieldID, "missing")
	default:
		r := v.String()
		if len(r) > 64 {
			r = truncateUTF8(r, 64) + "…"
		}
		return RefusedKey(r), invalid(r, FieldID, "must be a string job id, not %s (e.g. _id: \"daily_report\")", typeName(v.Type))
	}
}

// refusedMark starts every RefusedKey. The byte 0xFF never occurs in valid
// UTF-8, and a job id is valid UTF-8, so no job id starts with it.
const refusedMark = "\xff"

// RefusedKey returns the key under which a refused document whose _id is
// not a job id is tracked (by the engine, the API and the command line),
// given a readable rendering of that _id. No job id equals a RefusedKey, so
// such a document never stands in for a job, and deleting it never disarms
// one, whatever its _id renders as.
func RefusedKey(rendering string) string { return refusedMark + rendering }

// RefusedID reports whether key is a RefusedKey, and returns the rendering
// of the _id behind it; for a job id it returns key and false.
func RefusedID(key string) (rendering string, refused bool) {
	if r, ok := strings.CutPrefix(key, refusedMark); ok {
		return r, true
	}
	return key, false
}

// ShowKey returns key as people read it in logs and tables: a job id as it
// is, a RefusedKey as "_id " and the rendering of its _id (e.g. `_id
// {"tenant": "x"}`), so that it does not read as the job whose id is that
// rendering. Where ids are data (JSON), show RefusedID's rendering with a
// flag instead: any readable text is some job's possible id.
func ShowKey(key string) string {
	if r, ok := RefusedID(key); ok {
		return "_id " + r
	}
	return key
}

// truncateUTF8 returns at most n bytes of s, cut at a rune boundary.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func idOf(raw bson.Raw) string {
	v, err := raw.LookupErr(FieldID)
	if err != nil {
		return ""
	}
	id, _ := DecodeID(v)
	return id
}

// docFields are the values of the fields DecodeFields reads, taken from a
// document in one pass over its elements: for each name the first element
// that has it, as bson.Raw.LookupErr finds it; a zero Type where the
// document has none. (One lookup per field walked the document once per
// field: fourteen walks, most of them to the end for the fields a document
// leaves out.)
type docFields struct {
	id, cronExpr, enabled, timezone, dst, job, category, args bson.RawValue
	startAt, endAt, pausedUntil, maxRuns, exclude, updatedAt  bson.RawValue
}

// readFields reads the fields of raw, which must be valid BSON
// (bson.Raw.Validate).
func readFields(raw bson.Raw) docFields {
	var f docFields
	if len(raw) < 5 {
		return f
	}
	rest := bsoncore.Document(raw[4 : len(raw)-1])
	for len(rest) > 0 {
		elem, next, ok := bsoncore.ReadElement(rest)
		if !ok {
			break
		}
		rest = next
		var dst *bson.RawValue
		switch string(elem.KeyBytes()) {
		case FieldID:
			dst = &f.id
		case FieldCronExpr:
			dst = &f.cronExpr
		case FieldEnabled:
			dst = &f.enabled
		case FieldTimezone:
			dst = &f.timezone
		case FieldDST:
			dst = &f.dst
		case FieldJob:
			dst = &f.job
		case FieldCategory:
			dst = &f.category
		case FieldArgs:
			dst = &f.args
		case lifetime.FieldStartAt:
			dst = &f.startAt
		case lifetime.FieldEndAt:
			dst = &f.endAt
		case lifetime.FieldPausedUntil:
			dst = &f.pausedUntil
		case lifetime.FieldMaxRuns:
			dst = &f.maxRuns
		case FieldExclude:
			dst = &f.exclude
		case FieldUpdatedAt:
			dst = &f.updatedAt
		default:
			continue
		}
		if dst.Type == 0 {
			v := elem.Value()
			*dst = bson.RawValue{Type: bson.Type(v.Type), Value: v.Data}
		}
	}
	return f
}

// optionalString reads the optional string field named field, whose value
// is v (zero Type: absent).
func optionalString(v bson.RawValue, id, field string) (string, error) {
	if v.Type == 0 || v.Type == bson.TypeNull {
		return "", nil
	}
	if v.Type != bson.TypeString {
		return "", invalid(id, field, "must be a string, not %s", typeName(v.Type))
	}
	str, ok := v.StringValueOK()
	if !ok {
		return "", invalid(id, field, "is a malformed BSON string")
	}
	s := strings.TrimSpace(str)
	if len(s) > MaxNameBytes {
		return "", invalid(id, field, "is %d bytes, more than %d", len(s), MaxNameBytes)
	}
	return s, nil
}

// decodeDST reads the optional dst field: absent, null or "shift" is the
// default (empty), "plain" is DSTPlain, anything else is refused.
func decodeDST(v bson.RawValue, id string) (DSTMode, error) {
	str, err := optionalString(v, id, FieldDST)
	if err != nil {
		return "", err
	}
	m, err := ParseDSTMode(str)
	if err != nil {
		return "", invalid(id, FieldDST, "%v", err)
	}
	if m == DSTShift {
		return "", nil
	}
	return m, nil
}

// decodeLifetime reads the optional lifetime fields into s: dates
// (start_at, end_at, paused_until; null is absent) and a positive integer
// (max_runs: an int32, an int64 or an integral double, as mongosh writes
// numbers). end_at must be after start_at: otherwise no slot could ever
// run, which is refused as an expression that never fires is.
func decodeLifetime(fs *docFields, s *Schedule) error {
	id := s.ID
	var err error
	if s.StartAt, err = optionalDate(fs.startAt, id, lifetime.FieldStartAt); err != nil {
		return err
	}
	if s.EndAt, err = optionalDate(fs.endAt, id, lifetime.FieldEndAt); err != nil {
		return err
	}
	if s.PausedUntil, err = optionalDate(fs.pausedUntil, id, lifetime.FieldPausedUntil); err != nil {
		return err
	}
	if !s.StartAt.IsZero() && !s.EndAt.IsZero() && !s.EndAt.After(s.StartAt) {
		return invalid(id, lifetime.FieldEndAt, "%s is not after %s %s: no slot could ever run",
			s.EndAt.Format(time.RFC3339), lifetime.FieldStartAt, s.StartAt.Format(time.RFC3339))
	}
	v := fs.maxRuns
	if v.Type == 0 || v.Type == bson.TypeNull {
		return nil
	}
	var n int64
	switch v.Type {
	case bson.TypeInt32:
		n = int64(v.Int32())
	case bson.TypeInt64:
		n = v.Int64()
	case bson.TypeDouble:
		d := v.Double()
		if d != math.Trunc(d) || d < 1 || d > lifetime.MaxRuns {
			return invalid(id, lifetime.FieldMaxRuns, "must be a whole number from 1 to %d, not %v", lifetime.MaxRuns, d)
		}
		n = int64(d)
	default:
		return invalid(id, lifetime.FieldMaxRuns, "must be a whole number from 1 to %d, not %s (e.g. max_runs: 10)", lifetime.MaxRuns, typeName(v.Type))
	}
	if n < 1 || n > lifetime.MaxRuns {
		return invalid(id, lifetime.FieldMaxRuns, "must be a whole number from 1 to %d, not %d (omit it for no limit)", lifetime.MaxRuns, n)
	}
	s.MaxRuns = int(n)
	return nil
}

// optionalDate reads an optional date field (absent or null: the zero
// time), in UTC.
func optionalDate(v bson.RawValue, id, field string) (time.Time, error) {
	if v.Type == 0 || v.Type == bson.TypeNull {
		return time.Time{}, nil
	}
	t, ok := v.TimeOK()
	if !ok {
		return time.Time{}, invalid(id, field, "must be a date, not %s (e.g. %s: ISODate(\"2027-01-01T00:00:00Z\"), or new Date())", typeName(v.Type), field)
	}
	return t.UTC(), nil
}

// decodeExclude reads the optional exclude field, an array of calendar
// names (at most maxExclude; null or empty: none), into its JSON form
// (Schedule.Exclude), duplicates dropped. Whether each calendar exists is
// the daemons' check (a policy of the engine), not the document's.
func decodeExclude(v bson.RawValue, id string) (string, error) {
	if v.Type == 0 || v.Type == bson.TypeNull {
		return "", nil
	}
	const want = `(e.g. exclude: ["us-holidays"])`
	arr, ok := v.ArrayOK()
	if !ok {
		return "", invalid(id, FieldExclude, "must be an array of calendar names, not %s %s", typeName(v.Type), want)
	}
	vals, err := arr.Values()
	if err != nil {
		return "", invalid(id, FieldExclude, "is a malformed BSON array")
	}
	if len(vals) > maxExclude {
		return "", invalid(id, FieldExclude, "names %d calendars, more than %d", len(vals), maxExclude)
	}
	names := make([]string, 0, len(vals))
	for i, e := range vals {
		name, ok := e.StringValueOK()
		switch {
		case !ok:
			return "", invalid(id, FieldExclude, "element %d must be a calendar name (a string), not %s %s", i, typeName(e.Type), want)
		case name == "" || len(name) > MaxIDBytes || !utf8.ValidString(name) || strings.TrimSpace(name) != name:
			return "", invalid(id, FieldExclude, "element %d, %q, is not a calendar name (a non-empty UTF-8 string of at most %d bytes, without white space at its ends)",
				i, truncateUTF8(name, 64), MaxIDBytes)
		}
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return "", nil
	}
	js, err := json.Marshal(names)
	if err != nil {
		return "", invalid(id, FieldExclude, "cannot be turned into JSON: %v", err)
	}
	return string(js), nil
}

// Validate checks the fields of s that Decode cannot check by type alone:
// the expression parses and fires at least once, and the time zone exists.
func (s Schedule) Validate() error {
	if _, err := s.Parse(time.UTC); err != nil {
		return err
	}
	return nil
}

// Parse compiles the schedule's expression in its time zone, or in def when
// the document names none, with its daylight-saving mode. A CRON_TZ= or TZ=
// prefix in the expression wins over both zones.
func (s Schedule) Parse(def *time.Location) (cron.Schedule, error) {
	if _, err := ParseDSTMode(string(s.DST)); err != nil {
		return nil, invalid(s.ID, FieldDST, "%v", err)
	}
	if s.Timezone != "" {
		loc, err := LoadLocation(s.Timezone)
		if err != nil {
			return nil, invalid(s.ID, FieldTimezone, "%v", err)
		}
		def = loc
	}
	sched, err := ParseExprWith(s.CronExpr, def, ParseOptions{DST: s.DST, JobID: s.ID})
	if err != nil {
		return nil, invalid(s.ID, FieldCronExpr, "%v", err)
	}
	return sched, nil
}

// LoadLocation loads an IANA time zone, refusing names that are not zones.
func LoadLocation(name string) (*time.Location, error) {
	// "Local" depends on the machine, so replicas could disagree on slots.
	if name == "" || name == "Local" || strings.ContainsAny(name, " \t\n") || len(name) > MaxNameBytes {
		return nil, fmt.Errorf("unknown time zone %q (want an IANA name like \"Europe/Berlin\" or \"UTC\")", name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("unknown time zone %q (want an IANA name like \"Europe/Berlin\" or \"UTC\")", name)
	}
	return loc, nil
}

// exprParser accepts 5 fields, 6 fields with leading seconds, and descriptors.
var exprParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ParseExpr compiles a cron expression in loc (nil means UTC), with the
// default options: see ParseExprWith for what it accepts and returns.
func ParseExpr(expr string, loc *time.Location) (cron.Schedule, error) {
	return ParseExprWith(expr, loc, ParseOptions{})
}

// everySchedule is the schedule of an "@every <duration>" expression. robfig's
// ConstantDelaySchedule counts from whenever it is asked (now + delay), so two
// replicas, or one daemon before and after a restart, would disagree on the
// activation times. everySchedule instead fires on a fixed grid: the
// multiples of period since the Unix epoch (1970-01-01T00:00:00Z), whatever the time zone.
// "@every 1h" fires on the hour, "@every 30s" at :00 and :30 of each minute,
// "@every 7s" at the Unix times divisible by 7. So the scheduled time of a
// fire follows from the expression alone: every replica, started whenever,
// computes the same activations. ParseExpr accepts periods from MinEvery to
// MaxEvery in whole seconds.
type everySchedule struct {
	// period is the distance between activations, a whole number of
	// seconds; a value built by hand below one second counts as one
	// second, and fractions of a second are dropped.
	period time.Duration
}

func (s everySchedule) seconds() int64 {
	if p := int64(s.period / time.Second); p > 0 {
		return p
	}
	return 1
}

// Next returns the first grid point strictly after t, in t's location.
func (s everySchedule) Next(t time.Time) time.Time {
	p := s.seconds()
	return time.Unix((floorDiv(t.Unix(), p)+1)*p, 0).In(t.Location())
}

// Prev returns the last grid point at or before t, in t's location.
func (s everySchedule) Prev(t time.Time) time.Time {
	p := s.seconds()
	return time.Unix(floorDiv(t.Unix(), p)*p, 0).In(t.Location())
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// ArgsJSON returns the args as a JSON object, "{}" when there are none.
func (s Schedule) ArgsJSON() json.RawMessage {
	if s.Args == "" {
		return json.RawMessage("{}")
	}
	return json.RawMessage(s.Args)
}

func typeName(t bson.Type) string {
	switch t {
	case bson.TypeDouble:
		return "a double"
	case bson.TypeString:
		return "a string"
	case bson.TypeEmbeddedDocument:
		return "an object"
	case bson.TypeArray:
		return "an array"
	case bson.TypeBoolean:
		return "a boolean"
	case bson.TypeDateTime:
		return "a date"
	case bson.TypeNull:
		return "null"
	case bson.TypeInt32:
		return "an int32"
	case bson.TypeInt64:
		return "an int64"
	case bson.TypeObjectID:
		return "an ObjectId"
	case bson.TypeDecimal128:
		return "a decimal"
	default:
		return "a " + t.String()
	}
}
