package calendar

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	ics "github.com/arran4/golang-ical"
	"github.com/teambition/rrule-go"
)

// ImportOptions are the choices of Import.
type ImportOptions struct {
	// Timezone is the zone the calendar's dates are read in; empty: the
	// zone of the job that asks.
	Timezone string
	// Until is the last date a recurring event is expanded to (a rule
	// that is a plain date of every year becomes a yearly date instead,
	// which has no end).
	Until Date
	// Source names where the calendar came from (the file), kept on the
	// document.
	Source string
}

// Skipped is an event of the file that Import left out, and why.
type Skipped struct {
	// Summary is the event's SUMMARY (or its UID when it has none).
	Summary string
	// Reason says why it was left out.
	Reason string
}

// Import reads an iCalendar file (RFC 5545) into the calendar name. Every
// all-day event (DTSTART;VALUE=DATE) is a date, or a range when it lasts
// more than a day (DTEND, exclusive, or DURATION). An event with an RRULE
// that is one date of every year (FREQ=YEARLY, no other rule part, no
// COUNT, UNTIL or EXDATE) becomes a yearly date; any other rule is
// expanded (github.com/teambition/rrule-go) from its DTSTART up to
// opts.Until, less its EXDATEs and with its RDATEs. Timed events, and
// cancelled ones, are left out and listed in skipped: a calendar holds
// dates, not times.
func Import(r io.Reader, name string, opts ImportOptions) (c Calendar, skipped []Skipped, err error) {
	if err := CheckName(name); err != nil {
		return c, nil, err
	}
	parsed, err := ics.ParseCalendar(r)
	if err != nil {
		return c, nil, fmt.Errorf("calendar %q: read the iCalendar file: %w", name, err)
	}
	c = Calendar{Name: name, Timezone: opts.Timezone, Source: opts.Source}
	if desc := parsed.CalendarProperties; len(desc) > 0 {
		for _, p := range desc {
			if p.IANAToken == string(ics.PropertyXWRCalName) && len(p.Value) <= MaxTextBytes {
				c.Description = p.Value
			}
		}
	}
	for _, ev := range parsed.Events() {
		summary := propValue(&ev.ComponentBase, ics.ComponentPropertySummary)
		if summary == "" {
			summary = ev.Id()
		}
		skip := func(format string, a ...any) { skipped = append(skipped, Skipped{summary, fmt.Sprintf(format, a...)}) }
		if strings.EqualFold(propValue(&ev.ComponentBase, ics.ComponentPropertyStatus), "CANCELLED") {
			skip("cancelled")
			continue
		}
		start, allDay, err := dateProp(ev.GetProperty(ics.ComponentPropertyDtStart))
		if err != nil {
			skip("DTSTART: %v", err)
			continue
		}
		if !allDay {
			skip("a timed event, not a date (DTSTART has a time of day)")
			continue
		}
		days, err := eventDays(&ev.ComponentBase, start)
		if err != nil {
			skip("%v", err)
			continue
		}
		add := func(d Date) {
			if days == 1 {
				c.Dates = append(c.Dates, d)
				return
			}
			to := DateOf(time.Date(d.Year, d.Month, d.Day+days-1, 0, 0, 0, 0, time.UTC))
			c.Ranges = append(c.Ranges, Range{From: d, To: to})
		}
		rule := ev.GetProperty(ics.ComponentPropertyRrule)
		exdates := ev.GetProperties(ics.ComponentPropertyExdate)
		rdates := ev.GetProperties(ics.ComponentPropertyRdate)
		if rule == nil {
			add(start)
			for _, p := range rdates {
				ds, err := dateList(p)
				if err != nil {
					skip("RDATE: %v", err)
				}
				for _, d := range ds {
					add(d)
				}
			}
			continue
		}
		opt, err := rrule.StrToROption(rule.Value)
		if err != nil {
			skip("RRULE %q: %v", rule.Value, err)
			continue
		}
		if days == 1 && len(exdates) == 0 && len(rdates) == 0 && everyYearOn(opt, start) {
			c.Yearly = append(c.Yearly, Yearly{start.Month, start.Day})
			continue
		}
		opt.Dtstart = time.Date(start.Year, start.Month, start.Day, 0, 0, 0, 0, time.UTC)
		rr, err := rrule.NewRRule(*opt)
		if err != nil {
			skip("RRULE %q: %v", rule.Value, err)
			continue
		}
		set := &rrule.Set{}
		set.RRule(rr)
		for _, p := range exdates {
			ds, err := dateList(p)
			if err != nil {
				skip("EXDATE: %v", err)
			}
			for _, d := range ds {
				set.ExDate(time.Date(d.Year, d.Month, d.Day, 0, 0, 0, 0, time.UTC))
			}
		}
		for _, p := range rdates {
			ds, err := dateList(p)
			if err != nil {
				skip("RDATE: %v", err)
			}
			for _, d := range ds {
				set.RDate(time.Date(d.Year, d.Month, d.Day, 0, 0, 0, 0, time.UTC))
			}
		}
		until := time.Date(opts.Until.Year, opts.Until.Month, opts.Until.Day, 0, 0, 0, 0, time.UTC)
		for _, at := range set.Between(opt.Dtstart, until, true) {
			add(DateOf(at))
		}
	}
	sort.Slice(c.Dates, func(i, j int) bool { return c.Dates[i].Before(c.Dates[j]) })
	c.Dates = slices.Compact(c.Dates)
	sort.Slice(c.Yearly, func(i, j int) bool {
		return c.Yearly[i].Month < c.Yearly[j].Month || c.Yearly[i].Month == c.Yearly[j].Month && c.Yearly[i].Day < c.Yearly[j].Day
	})
	c.Yearly = slices.Compact(c.Yearly)
	sort.Slice(c.Ranges, func(i, j int) bool { return c.Ranges[i].From.Before(c.Ranges[j].From) })
	if n := len(c.Dates) + len(c.Yearly) + len(c.Ranges); n > MaxEntries {
		return c, skipped, fmt.Errorf("calendar %q: %d dates, yearly dates and ranges, more than %d (import up to an earlier date)", name, n, MaxEntries)
	}
	return c, skipped, nil
}

