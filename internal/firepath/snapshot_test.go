package firepath

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/cronswap/cronswap/internal/actions"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/jobs"
	"github.com/cronswap/cronswap/schedule"
)

// walkedSchedule is a schedule of job id, running action, with every field
// of schedule.Schedule set to a distinctive value, found by reflection: a
// field added later gets one too, without editing this test (it fails
// when it cannot make one up for the field's kind).
func walkedSchedule(t *testing.T, id, action string) schedule.Schedule {
	t.Helper()
	var s schedule.Schedule
	known := map[string]any{
		"ID": id, "Job": action, "Enabled": true, "Args": `{"walked":"args"}`, "CronExpr": "*/7 * * * * *",
		"Timezone": "Asia/Seoul", "DST": schedule.DSTPlain, "Category": "walked-category",
		// Milliseconds in UTC: what a BSON round trip keeps.
		"UpdatedAt": time.Date(2024, 5, 6, 7, 8, 9, 10_000_000, time.UTC),
		// A lifetime that lets every slot of the test run.
		"StartAt": time.Date(2001, 2, 3, 4, 5, 6, 7_000_000, time.UTC), "EndAt": time.Date(2101, 2, 3, 4, 5, 6, 7_000_000, time.UTC),
		"PausedUntil": time.Date(2002, 2, 3, 4, 5, 6, 7_000_000, time.UTC), "MaxRuns": 1000,
		"Exclude": `["walked-calendar"]`,
	}
	v := reflect.ValueOf(&s).Elem()
	for f := range v.Type().Fields() {
		field := v.FieldByIndex(f.Index)
		if x, ok := known[f.Name]; ok {
			field.Set(reflect.ValueOf(x))
			continue
		}
		switch field.Kind() {
		case reflect.String:
			field.SetString("walked-" + f.Name)
		case reflect.Bool:
			field.SetBool(true)
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			field.SetInt(7)
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			field.SetUint(7)
		case reflect.Float32, reflect.Float64:
			field.SetFloat(7.5)
		default:
			t.Fatalf("schedule.Schedule.%s (%s): the walk has no distinctive value for it; add one", f.Name, field.Type())
		}
		if field.IsZero() {
			t.Fatalf("schedule.Schedule.%s: the walk left it zero", f.Name)
		}
	}
	return s
}

// sameFields reports the fields of schedule.Schedule on which got differs
// from want.
func sameFields(got, want schedule.Schedule) []string {
	var diff []string
	g, w := reflect.ValueOf(got), reflect.ValueOf(want)
	for f := range g.Type().Fields() {
		if !reflect.DeepEqual(g.FieldByIndex(f.Index).Interface(), w.FieldByIndex(f.Index).Interface()) {
			diff = append(diff, f.Name)
		}
	}
	return diff
}

// snapshots collects what actions see of their fire's schedule, by run id.
type snapshots struct {
	mu   sync.Mutex
	seen map[string][]schedule.Schedule
}

func newSnapshots() *snapshots {
	return &snapshots{seen: map[string][]schedule.Schedule{}}
}

// handler records the schedule the action's context holds; fail makes the
// run fail (fail(run) true).
func (s *snapshots) handler(t *testing.T, fail func(jobs.Run) bool) jobs.Handler {
	return jobs.HandlerFunc(func(ctx context.Context, run jobs.Run) error {
		got, ok := ScheduleOf(ctx)
		if !ok {
			t.Errorf("run %s: its context holds no schedule", run.RunID)
		}
		s.mu.Lock()
		s.seen[run.JobID] = append(s.seen[run.JobID], got)
		s.mu.Unlock()
		if fail != nil && fail(run) {
			return errors.New("fails")
		}
		return nil
	})
}

// last waits for the action of job to have run n times and returns what
// the last run saw.
func (s *snapshots) last(t *testing.T, job string, n int) schedule.Schedule {
	t.Helper()
	waitFor(t, 20*time.Second, job+" run", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.seen[job]) >= n
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[job][n-1]
}

