package scheduler

import (
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/cronswap/cronswap/internal/lifetime"
)

// With Options.Arms the engine keeps every valid job but arms only those
// Arms names; the others are Elsewhere, with their next run. Rearm arms and
// disarms as Arms changes, and a job handed over arms its last known good
// even when its latest document was bad.
func TestArmsAndRearm(t *testing.T) {
	var mu sync.Mutex
	here := map[string]bool{"a": true, "b": true}
	e := New(Options{Arms: func(id string) bool { mu.Lock(); defer mu.Unlock(); return here[id] }})
	st := syncItems(e, []Item{{Schedule: sch("a", "0 9 * * *")}, {Schedule: sch("b", "0 9 * * *")},
		{Schedule: sch("c", "0 9 * * *")}, {Schedule: sch("d", "0 9 * * *")}})
	if st.Added != 2 || st.Held != 2 || e.Len() != 2 {
		t.Fatalf("sync: %+v, armed %d; want 2 added, 2 held", st, e.Len())
	}
	for _, id := range []string{"c", "d"} {
		s, ok := e.Get(id)
		if !ok || s.Armed || !s.Elsewhere || s.NextRun.IsZero() {
			t.Fatalf("%s: %+v, want kept, not armed, elsewhere, with a next run", id, s)
		}
	}
	if o := e.Reload(sch("c", "0 8 * * *")); o != Held {
		t.Fatalf("an edit of a job armed elsewhere: %v, want held", o)
	}
	e.Reject("c", errors.New("bad document"))
	mu.Lock()
	here = map[string]bool{"b": true, "c": true}
	mu.Unlock()
	armed, disarmed := e.Rearm()
	if !slices.Equal(armed, []string{"c"}) || !slices.Equal(disarmed, []string{"a"}) {
		t.Fatalf("Rearm: armed %v, disarmed %v; want [c], [a]", armed, disarmed)
	}
	if s, _ := e.Get("c"); !s.Armed || s.CronExpr != "0 8 * * *" || s.LastError == "" {
		t.Fatalf("c after the hand-over: %+v, want armed on its last good timing, with its error", s)
	}
	if s, _ := e.Get("a"); s.Armed || !s.Elsewhere {
		t.Fatalf("a after the hand-over: %+v, want elsewhere", s)
	}
	if _, _, ok := e.entry("c"); !ok {
		t.Fatal("c has no robfig entry")
	}
	if _, _, ok := e.entry("a"); ok {
		t.Fatal("a still has a robfig entry")
	}
	if armed, disarmed := e.Rearm(); len(armed)+len(disarmed) != 0 {
		t.Fatalf("Rearm with nothing changed: %v, %v", armed, disarmed)
	}
	if e.Len() != 2 {
		t.Fatalf("armed %d, want 2", e.Len())
	}
}

// A job ended by End (its run count at max_runs) stays unarmed through a
// re-division, here or elsewhere: Rearm neither disarms it (it has no
// entry) nor arms it again when it comes to this engine, and it is not
// shown as armed elsewhere. Raising max_runs arms it where Arms says.
func TestRearmLeavesAnEndedJobUnarmed(t *testing.T) {
	var mu sync.Mutex
	here := true
	e := newEngine(t, Options{Arms: func(string) bool { mu.Lock(); defer mu.Unlock(); return here }})
	s := sch("capped", "* * * * * *")
	s.MaxRuns = 3
	expect(t, e.Reload(s), Added)
	if !e.End("capped", s, lifetime.ReasonMaxRuns) {
		t.Fatal("End did not disarm the job")
	}
	for _, arms := range []bool{false, true} {
		mu.Lock()
		here = arms
		mu.Unlock()
		if armed, disarmed := e.Rearm(); len(armed)+len(disarmed) != 0 {
			t.Fatalf("Rearm (arms %v) of an ended job: armed %v, disarmed %v; want neither", arms, armed, disarmed)
		}
		st := mustGet(t, e, "capped")
		if st.Armed || st.Elsewhere || st.Ended != lifetime.ReasonMaxRuns || e.Len() != 0 {
			t.Fatalf("after Rearm (arms %v): %+v, armed jobs %d; want ended, neither armed nor elsewhere", arms, st, e.Len())
		}
	}
	s.MaxRuns = 5
	expect(t, e.Reload(s), Added)
	if st := mustGet(t, e, "capped"); !st.Armed || st.Ended != "" {
		t.Fatalf("max_runs raised: %+v, want armed again", st)
	}
}