// everyYearOn reports whether opt is the rule "every year on start's month
// and day" and nothing more.
func everyYearOn(opt *rrule.ROption, start Date) bool {
	if opt.Freq != rrule.YEARLY || opt.Interval > 1 || opt.Count != 0 || !opt.Until.IsZero() ||
		len(opt.Bysetpos)+len(opt.Byyearday)+len(opt.Byweekno)+len(opt.Byweekday)+len(opt.Byeaster) > 0 {
		return false
	}
	if len(opt.Bymonth) > 1 || len(opt.Bymonth) == 1 && opt.Bymonth[0] != int(start.Month) {
		return false
	}
	if len(opt.Bymonthday) > 1 || len(opt.Bymonthday) == 1 && opt.Bymonthday[0] != start.Day {
		return false
	}
	return !(start.Month == time.February && start.Day == 29) // every fourth year only
}

// eventDays returns how many days an all-day event starting on start
// lasts: DTEND (exclusive) or DURATION, else one.
func eventDays(ev *ics.ComponentBase, start Date) (int, error) {
	first := time.Date(start.Year, start.Month, start.Day, 0, 0, 0, 0, time.UTC)
	if p := ev.GetProperty(ics.ComponentPropertyDtEnd); p != nil {
		end, allDay, err := dateProp(p)
		if err != nil || !allDay {
			return 0, fmt.Errorf("DTEND %q is not a date", p.Value)
		}
		days := int(time.Date(end.Year, end.Month, end.Day, 0, 0, 0, 0, time.UTC).Sub(first).Hours() / 24)
		if days < 1 {
			return 0, fmt.Errorf("DTEND %s is not after DTSTART %s", end, start)
		}
		return days, nil
	}
	if p := ev.GetProperty(ics.ComponentPropertyDuration); p != nil {
		var days int
		if _, err := fmt.Sscanf(strings.TrimPrefix(p.Value, "+"), "P%dD", &days); err == nil && days >= 1 {
			return days, nil
		}
		var weeks int
		if _, err := fmt.Sscanf(strings.TrimPrefix(p.Value, "+"), "P%dW", &weeks); err == nil && weeks >= 1 {
			return 7 * weeks, nil
		}
		return 0, fmt.Errorf("DURATION %q is not a whole number of days or weeks", p.Value)
	}
	return 1, nil
}

// dateProp reads a DTSTART/DTEND-like property: its date, and whether it
// is a date alone (VALUE=DATE, or eight digits).
func dateProp(p *ics.IANAProperty) (Date, bool, error) {
	if p == nil {
		return Date{}, false, fmt.Errorf("missing")
	}
	ds, err := dateList(p)
	if err != nil {
		return Date{}, false, err
	}
	if len(ds) != 1 {
		return Date{}, false, fmt.Errorf("%q is not one date", p.Value)
	}
	allDay := len(strings.TrimSpace(p.Value)) == 8
	if v := p.ICalParameters[string(ics.ParameterValue)]; len(v) == 1 {
		allDay = strings.EqualFold(v[0], "DATE")
	}
	return ds[0], allDay, nil
}

// dateList reads the comma-separated dates (or the dates of the date-times)
// of a property's value, each as written: a date-time's date in its own
// zone, not converted.
func dateList(p *ics.IANAProperty) ([]Date, error) {
	var out []Date
	for _, v := range strings.Split(p.Value, ",") {
		v = strings.TrimSpace(v)
		if len(v) < 8 {
			return out, fmt.Errorf("%q is not a date", v)
		}
		t, err := time.Parse("20060102", v[:8])
		if err != nil {
			return out, fmt.Errorf("%q is not a date", v)
		}
		out = append(out, DateOf(t))
	}
	return out, nil
}

// propValue returns the value of the first property of kind p, "" when
// there is none.
func propValue(ev *ics.ComponentBase, p ics.ComponentProperty) string {
	if prop := ev.GetProperty(p); prop != nil {
		return prop.Value
	}
	return ""
}
