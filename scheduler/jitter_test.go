package scheduler

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cronswap/cronswap/schedule"
)

// TestJitterReplicasAgree: two engines standing for two replicas, given the
// same 100 hourly jobs with a 10s jitter bound, agree on every job's slot and
// delay; the delays stay within [0, 10s) and spread over it.
func TestJitterReplicasAgree(t *testing.T) {
	const bound = 10 * time.Second
	now := time.Date(2024, 5, 10, 12, 34, 56, 0, time.UTC)
	clock := func() time.Time { return now }
	jitter := func(schedule.Schedule) time.Duration { return bound }
	a := newEngine(t, Options{Policy: testPolicy{jitter: jitter}, Now: clock})
	b := newEngine(t, Options{Policy: testPolicy{jitter: jitter}, Now: clock, Shards: 3}) // sharding must not matter
	var items []Item
	for i := range 100 {
		items = append(items, Item{Schedule: sch(fmt.Sprintf("fleet-%03d", i), "0 * * * *")})
	}
	if st := syncItems(a, items); st.Added != 100 {
		t.Fatalf("replica a: %+v", st)
	}
	for _, it := range items {
		expect(t, b.Reload(it.Schedule), Added)
	}

	distinct := map[time.Duration]bool{}
	wantSlot := time.Date(2024, 5, 10, 13, 0, 0, 0, time.UTC)
	for _, sa := range a.List() {
		sb := mustGet(t, b, sa.ID)
		if sa.Delay != sb.Delay || !sa.NextRun.Equal(sb.NextRun) {
			t.Fatalf("%s: replicas disagree: delay %s / %s, slot %s / %s", sa.ID, sa.Delay, sb.Delay, sa.NextRun, sb.NextRun)
		}
		if !sa.NextRun.Equal(wantSlot) {
			t.Fatalf("%s: next slot %s, want the undelayed %s", sa.ID, sa.NextRun, wantSlot)
		}
		if sa.Delay < 0 || sa.Delay >= bound {
			t.Fatalf("%s: delay %s outside [0, %s)", sa.ID, sa.Delay, bound)
		}
		if sa.Delay != JitterDelay(sa.ID, bound) {
			t.Fatalf("%s: delay %s, JitterDelay says %s", sa.ID, sa.Delay, JitterDelay(sa.ID, bound))
		}
		// robfig's timer (on the real clock) is an hourly slot moved by the
		// delay.
		_, next, _ := a.entry(sa.ID)
		if s := next.Add(-sa.Delay); s.Minute() != 0 || s.Second() != 0 || s.Nanosecond() != 0 {
			t.Fatalf("%s: robfig fires at %s, not a whole hour + %s", sa.ID, next, sa.Delay)
		}
		distinct[sa.Delay] = true
	}
	if len(distinct) < 90 {
		t.Fatalf("only %d distinct delays among 100 jobs: not spread", len(distinct))
	}
	var lo, hi int
	for d := range distinct {
		if d < bound/2 {
			lo++
		} else {
			hi++
		}
	}
	if lo < 20 || hi < 20 {
		t.Fatalf("delays lopsided: %d below %s, %d above", lo, bound/2, hi)
	}
}

