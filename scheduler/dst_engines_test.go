package scheduler

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cronswap/cronswap/schedule"
)

// testClock is an engine clock the test moves.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *testClock) set(t time.Time) { c.mu.Lock(); c.now = t; c.mu.Unlock() }

// clockedEngine is an engine, not started, whose fires the test runs on
// its own clock, and the slots they reported.
type clockedEngine struct {
	*Engine
	clock *testClock
	mu    sync.Mutex
	fired map[string][]time.Time
}

func newClockedEngine(t *testing.T, start time.Time, scheds []schedule.Schedule) *clockedEngine {
	t.Helper()
	ce := &clockedEngine{clock: &testClock{now: start}, fired: map[string][]time.Time{}}
	ce.Engine = New(Options{Shards: 4, Logger: quiet(), Now: ce.clock.Now, Fire: func(d schedule.Due) {
		ce.mu.Lock()
		defer ce.mu.Unlock()
		ce.fired[d.Schedule.ID] = append(ce.fired[d.Schedule.ID], d.Slot)
	}})
	for _, s := range scheds {
		expect(t, ce.Reload(s), Added)
	}
	return ce
}

// runUntil fires job id as the engine would, from the clock's current time
// to end: the clock moves to the job's next run, the job's timer goes off,
// and so on.
func (ce *clockedEngine) runUntil(t *testing.T, id string, end time.Time) {
	t.Helper()
	for range 1000 {
		next := mustGet(t, ce.Engine, id).NextRun
		if next.IsZero() || next.After(end) {
			return
		}
		ce.clock.set(next)
		ce.load(id).fire.Run()
	}
	t.Fatalf("%s: more than 1000 fires before %v", id, end)
}

