// Package calendar reads the calendars collection: named sets of dates
// (single dates, dates that recur every year, ranges of dates) that a
// schedule can exclude, such as a country's public holidays. A calendar
// may name a time zone its dates are read in; without one they are read in
// the zone of the job that asks. Import reads an iCalendar file into a
// calendar document.
package calendar

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/refusal"
	"github.com/cronswap/cronswap/schedule"
)

// CollectionName is the collection of the calendars.
const CollectionName = "calendars"

// Fields of a calendars document.
const (
	// FieldID is the calendar's name, as schedules name it.
	FieldID = "_id"
	// FieldTimezone is the optional IANA zone the dates are read in.
	FieldTimezone = "timezone"
	// FieldDates are single dates, "2027-12-24".
	FieldDates = "dates"
	// FieldYearly are dates of every year, "12-25".
	FieldYearly = "yearly"
	// FieldRanges are {from, to} ranges of dates, both included.
	FieldRanges = "ranges"
	// FieldFrom and FieldTo bound one range.
	FieldFrom = "from"
	FieldTo   = "to"
	// FieldDescription says what the calendar is, for people.
	FieldDescription = "description"
	// FieldSource names where an imported calendar came from (the file).
	FieldSource = "source"
	// FieldUpdatedAt and FieldUpdatedBy are informational, as on
	// schedules.
	FieldUpdatedAt = "updated_at"
	FieldUpdatedBy = "updated_by"
)

// knownFields are the fields a calendar may have. Any other is refused: a
// misspelt "dates" would otherwise leave every holiday out.
var knownFields = []string{FieldID, FieldTimezone, FieldDates, FieldYearly, FieldRanges, FieldDescription,
	FieldSource, FieldUpdatedAt, FieldUpdatedBy}

// Limits of a calendar document.
const (
	// MaxDocumentBytes bounds a calendars document.
	MaxDocumentBytes = 1 << 20
	// MaxEntries bounds the dates, yearly dates and ranges of one
	// calendar together.
	MaxEntries = 20000
	// MaxTextBytes bounds the description and the source.
	MaxTextBytes = 1024
)

// Layouts of the dates of a calendar document.
const (
	DateLayout   = time.DateOnly // "2027-12-24"
	YearlyLayout = "01-02"       // "12-25"
)

// ErrInvalid is wrapped by every validation error of a calendar.
var ErrInvalid = errors.New("invalid calendar")

// Error is a validation error about one calendar document.
type Error struct {
	// Name is the calendar's _id, or a rendering of it; empty when unknown.
	Name string
	// Field is the offending field; empty for the whole document.
	Field string
	// Reason says what is wrong.
	Reason string
}

// Error renders the refusal as `calendar "<name>": field <f>: <reason>`.
func (e *Error) Error() string {
	return refusal.Message("calendar", e.Name, e.Field, e.Reason)
}

// Unwrap makes errors.Is(err, ErrInvalid) true.
func (e *Error) Unwrap() error { return ErrInvalid }

func invalid(name, field, format string, a ...any) *Error {
	return &Error{Name: name, Field: field, Reason: fmt.Sprintf(format, a...)}
}

// Date is a day of the calendar, without a zone.
type Date struct {
	Year  int
	Month time.Month
	Day   int
}

// DateOf returns the date of t in its location.
func DateOf(t time.Time) Date {
	y, m, d := t.Date()
	return Date{y, m, d}
}

// String formats d as "2006-01-02".
func (d Date) String() string { return fmt.Sprintf("%04d-%02d-%02d", d.Year, int(d.Month), d.Day) }

// Before reports whether d comes before e.
func (d Date) Before(e Date) bool { return d.key() < e.key() }

func (d Date) key() int { return d.Year*10000 + int(d.Month)*100 + d.Day }

// Yearly is a date of every year.
type Yearly struct {
	Month time.Month
	Day   int
}

// String formats y as "01-02".
func (y Yearly) String() string { return fmt.Sprintf("%02d-%02d", int(y.Month), y.Day) }

// Range is a stretch of dates, From and To included.
type Range struct {
	From, To Date
}

// Calendar is one validated calendar.
type Calendar struct {
	// Name is the document's _id, as schedules name the calendar.
	Name string
	// Timezone is the zone the dates are read in; empty: the job's.
	Timezone string
	// Dates, Yearly and Ranges are the dates the calendar holds, each
	// sorted.
	Dates  []Date
	Yearly []Yearly
	Ranges []Range
	// Description and Source are informational.
	Description string
	Source      string

	loc *time.Location
}

// Location returns the zone the calendar's dates are read in, nil when
// they are read in the zone of the job that asks.
func (c Calendar) Location() *time.Location { return c.loc }

// Holds reports whether the date of instant t, read in the calendar's
// zone (or in def, the job's zone, when the calendar names none; nil is
// UTC), is one of the calendar's dates.
func (c Calendar) Holds(t time.Time, def *time.Location) (Date, bool) {
	loc := c.loc
	if loc == nil {
		loc = def
	}
	if loc == nil {
		loc = time.UTC
	}
	d := DateOf(t.In(loc))
	return d, c.HoldsDate(d)
}

