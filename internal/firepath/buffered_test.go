package firepath

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cronswap/cronswap/internal/actions"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/jobs"
	"github.com/cronswap/cronswap/schedule"
)

// overlapJob is an action that outlasts its interval: each run records
// when it started and ended and waits until released (or cancelled).
type overlapJob struct {
	release chan struct{}
	mu      sync.Mutex
	runs    []overlapRun
	running int
	peak    int
}

type overlapRun struct {
	slot       time.Time
	instance   string
	fence      int64
	start, end time.Time
	cancelled  error
}

func newOverlapJob() *overlapJob { return &overlapJob{release: make(chan struct{})} }

func (j *overlapJob) Handle(ctx context.Context, f jobs.Run) error {
	j.mu.Lock()
	i := len(j.runs)
	j.runs = append(j.runs, overlapRun{slot: f.Slot, instance: f.InstanceID, fence: f.Fence, start: time.Now()})
	j.running++
	j.peak = max(j.peak, j.running)
	j.mu.Unlock()
	var err error
	select {
	case <-j.release:
	case <-ctx.Done():
		err = context.Cause(ctx)
	}
	j.mu.Lock()
	j.runs[i].end, j.runs[i].cancelled = time.Now(), err
	j.running--
	j.mu.Unlock()
	return err
}

func (j *overlapJob) snapshot() []overlapRun {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.runs)
}

func (j *overlapJob) started() int { return len(j.snapshot()) }

// records waits until job's records of the slots are all decided (none
// claiming, buffered or running) and returns them by slot.
func (e *fireEnv) decided(t *testing.T, job string, n int) []record.RunDoc {
	t.Helper()
	var runs []record.RunDoc
	waitFor(t, 30*time.Second, fmt.Sprintf("%d decided records of %s", n, job), func() bool {
		runs = e.runDocs(t, job)
		if len(runs) != n {
			return false
		}
		for _, r := range runs {
			if r.Status == record.StatusClaiming || r.Status == record.StatusBuffered || r.Status == record.StatusRunning {
				return false
			}
		}
		return true
	})
	return runs
}

func statuses(runs []record.RunDoc) []string {
	out := make([]string, len(runs))
	for i, r := range runs {
		out[i] = r.Status
	}
	return out
}