// The schedule a fire carries reaches its action whole on every kind of
// fire: every field of schedule.Schedule (walked by reflection, as
// TestUnchangedRuleCoversEveryField does for re-arming) is seen by the
// action of a cron slot, a catch-up fire, a run-now request, a backfilled
// slot, a buffered cron fire and a buffered run-now request (both taken up
// by a replica that did not buffer them: from the record), and a retry
// attempt, on the replica whose attempt failed (its timer) and on another
// replica (its poll, which arms the job without the fields: from the
// record). A buffered fire carries the schedule as it was when it came
// due; so does a retry attempt.
func TestScheduleReachesTheActionOnEveryFireKind(t *testing.T) {
	t.Parallel()
	e := newFireEnv(t)
	seen := newSnapshots()
	firstFails := func(run jobs.Run) bool { return run.Attempt == 1 }
	e.reg.Register("walk", actions.Action{Handler: seen.handler(t, nil)})
	e.reg.Register("walk_buffered", actions.Action{Handler: seen.handler(t, nil),
		Policy: jobs.Policy{Overlap: jobs.OverlapBufferOne}})
	e.reg.Register("walk_retry", actions.Action{Handler: seen.handler(t, firstFails),
		Policy: jobs.Policy{Retry: jobs.RetryPolicy{Attempts: 2, Backoff: 100 * time.Millisecond}}})
	r1 := e.retryRunner(t, "r1", time.Hour, 50*time.Millisecond)
	now := time.Now().UTC()
	slot := now.Truncate(time.Second)
	check := func(kind string, s schedule.Schedule, n int) {
		t.Helper()
		got := seen.last(t, s.ID, n)
		if diff := sameFields(got, s); len(diff) > 0 {
			t.Errorf("%s: the action saw %+v; fields %v differ from the schedule the fire came due under %+v", kind, got, diff, s)
		}
	}

	s := walkedSchedule(t, "slot", "walk")
	r1.Fire(schedule.Due{Schedule: s, Slot: slot})
	check("cron slot", s, 1)

	s = walkedSchedule(t, "catchup", "walk")
	r1.FireCatchUp(schedule.Due{Schedule: s, Slot: slot.Add(-time.Minute)}, time.Hour)
	check("catch-up", s, 1)

	s = walkedSchedule(t, "runnow", "walk")
	if res := r1.RunOffSchedule(OffScheduleFire{Schedule: s, RunID: "trigger/walk", Slot: now.Add(123 * time.Millisecond),
		Offered: time.Now(), Buffer: true}); !res.Ran {
		t.Fatalf("run-now: %+v, want run", res)
	}
	check("run-now", s, 1)

	s = walkedSchedule(t, "backfill", "walk")
	old := slot.Add(-time.Hour)
	if res := r1.RunOffSchedule(OffScheduleFire{Schedule: s, RunID: record.RunID(s.ID, old), Slot: old,
		Offered: time.Now()}); !res.Ran {
		t.Fatalf("backfill: %+v, want run", res)
	}
	check("backfilled slot", s, 1)

	// Buffered behind a run of another replica, which ends without taking
	// them up: r1 takes them from the lock.
	other := e.replica("other", "o1")
	for _, kind := range []string{"buffered", "buffered_runnow"} {
		s = walkedSchedule(t, kind, "walk_buffered")
		held := other.claimOne(t, record.FireClaim{JobID: s.ID, Slot: slot, Overlap: jobs.OverlapBufferOne}, time.Now(), record.Acquired)
		if kind == "buffered" {
			other.claimOne(t, record.FireClaim{JobID: s.ID, Slot: slot.Add(time.Second), Overlap: jobs.OverlapBufferOne,
				Schedule: &s}, time.Now(), record.Buffered)
		} else {
			other.claimOne(t, record.FireClaim{JobID: s.ID, Slot: now.Add(456 * time.Millisecond), Overlap: jobs.OverlapBufferOne,
				RunID: "trigger/walk-buffered", Fence: time.Now().UnixMilli(), OffSchedule: true, Buffer: true, Schedule: &s},
				time.Now(), record.Buffered)
		}
		other.end(t, held.Lease, time.Now())
		r1.drainSoon(s.ID, jobs.OverlapBufferOne)
		check(kind, s, 1)
	}

	// A retry attempt after its timer, on the replica whose attempt failed.
	s = walkedSchedule(t, "retry_timer", "walk_retry")
	r1.Fire(schedule.Due{Schedule: s, Slot: slot})
	check("retry attempt (timer)", s, 2)

	// A retry attempt taken by another replica's poll: the replica whose
	// attempt failed is gone, and the other arms the job without the
	// walked fields (retryRunner's Lookup).
	s = walkedSchedule(t, "retry_poll", "walk_retry")
	gone := e.retryRunner(t, "gone", time.Hour, 50*time.Millisecond)
	gone.Fire(schedule.Due{Schedule: s, Slot: slot})
	if !gone.Shutdown(10 * time.Second) {
		t.Fatal("the replica whose attempt failed did not shut down")
	}
	e.waitStatus(t, record.RunID(s.ID, slot), record.StatusRetrying)
	e.retryRunner(t, "poller", 50*time.Millisecond, 50*time.Millisecond)
	check("retry attempt (another replica's poll)", s, 2)
}