// Why says why a slot on date d, which the calendar holds, is excluded:
// `<d> is in calendar "<name>"`.
func (c Calendar) Why(d Date) string { return fmt.Sprintf("%s is in calendar %q", d, c.Name) }

// HoldsDate reports whether d is one of the calendar's dates.
func (c Calendar) HoldsDate(d Date) bool {
	if _, ok := slices.BinarySearchFunc(c.Dates, d, func(a, b Date) int { return a.key() - b.key() }); ok {
		return true
	}
	for _, y := range c.Yearly {
		if y.Month == d.Month && y.Day == d.Day {
			return true
		}
	}
	for _, r := range c.Ranges {
		if !d.Before(r.From) && !r.To.Before(d) {
			return true
		}
	}
	return false
}

// Document returns the calendar as a calendars document (without
// updated_at and updated_by).
func (c Calendar) Document() bson.D {
	doc := bson.D{{Key: FieldID, Value: c.Name}}
	if c.Timezone != "" {
		doc = append(doc, bson.E{Key: FieldTimezone, Value: c.Timezone})
	}
	dates := make(bson.A, len(c.Dates))
	for i, d := range c.Dates {
		dates[i] = d.String()
	}
	yearly := make(bson.A, len(c.Yearly))
	for i, y := range c.Yearly {
		yearly[i] = y.String()
	}
	ranges := make(bson.A, len(c.Ranges))
	for i, r := range c.Ranges {
		ranges[i] = bson.D{{Key: FieldFrom, Value: r.From.String()}, {Key: FieldTo, Value: r.To.String()}}
	}
	doc = append(doc, bson.E{Key: FieldDates, Value: dates}, bson.E{Key: FieldYearly, Value: yearly}, bson.E{Key: FieldRanges, Value: ranges})
	if c.Description != "" {
		doc = append(doc, bson.E{Key: FieldDescription, Value: c.Description})
	}
	if c.Source != "" {
		doc = append(doc, bson.E{Key: FieldSource, Value: c.Source})
	}
	return doc
}

// CheckName checks a calendar's name: a non-empty UTF-8 string of at most
// schedule.MaxIDBytes without white space at its ends (schedules list
// calendars by name).
func CheckName(name string) error {
	switch {
	case name == "":
		return errors.New("empty calendar name")
	case len(name) > schedule.MaxIDBytes:
		return fmt.Errorf("calendar name is %d bytes, more than %d", len(name), schedule.MaxIDBytes)
	case !utf8.ValidString(name):
		return errors.New("calendar name is not valid UTF-8")
	case strings.TrimSpace(name) != name:
		return fmt.Errorf("calendar name %q has white space at its ends", name)
	}
	return nil
}

// Decode validates a raw calendars document. The name is filled in
// whenever it could be read (also on error), so the caller can name the
// document.
func Decode(raw bson.Raw) (c Calendar, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = invalid(c.Name, "", "malformed document: %v", r)
		}
	}()
	if err := raw.Validate(); err != nil {
		return c, invalid("", "", "malformed BSON: %v", err)
	}
	c.Name, err = DecodeName(raw.Lookup(FieldID))
	if err != nil {
		return c, err
	}
	if len(raw) > MaxDocumentBytes {
		return c, invalid(c.Name, "", "document is %d bytes, more than %d", len(raw), MaxDocumentBytes)
	}
	elems, err := raw.Elements()
	if err != nil {
		return c, invalid(c.Name, "", "malformed BSON: %v", err)
	}
	for _, e := range elems {
		if !slices.Contains(knownFields, e.Key()) {
			return c, invalid(c.Name, e.Key(), "unknown field (a calendar has %s)", strings.Join(knownFields, ", "))
		}
	}
	if c.Timezone, err = textField(raw, c.Name, FieldTimezone); err != nil {
		return c, err
	}
	if c.Timezone != "" {
		if c.loc, err = schedule.LoadLocation(c.Timezone); err != nil {
			return c, invalid(c.Name, FieldTimezone, "%v", err)
		}
	}
	if c.Description, err = textField(raw, c.Name, FieldDescription); err != nil {
		return c, err
	}
	if c.Source, err = textField(raw, c.Name, FieldSource); err != nil {
		return c, err
	}
	entries := 0
	if err := eachString(raw, c.Name, FieldDates, &entries, func(i int, s string) error {
		t, err := time.Parse(DateLayout, s)
		if err != nil {
			return invalid(c.Name, FieldDates, "element %d, %q, is not a date (want e.g. \"2027-12-24\")", i, s)
		}
		c.Dates = append(c.Dates, DateOf(t))
		return nil
	}); err != nil {
		return c, err
	}
	if err := eachString(raw, c.Name, FieldYearly, &entries, func(i int, s string) error {
		t, err := time.Parse("2006-"+YearlyLayout, "2000-"+s) // a leap year: 02-29 exists
		if err != nil || len(s) != len(YearlyLayout) {
			return invalid(c.Name, FieldYearly, "element %d, %q, is not a month and day (want e.g. \"12-25\")", i, s)
		}
		c.Yearly = append(c.Yearly, Yearly{t.Month(), t.Day()})
		return nil
	}); err != nil {
		return c, err
	}
	if c.Ranges, err = decodeRanges(raw, c.Name, &entries); err != nil {
		return c, err
	}
	sort.Slice(c.Dates, func(i, j int) bool { return c.Dates[i].Before(c.Dates[j]) })
	c.Dates = slices.Compact(c.Dates)
	sort.Slice(c.Yearly, func(i, j int) bool {
		return c.Yearly[i].Month < c.Yearly[j].Month || c.Yearly[i].Month == c.Yearly[j].Month && c.Yearly[i].Day < c.Yearly[j].Day
	})
	c.Yearly = slices.Compact(c.Yearly)
	sort.Slice(c.Ranges, func(i, j int) bool { return c.Ranges[i].From.Before(c.Ranges[j].From) })
	return c, nil
}

