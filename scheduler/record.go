package scheduler

import (
	"time"
	"unique"

	"github.com/robfig/cron/v3"

	"github.com/cronswap/cronswap/internal/lifetime"
	"github.com/cronswap/cronswap/schedule"
)

// The engine keeps every job it knows, a million on one replica, so its
// state of one job is kept compact: a record holds a job's schedule in an
// internal form that converts back to the schedule.Schedule it was made
// from, field for field (== holds), and the fields most jobs leave zero
// sit behind one pointer that is nil when they are.

// timing is what parsing a job's expression depends on besides its id —
// expression, zone, daylight-saving mode — and the parsed schedule. The
// jobs of one Sync with the same expression share one (the Sync's parse
// cache), so a record pays a pointer for them. Immutable once made.
type timing struct {
	expr, tz string
	dst      schedule.DSTMode
	// sched is the parsed expression, bounded by the job's lifetime when it
	// has one (then the timing is the job's own); nil in the record of a
	// bad schedule.
	sched cron.Schedule
}

// record is the engine's state of one job; its id is the key of the
// engine's job map. Records are never modified once stored, but for gen: a
// change stores a new one. Invariant: fire != nil exactly when valid && enabled
// && ended() == "" && the engine arms the job (Options.Arms, as last
// asked).
type record struct {
	// t, the fields below up to x, and x hold the last valid schedule, or
	// the latest bad one while no valid schedule was ever applied (see
	// schedule); t is nil when its fields are all empty.
	t        *timing
	job, cat name // the action and the category: few distinct values
	args     string
	// upd is UpdatedAt as Unix nanoseconds when updKind is timeUTC or
	// timeLocal.
	upd int64
	// x holds the fields most jobs leave zero; nil when all are.
	x *extra
	// fire is the robfig job of the job's armed entry; nil when not armed.
	fire *firing
	// slots is shared by all entries the job ever had; nil until the job
	// is first armed.
	slots *slotState
	// gen is the Sync (Engine.syncs) that last listed the job; 0 when
	// none did. A Sync removes the jobs it did not mark. The one field
	// written in a stored record: by Sync, on its goroutine, with the
	// job's shard lock held, when it lists the job as it is (relist); read
	// by Sync, and copied into a new record only under that lock, so no
	// one sees it change.
	gen     uint32
	enabled bool
	valid   bool // the schedule is a valid one, parsed into t.sched
	updKind uint8
}

// How a record holds its schedule's UpdatedAt.
const (
	timeZero  uint8 = iota // time.Time{}
	timeUTC                // time.Unix(0, upd).UTC()
	timeLocal              // time.Unix(0, upd)
	timeFull               // extra.updatedAt
)

// extra is the part of a record most jobs leave zero: the schedule's
// rarer fields and the engine's state of the job beyond its timer.
type extra struct {
	life      lifetime.Lifetime
	exclude   string
	updatedAt time.Time // when record.updKind is timeFull
	jobState
}

// jobState is the engine's state of a job beyond its schedule and timer.
type jobState struct {
	// jitter is the jitter bound the schedule was armed with (part of its
	// timing); zero without jitter.
	jitter time.Duration
	// err is the last error, empty when the latest document was applied.
	err string
	// ended is why the job was disarmed by End (its run count reached
	// max_runs); empty while it is not. A changed timing arms it again.
	ended string
	// pending is the latest schedule of the job that was decoded but
	// refused (by the parse or the policy), while no later document
	// replaced it: Recheck applies it again when what the policy checks
	// may have changed (a calendar it names appeared).
	pending *schedule.Schedule
}

// newTiming returns the timing of s parsed as sched; nil when it would
// hold nothing.
func newTiming(s schedule.Schedule, sched cron.Schedule) *timing {
	if s.CronExpr == "" && s.Timezone == "" && s.DST == "" && sched == nil {
		return nil
	}
	return &timing{expr: s.CronExpr, tz: s.Timezone, dst: s.DST, sched: sched}
}

// pack returns the record holding s (but its id) with timing t, which
// must hold s's expression, zone and daylight-saving mode, and state st.
// prev, when not nil, is the job's record so far: its names are reused
// where they are s's (most edits keep the action and category).
func pack(s schedule.Schedule, t *timing, st jobState, prev *record) record {
	r := record{t: t, args: s.Args, enabled: s.Enabled}
	if prev != nil {
		r.job, r.cat = prev.job.or(s.Job), prev.cat.or(s.Category)
	} else {
		r.job, r.cat = internName(s.Job), internName(s.Category)
	}
	r.upd, r.updKind = packTime(s.UpdatedAt)
	life := lifetimeOf(s)
	if st == (jobState{}) && life.IsZero() && s.Exclude == "" && r.updKind != timeFull {
		return r // the common case: no side fields
	}
	x := extra{life: life, exclude: s.Exclude, jobState: st}
	if r.updKind == timeFull {
		x.updatedAt = s.UpdatedAt
	}
	if prev != nil && prev.x != nil && *prev.x == x {
		r.x = prev.x // immutable: a resync that finds them unchanged allocates none
		return r
	}
	r.x = new(extra)
	*r.x = x
	return r
}