// Each policy with an action that outlasts its interval, on two replicas
// sharing the database: the first run holds the job while three more
// slots come due (alternately on each replica); the records and the
// runs' start and end times are what the policy says.
func TestFirePathOverlapPolicies(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		policy jobs.Overlap
		want   []string // statuses of the four slots
		ran    int      // runs that start, in slot order
	}{
		{jobs.OverlapSkip, []string{record.StatusSucceeded, record.StatusSkipped, record.StatusSkipped, record.StatusSkipped}, 1},
		{jobs.OverlapBufferOne, []string{record.StatusSucceeded, record.StatusSucceeded, record.StatusSkipped, record.StatusSkipped}, 2},
		{jobs.OverlapBufferAll, []string{record.StatusSucceeded, record.StatusSucceeded, record.StatusSucceeded, record.StatusSucceeded}, 4},
		{jobs.OverlapAllow, []string{record.StatusSucceeded, record.StatusSucceeded, record.StatusSucceeded, record.StatusSucceeded}, 4},
	} {
		t.Run(string(tc.policy), func(t *testing.T) {
			t.Parallel()
			e := newFireEnv(t)
			job := newOverlapJob()
			id := "o_" + string(tc.policy)
			e.reg.Register(id, actions.Action{Handler: job, Policy: jobs.Policy{Overlap: tc.policy}})
			replicas := []*Runner{e.runner(t, "r1", time.Minute), e.runner(t, "r2", time.Minute)}
			slot := time.Now().Truncate(time.Second)
			var wg sync.WaitGroup
			wg.Go(func() { replicas[0].Fire(dueAt(id, slot)) })
			waitFor(t, 10*time.Second, "the first run to start", func() bool { return job.started() == 1 })
			for i := 1; i <= 3; i++ {
				s := slot.Add(time.Duration(i) * time.Second)
				r := replicas[i%2]
				if tc.policy == jobs.OverlapAllow {
					wg.Go(func() { r.Fire(dueAt(id, s)) })
					waitFor(t, 10*time.Second, "the overlapping run to start", func() bool { return job.started() == i+1 })
					continue
				}
				r.Fire(dueAt(id, s)) // returns once the fire is skipped or buffered
			}
			if got := job.started(); got != 1 && tc.policy != jobs.OverlapAllow {
				t.Fatalf("%d runs started while the first holds the job, want 1", got)
			}
			close(job.release)
			wg.Wait()
			runs := e.decided(t, id, 4)
			if got := statuses(runs); !slices.Equal(got, tc.want) {
				t.Fatalf("records %v, want %v", got, tc.want)
			}
			waitFor(t, 10*time.Second, "the buffered runs", func() bool { return job.started() == tc.ran })
			ran := job.snapshot()
			for i, r := range ran {
				if tc.policy != jobs.OverlapAllow && !r.slot.Equal(slot.Add(time.Duration(i)*time.Second).UTC()) {
					t.Errorf("run %d is of slot %v, want slot order", i, r.slot)
				}
				if i > 0 && tc.policy != jobs.OverlapAllow {
					if r.start.Before(ran[i-1].end) {
						t.Errorf("run %d started %v before run %d ended", i, ran[i-1].end.Sub(r.start), i-1)
					}
					if r.fence <= ran[i-1].fence {
						t.Errorf("run %d fence %d after %d, want increasing", i, r.fence, ran[i-1].fence)
					}
				}
			}
			// The records say the same: runs of a job that may not overlap
			// do not.
			var prev *record.RunDoc
			for k := range runs {
				r := &runs[k]
				if r.Status != record.StatusSucceeded {
					continue
				}
				if prev != nil && tc.policy != jobs.OverlapAllow && r.StartedAt.Before(prev.EndedAt) {
					t.Errorf("record %s started before %s ended", r.ID, prev.ID)
				}
				prev = r
			}
			if tc.policy == jobs.OverlapAllow && job.peak != 4 {
				t.Errorf("allow: at most %d runs at once, want 4", job.peak)
			}
			if l := e.lock(t, id); l.State != record.LockFree || len(e.bufferRunIDs(t, id)) != 0 {
				t.Errorf("lock %+v: want free with nothing buffered", l)
			}
		})
	}
}

// cancel_other: a fire on another replica while the job runs stops the
// running action within 2 s (the holder checks every second, not at its
// next renewal, a minute away here); the stopped run is recorded abandoned
// naming its replacement, which starts as soon as it ended. A fire on the
// holder itself stops its run at once.
func TestFirePathCancelOther(t *testing.T) {
	t.Parallel()
	e := newFireEnv(t)
	job := newOverlapJob()
	e.reg.Register("c", actions.Action{Handler: job, Policy: jobs.Policy{Overlap: jobs.OverlapCancelOther}})
	r1, r2 := e.runner(t, "r1", 3*time.Minute), e.runner(t, "r2", 3*time.Minute)
	slot := time.Now().Truncate(time.Second)
	var wg sync.WaitGroup
	wg.Go(func() { r1.Fire(dueAt("c", slot)) })
	waitFor(t, 10*time.Second, "the first run to start", func() bool { return job.started() == 1 })

	s1 := slot.Add(time.Second)
	asked := time.Now()
	r2.Fire(dueAt("c", s1))
	waitFor(t, 10*time.Second, "the replacing run to start", func() bool { return job.started() == 2 })
	ran := job.snapshot()
	if took := ran[0].end.Sub(asked); took > 2*time.Second {
		t.Errorf("first run stopped %v after the replacing fire, want within 2s", took)
	}
	if ran[1].start.Before(ran[0].end) || !ran[1].slot.Equal(s1.UTC()) {
		t.Errorf("replacing run %+v started before the first %+v ended", ran[1], ran[0])
	}

	s2 := slot.Add(2 * time.Second)
	asked = time.Now()
	holder := r2
	if ran[1].instance == "r1" {
		holder = r1
	}
	holder.Fire(dueAt("c", s2))
	waitFor(t, 10*time.Second, "the third run to start", func() bool { return job.started() == 3 })
	ran = job.snapshot()
	if took := ran[1].end.Sub(asked); took > time.Second {
		t.Errorf("a fire on the holder stopped its run after %v, want at once", took)
	}
	close(job.release)
	wg.Wait()
	runs := e.decided(t, "c", 3)
	if got := statuses(runs); !slices.Equal(got, []string{record.StatusAbandoned, record.StatusAbandoned, record.StatusSucceeded}) {
		t.Fatalf("records %v, want abandoned, abandoned, succeeded", got)
	}
	for i, r := range runs[:2] {
		if next := record.RunID("c", runs[i+1].ScheduledAt); !strings.Contains(r.Error, next) || r.EndedAt.IsZero() {
			t.Errorf("record %+v: want its end and the run replacing it (%s) named", r, next)
		}
		if runs[i+1].StartedAt.Before(r.EndedAt) {
			t.Errorf("record %s started before %s ended", runs[i+1].ID, r.ID)
		}
	}
}

