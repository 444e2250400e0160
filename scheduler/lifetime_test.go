package scheduler

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cronswap/cronswap/internal/lifetime"
	"github.com/cronswap/cronswap/schedule"
)

// transitions returns the instants in [from, to) at which loc changes its
// UTC offset.
func transitions(loc *time.Location, from, to time.Time) []time.Time {
	var out []time.Time
	for t := from; t.Before(to); {
		_, end := t.In(loc).ZoneBounds()
		if end.IsZero() || !end.Before(to) {
			break
		}
		out = append(out, end)
		t = end
	}
	return out
}

// A job's lifetime bounds the slots the engine fires, by instant, across
// the daylight-saving transitions of three zones, for plain, hashed and
// day-rule expressions: the job fires exactly the slots of the same
// schedule without a lifetime that are at or after start_at and
// paused_until and before end_at, and once end_at has passed it is shown
// ended ("after end_at") with no next run. A slot that daylight saving
// shifts keeps its shifted instant.
func TestLifetimeBoundsTheSlotsAcrossDST(t *testing.T) {
	exprs := []string{"30 2 * * *", "*/45 * * * *", "H H(0-3) * * *", "0 2 LW * *", "15 1 * * 0L"}
	for _, zone := range []string{"America/New_York", "Europe/Berlin", "Australia/Sydney"} {
		loc := mustZone(t, zone)
		ts := transitions(loc, time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2028, 1, 1, 0, 0, 0, 0, time.UTC))
		if len(ts) != 2 {
			t.Fatalf("%s: %d transitions in 2027, want 2", zone, len(ts))
		}
		for _, tr := range ts {
			for _, expr := range exprs {
				at, day := tr, 24*time.Hour
				if expr == "0 2 LW * *" || expr == "15 1 * * 0L" {
					// A day rule fires once a month: the window is around
					// the end of the transition's month, in months.
					y, m, _ := tr.In(loc).Date()
					at, day = time.Date(y, m+1, 1, 0, 0, 0, 0, loc).Add(-36*time.Hour), 30*24*time.Hour/7
				}
				plain := schedule.Schedule{ID: "job-" + zone, CronExpr: expr, Timezone: zone, Enabled: true}
				bounded := plain
				bounded.StartAt = at.Add(-7*day - 17*time.Second)
				bounded.PausedUntil = at.Add(-3*day - time.Hour)
				bounded.EndAt = at.Add(2*day + 30*time.Minute)
				from, to := at.Add(-10*day), at.Add(10*day)

				want := firedSlots(t, plain, from, to)
				var inLife []time.Time
				life := lifetime.Lifetime{StartAt: bounded.StartAt, EndAt: bounded.EndAt, PausedUntil: bounded.PausedUntil}
				for _, s := range want {
					if life.Why(s) == "" {
						inLife = append(inLife, s)
					}
				}
				if len(inLife) == 0 || len(inLife) == len(want) {
					t.Fatalf("%s %q around %v: %d of %d slots in the lifetime; the test wants some in and some out", zone, expr, at, len(inLife), len(want))
				}
				ce := newClockedEngine(t, from, []schedule.Schedule{bounded})
				if st := mustGet(t, ce.Engine, bounded.ID); len(inLife) > 0 && !st.NextRun.Equal(inLife[0]) {
					t.Errorf("%s %q around %v: next run %v before the lifetime began, want %v", zone, expr, at, st.NextRun, inLife[0])
				}
				ce.runUntil(t, bounded.ID, to)
				if got := ce.fired[bounded.ID]; !slices.EqualFunc(got, inLife, time.Time.Equal) {
					t.Errorf("%s %q around %v:\n got %s\nwant %s", zone, expr, at, showSlots(got, zone), showSlots(inLife, zone))
				}
				ce.clock.set(to)
				st := mustGet(t, ce.Engine, bounded.ID)
				if st.Ended != lifetime.ReasonAfterEnd || st.Armed || !st.NextRun.IsZero() {
					t.Errorf("%s %q: after end_at: ended %q, armed %v, next run %v; want ended %q, not armed, no next run",
						zone, expr, st.Ended, st.Armed, st.NextRun, lifetime.ReasonAfterEnd)
				}
			}
		}
	}
}

// firedSlots are the slots an engine fires for s from from to to.
func firedSlots(t *testing.T, s schedule.Schedule, from, to time.Time) []time.Time {
	t.Helper()
	ce := newClockedEngine(t, from, []schedule.Schedule{s})
	ce.runUntil(t, s.ID, to)
	return ce.fired[s.ID]
}

// The latest slot at or before an instant (what catch-up and the missed
// ledger look at) and the slot sequence of an armed job are the bounded
// ones: none before start_at or during a pause, none at or after end_at.
func TestLifetimeBoundsLastSlotAndNextFunc(t *testing.T) {
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, expr := range []string{"* * * * * *", "@every 1s", "CRON_TZ=Europe/Berlin * * * * * *"} {
		s := sch("life", expr)
		s.StartAt, s.EndAt = base.Add(10*time.Second), base.Add(20*time.Second)
		e := New(Options{Logger: quiet(), Now: func() time.Time { return base }})
		expect(t, e.Reload(s), Added)
		if got := mustGet(t, e, "life").NextRun; !got.Equal(s.StartAt) {
			t.Errorf("%q: next run %v, want start_at %v", expr, got, s.StartAt)
		}
		if got, ok := e.LastSlot("life", base.Add(5*time.Second)); ok {
			t.Errorf("%q: last slot before start_at: %v, want none", expr, got)
		}
		if got, _ := e.LastSlot("life", base.Add(time.Hour)); !got.Equal(s.EndAt.Add(-time.Second)) {
			t.Errorf("%q: last slot after end_at %v, want %v", expr, got, s.EndAt.Add(-time.Second))
		}
		next, ok := e.NextFunc("life")
		if !ok {
			t.Fatalf("%q: no slot sequence", expr)
		}
		n := 0
		for at := next(base); !at.IsZero(); at = next(at) {
			n++
		}
		if n != 10 {
			t.Errorf("%q: %d slots in [start_at, end_at), want 10", expr, n)
		}
	}
}

