package firepath

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/cronswap/cronswap/internal/actions"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/jobs"
	"github.com/cronswap/cronswap/schedule"
)

// offFire is an off-schedule fire of job id under run id at slot, offered now.
func offFire(id, runID string, slot time.Time) OffScheduleFire {
	return OffScheduleFire{Schedule: schedule.Schedule{ID: id, Enabled: true}, RunID: runID, Slot: slot, Offered: time.Now()}
}

// An off-schedule run offered to three replicas runs once, with a fence
// above the job's earlier ones, and the job's cron slots before and after
// it still run (the lock's last slot is not moved by it).
func TestOffScheduleRunsOnceAcrossReplicas(t *testing.T) {
	t.Parallel()
	e := newFireEnv(t)
	var mu sync.Mutex
	var fences []int64
	var runIDs []string
	action := jobs.HandlerFunc(func(ctx context.Context, f jobs.Run) error {
		mu.Lock()
		fences = append(fences, f.Fence)
		runIDs = append(runIDs, f.RunID)
		mu.Unlock()
		return nil
	})
	for _, ov := range []jobs.Overlap{jobs.OverlapSkip, jobs.OverlapAllow} {
		job := "off_" + string(ov)
		e.reg.Register(job, actions.Action{Handler: action, Policy: jobs.Policy{Overlap: ov}})
	}
	replicas := []*Runner{e.runner(t, "r1", time.Minute), e.runner(t, "r2", time.Minute), e.runner(t, "r3", time.Minute)}
	for _, ov := range []jobs.Overlap{jobs.OverlapSkip, jobs.OverlapAllow} {
		job := "off_" + string(ov)
		mu.Lock()
		fences, runIDs = nil, nil
		mu.Unlock()
		slot := time.Now().Truncate(time.Second).Add(-time.Second).UTC()
		replicas[0].Fire(dueAt(job, slot))
		trig := time.Now().Truncate(time.Second).Add(1234 * time.Millisecond).UTC()
		results := make([]OffScheduleResult, len(replicas))
		var wg sync.WaitGroup
		for i, r := range replicas {
			wg.Go(func() { results[i] = r.RunOffSchedule(offFire(job, "trigger/t-"+job, trig)) })
		}
		wg.Wait()
		ran := 0
		for i, res := range results {
			switch {
			case res.Ran:
				ran++
				if res.Status != record.StatusSucceeded {
					t.Errorf("%s: replica %d ran it with status %q (%s)", job, i, res.Status, res.Error)
				}
			case !res.AlreadyFired:
				t.Errorf("%s: replica %d: %+v, want ran or already fired", job, i, res)
			}
		}
		if ran != 1 {
			t.Fatalf("%s: ran on %d replicas, want 1", job, ran)
		}
		// The next cron slot, earlier than the trigger's time would allow
		// if it moved the last slot, still runs.
		replicas[1].Fire(dueAt(job, slot.Add(time.Second)))
		mu.Lock()
		if len(fences) != 3 || runIDs[1] != "trigger/t-"+job || fences[1] <= fences[0] {
			t.Errorf("%s: runs %v fences %v: want the cron slot, the trigger (higher fence), the next slot", job, runIDs, fences)
		}
		mu.Unlock()
		docs := e.runDocs(t, job)
		if len(docs) != 3 {
			t.Fatalf("%s: %d records, want 3: %+v", job, len(docs), docs)
		}
		for _, d := range docs {
			if d.Status != record.StatusSucceeded {
				t.Errorf("%s: record %s status %s, want succeeded", job, d.ID, d.Status)
			}
			if d.ID == "trigger/t-"+job && !d.ScheduledAt.Equal(trig) {
				t.Errorf("%s: trigger record scheduled_at %v, want %v", job, d.ScheduledAt, trig)
			}
		}
	}
}

// Under forbid, an off-schedule run offered while a run holds the job's
// lock is skipped and recorded skipped; a backfilled slot (an earlier slot
// under its own RunID) runs although later slots ran, and once only.
func TestOffScheduleForbidSkipsAndBackfillRunsOnce(t *testing.T) {
	t.Parallel()
	e := newFireEnv(t)
	release := make(chan struct{})
	started := make(chan string, 10)
	e.reg.Register("hold", actions.Action{Handler: jobs.HandlerFunc(func(ctx context.Context, f jobs.Run) error {
		started <- f.RunID
		if f.RunID == record.RunID("hold", time.Unix(1000, 0)) {
			return nil
		}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})})
	r1, r2 := e.runner(t, "r1", time.Minute), e.runner(t, "r2", time.Minute)
	slot := time.Now().Truncate(time.Second).UTC()
	done := make(chan struct{})
	go func() { defer close(done); r1.Fire(dueAt("hold", slot)) }()
	<-started
	res := r2.RunOffSchedule(offFire("hold", "trigger/busy", slot.Add(10*time.Millisecond)))
	if res.Ran || res.Status != record.StatusSkipped {
		t.Fatalf("off-schedule run while held: %+v, want skipped", res)
	}
	close(release)
	<-done
	docs := e.runDocs(t, "hold")
	var skipped bool
	for _, d := range docs {
		if d.ID == "trigger/busy" {
			skipped = d.Status == record.StatusSkipped
		}
	}
	if !skipped {
		t.Errorf("records %+v: want trigger/busy recorded skipped", docs)
	}
	// A slot long before the last one: refused as a cron fire, run as a
	// backfill, and only once.
	old := time.Unix(1000, 0).UTC()
	r1.Fire(dueAt("hold", old))
	select {
	case id := <-started:
		t.Fatalf("an old cron slot ran (%s): want it refused", id)
	default:
	}
	first := r1.RunOffSchedule(offFire("hold", record.RunID("hold", old), old))
	again := r2.RunOffSchedule(offFire("hold", record.RunID("hold", old), old))
	if !first.Ran || first.Status != record.StatusSucceeded || again.Ran || !again.AlreadyFired {
		t.Fatalf("backfill: first %+v, again %+v: want ran once, then already fired", first, again)
	}
}

