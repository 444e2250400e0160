package scheduler

import (
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/cronswap/cronswap/schedule"
)

// roundTripTimes are times a schedule's time fields may hold: the zero
// time, what the decoder makes (UTC, whole milliseconds), and what a Go
// caller may hand the engine (another location, a monotonic reading, the
// zero instant in a location, beyond Unix nanoseconds).
func roundTripTimes(t *testing.T) []time.Time {
	seoul, err := time.LoadLocation("Asia/Seoul")
	if err != nil {
		t.Fatal(err)
	}
	d := time.Date(2024, 5, 1, 9, 30, 0, 123_000_000, time.UTC)
	return []time.Time{
		{},
		d,
		d.Local(),
		d.In(seoul),
		d.In(time.FixedZone("X", 3600)),
		time.Now(),       // with a monotonic reading
		time.Now().UTC(), // without
		time.Time{}.In(seoul),
		time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(1500, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Unix(0, 0).UTC(),
		time.Unix(0, 0),
	}
}

// A record gives back exactly (==) the schedule it was made from, whatever
// its fields hold, so that Status, the fire callback and the comparisons
// of Reload see what was applied: every field of schedule.Schedule, by
// reflection, set alone and all at once, each time field through every
// kind of time.
func TestRecordKeepsTheScheduleExactly(t *testing.T) {
	full := schedule.Schedule{ID: "job", CronExpr: "0 9 * * *", Timezone: "Europe/Berlin", DST: schedule.DSTPlain,
		Enabled: true, Job: "act", Category: "cat", Args: `{"a":1}`,
		UpdatedAt: time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC),
		StartAt:   time.Date(2024, 6, 1, 0, 0, 0, 0, time.UTC), EndAt: time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC),
		MaxRuns: 7, PausedUntil: time.Date(2024, 7, 1, 0, 0, 0, 0, time.UTC), Exclude: `["holidays"]`}
	var cases []schedule.Schedule
	fv := reflect.ValueOf(full)
	for i := range fv.NumField() {
		s := schedule.Schedule{ID: "job"}
		reflect.ValueOf(&s).Elem().Field(i).Set(fv.Field(i))
		cases = append(cases, s)
	}
	cases = append(cases, full, schedule.Schedule{ID: "job"})
	timeFields := []string{"UpdatedAt", "StartAt", "EndAt", "PausedUntil"}
	for _, tm := range roundTripTimes(t) {
		for _, f := range timeFields {
			for _, base := range []schedule.Schedule{{ID: "job"}, full} {
				s := base
				reflect.ValueOf(&s).Elem().FieldByName(f).Set(reflect.ValueOf(tm))
				cases = append(cases, s)
			}
		}
	}
	sched := cron.Every(time.Minute)
	// The job's record so far, whose names pack reuses when they match.
	prevs := []*record{nil}
	for _, p := range []schedule.Schedule{full, {ID: "job"}, {ID: "job", Job: "other", Category: "other"}} {
		r := pack(p, newTiming(p, nil), jobState{}, nil)
		prevs = append(prevs, &r)
	}
	for i, s := range cases {
		for _, st := range []jobState{{}, {jitter: time.Second, err: "e", ended: "max_runs", pending: &s}} {
			for k, parsed := range []cron.Schedule{nil, sched} {
				r := pack(s, newTiming(s, parsed), st, prevs[(i+k)%len(prevs)])
				if got := r.schedule(s.ID); got != s {
					t.Fatalf("case %d (%+v): the record gives back %+v", i, s, got)
				}
				if r.state() != st {
					t.Fatalf("case %d: state %+v, want %+v", i, r.state(), st)
				}
				if r.sched() != parsed {
					t.Fatalf("case %d: parsed schedule %v, want %v", i, r.sched(), parsed)
				}
				if (r.x == nil) != (st == jobState{} && lifetimeOf(s).IsZero() && s.Exclude == "" && r.updKind != timeFull) {
					t.Fatalf("case %d: side fields %+v for %+v", i, r.x, s)
				}
			}
		}
	}
	// Side fields equal to those of the job's record so far are shared.
	withSide := full
	withSide.UpdatedAt = time.Now()
	prev := pack(withSide, newTiming(withSide, nil), jobState{jitter: time.Second}, nil)
	if r := pack(withSide, prev.t, jobState{jitter: time.Second}, &prev); r.x != prev.x || r.schedule("job") != withSide {
		t.Fatalf("equal side fields not shared: %p, %p", r.x, prev.x)
	}
	if r := pack(withSide, nil, jobState{}, &prev); r.x == prev.x || r.state() != (jobState{}) {
		t.Fatalf("side fields shared though the state differs: %+v", r.state())
	}

	// Reload compares a record with the next schedule of its job without
	// making the record's schedule: the same answers as the schedule's own
	// comparisons.
	for i, a := range cases {
		r := pack(a, newTiming(a, nil), jobState{}, nil)
		for j, b := range cases {
			if got, want := r.sameTiming(b), a.Timing() == b.Timing(); got != want {
				t.Fatalf("cases %d, %d: sameTiming %v, want %v (%+v, %+v)", i, j, got, want, a, b)
			}
			if got, want := r.sameExceptTiming(b), a.SameExceptTiming(b); got != want {
				t.Fatalf("cases %d, %d: sameExceptTiming %v, want %v (%+v, %+v)", i, j, got, want, a, b)
			}
		}
	}
}

