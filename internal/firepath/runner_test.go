package firepath

import (
	"context"
	"encoding/hex"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cronswap/cronswap/internal/actions"
	"github.com/cronswap/cronswap/jobs"
	"github.com/cronswap/cronswap/schedule"
)

// killOnCleanup kills pid at the end of the test if it is still there (only
// when the test failed), so a failing run leaves no 300s sleep behind.
func killOnCleanup(t *testing.T, pid int) {
	t.Cleanup(func() {
		if !processGone(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(pid, &ws, 0, nil)
		}
	})
}

// processGone reports whether pid no longer exists. Orphans are reparented
// to the test process (see setSubreaper), so it reaps pid first if it can.
func processGone(pid int) bool {
	var ws syscall.WaitStatus
	_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

type outcome struct {
	f    jobs.Run
	err  error
	took time.Duration
}

type runnerHarness struct {
	reg  *actions.Registry
	r    *Runner
	done chan outcome
	mu   sync.Mutex
	// armed holds each job's schedule, as the engine would hand it over.
	armed map[string]schedule.Schedule
}

func newHarness(t *testing.T) *runnerHarness {
	t.Helper()
	h := &runnerHarness{reg: actions.NewRegistry(), done: make(chan outcome, 10000), armed: map[string]schedule.Schedule{}}
	h.r = NewRunner(RunnerOptions{
		Registry:   h.reg,
		InstanceID: "replica-a",
		Logger:     slog.New(slog.DiscardHandler),
		Done:       func(f jobs.Run, err error, took time.Duration) { h.done <- outcome{f, err, took} },
	})
	return h
}

func (h *runnerHarness) arm(id, action, args string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.armed[id] = schedule.Schedule{ID: id, Enabled: true, Job: action, Args: args}
}

// due is the fire of job id's armed schedule for slot.
func (h *runnerHarness) due(id string, slot time.Time) schedule.Due {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.armed[id]
	if !ok {
		panic("job " + id + " is not armed")
	}
	return schedule.Due{Schedule: s, Slot: slot}
}

func (h *runnerHarness) outcome(t *testing.T) outcome {
	t.Helper()
	select {
	case o := <-h.done:
		return o
	case <-time.After(10 * time.Second):
		t.Fatal("Done was not called")
		return outcome{}
	}
}

func (h *runnerHarness) noOutcome(t *testing.T) {
	t.Helper()
	select {
	case o := <-h.done:
		t.Fatalf("unexpected Done(%+v)", o)
	default:
	}
}

// fireAsync runs Fire in a goroutine; the channel closes when it returns.
func fireAsync(r *Runner, d schedule.Due) <-chan struct{} {
	ch := make(chan struct{})
	go func() { defer close(ch); r.Fire(d) }()
	return ch
}

func waitClosed(t *testing.T, ch <-chan struct{}, timeout time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(timeout):
		t.Fatalf("%s did not happen within %v", what, timeout)
	}
}

func TestRunnerFireFillsFire(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var got []jobs.Run
	var mu sync.Mutex
	h.reg.Register("report", actions.Action{Handler: jobs.HandlerFunc(func(ctx context.Context, f jobs.Run) error {
		mu.Lock()
		got = append(got, f)
		mu.Unlock()
		return nil
	})})
	h.arm("daily_report", "report", `{"region":"eu"}`)

	// A slot ahead of the clock: well within its starting deadline.
	slot := time.Date(2030, 3, 10, 9, 0, 0, 0, time.FixedZone("CET", 3600))
	h.r.Fire(h.due("daily_report", slot))
	h.r.Fire(h.due("daily_report", slot))

	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 {
		t.Fatalf("action ran %d times, want 2", len(got))
	}
	for i, f := range got {
		if f.JobID != "daily_report" || f.InstanceID != "replica-a" || string(f.Args) != `{"region":"eu"}` {
			t.Errorf("fire %d = %+v", i, f)
		}
		if !f.Slot.Equal(slot) || f.Slot.Location() != time.UTC {
			t.Errorf("fire %d ScheduledAt = %v, want %v in UTC", i, f.Slot, slot)
		}
		if b, err := hex.DecodeString(f.RunID); err != nil || len(b) < 8 {
			t.Errorf("fire %d RunID %q: want a random hex id", i, f.RunID)
		}
		o := h.outcome(t)
		if o.err != nil || o.f.RunID != f.RunID || o.took < 0 {
			t.Errorf("Done(%+v), want the fire with a nil error", o)
		}
	}
	if got[0].RunID == got[1].RunID {
		t.Errorf("two fires share RunID %q", got[0].RunID)
	}
}