// DecodeName reads a calendar's name from its _id. On error the name is a
// rendering of the _id, or empty when there is none.
func DecodeName(v bson.RawValue) (string, error) {
	if v.Type != bson.TypeString {
		if v.Type == 0 {
			return "", invalid("", FieldID, "missing")
		}
		r := v.String()
		if len(r) > 64 {
			r = r[:64] + "…"
		}
		r = "_id " + r // not taken for a calendar named the same
		return r, invalid(r, FieldID, "must be a string, the calendar's name (e.g. _id: \"us-holidays\")")
	}
	name, ok := v.StringValueOK()
	if !ok {
		return "", invalid("", FieldID, "is a malformed BSON string")
	}
	if err := CheckName(name); err != nil {
		if !utf8.ValidString(name) || len(name) > schedule.MaxIDBytes {
			return "", invalid("", FieldID, "%v", err)
		}
		return name, invalid(name, FieldID, "%v", err)
	}
	return name, nil
}

// textField reads an optional string field of at most MaxTextBytes.
func textField(raw bson.Raw, name, field string) (string, error) {
	v, err := raw.LookupErr(field)
	if err != nil || v.Type == bson.TypeNull {
		return "", nil
	}
	s, ok := v.StringValueOK()
	if !ok {
		return "", invalid(name, field, "must be a string")
	}
	if len(s) > MaxTextBytes {
		return "", invalid(name, field, "is %d bytes, more than %d", len(s), MaxTextBytes)
	}
	return strings.TrimSpace(s), nil
}

// eachString calls f with each element of the optional array field, which
// must hold strings; entries counts the elements against MaxEntries.
func eachString(raw bson.Raw, name, field string, entries *int, f func(i int, s string) error) error {
	v, err := raw.LookupErr(field)
	if err != nil || v.Type == bson.TypeNull {
		return nil
	}
	arr, ok := v.ArrayOK()
	if !ok {
		return invalid(name, field, "must be an array of strings")
	}
	vals, err := arr.Values()
	if err != nil {
		return invalid(name, field, "malformed array: %v", err)
	}
	for i, e := range vals {
		if *entries++; *entries > MaxEntries {
			return invalid(name, field, "more than %d dates, yearly dates and ranges in all", MaxEntries)
		}
		s, ok := e.StringValueOK()
		if !ok {
			return invalid(name, field, "element %d must be a string", i)
		}
		if err := f(i, s); err != nil {
			return err
		}
	}
	return nil
}

func decodeRanges(raw bson.Raw, name string, entries *int) ([]Range, error) {
	v, err := raw.LookupErr(FieldRanges)
	if err != nil || v.Type == bson.TypeNull {
		return nil, nil
	}
	arr, ok := v.ArrayOK()
	if !ok {
		return nil, invalid(name, FieldRanges, "must be an array of {from, to} (e.g. {from: \"2027-12-24\", to: \"2028-01-02\"})")
	}
	vals, err := arr.Values()
	if err != nil {
		return nil, invalid(name, FieldRanges, "malformed array: %v", err)
	}
	var out []Range
	for i, e := range vals {
		if *entries++; *entries > MaxEntries {
			return nil, invalid(name, FieldRanges, "more than %d dates, yearly dates and ranges in all", MaxEntries)
		}
		doc, ok := e.DocumentOK()
		if !ok {
			return nil, invalid(name, FieldRanges, "element %d must be {from, to}", i)
		}
		var r Range
		for _, end := range []struct {
			field string
			dst   *Date
		}{{FieldFrom, &r.From}, {FieldTo, &r.To}} {
			s, ok := doc.Lookup(end.field).StringValueOK()
			t, err := time.Parse(DateLayout, s)
			if !ok || err != nil {
				return nil, invalid(name, FieldRanges, "element %d: %s must be a date like \"2027-12-24\"", i, end.field)
			}
			*end.dst = DateOf(t)
		}
		if r.To.Before(r.From) {
			return nil, invalid(name, FieldRanges, "element %d ends (%s) before it starts (%s)", i, r.To, r.From)
		}
		out = append(out, r)
	}
	return out, nil
}
