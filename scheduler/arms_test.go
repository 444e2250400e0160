package scheduler

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cronswap/cronswap/internal/lifetime"
	"github.com/cronswap/cronswap/schedule"
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
	armed, _, disarmed := e.Rearm(nil)
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
	if armed, _, disarmed := e.Rearm(nil); len(armed)+len(disarmed) != 0 {
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
		if armed, _, disarmed := e.Rearm(nil); len(armed)+len(disarmed) != 0 {
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

// Armed yields exactly the jobs All reports armed, each with the schedule
// and delay All gives it: not a job armed elsewhere (Options.Arms), nor a
// disabled or rejected one, nor one whose end_at has passed. ArmedIDs
// lists the same jobs, with the longest of their delays.
func TestArmedYieldsOnlyArmedJobs(t *testing.T) {
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	now := base
	e := New(Options{Logger: quiet(), Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now },
		Arms: func(id string) bool { return id != "elsewhere" },
		Policy: testPolicy{jitter: func(s schedule.Schedule) time.Duration {
			if s.ID == "jittered" {
				return time.Minute
			}
			return 0
		}}})
	ending := sch("ending", "* * * * * *")
	ending.EndAt = base.Add(20 * time.Second)
	disabled := sch("disabled", "0 9 * * *")
	disabled.Enabled = false
	syncItems(e, []Item{{Schedule: sch("a", "0 9 * * *")}, {Schedule: sch("elsewhere", "0 9 * * *")},
		{Schedule: ending}, {Schedule: disabled}, {Schedule: sch("jittered", "0 9 * * *")},
		{Schedule: sch("bad", "0 9 * * *"), Err: errors.New("bad document")}})
	check := func(want ...string) {
		t.Helper()
		all := map[string]Status{}
		for st := range e.All() {
			if st.Armed {
				all[st.ID] = st
			}
		}
		var got []string
		var longest time.Duration
		for s, delay := range e.Armed() {
			got = append(got, s.ID)
			longest = max(longest, delay)
			if s.ID == "jittered" && delay == 0 {
				t.Error("jittered: no delay yielded")
			}
			if st, ok := all[s.ID]; !ok || st.Schedule != s || st.Delay != delay {
				t.Errorf("Armed yields %s %+v delay %v; All has %+v (armed %v)", s.ID, s, delay, st, ok)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) || len(all) != len(want) {
			t.Errorf("Armed yields %v, want %v (All armed %d)", got, want, len(all))
		}
		ids, maxDelay := e.ArmedIDs()
		slices.Sort(ids)
		if !slices.Equal(ids, want) || maxDelay != longest || longest == 0 {
			t.Errorf("ArmedIDs = %v, longest delay %v; want %v, %v", ids, maxDelay, want, longest)
		}
	}
	check("a", "ending", "jittered")
	mu.Lock()
	now = base.Add(time.Hour) // past ending's end_at
	mu.Unlock()
	check("a", "jittered")
}

// entriesNow counts the robfig entries of all e's shards as they are,
// retired ones still waiting in the queue included (robfigEntries waits
// for the queue first).
func entriesNow(e *Engine) int {
	n := 0
	for _, sh := range e.shards {
		n += shardEntries(sh)
	}
	return n
}

// A re-division that disarms many jobs takes their robfig entries out in
// paced bursts (paceBurst, then a pause while more wait), not all at
// once; Stop drains the rest without waiting for the pauses. Here the
// pause is an hour: the first burst goes, the rest waits until Stop.
func TestRetiredEntriesLeaveInPacedBurstsAndAtOnceOnStop(t *testing.T) {
	var mu sync.Mutex
	armHere := true
	e := New(Options{Logger: quiet(), Shards: 4, Arms: func(string) bool { mu.Lock(); defer mu.Unlock(); return armHere }})
	e.retired.pace.pause = time.Hour
	const n = 3*paceBurst + 10
	var items []Item
	for i := range n {
		items = append(items, Item{Schedule: sch(fmt.Sprintf("j%04d", i), "0 9 * * *")})
	}
	syncItems(e, items)
	e.Start()
	if got := entriesNow(e); got != n {
		t.Fatalf("%d robfig entries, want %d", got, n)
	}
	mu.Lock()
	armHere = false
	mu.Unlock()
	if _, _, disarmed := e.Rearm(nil); len(disarmed) != n {
		t.Fatalf("Rearm disarmed %d, want %d", len(disarmed), n)
	}
	deadline := time.Now().Add(30 * time.Second)
	for entriesNow(e) > n-paceBurst {
		if time.Now().After(deadline) {
			t.Fatalf("%d robfig entries after 30 s, want the first burst of %d gone", entriesNow(e), paceBurst)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := entriesNow(e); got != n-paceBurst {
		t.Fatalf("%d robfig entries after the first burst, want %d: the rest waits for the pause", got, n-paceBurst)
	}
	stopped := make(chan struct{})
	go func() {
		<-e.Stop().Done()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("Stop did not return within 30 s: it waited for the drain's pause")
	}
	if got := entriesNow(e); got != 0 {
		t.Fatalf("%d robfig entries after Stop, want 0", got)
	}
}

// Rearm arms at once only the jobs urgent names and defers the others,
// unarmed; ArmPaced arms them in bursts of paceBurst, asking stop before
// each, and skips a job Arms no longer gives it, one removed meanwhile
// and one a Reload armed already.
func TestRearmDefersAndArmPacedArms(t *testing.T) {
	var mu sync.Mutex
	armAll, moved := false, ""
	arms := func(id string) bool {
		mu.Lock()
		defer mu.Unlock()
		return armAll && id != moved || id == "base"
	}
	e := New(Options{Logger: quiet(), Shards: 8, Arms: arms})
	items := []Item{{Schedule: sch("base", "0 9 * * *")}, {Schedule: sch("urgent", "0 9 * * *")},
		{Schedule: sch("removed", "0 9 * * *")}, {Schedule: sch("reloaded", "0 9 * * *")}}
	const many = paceBurst + 10
	for i := range many {
		items = append(items, Item{Schedule: sch(fmt.Sprintf("d%04d", i), "0 9 * * *")})
	}
	syncItems(e, items)
	e.Start()
	defer e.Stop()
	if e.Len() != 1 {
		t.Fatalf("%d armed, want 1", e.Len())
	}
	mu.Lock()
	armAll = true
	mu.Unlock()
	armed, deferred, disarmed := e.Rearm(func(id string) bool { return id == "urgent" })
	if !slices.Equal(armed, []string{"urgent"}) || len(deferred) != many+2 || len(disarmed) != 0 {
		t.Fatalf("Rearm: armed %v, %d deferred, disarmed %v; want [urgent], %d, none", armed, len(deferred), disarmed, many+2)
	}
	if e.Len() != 2 {
		t.Fatalf("%d armed after Rearm, want 2: the deferred jobs are not armed yet", e.Len())
	}
	// Meanwhile: one deferred job removed, one armed by a Reload, one
	// moved on to another replica. They come first.
	special := []string{"removed", "reloaded", "d0000"}
	deferred = append(slices.Clone(special), slices.DeleteFunc(deferred, func(id string) bool { return slices.Contains(special, id) })...)
	e.Remove("removed")
	if o := e.Reload(sch("reloaded", "0 8 * * *")); o != Added {
		t.Fatalf("Reload of a deferred job: %v, want added (armed)", o)
	}
	mu.Lock()
	moved = "d0000"
	mu.Unlock()
	calls := 0
	got, rest := e.ArmPaced(deferred, func() bool { calls++; return calls > 1 })
	if len(got) != paceBurst-3 || !slices.Equal(rest, deferred[paceBurst:]) {
		t.Fatalf("ArmPaced stopped after one burst: armed %d, rest %d; want %d, %d",
			len(got), len(rest), paceBurst-3, len(deferred)-paceBurst)
	}
	for _, id := range special {
		if slices.Contains(got, id) {
			t.Errorf("ArmPaced armed %s", id)
		}
	}
	got, rest = e.ArmPaced(rest, func() bool { return false })
	if len(got) != len(deferred)-paceBurst || len(rest) != 0 {
		t.Fatalf("ArmPaced: armed %d, rest %d; want %d, 0", len(got), len(rest), len(deferred)-paceBurst)
	}
	if want := 3 + many - 1; e.Len() != want { // base, urgent, reloaded and the d jobs but d0000
		t.Fatalf("%d armed, want %d", e.Len(), want)
	}
	if st, _ := e.Get("d0000"); st.Armed {
		t.Error("d0000 armed, though Arms gave it to another replica before its turn")
	}
}