func TestRunnerRunIDsUniqueConcurrent(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.reg.Register("noop", actions.Action{Handler: jobs.HandlerFunc(func(context.Context, jobs.Run) error { return nil }), Policy: jobs.Policy{Overlap: jobs.OverlapAllow}})
	h.arm("j", "noop", "")
	const n = 50
	var wg sync.WaitGroup
	slot := time.Now().Truncate(time.Second)
	for range n {
		wg.Add(1)
		go func() { defer wg.Done(); h.r.Fire(h.due("j", slot)) }()
	}
	wg.Wait()
	seen := map[string]bool{}
	for range n {
		o := h.outcome(t)
		if seen[o.f.RunID] {
			t.Fatalf("RunID %q repeated", o.f.RunID)
		}
		seen[o.f.RunID] = true
	}
}

func TestRunnerUnknownActionOrJob(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var ran atomic.Int32
	h.reg.Register("known", actions.Action{Handler: jobs.HandlerFunc(func(context.Context, jobs.Run) error { ran.Add(1); return nil })})
	h.arm("bad_action", "not-registered", `{}`)

	// Neither may run anything or panic; both return.
	h.r.Fire(h.due("bad_action", time.Now()))
	if n := ran.Load(); n != 0 {
		t.Fatalf("an action ran %d times", n)
	}
	// No run means no outcome — or, if one is ever reported, a clear error.
	select {
	case o := <-h.done:
		if o.f.JobID != "bad_action" || !errors.Is(o.err, actions.ErrUnknownAction) {
			t.Errorf("Done(%+v), want none or ErrUnknownAction for bad_action", o)
		}
	default:
	}

	// A nil Done is fine too.
	r := NewRunner(RunnerOptions{Registry: h.reg, Logger: slog.New(slog.DiscardHandler)})
	r.Fire(schedule.Due{Schedule: schedule.Schedule{ID: "x", Enabled: true, Job: "nope"}, Slot: time.Now()})
	if !r.Shutdown(time.Second) {
		t.Error("Shutdown of an idle runner = false")
	}
}

func TestRunnerRecoversPanic(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.reg.Register("boom", actions.Action{Handler: jobs.HandlerFunc(func(context.Context, jobs.Run) error { panic("kaboom") })})
	h.reg.Register("ok", actions.Action{Handler: jobs.HandlerFunc(func(context.Context, jobs.Run) error { return nil })})
	h.arm("p", "boom", "")
	h.arm("q", "ok", "")
	h.r.Fire(h.due("p", time.Now()))
	o := h.outcome(t)
	if o.err == nil || !strings.Contains(o.err.Error(), "panic") || !strings.Contains(o.err.Error(), "kaboom") {
		t.Fatalf("Done err = %v, want the recovered panic", o.err)
	}
	// The runner is still usable and Shutdown is not blocked by the panicked run.
	h.r.Fire(h.due("q", time.Now()))
	if o := h.outcome(t); o.err != nil {
		t.Fatalf("after a panic: %v", o.err)
	}
	if !h.r.Shutdown(5 * time.Second) {
		t.Error("Shutdown = false after a recovered panic")
	}
}

func TestRunnerReportsError(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	want := errors.New("upstream said no")
	h.reg.Register("fail", actions.Action{Handler: jobs.HandlerFunc(func(context.Context, jobs.Run) error { return want })})
	h.arm("f", "fail", "")
	h.r.Fire(h.due("f", time.Now()))
	if o := h.outcome(t); !errors.Is(o.err, want) || o.f.JobID != "f" {
		t.Fatalf("Done(%+v), want error %v", o, want)
	}
}

func TestRunnerAppliesTimeout(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	const timeout = 200 * time.Millisecond
	var deadline time.Time
	var hasDeadline bool
	h.reg.Register("slow", actions.Action{Handler: jobs.HandlerFunc(func(ctx context.Context, f jobs.Run) error {
		deadline, hasDeadline = ctx.Deadline()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Second):
			return errors.New("the timeout was not applied")
		}
	}), Policy: jobs.Policy{Timeout: timeout}})
	h.reg.Register("untimed", actions.Action{Handler: jobs.HandlerFunc(func(ctx context.Context, f jobs.Run) error {
		if _, ok := ctx.Deadline(); ok {
			return errors.New("unexpected deadline")
		}
		return nil
	})})
	h.arm("s", "slow", "")
	h.arm("u", "untimed", "")

	start := time.Now()
	h.r.Fire(h.due("s", time.Now()))
	took := time.Since(start)
	o := h.outcome(t)
	if !errors.Is(o.err, context.DeadlineExceeded) {
		t.Fatalf("Done err = %v, want context.DeadlineExceeded", o.err)
	}
	if !hasDeadline || deadline.Before(start.Add(timeout)) || deadline.After(start.Add(timeout+5*time.Second)) {
		t.Errorf("action deadline %v (set %v), want about start+%v", deadline, hasDeadline, timeout)
	}
	if took < timeout || took > timeout+5*time.Second {
		t.Errorf("Fire took %v, want about %v", took, timeout)
	}
	if o.took < timeout {
		t.Errorf("Done took %v, want >= %v", o.took, timeout)
	}

	h.r.Fire(h.due("u", time.Now()))
	if o := h.outcome(t); o.err != nil {
		t.Errorf("no timeout: %v", o.err)
	}
}