// A holder that dies with a fire buffered behind it and no further fire
// coming: a replica's sweep finds the lock past its lease with a fire
// waiting and runs it, once, although no claim comes along.
func TestFirePathBufferedFireAfterHolderDied(t *testing.T) {
	t.Parallel()
	e := newFireEnv(t)
	job := newOverlapJob()
	close(job.release)
	e.reg.Register("b", actions.Action{Handler: job, Policy: jobs.Policy{Overlap: jobs.OverlapBufferOne}})
	const ttl = 3 * time.Second
	// Two live replicas: both sweep, the fire runs once.
	r2 := e.runner(t, "r2", ttl)
	e.runner(t, "r3", ttl)
	// The holder is a store alone: it claims and then never renews nor
	// ends, like a SIGKILLed replica.
	slot := time.Now().Truncate(time.Second)
	dead := e.replica("dead", "d1")
	dead.claimOne(t, record.FireClaim{JobID: "b", Slot: slot, Overlap: jobs.OverlapBufferOne}, time.Now(), record.Acquired)
	s1 := slot.Add(time.Second)
	r2.Fire(dueAt("b", s1))
	if st := e.run(t, record.RunID("b", s1)).Status; st != record.StatusBuffered {
		t.Fatalf("fire behind the holder recorded %s, want buffered", st)
	}
	waitFor(t, 30*time.Second, "the buffered fire to run after the holder's lease", func() bool {
		return e.run(t, record.RunID("b", s1)).Status == record.StatusSucceeded
	})
	ran := job.snapshot()
	if len(ran) != 1 || !ran[0].slot.Equal(s1.UTC()) || ran[0].fence != record.FenceOf(s1) {
		t.Fatalf("runs %+v, want the buffered fire once with its fence", ran)
	}
}

// A run stopped by cancel_other ends with ReasonReplaced, so that what
// reads run ends (the outbox) can tell a replacement from a fault.
func TestCancelledRunEndsReplaced(t *testing.T) {
	t.Parallel()
	store := &endRecorder{memStore: newMemStore()}
	reg := actions.NewRegistry()
	started := make(chan struct{}, 2)
	reg.Register("a", actions.Action{Handler: jobs.HandlerFunc(func(ctx context.Context, f jobs.Run) error {
		started <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}), Policy: jobs.Policy{Overlap: jobs.OverlapCancelOther}})
	r := memRunner(t, store, reg, "r1", nil)
	slot := time.Now().Truncate(time.Second)
	done := make(chan struct{})
	go func() { r.Fire(memDue("j", slot)); close(done) }()
	<-started
	var l record.Lease
	waitFor(t, 10*time.Second, "the run's lease held", func() bool {
		r.leases.mu.Lock()
		defer r.leases.mu.Unlock()
		for _, h := range r.leases.held {
			l = h.lease
		}
		return l.RunID != ""
	})
	if !r.leases.cancelRun(l.RunID, "j@next") {
		t.Fatal("the runner does not hold the run")
	}
	waitClosed(t, done, 10*time.Second, "the cancelled fire to return")
	ends := store.ended()
	if len(ends) != 1 || ends[0].End.Status != record.StatusAbandoned || ends[0].End.Reason != record.ReasonReplaced ||
		!strings.Contains(ends[0].End.Error, "j@next") {
		t.Fatalf("ends %+v: want one abandoned, reason replaced, naming the replacing run", ends)
	}
}

