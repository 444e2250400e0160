// Package lifetime is when a schedule's slots may run at all: the lifetime
// fields of a schedules document (start_at, end_at, max_runs,
// paused_until), why a slot outside them does not run, and the slots of an
// expression bounded by them (Bound), which the engine arms. The schedule
// package decodes the fields (schedule.Schedule.Lifetime); the claim
// counts max_runs (package record); docs/time.md#lifetimes has the rules.
package lifetime

import (
	"time"

	"github.com/robfig/cron/v3"
)

// Fields of a schedules document that bound a job's lifetime.
const (
	// FieldStartAt is a date: no slot before it runs.
	FieldStartAt = "start_at"
	// FieldEndAt is a date: no slot at or after it runs; once it has
	// passed, the job is ended.
	FieldEndAt = "end_at"
	// FieldMaxRuns is a positive integer: the job ends once that many of
	// its cron slots have started, counted once across replicas by the
	// claim (docs/locks.md#the-run-count).
	FieldMaxRuns = "max_runs"
	// FieldPausedUntil is a date: no slot before it runs; the job resumes
	// by itself at it.
	FieldPausedUntil = "paused_until"
)

// MaxRuns is the largest max_runs a schedule may have.
const MaxRuns = 1 << 40

// Reasons a slot of a job does not run, as explain, the timeline and the
// status show them; PausedReason is the fourth.
const (
	ReasonBeforeStart = "before start_at"
	ReasonAfterEnd    = "after end_at"
	// ReasonMaxRuns is also the reason on the one skipped record of the
	// slot whose claim found the job's count at max_runs.
	ReasonMaxRuns = "max_runs reached"
)

// PausedReason is why a slot before paused_until does not run: "paused
// until <until, RFC 3339 UTC>".
func PausedReason(until time.Time) string {
	return "paused until " + until.UTC().Format(time.RFC3339)
}

// Lifetime is the lifetime of one schedule. A zero field sets no bound.
type Lifetime struct {
	StartAt, EndAt time.Time
	// MaxRuns is the most cron slots of the job that start; 0: no limit.
	MaxRuns int
	// PausedUntil holds back every slot before it.
	PausedUntil time.Time
}

// IsZero reports whether l bounds nothing.
func (l Lifetime) IsZero() bool { return l == Lifetime{} }

// Why says why slot does not run under l: ReasonBeforeStart,
// ReasonAfterEnd or PausedReason; "" when it may run (the count of
// max_runs is the claim's to decide).
func (l Lifetime) Why(slot time.Time) string {
	switch {
	case !l.StartAt.IsZero() && slot.Before(l.StartAt):
		return ReasonBeforeStart
	case !l.EndAt.IsZero() && !slot.Before(l.EndAt):
		return ReasonAfterEnd
	case !l.PausedUntil.IsZero() && slot.Before(l.PausedUntil):
		return PausedReason(l.PausedUntil)
	}
	return ""
}

// Over reports whether no slot at or after now is in l: end_at is not
// after now.
func (l Lifetime) Over(now time.Time) bool { return !l.EndAt.IsZero() && !now.Before(l.EndAt) }

// from is the first instant a slot may have; zero when none bounds it.
func (l Lifetime) from() time.Time {
	if l.PausedUntil.After(l.StartAt) {
		return l.PausedUntil
	}
	return l.StartAt
}

// Bound returns the slots of sched that l lets run: those at or after
// start_at and paused_until and before end_at. Its Next answers the zero
// time once end_at is reached, which the engine (robfig) reads as "no more
// activations". A schedule whose own Prev is exact keeps one. With no
// bound (IsZero, or only max_runs) it returns sched itself, so a plain
// schedule costs nothing more.
func (l Lifetime) Bound(sched cron.Schedule) cron.Schedule {
	b := bounded{inner: sched, from: l.from(), end: l.EndAt}
	if b.from.IsZero() && b.end.IsZero() {
		return sched
	}
	if _, ok := sched.(prever); ok {
		return boundedPrev{b}
	}
	return b
}

// prever is a schedule that names its previous activation directly.
type prever interface {
	Prev(t time.Time) time.Time
}

// bounded is the activations of inner in [from, end).
type bounded struct {
	inner     cron.Schedule
	from, end time.Time
}

// Next returns the first activation of inner after t that is at or after
// from and before end, in t's location; zero when there is none.
func (b bounded) Next(t time.Time) time.Time {
	if !b.from.IsZero() && t.Before(b.from) {
		// Next is strictly after its argument: one nanosecond before
		// from lets an activation at from itself count.
		t = b.from.Add(-time.Nanosecond).In(t.Location())
	}
	n := b.inner.Next(t)
	if n.IsZero() || (!b.end.IsZero() && !n.Before(b.end)) {
		return time.Time{}
	}
	return n
}

// Unwrap returns the schedule b bounds (what schedule.Upcoming annotates
// with daylight saving's notes).
func (b bounded) Unwrap() cron.Schedule { return b.inner }

// boundedPrev is bounded over a schedule with an exact Prev.
type boundedPrev struct{ bounded }

// Prev returns the last activation at or before t within the bounds; zero
// when there is none.
func (b boundedPrev) Prev(t time.Time) time.Time {
	if !b.end.IsZero() && !t.Before(b.end) {
		t = b.end.Add(-time.Nanosecond).In(t.Location())
	}
	p := b.inner.(prever).Prev(t)
	if p.IsZero() || (!b.from.IsZero() && p.Before(b.from)) {
		return time.Time{}
	}
	return p
}