// The timeout of an exec action kills its process; Fire returns promptly.
func TestRunnerExecTimeout(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	pidfile := filepath.Join(t.TempDir(), "pid")
	h.reg.Register("sleepy", actions.Action{Handler: &actions.ExecAction{
		Argv: []string{"sh", "-c", `echo $$ > "$1"; exec sleep 300`, "sh", pidfile}}, Policy: jobs.Policy{Timeout: time.Second}})
	h.arm("s", "sleepy", `{"x":1}`)
	start := time.Now()
	h.r.Fire(h.due("s", time.Now()))
	if took := time.Since(start); took > 6*time.Second {
		t.Fatalf("Fire took %v with a 1s timeout", took)
	}
	o := h.outcome(t)
	var ee *actions.ExitError
	if !errors.As(o.err, &ee) || !errors.Is(o.err, context.DeadlineExceeded) || ee.Code == 0 {
		t.Fatalf("Done err = %v, want *ExitError wrapping DeadlineExceeded", o.err)
	}
	waitPIDGone(t, pidfile, 10*time.Second, "the program to be gone")
}

// blockingAction signals started, then blocks until release or ctx ends.
type blockingAction struct {
	started chan struct{}
	release chan struct{}
}

func newBlocking() *blockingAction {
	return &blockingAction{started: make(chan struct{}, 10), release: make(chan struct{})}
}