// endRecorder is a memStore that keeps the ends it was given.
type endRecorder struct {
	*memStore
	mu   sync.Mutex
	ends []record.LeaseEnd
}

func (s *endRecorder) EndBatch(ctx context.Context, ends []record.LeaseEnd) []error {
	s.mu.Lock()
	s.ends = append(s.ends, ends...)
	s.mu.Unlock()
	return s.memStore.EndBatch(ctx, ends)
}

func (s *endRecorder) ended() []record.LeaseEnd {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.ends)
}

// A buffered fire runs what it named when it was due: its args reach the
// action on whichever replica takes it up; one naming an action this
// replica does not have is recorded failed, and the job goes on.
func TestFirePathBufferedFireKeepsWhatItNamed(t *testing.T) {
	t.Parallel()
	e := newFireEnv(t)
	job := newOverlapJob()
	args := make(chan string, 4)
	e.reg.Register("k", actions.Action{Handler: jobs.HandlerFunc(func(ctx context.Context, f jobs.Run) error {
		args <- string(f.Args)
		return job.Handle(ctx, f)
	}), Policy: jobs.Policy{Overlap: jobs.OverlapBufferOne}})
	r1, r2 := e.runner(t, "r1", time.Minute), e.runner(t, "r2", time.Minute)
	slot := time.Now().Truncate(time.Second)
	due := func(s time.Time, a string) schedule.Due {
		d := dueAt("k", s)
		d.Schedule.Args = a
		return d
	}
	var wg sync.WaitGroup
	wg.Go(func() { r1.Fire(due(slot, `{"n":0}`)) })
	waitFor(t, 10*time.Second, "the first run", func() bool { return job.started() == 1 })
	r2.Fire(due(slot.Add(time.Second), `{"n":1}`))
	close(job.release)
	wg.Wait()
	e.decided(t, "k", 2)
	if got := []string{<-args, <-args}; got[0] != `{"n":0}` || got[1] != `{"n":1}` {
		t.Fatalf("args %v, want each fire's own", got)
	}

	// A buffered fire whose action is gone from this replica's config.
	s2, s3 := slot.Add(2*time.Second), slot.Add(3*time.Second)
	other := e.replica("other", "o1")
	held := other.claimOne(t, record.FireClaim{JobID: "k", Slot: s2, Overlap: jobs.OverlapBufferOne}, time.Now(), record.Acquired)
	other.claimOne(t, record.FireClaim{JobID: "k", Slot: s3, Overlap: jobs.OverlapBufferOne, Schedule: &schedule.Schedule{ID: "k", Job: "gone"}}, time.Now(), record.Buffered)
	other.end(t, held.Lease, time.Now())
	r2.drainSoon("k", jobs.OverlapBufferOne)
	waitFor(t, 10*time.Second, "the buffered fire of an unknown action recorded", func() bool {
		return e.run(t, record.RunID("k", s3)).Status == record.StatusFailed
	})
	if r := e.run(t, record.RunID("k", s3)); !strings.Contains(r.Error, "gone") {
		t.Fatalf("record %+v: want the unknown action named", r)
	}
	if l := e.lock(t, "k"); l.State != record.LockFree {
		t.Fatalf("lock %+v: want free", l)
	}
}