// setExtra stores x in r, or nil when it is zero.
func (r *record) setExtra(x extra) {
	if x == (extra{}) {
		r.x = nil
		return
	}
	p := new(extra)
	*p = x
	r.x = p
}

// extra returns r's rarely set fields.
func (r *record) extra() extra {
	if r.x == nil {
		return extra{}
	}
	return *r.x
}

// state returns the engine's state of the job beyond its timer.
func (r *record) state() jobState {
	if r.x == nil {
		return jobState{}
	}
	return r.x.jobState
}

// withState returns r with its state replaced by st.
func (r record) withState(st jobState) record {
	x := r.extra()
	x.jobState = st
	r.setExtra(x)
	return r
}

// schedule returns the schedule r holds, as it was given to pack, with id
// as its ID.
func (r *record) schedule(id string) schedule.Schedule {
	s := schedule.Schedule{ID: id, Enabled: r.enabled, Job: r.job.String(), Category: r.cat.String(), Args: r.args}
	if t := r.t; t != nil {
		s.CronExpr, s.Timezone, s.DST = t.expr, t.tz, t.dst
	}
	switch r.updKind {
	case timeUTC:
		s.UpdatedAt = time.Unix(0, r.upd).UTC()
	case timeLocal:
		s.UpdatedAt = time.Unix(0, r.upd)
	}
	if x := r.x; x != nil {
		s.StartAt, s.EndAt, s.MaxRuns, s.PausedUntil = x.life.StartAt, x.life.EndAt, x.life.MaxRuns, x.life.PausedUntil
		s.Exclude = x.exclude
		if r.updKind == timeFull {
			s.UpdatedAt = x.updatedAt
		}
	}
	return s
}

// sameTiming reports whether r's schedule has the timing of s
// (schedule.Schedule.Timing), without making r's schedule.
func (r *record) sameTiming(s schedule.Schedule) bool {
	var t timing
	if r.t != nil {
		t = *r.t
	}
	return t.expr == s.CronExpr && t.tz == s.Timezone && t.dst == s.DST && r.enabled == s.Enabled &&
		r.life() == lifetimeOf(s)
}

// sameExceptTiming reports whether r's schedule agrees with s on every
// field but the timing and UpdatedAt (schedule.Schedule.SameExceptTiming)
// but the ID, the job map's key; without making r's schedule.
func (r *record) sameExceptTiming(s schedule.Schedule) bool {
	var exclude string
	if r.x != nil {
		exclude = r.x.exclude
	}
	return r.job.String() == s.Job && r.cat.String() == s.Category && r.args == s.Args && exclude == s.Exclude
}

// sched is r's parsed schedule; nil unless r is valid.
func (r *record) sched() cron.Schedule {
	if r.t == nil {
		return nil
	}
	return r.t.sched
}

// life is the lifetime r's schedule bounds.
func (r *record) life() lifetime.Lifetime {
	if r.x == nil {
		return lifetime.Lifetime{}
	}
	return r.x.life
}

// delay is the dispatch delay of job id under r's jitter bound.
func (r *record) delay(id string) time.Duration {
	return JitterDelay(id, r.state().jitter)
}

// packTime returns t as Unix nanoseconds and the way it is restored
// (timeZero, timeUTC, timeLocal), or timeFull when no way gives back t
// exactly (==: a monotonic reading, another location, or out of range of
// Unix nanoseconds).
func packTime(t time.Time) (int64, uint8) {
	if t == (time.Time{}) {
		return 0, timeZero
	}
	ns := t.UnixNano()
	if time.Unix(0, ns).UTC() == t {
		return ns, timeUTC
	}
	if time.Unix(0, ns) == t {
		return ns, timeLocal
	}
	return 0, timeFull
}

// packPlanned returns activation t as firing.planned keeps it: Unix
// nanoseconds, read back in loc, the location robfig asks in (the
// engine's); 0 when that would not give back t exactly (another location,
// a monotonic reading, out of range of Unix nanoseconds, or the Unix epoch
// itself): such an activation is not known in advance, and Run searches
// for its slot.
func packPlanned(t time.Time, loc *time.Location) int64 {
	ns := t.UnixNano()
	if ns == 0 || time.Unix(0, ns).In(loc) != t {
		return 0
	}
	return ns
}

// unpackPlanned returns the activation packPlanned kept as ns; zero for 0.
func unpackPlanned(ns int64, loc *time.Location) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns).In(loc)
}

// name is an interned string (unique.Make), in 8 bytes where a string
// takes 16: for the fields a fleet repeats (action, category), whose
// bytes the schedules' decoder interns already. The zero name is "".
type name struct{ h unique.Handle[string] }

// internName returns the name of s.
func internName(s string) name {
	if s == "" {
		return name{}
	}
	return name{unique.Make(s)}
}

// or returns n when it names s, else the name of s: no lookup when a
// name is kept.
func (n name) or(s string) name {
	if n.String() == s {
		return n
	}
	return internName(s)
}

// String returns the string n names.
func (n name) String() string {
	if n == (name{}) {
		return ""
	}
	return n.h.Value()
}