// Two engines, one started hours before a transition and one started just
// before the clocks jump forward or inside the hour they repeat, agree on
// every slot: the slots they fire (each from its own start), the latest
// slot at or before a probe instant (LastSlot, what catch-up looks at) and
// the next run they report with their clock at that instant. The schedules
// are the ones daylight saving touches, in America/New_York and
// Europe/Berlin, across both of their 2027 transitions.
func TestDSTEnginesStartedAtDifferentTimesAgree(t *testing.T) {
	exprs := []string{"30 2 * * *", "0 1 * * *", "30 1 * * *", "*/15 * * * *", "0 */2 * * *"}
	zones := []string{"America/New_York", "Europe/Berlin"}
	var scheds []schedule.Schedule
	for _, z := range zones {
		for _, x := range exprs {
			s := sch(z+" "+x, x)
			s.Timezone = z
			scheds = append(scheds, s)
		}
	}
	at := func(s string) time.Time {
		t.Helper()
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	type pin struct {
		id           string
		early, later []string // the slots each engine fires in the window
	}
	for _, w := range []struct {
		name, zone string
		change     string // the first instant after the transition
		// later is when the second engine starts, relative to change.
		later time.Duration
		// pins are the slots some jobs fire in the window, written out.
		pins []pin
	}{
		{"New York spring forward", "America/New_York", "2027-03-14T03:00:00-04:00", -time.Second, []pin{
			{"America/New_York 30 2 * * *", []string{"2027-03-14T03:00:00-04:00"}, []string{"2027-03-14T03:00:00-04:00"}},
			{"America/New_York 30 1 * * *", []string{"2027-03-14T01:30:00-05:00"}, nil},
			{"America/New_York 0 */2 * * *", []string{"2027-03-14T00:00:00-05:00", "2027-03-14T03:00:00-04:00", "2027-03-14T04:00:00-04:00", "2027-03-14T06:00:00-04:00"},
				[]string{"2027-03-14T03:00:00-04:00", "2027-03-14T04:00:00-04:00", "2027-03-14T06:00:00-04:00"}},
		}},
		{"New York fall back", "America/New_York", "2027-11-07T01:00:00-05:00", 20 * time.Minute, []pin{
			// The later engine starts at 01:20 EST, ten minutes before
			// 01:30 comes round again: it must not run it.
			{"America/New_York 30 1 * * *", []string{"2027-11-07T01:30:00-04:00"}, nil},
			{"America/New_York 0 1 * * *", []string{"2027-11-07T01:00:00-04:00"}, nil},
			{"America/New_York 30 2 * * *", []string{"2027-11-07T02:30:00-05:00"}, []string{"2027-11-07T02:30:00-05:00"}},
		}},
		{"Berlin spring forward", "Europe/Berlin", "2027-03-28T03:00:00+02:00", -time.Second, []pin{
			{"Europe/Berlin 30 2 * * *", []string{"2027-03-28T03:00:00+02:00"}, []string{"2027-03-28T03:00:00+02:00"}},
		}},
		{"Berlin fall back", "Europe/Berlin", "2027-10-31T02:00:00+01:00", 20 * time.Minute, []pin{
			{"Europe/Berlin 30 2 * * *", []string{"2027-10-31T02:30:00+02:00"}, nil},
			// The early engine starts at 00:00 CEST itself, so its
			// first slot is the next one.
			{"Europe/Berlin 0 */2 * * *", []string{"2027-10-31T02:00:00+02:00", "2027-10-31T02:00:00+01:00", "2027-10-31T04:00:00+01:00", "2027-10-31T06:00:00+01:00"},
				[]string{"2027-10-31T04:00:00+01:00", "2027-10-31T06:00:00+01:00"}},
		}},
	} {
		t.Run(w.name, func(t *testing.T) {
			change := at(w.change)
			startEarly, startLater := change.Add(-3*time.Hour), change.Add(w.later)
			end := change.Add(4 * time.Hour)
			early := newClockedEngine(t, startEarly, scheds)
			later := newClockedEngine(t, startLater, scheds)

			for _, s := range scheds {
				early.clock.set(startEarly)
				later.clock.set(startLater)
				early.runUntil(t, s.ID, end)
				later.runUntil(t, s.ID, end)
				e, l := early.fired[s.ID], later.fired[s.ID]
				// The later engine fires exactly what the early one
				// fires from its start on.
				i, _ := slices.BinarySearchFunc(e, startLater, func(a, b time.Time) int { return a.Compare(b) })
				if j := i; j < len(e) && e[j].Equal(startLater) {
					i++ // NextRun is after now: a slot at the start itself is not fired
				}
				if !slices.EqualFunc(e[i:], l, time.Time.Equal) {
					t.Errorf("%s: started at %v fires %s\nstarted at %v fires %s", s.ID, startEarly, showSlots(e[i:], w.zone), startLater, showSlots(l, w.zone))
				}
			}
			for _, p := range w.pins {
				for _, c := range []struct {
					name string
					got  []time.Time
					want []string
				}{{"early", early.fired[p.id], p.early}, {"later", later.fired[p.id], p.later}} {
					var want []time.Time
					for _, s := range c.want {
						want = append(want, at(s))
					}
					if !slices.EqualFunc(c.got, want, time.Time.Equal) {
						t.Errorf("%s, %s engine: fired %s, want %s", p.id, c.name, showSlots(c.got, w.zone), showSlots(want, w.zone))
					}
				}
			}

			// Probe instants: every 5 minutes of the window and the
			// seconds around the transition and the later start.
			var probes []time.Time
			for p := startLater; !p.After(end); p = p.Add(5 * time.Minute) {
				probes = append(probes, p)
			}
			for _, d := range []time.Duration{-time.Second, 0, time.Second} {
				probes = append(probes, change.Add(d), startLater.Add(d+time.Second))
			}
			for _, p := range probes {
				early.clock.set(p)
				later.clock.set(p)
				for _, s := range scheds {
					le, okE := early.LastSlot(s.ID, p)
					ll, okL := later.LastSlot(s.ID, p)
					if okE != okL || !le.Equal(ll) {
						t.Errorf("%s at %v: LastSlot %v (%v) and %v (%v)", s.ID, p, le, okE, ll, okL)
					}
					// The latest slot at or before p is the last one
					// fired at or before p.
					if fired := early.fired[s.ID]; len(fired) > 0 && !p.Before(fired[0]) {
						k, found := slices.BinarySearchFunc(fired, p, func(a, b time.Time) int { return a.Compare(b) })
						if !found {
							k--
						}
						if !le.Equal(fired[k]) {
							t.Errorf("%s at %v: LastSlot %v, but the last slot fired by then is %v", s.ID, p, le, fired[k])
						}
					}
					ne, nl := mustGet(t, early.Engine, s.ID).NextRun, mustGet(t, later.Engine, s.ID).NextRun
					if !ne.Equal(nl) || !ne.After(p) {
						t.Errorf("%s at %v: next run %v and %v", s.ID, p, ne, nl)
					}
				}
			}
		})
	}
}

// showSlots formats ts in zone.
func showSlots(ts []time.Time, zone string) string {
	loc, _ := time.LoadLocation(zone)
	out := "["
	for i, t := range ts {
		if i > 0 {
			out += " "
		}
		out += t.In(loc).Format(time.RFC3339)
	}
	return out + "]"
}
