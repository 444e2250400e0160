package daemon

import (
	"fmt"
	"iter"
	"log/slog"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/internal/calendar"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/schedule"
	"github.com/cronswap/cronswap/scheduler"
)

// calendarWatch keeps the daemon's calendars equal to the calendars
// collection (through its sideWatch), answers the fire path's question
// whether a slot falls on a date of a calendar its schedule excludes, and
// checks, as part of the engine's policy, that every calendar a schedule
// excludes is there and valid. A calendar that changes makes the engine check again the
// schedules that exclude it (scheduler.Engine.Recheck).
type calendarWatch struct {
	set *calendar.Set
	loc *time.Location
	// recheck is the engine's Recheck, set once the engine is built
	// (before the watcher starts).
	recheck func(match func(schedule.Schedule) bool) int
	*sideWatch
}

// newCalendarWatch returns the watch over db's calendars collection; it
// reads nothing until start.
func newCalendarWatch(db *mongo.Database, opts Options, log *slog.Logger) *calendarWatch {
	c := &calendarWatch{set: calendar.NewSet(log), loc: opts.Location}
	c.sideWatch = newSideWatch(db, calendar.CollectionName, calendarSink{c}, opts, log)
	return c
}

// policy is the engine's policy: next's, then every calendar s excludes
// must be in force without a problem. A schedule refused so keeps its last
// known good armed, exclusions included (a deleted calendar's last dates
// stay in force), with the error shown.
func (c *calendarWatch) policy(next scheduler.Policy) scheduler.Policy {
	return calendarPolicy{Policy: next, c: c}
}

// calendarPolicy is calendarWatch.policy.
type calendarPolicy struct {
	scheduler.Policy
	c *calendarWatch
}

// Check implements scheduler.Policy.
func (p calendarPolicy) Check(s schedule.Schedule) error {
	if err := p.Policy.Check(s); err != nil {
		return err
	}
	for _, name := range s.Excludes() {
		if _, _, problem := p.c.set.Lookup(name); problem != "" {
			return &schedule.Error{ID: s.ID, Field: schedule.FieldExclude, Reason: fmt.Sprintf("calendar %q: %s", name, problem)}
		}
	}
	return nil
}

// match is the fire path's RunnerOptions.Calendars: the first calendar s
// excludes whose dates hold slot, read in the calendar's zone, else the
// job's. A calendar never seen (which the policy refuses) excludes every
// slot: a holiday is never run because a calendar is missing.
func (c *calendarWatch) match(s schedule.Schedule, slot time.Time) (record.Exclusion, bool) {
	names := s.Excludes()
	if len(names) == 0 {
		return record.Exclusion{}, false
	}
	zone := c.loc
	if name := s.Zone(); name != "" {
		if l, err := time.LoadLocation(name); err == nil {
			zone = l
		}
	}
	if zone == nil {
		zone = time.UTC
	}
	for _, name := range names {
		cal, found, problem := c.set.Lookup(name)
		if !found {
			return record.CalendarExclusion(name, problem), true
		}
		if d, ok := cal.Holds(slot, zone); ok {
			return record.CalendarExclusion(name, cal.Why(d)), true
		}
	}
	return record.Exclusion{}, false
}

// changed makes the engine check again the schedules that exclude one of
// names.
func (c *calendarWatch) changed(names ...string) {
	if len(names) == 0 || c.recheck == nil {
		return
	}
	c.recheck(func(s schedule.Schedule) bool {
		return slices.ContainsFunc(s.Excludes(), func(n string) bool { return slices.Contains(names, n) })
	})
}

// calendarSink applies the collection's changes to the set, then has the
// schedules that exclude a changed calendar checked again.
type calendarSink struct{ c *calendarWatch }

// Upsert implements changestream.Sink.
func (k calendarSink) Upsert(doc bson.Raw) {
	k.c.set.Upsert(doc)
	name, _ := calendar.DecodeName(doc.Lookup("_id"))
	k.c.changed(name)
}

// Delete implements changestream.Sink.
func (k calendarSink) Delete(id bson.RawValue) {
	k.c.set.Delete(id)
	name, _ := calendar.DecodeName(id)
	k.c.changed(name)
}

// ReplaceAll implements changestream.Sink.
func (k calendarSink) ReplaceAll(docs iter.Seq2[bson.Raw, error]) ([]string, error) {
	changed, err := k.c.set.ReplaceAll(docs)
	k.c.changed(changed...)
	return changed, err
}