// A replica whose clock is behind the fence of the lock's last acquisition
// takes the next fence instead of failing, and its record says so: fences
// still increase.
func TestOffScheduleFenceAboveLockFence(t *testing.T) {
	t.Parallel()
	e := newFireEnv(t)
	var fence int64
	e.reg.Register("ahead", actions.Action{Handler: jobs.HandlerFunc(func(ctx context.Context, f jobs.Run) error { fence = f.Fence; return nil })})
	r := e.runner(t, "r1", time.Minute)
	ahead := time.Now().Add(time.Hour).UnixMilli()
	if _, err := e.locks.InsertOne(context.Background(), record.LockDoc{JobID: "ahead", State: record.LockFree, Fence: ahead,
		LastSlot: time.Now().Truncate(time.Second), UpdatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	res := r.RunOffSchedule(offFire("ahead", "trigger/ahead", time.Now().Truncate(time.Second).Add(5*time.Millisecond)))
	if !res.Ran || res.Status != record.StatusSucceeded || fence != ahead+1 || res.Lease.Fence != ahead+1 {
		t.Fatalf("result %+v, fence %d: want it run with fence %d", res, fence, ahead+1)
	}
	docs := e.runDocs(t, "ahead")
	if len(docs) != 1 || docs[0].Fence != ahead+1 {
		t.Errorf("records %+v: want one with fence %d", docs, ahead+1)
	}
}

// Replicas that give one off-schedule run different scheduled times (each
// saw the request at its own moment) still run it once: the record is
// found by its run id, whoever's time it has.
func TestOffScheduleOnceWhateverEachReplicasTime(t *testing.T) {
	t.Parallel()
	e := newFireEnv(t)
	var mu sync.Mutex
	ran := 0
	e.reg.Register("seen", actions.Action{Handler: jobs.HandlerFunc(func(ctx context.Context, f jobs.Run) error { mu.Lock(); ran++; mu.Unlock(); return nil })})
	replicas := []*Runner{e.runner(t, "r1", time.Minute), e.runner(t, "r2", time.Minute), e.runner(t, "r3", time.Minute)}
	base := time.Now().Truncate(time.Second).Add(100 * time.Millisecond).UTC()
	results := make([]OffScheduleResult, len(replicas))
	var wg sync.WaitGroup
	for i, r := range replicas {
		wg.Go(func() {
			results[i] = r.RunOffSchedule(offFire("seen", "trigger/seen", base.Add(time.Duration(i)*7*time.Millisecond)))
		})
	}
	wg.Wait()
	for i, res := range results {
		if !res.Ran && !res.AlreadyFired {
			t.Errorf("replica %d: %+v, want ran or already fired", i, res)
		}
	}
	if ran != 1 {
		t.Fatalf("ran %d times, want once", ran)
	}
}

// Under every policy that takes the lock, an off-schedule run that may not
// wait (OffScheduleFire.Buffer false: a backfilled slot) offered while a
// run holds it is skipped: it is neither buffered nor does it replace the
// running one, and the holder runs on.
func TestOffScheduleSkippedWhileHeldUnderEveryLockPolicy(t *testing.T) {
	t.Parallel()
	for _, ov := range []jobs.Overlap{jobs.OverlapSkip, jobs.OverlapBufferOne, jobs.OverlapBufferAll, jobs.OverlapCancelOther} {
		e := newFireEnv(t)
		job := "held_" + string(ov)
		release := make(chan struct{})
		started := make(chan struct{}, 1)
		var holderErr error
		e.reg.Register(job, actions.Action{Handler: jobs.HandlerFunc(func(ctx context.Context, f jobs.Run) error {
			started <- struct{}{}
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				holderErr = context.Cause(ctx)
				return holderErr
			}
		}), Policy: jobs.Policy{Overlap: ov}})
		r1, r2 := e.runner(t, "r1", time.Minute), e.runner(t, "r2", time.Minute)
		done := make(chan struct{})
		go func() { defer close(done); r1.Fire(dueAt(job, time.Now().Truncate(time.Second).UTC())) }()
		<-started
		res := r2.RunOffSchedule(offFire(job, "trigger/"+job, time.Now().Truncate(time.Second).Add(3*time.Millisecond)))
		close(release)
		<-done
		if res.Ran || res.Status != record.StatusSkipped || holderErr != nil {
			t.Errorf("%s: off-schedule run while held: %+v, holder ended with %v: want skipped, the holder untouched", ov, res, holderErr)
		}
	}
}
