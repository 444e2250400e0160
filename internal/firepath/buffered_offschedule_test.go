package firepath

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/actions"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/jobs"
)

// reportLog is a RequestReporter that keeps what it was told.
type reportLog struct {
	mu      sync.Mutex
	started []record.Lease
	ended   []OffScheduleResult
}

func (l *reportLog) BufferedStarted(_ context.Context, lease record.Lease, _ time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.started = append(l.started, lease)
	return nil
}

func (l *reportLog) BufferedEnded(_ context.Context, _ record.Lease, res OffScheduleResult, _ time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ended = append(l.ended, res)
	return nil
}

func (l *reportLog) endedRuns() map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]string{}
	for _, r := range l.ended {
		out[r.Lease.RunID] = r.Status
	}
	return out
}

// reportingRunner is fireEnv.runner with a RequestReporter.
func (e *fireEnv) reportingRunner(t *testing.T, instance string, ttl time.Duration, rep RequestReporter) *Runner {
	t.Helper()
	r := e.runner(t, instance, ttl)
	r.opts.Requests = rep
	return r
}

// bufferedOff is an off-schedule fire of job that may wait on its lock.
func bufferedOff(job, runID string, slot time.Time) OffScheduleFire {
	f := offFire(job, runID, slot)
	f.Buffer = true
	return f
}

// Under buffer_all, off-schedule runs that may wait (run-now requests)
// join the lock's buffer beside a cron fire, up to BufferAllLimit; beyond
// it they are skipped. Once the holder ends, every waiting one runs once,
// in the order buffered, under its own run id and scheduled_at, with
// fences strictly increasing above the holder's (the cron fire between
// them keeps FenceOf(its slot) and is not dropped as stale), and the
// reporter hears of each start and end.
func TestOffScheduleBufferAllLimitAndOrder(t *testing.T) {
	t.Parallel()
	e := newFireEnv(t)
	job := newOverlapJob()
	e.reg.Register("ba", actions.Action{Handler: jobs.HandlerFunc(func(ctx context.Context, f jobs.Run) error {
		if f.RunID == record.RunID("ba", f.Slot) && f.Slot.Nanosecond() == 0 && job.started() == 0 {
			return job.Handle(ctx, f) // the holder waits to be released
		}
		job.mu.Lock()
		job.runs = append(job.runs, overlapRun{slot: f.Slot, instance: f.InstanceID, fence: f.Fence, start: time.Now(), end: time.Now()})
		job.mu.Unlock()
		return nil
	}), Policy: jobs.Policy{Overlap: jobs.OverlapBufferAll}})
	rep := &reportLog{}
	r1 := e.reportingRunner(t, "r1", time.Minute, rep)
	r2 := e.reportingRunner(t, "r2", time.Minute, rep)
	slot := time.Now().Truncate(time.Second).UTC()
	var wg sync.WaitGroup
	wg.Go(func() { r1.Fire(dueAt("ba", slot)) })
	waitFor(t, 10*time.Second, "the holder to start", func() bool { return job.started() == 1 })

	offer := func(from, n int) []OffScheduleResult {
		out := make([]OffScheduleResult, n)
		var g sync.WaitGroup
		for k := range n {
			i := from + k
			g.Go(func() {
				out[k] = r2.RunOffSchedule(bufferedOff("ba", fmt.Sprintf("trigger/t%03d", i), slot.Add(time.Duration(1+i)*time.Millisecond)))
			})
		}
		g.Wait()
		return out
	}
	first := offer(0, 50)
	s1 := slot.Add(time.Second)
	r2.Fire(dueAt("ba", s1)) // a cron fire waits among them
	if st := e.run(t, record.RunID("ba", s1)).Status; st != record.StatusBuffered {
		t.Fatalf("cron fire behind the holder recorded %s, want buffered", st)
	}
	rest := offer(50, jobs.BufferAllLimit-50+1)
	count := map[string]int{}
	for _, res := range append(first, rest...) {
		count[res.Status]++
		if res.Ran {
			t.Errorf("run %+v ran while the lock was held", res)
		}
	}
	if count[record.StatusBuffered] != jobs.BufferAllLimit-1 || count[record.StatusSkipped] != 2 {
		t.Fatalf("outcomes %v: want %d buffered (the cron fire is the %dth) and 2 skipped", count, jobs.BufferAllLimit-1, jobs.BufferAllLimit)
	}
	close(job.release)
	wg.Wait()
	runs := e.decided(t, "ba", jobs.BufferAllLimit+3)
	byStatus := map[string]int{}
	for _, r := range runs {
		byStatus[r.Status]++
	}
	if byStatus[record.StatusSucceeded] != jobs.BufferAllLimit+1 || byStatus[record.StatusSkipped] != 2 {
		t.Fatalf("records %v: want the holder and %d buffered runs succeeded, 2 skipped", byStatus, jobs.BufferAllLimit)
	}
	ran := job.snapshot()
	if len(ran) != jobs.BufferAllLimit+1 {
		t.Fatalf("%d runs, want %d (each once)", len(ran), jobs.BufferAllLimit+1)
	}
	seen := map[time.Time]bool{}
	for i, r := range ran {
		if seen[r.slot] {
			t.Errorf("scheduled_at %v ran twice", r.slot)
		}
		seen[r.slot] = true
		if i > 0 && r.fence <= ran[i-1].fence {
			t.Errorf("run %d (scheduled_at %v) fence %d not above the previous run's %d", i, r.slot, r.fence, ran[i-1].fence)
		}
	}
	if ran[51].slot != s1 || ran[51].fence != record.FenceOf(s1) {
		t.Errorf("run 51 %+v: want the cron fire of %v with its own fence, between the requests", ran[51], s1)
	}
	ended := rep.endedRuns()
	for _, r := range runs {
		if strings.HasPrefix(r.ID, "trigger/") && r.Status == record.StatusSucceeded && ended[r.ID] != record.StatusSucceeded {
			t.Errorf("run %s: reported %q, want succeeded", r.ID, ended[r.ID])
		}
	}
	if len(ended) != jobs.BufferAllLimit-1 {
		t.Errorf("%d reported ends, want one per buffered request (%d), none for the cron fire", len(ended), jobs.BufferAllLimit-1)
	}
}