// End disarms a job whose run count reached max_runs until its timing
// changes: applying the same schedule again leaves it ended, an End made
// under an older timing is ignored, and raising max_runs arms it again.
func TestEndDisarmsUntilTheTimingChanges(t *testing.T) {
	e := newEngine(t, Options{})
	s := sch("capped", "* * * * * *")
	s.MaxRuns = 3
	expect(t, e.Reload(s), Added)
	older := s
	older.MaxRuns = 2
	if e.End("capped", older, lifetime.ReasonMaxRuns) {
		t.Fatal("End under another timing disarmed the job")
	}
	if !e.End("capped", s, lifetime.ReasonMaxRuns) {
		t.Fatal("End did not disarm the job")
	}
	st := mustGet(t, e, "capped")
	if st.Armed || st.Ended != lifetime.ReasonMaxRuns || !st.NextRun.IsZero() || e.Len() != 0 {
		t.Fatalf("after End: armed %v, ended %q, next run %v, armed jobs %d", st.Armed, st.Ended, st.NextRun, e.Len())
	}
	s.Category = "other" // not timing
	expect(t, e.Reload(s), Unchanged)
	if st := mustGet(t, e, "capped"); st.Armed || st.Ended == "" {
		t.Fatalf("an edit of another field armed the ended job again: %+v", st)
	}
	s.MaxRuns = 5
	expect(t, e.Reload(s), Added)
	if st := mustGet(t, e, "capped"); !st.Armed || st.Ended != "" || st.NextRun.IsZero() {
		t.Fatalf("max_runs raised: armed %v, ended %q, next run %v; want armed again", st.Armed, st.Ended, st.NextRun)
	}
}

// namesPolicy refuses a schedule that excludes a calendar it does not
// know, as the daemon's does.
type namesPolicy struct {
	mu    sync.Mutex
	known map[string]bool
}

func (p *namesPolicy) Check(s schedule.Schedule) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, n := range s.Excludes() {
		if !p.known[n] {
			return errors.New("calendar " + n + ": no such calendar")
		}
	}
	return nil
}

func (p *namesPolicy) Jitter(schedule.Schedule) time.Duration { return 0 }

func (p *namesPolicy) learn(name string) {
	p.mu.Lock()
	p.known[name] = true
	p.mu.Unlock()
}

func excludes(name string) func(schedule.Schedule) bool {
	return func(s schedule.Schedule) bool { return slices.Contains(s.Excludes(), name) }
}

// Recheck applies again the latest schedule of the jobs it is asked about
// once the policy's answer changed: a job refused for a calendar nobody
// knew is armed when the calendar appears; an edit refused so keeps the
// last known good armed, with the error, until then; a later document
// that could not be decoded is not overridden by the older refused one.
func TestRecheckAppliesTheLatestScheduleAgain(t *testing.T) {
	p := &namesPolicy{known: map[string]bool{"old": true}}
	e := newEngine(t, Options{Policy: p})

	fresh := sch("fresh", "* * * * * *")
	fresh.Exclude = `["new"]`
	expect(t, e.Reload(fresh), Rejected)
	if st := mustGet(t, e, "fresh"); st.Armed || st.LastError == "" {
		t.Fatalf("a job excluding an unknown calendar: %+v, want refused, not armed", st)
	}

	kept := sch("kept", "* * * * * *")
	kept.Exclude = `["old"]`
	expect(t, e.Reload(kept), Added)
	edit := kept
	edit.Exclude = `["new"]`
	expect(t, e.Reload(edit), Rejected)
	if st := mustGet(t, e, "kept"); !st.Armed || st.Exclude != `["old"]` || st.LastError == "" {
		t.Fatalf("an edit excluding an unknown calendar: %+v, want the last known good armed with the error", st)
	}

	gone := sch("gone", "* * * * * *")
	gone.Exclude = `["new"]`
	expect(t, e.Reload(gone), Rejected)
	e.Reject("gone", errors.New("a later document that could not be decoded"))

	if n := e.Recheck(excludes("new")); n != 2 {
		t.Fatalf("Recheck before the calendar exists applied %d jobs again, want 2 (fresh, kept)", n)
	}
	if st := mustGet(t, e, "kept"); st.Exclude != `["old"]` || st.LastError == "" {
		t.Fatalf("Recheck armed a refused edit the policy still refuses: %+v", st)
	}
	p.learn("new")
	e.Recheck(excludes("new"))
	if st := mustGet(t, e, "fresh"); !st.Armed || st.LastError != "" {
		t.Fatalf("the calendar appeared: %+v, want the job armed without error", st)
	}
	if st := mustGet(t, e, "kept"); !st.Armed || st.Exclude != `["new"]` || st.LastError != "" {
		t.Fatalf("the calendar appeared: %+v, want the refused edit armed", st)
	}
	if st := mustGet(t, e, "gone"); st.Armed {
		t.Fatalf("Recheck armed an older schedule over a later undecodable document: %+v", st)
	}
}