func (b *blockingAction) Handle(ctx context.Context, f jobs.Run) error {
	b.started <- struct{}{}
	select {
	case <-b.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func TestRunnerShutdownWaitsWithinGrace(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	blk := newBlocking()
	var probes atomic.Int32
	h.reg.Register("block", actions.Action{Handler: blk})
	h.reg.Register("probe", actions.Action{Handler: jobs.HandlerFunc(func(context.Context, jobs.Run) error { probes.Add(1); return nil })})
	h.arm("b", "block", "")
	h.arm("p", "probe", "")

	fired := fireAsync(h.r, h.due("b", time.Now()))
	recvWithin(t, blk.started, 10*time.Second, "action start")

	shut := make(chan bool, 1)
	go func() { shut <- h.r.Shutdown(time.Minute) }()

	// Once Shutdown has begun, fires are refused: fire the probe until one
	// does not run (earlier ones may run before Shutdown set its flag).
	waitFor(t, 10*time.Second, "Shutdown to refuse fires", func() bool {
		before := probes.Load()
		h.r.Fire(h.due("p", time.Now()))
		return probes.Load() == before
	})
	for range probes.Load() {
		if o := h.outcome(t); o.f.JobID != "p" || o.err != nil {
			t.Fatalf("probe outcome %+v", o)
		}
	}
	select {
	case ok := <-shut:
		t.Fatalf("Shutdown returned %v while an action was running", ok)
	default:
	}

	close(blk.release)
	select {
	case ok := <-shut:
		if !ok {
			t.Error("Shutdown = false, want true: the action ended within grace")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown did not return after the action ended")
	}
	waitClosed(t, fired, 10*time.Second, "Fire return")
	if o := h.outcome(t); o.f.JobID != "b" || o.err != nil {
		t.Errorf("Done(%+v), want b succeeded", o)
	}

	// After Shutdown: refused, nothing runs, Done is not called.
	n := probes.Load()
	h.r.Fire(h.due("p", time.Now()))
	h.r.Fire(h.due("b", time.Now()))
	if probes.Load() != n || len(blk.started) != 0 {
		t.Error("an action ran after Shutdown")
	}
	h.noOutcome(t)
}

func TestRunnerShutdownCancelsAfterGrace(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	blk := newBlocking()
	h.reg.Register("block", actions.Action{Handler: blk})
	h.arm("b", "block", "")

	fired := fireAsync(h.r, h.due("b", time.Now()))
	recvWithin(t, blk.started, 10*time.Second, "action start")

	const grace = 200 * time.Millisecond
	start := time.Now()
	ok := h.r.Shutdown(grace)
	took := time.Since(start)
	if ok {
		t.Error("Shutdown = true, want false: the action outlived the grace period")
	}
	if took < grace || took > grace+5*time.Second {
		t.Errorf("Shutdown took %v, want about the %v grace", took, grace)
	}
	// Shutdown waited for the cancelled action, so Fire returns at once.
	waitClosed(t, fired, 5*time.Second, "Fire return after Shutdown")
	o := h.outcome(t)
	if !errors.Is(o.err, context.Canceled) {
		t.Errorf("Done err = %v, want context.Canceled", o.err)
	}
	// A second Shutdown is harmless.
	if !h.r.Shutdown(time.Second) {
		t.Error("second Shutdown = false")
	}
}

// The grace period cancels exec actions too, killing the process.
func TestRunnerShutdownKillsExec(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	pidfile := filepath.Join(t.TempDir(), "pid")
	h.reg.Register("sleepy", actions.Action{Handler: &actions.ExecAction{
		Argv: []string{"sh", "-c", `sleep 300 & echo $! > "$1"; wait`, "sh", pidfile}}})
	h.arm("s", "sleepy", "")
	fired := fireAsync(h.r, h.due("s", time.Now()))
	waitFor(t, 30*time.Second, "pid file", func() bool {
		b, err := os.ReadFile(pidfile)
		return err == nil && strings.HasSuffix(string(b), "\n")
	})
	b, _ := os.ReadFile(pidfile)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	killOnCleanup(t, pid)
	if h.r.Shutdown(100 * time.Millisecond) {
		t.Error("Shutdown = true with a 300s action")
	}
	waitClosed(t, fired, 5*time.Second, "Fire return after Shutdown")
	if o := h.outcome(t); !errors.Is(o.err, context.Canceled) {
		t.Errorf("Done err = %v, want context.Canceled", o.err)
	}
	waitFor(t, 10*time.Second, "grandchild sleep to be gone", func() bool { return processGone(pid) })
}

func TestRunnerShutdownIdle(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	start := time.Now()
	if !h.r.Shutdown(time.Minute) {
		t.Error("idle Shutdown = false")
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("idle Shutdown took %v", took)
	}
}

// recvWithin receives one value from c or fails after timeout.
func recvWithin(t *testing.T, c <-chan struct{}, timeout time.Duration, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(timeout):
		t.Fatalf("%s did not happen within %v", what, timeout)
	}
}

// The fire's schedule decides the run: its action and args come from the
// Due (the category too, for the worker pool and the Dispatched hook), and the Dispatched hook measures lateness from Due.At (the
// slot plus the planned jitter), not from the slot.
func TestRunnerFireTakesEverythingFromTheDue(t *testing.T) {
	t.Parallel()
	type dispatch struct {
		id, category string
		due, at      time.Time
	}
	dispatched := make(chan dispatch, 1)
	got := make(chan jobs.Run, 1)
	reg := actions.NewRegistry()
	reg.Register("report", actions.Action{Handler: jobs.HandlerFunc(func(_ context.Context, f jobs.Run) error { got <- f; return nil })})
	r := NewRunner(RunnerOptions{Registry: reg, InstanceID: "a", Logger: slog.New(slog.DiscardHandler),
		Hooks: Hooks{Dispatched: func(_ context.Context, id, category string, due, at time.Time) {
			dispatched <- dispatch{id, category, due, at}
		}}})
	defer r.Shutdown(time.Second)

	slot := time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC)
	r.Fire(schedule.Due{
		Schedule: schedule.Schedule{ID: "eu_report", Enabled: true, Job: "report", Category: "reports", Args: `{"region":"eu"}`},
		Slot:     slot,
		Delay:    7 * time.Second,
	})
	d := <-dispatched
	if d.id != "eu_report" || d.category != "reports" || !d.due.Equal(slot.Add(7*time.Second)) || d.at.IsZero() {
		t.Errorf("Dispatched(%q, %q, due %v, at %v), want eu_report of category reports due at the slot plus 7s", d.id, d.category, d.due, d.at)
	}
	f := <-got
	if f.JobID != "eu_report" || !f.Slot.Equal(slot) || string(f.Args) != `{"region":"eu"}` {
		t.Errorf("fire %+v: want job eu_report at the undelayed slot with the schedule's args", f)
	}
}