// TestJitterTiming: the jitter bound is part of a job's timing; no jitter
// function, or a bound <= 0, means no delay; disabled jobs have none.
func TestJitterTiming(t *testing.T) {
	var mu sync.Mutex
	bounds := map[string]time.Duration{"a": time.Minute}
	e := newEngine(t, Options{Policy: testPolicy{jitter: func(s schedule.Schedule) time.Duration {
		mu.Lock()
		defer mu.Unlock()
		return bounds[s.ActionName()]
	}}})
	expect(t, e.Reload(sch("a", "0 9 * * *")), Added)
	if d := mustGet(t, e, "a").Delay; d != JitterDelay("a", time.Minute) || d == 0 {
		t.Fatalf("delay %s, want %s", d, JitterDelay("a", time.Minute))
	}
	entry := mustEntry(t, e, "a")
	expect(t, e.Reload(sch("a", "0 9 * * *")), Unchanged)
	if mustEntry(t, e, "a") != entry {
		t.Fatal("unchanged jitter re-armed the job")
	}

	mu.Lock()
	bounds["a"] = 2 * time.Minute
	mu.Unlock()
	expect(t, e.Reload(sch("a", "0 9 * * *")), Replaced)
	if d := mustGet(t, e, "a").Delay; d != JitterDelay("a", 2*time.Minute) {
		t.Fatalf("delay %s after the bound changed, want %s", d, JitterDelay("a", 2*time.Minute))
	}
	// A Sync sees a changed bound too.
	mu.Lock()
	bounds["a"] = -time.Second
	mu.Unlock()
	if st := syncItems(e, []Item{{Schedule: sch("a", "0 9 * * *")}}); st.Replaced != 1 {
		t.Fatalf("Sync after the bound went away: %+v", st)
	}
	if d := mustGet(t, e, "a").Delay; d != 0 {
		t.Fatalf("delay %s with a negative bound", d)
	}

	off := sch("a", "0 9 * * *")
	off.Enabled = false
	mu.Lock()
	bounds["a"] = time.Minute
	mu.Unlock()
	expect(t, e.Reload(off), Disarmed)
	if d := mustGet(t, e, "a").Delay; d != 0 {
		t.Fatalf("disabled job has delay %s", d)
	}

	plain := newEngine(t, Options{})
	expect(t, plain.Reload(sch("a", "0 9 * * *")), Added)
	if d := mustGet(t, plain, "a").Delay; d != 0 {
		t.Fatalf("delay %s without a jitter function", d)
	}
	if JitterDelay("a", 0) != 0 || JitterDelay("a", -time.Second) != 0 {
		t.Fatal("JitterDelay without a positive bound is not zero")
	}
}

// TestJitterSlotOnFakeClock: NextRun keeps naming a slot until its delayed
// dispatch time, and the job's robfig callback, run by hand at chosen clock
// readings at slot+delay or later, reports the undelayed slot.
func TestJitterSlotOnFakeClock(t *testing.T) {
	const bound = 10 * time.Second
	var (
		mu    sync.Mutex
		now   time.Time
		slots []time.Time
	)
	// Not started: only the calls below run the job.
	e := New(Options{
		Logger: quiet(),
		Policy: testPolicy{jitter: func(schedule.Schedule) time.Duration { return bound }},
		Now: func() time.Time {
			mu.Lock()
			defer mu.Unlock()
			return now
		},
		Fire: func(d schedule.Due) {
			slot := d.Slot
			mu.Lock()
			defer mu.Unlock()
			slots = append(slots, slot)
		},
	})
	set := func(t time.Time) {
		mu.Lock()
		defer mu.Unlock()
		now = t
	}
	id := "jittered"
	delay := JitterDelay(id, bound)
	if delay < time.Second {
		t.Fatalf("pick an id with a delay of a second or more, %q has %s", id, delay)
	}
	slot := time.Date(2024, 5, 10, 13, 0, 0, 0, time.UTC)
	set(slot.Add(-time.Minute))
	expect(t, e.Reload(sch(id, "0 * * * *")), Added)

	// Between the slot and its dispatch time, the slot is still to come.
	set(slot.Add(delay / 2))
	if st := mustGet(t, e, id); !st.NextRun.Equal(slot) || st.Delay != delay {
		t.Fatalf("at slot+delay/2: next run %s, delay %s; want %s, %s", st.NextRun, st.Delay, slot, delay)
	}
	set(slot.Add(delay))
	if st := mustGet(t, e, id); !st.NextRun.Equal(slot.Add(time.Hour)) {
		t.Fatalf("at slot+delay: next run %s, want %s", st.NextRun, slot.Add(time.Hour))
	}

	// The same job every second: with a delay of over a second, the wall
	// time of a run is in a later second than its slot.
	expect(t, e.Reload(sch(id, "* * * * * *")), Replaced)
	r := e.load(id)
	run := func(at time.Time) {
		set(at)
		n := *r                   // the stored record stays as it is
		e.newFiring(id, &n).Run() // a fresh entry each time: nothing planned

	}
	s1, s2 := slot.Add(time.Minute), slot.Add(time.Minute+5*time.Second)
	run(s1.Add(delay))                        // robfig wakes exactly at slot+delay
	run(s2.Add(delay + 300*time.Millisecond)) // or a little late
	run(s2.Add(delay + 600*time.Millisecond)) // a second wake-up has no slot of its own
	mu.Lock()
	defer mu.Unlock()
	if len(slots) != 2 || !slots[0].Equal(s1) || !slots[1].Equal(s2) {
		t.Fatalf("slots %v, want [%s %s]", slots, s1, s2)
	}
}