// Under cancel_other an off-schedule run that may wait replaces the
// holder on another replica: the holder stops within 2 s, is recorded
// abandoned (reason replaced, naming the request's run), and the request
// runs once, offered to three replicas.
func TestOffScheduleCancelOtherReplacesHolder(t *testing.T) {
	t.Parallel()
	e := newFireEnv(t)
	job := newOverlapJob()
	e.reg.Register("co", actions.Action{Handler: job, Policy: jobs.Policy{Overlap: jobs.OverlapCancelOther}})
	rep := &reportLog{}
	rs := []*Runner{e.reportingRunner(t, "r1", time.Minute, rep), e.reportingRunner(t, "r2", time.Minute, rep),
		e.reportingRunner(t, "r3", time.Minute, rep)}
	rs[2].opts.Owns = func(string) bool { return false }
	slot := time.Now().Truncate(time.Second).UTC()
	var wg sync.WaitGroup
	wg.Go(func() { rs[0].Fire(dueAt("co", slot)) })
	waitFor(t, 10*time.Second, "the holder to start", func() bool { return job.started() == 1 })
	const runID = "trigger/replace"
	at := slot.Add(7 * time.Millisecond)
	asked := time.Now()
	results := make([]OffScheduleResult, len(rs))
	var g sync.WaitGroup
	for i, r := range rs[1:] {
		g.Go(func() { results[i+1] = r.RunOffSchedule(bufferedOff("co", runID, at)) })
	}
	waitFor(t, 10*time.Second, "the request's run to start", func() bool { return job.started() == 2 })
	ran := job.snapshot()
	if took := ran[0].end.Sub(asked); took > 2*time.Second || !strings.Contains(fmt.Sprint(ran[0].cancelled), runID) {
		t.Errorf("holder stopped %v after the request (cause %v), want within 2s, replaced by %s", took, ran[0].cancelled, runID)
	}
	if ran[1].start.Before(ran[0].end) || !ran[1].slot.Equal(at) || ran[1].fence <= ran[0].fence {
		t.Errorf("request's run %+v: want it after the holder %+v, at its own scheduled_at, fence above", ran[1], ran[0])
	}
	close(job.release)
	g.Wait()
	wg.Wait()
	runs := e.decided(t, "co", 2)
	if runs[0].Status != record.StatusAbandoned || !strings.Contains(runs[0].Error, runID) || runs[1].ID != runID || runs[1].Status != record.StatusSucceeded {
		t.Fatalf("records %+v: want the holder abandoned naming %s, the request's run succeeded", runs, runID)
	}
	var reason struct {
		Reason string `bson:"reason"`
	}
	if err := e.runs.FindOne(context.Background(), bson.D{{Key: "_id", Value: runs[0].ID}}).Decode(&reason); err != nil || reason.Reason != record.ReasonReplaced {
		t.Errorf("holder's reason %q (%v), want %q", reason.Reason, err, record.ReasonReplaced)
	}
	if job.started() != 2 {
		t.Errorf("%d runs, want the holder and the request's once", job.started())
	}
	for _, res := range results[1:] {
		if res.Status != record.StatusBuffered && !res.AlreadyFired {
			t.Errorf("offer %+v: want buffered on one replica, already fired on the others", res)
		}
	}
	waitFor(t, 5*time.Second, "the request's end reported", func() bool { return rep.endedRuns()[runID] == record.StatusSucceeded })
	rep.mu.Lock()
	defer rep.mu.Unlock()
	if len(rep.started) != 1 || slices.ContainsFunc(rep.started, func(l record.Lease) bool { return l.RunID != runID }) {
		t.Errorf("reported starts %+v: want the request's run once", rep.started)
	}
}