// The record of a plain schedule, as the decoder makes it (updated_at in
// UTC), holds no side fields, and the jobs of one Sync with the same
// expression share one timing.
func TestRecordOfAPlainScheduleIsCompact(t *testing.T) {
	e := New(Options{Shards: 4, Logger: quiet(), Arms: func(string) bool { return false }})
	var items []Item
	for i := range 10 {
		items = append(items, Item{Schedule: schedule.Schedule{ID: fmt.Sprintf("j%d", i), CronExpr: fmt.Sprintf("0 %d * * *", i%2),
			Enabled: true, Job: "act", Category: "cat", Args: `{"i":1}`,
			UpdatedAt: time.UnixMilli(1714550400123 + int64(i)).UTC()}})
	}
	if st := syncItems(e, items); st.Held != len(items) {
		t.Fatalf("Sync: %+v", st)
	}
	timings := map[*timing]bool{}
	for _, it := range items {
		r := e.load(it.Schedule.ID)
		if r.x != nil || r.slots != nil || r.fire != nil {
			t.Fatalf("%s: side fields %+v, slots %v, fire %v; want none", it.Schedule.ID, r.x, r.slots, r.fire)
		}
		if got := r.schedule(it.Schedule.ID); got != it.Schedule {
			t.Fatalf("%s: %+v, want %+v", it.Schedule.ID, got, it.Schedule)
		}
		timings[r.t] = true
	}
	if len(timings) != 2 {
		t.Fatalf("%d timings for 2 expressions", len(timings))
	}
}

// An activation robfig is handed comes back exactly from firing.planned
// when it is in the engine's location, and is not kept otherwise (Run
// then searches for the slot).
func TestPlannedActivationsComeBackExactly(t *testing.T) {
	seoul, err := time.LoadLocation("Asia/Seoul")
	if err != nil {
		t.Fatal(err)
	}
	for _, loc := range []*time.Location{time.UTC, time.Local, seoul} {
		for _, tm := range roundTripTimes(t) {
			ns := packPlanned(tm, loc)
			if ns == 0 {
				if tm.Location() == loc && tm.Round(0) == tm && !tm.IsZero() && tm.Year() > 1700 && tm.Year() < 2200 && tm.UnixNano() != 0 {
					t.Errorf("%v in %v not kept", tm, loc)
				}
				continue
			}
			if got := unpackPlanned(ns, loc); got != tm {
				t.Errorf("%v kept in %v comes back as %v", tm, loc, got)
			}
		}
	}
}

// A fire reads the job's record while Reload stores the next one: every
// fire carries one whole schedule that was applied (its action, category
// and args from one document, never a mix), and go test -race finds no
// race between the two.
func TestFireReadsTheRecordWhileReloadStoresIt(t *testing.T) {
	var (
		mu  sync.Mutex
		now = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
		got []schedule.Schedule
	)
	// Not started: the test runs the entry itself, each time a second
	// later on the engine's clock, so every run has a slot of its own.
	e := New(Options{Shards: 1, Logger: quiet(),
		Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now },
		Fire: func(d schedule.Due) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, d.Schedule)
		}})
	version := func(i int) schedule.Schedule {
		s := sch("a", "* * * * * *")
		s.Job, s.Category, s.Args = fmt.Sprintf("act-%d", i), fmt.Sprintf("cat-%d", i), fmt.Sprintf(`{"v":%d}`, i)
		return s
	}
	expect(t, e.Reload(version(0)), Added)
	f := e.load("a").fire
	const edits = 2000
	var editing atomic.Bool
	editing.Store(true)
	started := make(chan struct{})
	done := make(chan int)
	go func() {
		runs := 0
		close(started)
		for editing.Load() || runs == 0 {
			mu.Lock()
			now = now.Add(time.Second)
			mu.Unlock()
			f.Run()
			runs++
		}
		done <- runs
	}()
	<-started
	for i := 1; i <= edits; i++ {
		expect(t, e.Reload(version(i)), Unchanged)
	}
	editing.Store(false)
	runs := <-done
	mu.Lock()
	defer mu.Unlock()
	if len(got) != runs {
		t.Fatalf("%d fires of %d runs", len(got), runs)
	}
	last := -1
	for _, s := range got {
		var i int
		if _, err := fmt.Sscanf(s.Job, "act-%d", &i); err != nil || s != version(i) {
			t.Fatalf("a fire carried %+v, which no Reload applied", s)
		}
		if i < last {
			t.Fatalf("a fire carried version %d after one carried %d", i, last)
		}
		last = i
	}
}