// TestJitterFires runs an every-second job with a real delay: its callback
// runs no earlier than slot+delay and still gets the whole-second slot, with
// the delay alongside.
func TestJitterFires(t *testing.T) {
	t.Parallel() // waits on real time
	const bound = 900 * time.Millisecond
	id := ""
	for i := 0; id == ""; i++ { // deterministic: the first id whose delay is at least 300ms
		if c := fmt.Sprintf("tick-%d", i); JitterDelay(c, bound) >= 300*time.Millisecond {
			id = c
		}
	}
	delay := JitterDelay(id, bound)
	fires := make(chan fire, 100)
	e := newEngine(t, Options{
		Policy: testPolicy{jitter: func(schedule.Schedule) time.Duration { return bound }},
		Fire: func(d schedule.Due) {
			if d.Delay != delay {
				t.Errorf("fire carries delay %s, want the job's %s", d.Delay, delay)
			}
			fires <- fire{d.Schedule.ID, d.Slot, time.Now()}
		},
	})
	expect(t, e.Reload(sch(id, "* * * * * *")), Added)
	var got []fire
	deadline := time.After(20 * time.Second)
	for len(got) < 3 {
		select {
		case f := <-fires:
			got = append(got, f)
		case <-deadline:
			t.Fatalf("only %d fires within 20s", len(got))
		}
	}
	for i, f := range got {
		if f.id != id || f.slot.Nanosecond() != 0 {
			t.Fatalf("fire %+v: want job %s at a whole-second slot", f, id)
		}
		if f.wall.Before(f.slot.Add(delay)) {
			t.Fatalf("fire for slot %s at %s, before slot+delay %s", f.slot, f.wall, f.slot.Add(delay))
		}
		if i > 0 && !f.slot.After(got[i-1].slot) {
			t.Fatalf("slots not strictly increasing: %s then %s", got[i-1].slot, f.slot)
		}
	}
}

// TestFiringNext: the timer robfig runs a job on is the job's schedule moved
// by its delay, and it remembers the last two (undelayed) activations it
// handed out for Run.
func TestFiringNext(t *testing.T) {
	sched := mustParse(t, "*/10 * * * * *", "")
	t0 := time.Date(2024, 5, 10, 12, 0, 3, 0, time.UTC)
	// Jobs whose delays under a 30s bound are about 0, 3.5s and 25s.
	for _, about := range []time.Duration{0, 3500 * time.Millisecond, 25 * time.Second} {
		id, bound := "job", time.Duration(0)
		if about > 0 {
			bound = 30 * time.Second
			for i := 0; ; i++ {
				id = fmt.Sprintf("job-%d", i)
				if d := JitterDelay(id, bound); d >= about && d < about+time.Second && d%time.Second != 0 {
					break
				}
			}
		}
		delay := JitterDelay(id, bound)
		r := record{t: &timing{sched: sched}}
		r = r.withState(jobState{jitter: bound})
		f := &firing{e: New(Options{Shards: 1, Logger: quiet()}), id: id}
		f.rec.Store(&r)
		n1 := f.Next(t0)
		if want := sched.Next(t0.Add(-delay)).Add(delay); !n1.Equal(want) {
			t.Fatalf("delay %s: Next(%s) = %s, want %s", delay, t0, n1, want)
		}
		if !n1.After(t0) || n1.Add(-delay).Second()%10 != 0 || n1.Add(-delay).Nanosecond() != 0 {
			t.Fatalf("delay %s: Next(%s) = %s is not a */10 activation + delay after t0", delay, t0, n1)
		}
		n2 := f.Next(n1)
		if !n2.Equal(n1.Add(10 * time.Second)) {
			t.Fatalf("delay %s: Next(%s) = %s, want 10s later", delay, n1, n2)
		}
		if planned := [2]time.Time{unpackPlanned(f.planned[0], time.UTC), unpackPlanned(f.planned[1], time.UTC)}; planned != [2]time.Time{n1.Add(-delay), n2.Add(-delay)} {
			t.Fatalf("delay %s: planned %v, want [%s %s]", delay, planned, n1.Add(-delay), n2.Add(-delay))
		}
	}
}