// An off-schedule run holding the lock of a buffer_one job takes up the
// request buffered behind it when it ends, as a cron run does, not at the
// next sweep (a minute away with this lease).
func TestOffScheduleHolderTakesUpBufferedAtItsEnd(t *testing.T) {
	t.Parallel()
	e := newFireEnv(t)
	job := newOverlapJob()
	e.reg.Register("oh", actions.Action{Handler: job, Policy: jobs.Policy{Overlap: jobs.OverlapBufferOne}})
	r1, r2 := e.runner(t, "r1", 3*time.Minute), e.runner(t, "r2", 3*time.Minute)
	slot := time.Now().Truncate(time.Second).UTC()
	held := make(chan OffScheduleResult, 1)
	go func() { held <- r1.RunOffSchedule(bufferedOff("oh", "trigger/holder", slot.Add(3*time.Millisecond))) }()
	waitFor(t, 10*time.Second, "the holder to start", func() bool { return job.started() == 1 })
	if res := r2.RunOffSchedule(bufferedOff("oh", "trigger/next", slot.Add(5*time.Millisecond))); res.Status != record.StatusBuffered {
		t.Fatalf("request behind the holder: %+v, want buffered", res)
	}
	job.release <- struct{}{}
	if res := <-held; !res.Ran || res.Status != record.StatusSucceeded {
		t.Fatalf("holder: %+v, want succeeded", res)
	}
	waitFor(t, 10*time.Second, "the buffered request to start", func() bool { return job.started() == 2 })
	ran := job.snapshot()
	if wait := ran[1].start.Sub(ran[0].end); wait > 2*time.Second || ran[1].fence != ran[0].fence+1 {
		t.Errorf("buffered request %+v started %s after the holder %+v ended: want at once, the holder's fence plus one", ran[1], wait, ran[0])
	}
	close(job.release)
	if runs := e.decided(t, "oh", 2); runs[1].ID != "trigger/next" || runs[1].Status != record.StatusSucceeded || runs[1].Fence != ran[1].fence {
		t.Errorf("records %+v: want the request's run succeeded with the fence it ran with", runs)
	}
}
