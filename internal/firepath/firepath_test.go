package firepath

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/internal/actions"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/internal/runstore"
	"github.com/cronswap/cronswap/internal/testmongo"
	"github.com/cronswap/cronswap/jobs"
	"github.com/cronswap/cronswap/schedule"
)

// waitPIDGone reads the pid a test action wrote to pidfile, makes sure the
// process is killed at the end of the test if it is still there, and waits
// up to within for it to be gone.
func waitPIDGone(t *testing.T, pidfile string, within time.Duration, what string) {
	t.Helper()
	b, err := os.ReadFile(pidfile)
	if err != nil {
		t.Fatalf("pid file: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		t.Fatalf("pid file %q: %v", b, err)
	}
	killOnCleanup(t, pid)
	waitFor(t, within, what+" (pid "+strconv.Itoa(pid)+")", func() bool { return processGone(pid) })
}

// dueAt is the fire for slot of job id's schedule, which runs the action
// named like the job.
func dueAt(id string, slot time.Time) schedule.Due {
	return schedule.Due{Schedule: schedule.Schedule{ID: id, Enabled: true}, Slot: slot}
}

// fireEnv is a set of runners (replicas) sharing one test database.
type fireEnv struct {
	storeEnv
	reg *actions.Registry
	mu  sync.Mutex
	// hooks record what the runners reported.
	notRun  []string
	ended   []string
	claimed []string
}

func newFireEnv(t *testing.T) *fireEnv {
	t.Helper()
	return &fireEnv{storeEnv: newStoreEnv(t), reg: actions.NewRegistry()}
}

func (e *fireEnv) runner(t *testing.T, instance string, ttl time.Duration) *Runner {
	t.Helper()
	r := NewRunner(RunnerOptions{
		Registry:   e.reg,
		InstanceID: instance,
		Logger:     slog.New(slog.DiscardHandler),
		Store:      runstore.New(e.locks, e.runs, runstore.Options{Instance: instance, Logger: slog.New(slog.DiscardHandler)}),
		TTL:        ttl,
		Workers:    4,
		Hooks: Hooks{
			Claimed: func(id, result string) { e.record(&e.claimed, id+":"+result) },
			RunEnded: func(id, status string) {
				e.record(&e.ended, id+":"+status)
			},
			NotRun: func(id string, slot time.Time, reason string) { e.record(&e.notRun, id+":"+reason) },
		},
	})
	t.Cleanup(func() { r.Shutdown(30 * time.Second) })
	return r
}

func (e *fireEnv) record(to *[]string, s string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	*to = append(*to, s)
}

func (e *fireEnv) count(from *[]string, s string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, x := range *from {
		if x == s {
			n++
		}
	}
	return n
}

// Three replicas fire every slot of a job at once: each slot runs exactly
// once and is recorded once.
func TestFirePathExactlyOnceAcrossReplicas(t *testing.T) {
	t.Parallel()
	e := newFireEnv(t)
	var mu sync.Mutex
	ran := map[time.Time][]int64{}
	action := jobs.HandlerFunc(func(ctx context.Context, f jobs.Run) error {
		mu.Lock()
		ran[f.Slot] = append(ran[f.Slot], f.Fence)
		mu.Unlock()
		return nil
	})
	e.reg.Register("forbid_job", actions.Action{Handler: action})
	e.reg.Register("allow_job", actions.Action{Handler: action, Policy: jobs.Policy{Overlap: jobs.OverlapAllow}})
	replicas := []*Runner{e.runner(t, "r1", time.Minute), e.runner(t, "r2", time.Minute), e.runner(t, "r3", time.Minute)}
	for _, job := range []string{"forbid_job", "allow_job"} {
		clear(ran)
		start := time.Now().Truncate(time.Second)
		const slots = 15
		for i := range slots {
			slot := start.Add(time.Duration(i) * time.Second)
			var wg sync.WaitGroup
			for _, r := range replicas {
				wg.Go(func() { r.Fire(dueAt(job, slot)) })
			}
			wg.Wait()
		}
		if len(ran) != slots {
			t.Fatalf("%s: %d slots ran, want %d", job, len(ran), slots)
		}
		var last int64
		for i := range slots {
			slot := start.Add(time.Duration(i) * time.Second).UTC()
			fences := ran[slot]
			if len(fences) != 1 {
				t.Fatalf("%s slot %v ran %d times", job, slot, len(fences))
			}
			if fences[0] <= last {
				t.Errorf("%s: fence %d after %d, want strictly increasing", job, fences[0], last)
			}
			last = fences[0]
		}
		runs := e.runDocs(t, job)
		if len(runs) != slots {
			t.Fatalf("%s: %d run records, want %d", job, len(runs), slots)
		}
		for _, r := range runs {
			if r.Status != record.StatusSucceeded || r.EndedAt.Before(r.StartedAt) {
				t.Errorf("%s run %+v: want succeeded with an end", job, r)
			}
		}
	}
}

// A run lasting 3× the TTL on a live holder is never taken over: its
// renewals keep the lease, other replicas' fires are skipped.
func TestFirePathRenewalKeepsLongRun(t *testing.T) {
	t.Parallel()
	e := newFireEnv(t)
	const ttl = time.Second
	started := make(chan struct{}, 1)
	var cancelled atomic.Bool
	e.reg.Register("long", actions.Action{Handler: jobs.HandlerFunc(func(ctx context.Context, f jobs.Run) error {
		started <- struct{}{}
		select {
		case <-ctx.Done():
			cancelled.Store(true)
			return ctx.Err()
		case <-time.After(3*ttl + ttl/2):
			return nil
		}
	})})
	a, b := e.runner(t, "a", ttl), e.runner(t, "b", ttl)
	slot := time.Now().Truncate(time.Second)
	done := make(chan struct{})
	go func() { defer close(done); a.Fire(dueAt("long", slot)) }()
	<-started
	// b fires later slots all through the run (and past several TTLs).
	next := slot
	for {
		select {
		case <-done:
		default:
			next = next.Add(time.Second)
			b.Fire(dueAt("long", next))
			time.Sleep(200 * time.Millisecond)
			continue
		}
		break
	}
	if cancelled.Load() {
		t.Fatal("the long run was cancelled")
	}
	runs := e.runDocs(t, "long")
	if len(runs) < 2 {
		t.Fatalf("runs %+v: want the long run and skipped fires", runs)
	}
	if runs[0].Status != record.StatusSucceeded || runs[0].Instance != "a" || runs[0].EndedAt.Sub(runs[0].StartedAt) < 3*ttl {
		t.Fatalf("long run %+v: want succeeded on a, lasting > 3 TTL", runs[0])
	}
	for _, r := range runs[1:] {
		// Slots fired while the run held the lock are skipped; one fired
		// after it ended may run — but never as a takeover.
		if r.Status != record.StatusSkipped && r.Status != record.StatusSucceeded {
			t.Errorf("run %+v: want skipped", r)
		}
	}
	if n := e.count(&e.claimed, "long:taken_over"); n != 0 {
		t.Errorf("%d takeovers", n)
	}
}

// A fire whose job's lock is held by a dead replica past its lease takes
// the lock over and runs: its claim reports taken_over (the result
// cronswap_lock_acquisitions_total counts, and an alert watches), not
// acquired.
func TestFirePathTakeoverReported(t *testing.T) {
	t.Parallel()
	e := newFireEnv(t)
	e.reg.Register("gone", actions.Action{Handler: jobs.HandlerFunc(func(context.Context, jobs.Run) error { return nil }),
		Policy: jobs.Policy{Overlap: jobs.OverlapSkip}})
	a := e.runner(t, "a", 10*time.Second)
	slot := time.Now().Truncate(time.Second)
	// The holder is a store alone that claimed a minute ago and then
	// stopped, like a SIGKILLed replica: its lease is long past.
	dead := e.replica("dead", "d1")
	held := dead.claimOne(t, record.FireClaim{JobID: "gone", Slot: slot.Add(-time.Second), Overlap: jobs.OverlapSkip},
		time.Now().Add(-time.Minute), record.Acquired)
	a.Fire(dueAt("gone", slot))
	waitFor(t, 30*time.Second, "the fire to run after the takeover", func() bool {
		return e.run(t, record.RunID("gone", slot)).Status == record.StatusSucceeded
	})
	if n, m := e.count(&e.claimed, "gone:taken_over"), e.count(&e.claimed, "gone:acquired"); n != 1 || m != 0 {
		t.Errorf("%d taken_over and %d acquired claims: want one taken_over, no acquired", n, m)
	}
	if l := e.lock(t, "gone"); l.Holder == "dead" || l.RunID == held.Lease.RunID {
		t.Errorf("lock %+v: want it taken from the dead replica", l)
	}
}

// An operator forcing the lock free (cronswap locks release) makes the
// holder's next renewal fail: the action is cancelled, the run abandoned.
func TestFirePathLockLossCancelsAction(t *testing.T) {
	t.Parallel()
	e := newFireEnv(t)
	const ttl = 900 * time.Millisecond
	started := make(chan struct{}, 1)
	e.reg.Register("victim", actions.Action{Handler: jobs.HandlerFunc(func(ctx context.Context, f jobs.Run) error {
		started <- struct{}{}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Minute):
			return errors.New("not cancelled")
		}
	})})
	a := e.runner(t, "a", ttl)
	done := make(chan struct{})
	go func() { defer close(done); a.Fire(dueAt("victim", time.Now().Truncate(time.Second))) }()
	<-started
	if _, err := e.locks.UpdateOne(testCtx(t), bson.D{{Key: "_id", Value: "victim"}}, bson.D{{Key: "$set", Value: bson.D{
		{Key: "state", Value: "free"}, {Key: "holder", Value: ""}, {Key: "run_id", Value: ""}, {Key: "lease_until", Value: time.Now()}}}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the action was not cancelled after the lock was forced free")
	}
	runs := e.runDocs(t, "victim")
	if len(runs) != 1 || runs[0].Status != record.StatusAbandoned || !strings.Contains(runs[0].Error, "lock lost") {
		t.Fatalf("runs %+v: want one abandoned run with a lock-lost error", runs)
	}
	if l := e.lock(t, "victim"); l.State != record.LockFree {
		t.Errorf("lock %+v: want free", l)
	}
}

func TestFirePathRecordsExecExitAndStderr(t *testing.T) {
	t.Parallel()
	e := newFireEnv(t)
	e.reg.Register("fails", actions.Action{Handler: &actions.ExecAction{Argv: []string{"sh", "-c", `echo out; echo first >&2; echo "the end" >&2; exit 3`}}})
	pidfile := filepath.Join(t.TempDir(), "pid")
	e.reg.Register("hangs", actions.Action{Handler: &actions.ExecAction{
		Argv: []string{"sh", "-c", `sleep 300 & echo $! > "$1"; echo started >&2; wait`, "sh", pidfile}}, Policy: jobs.Policy{Timeout: 500 * time.Millisecond}})
	e.reg.Register("ok", actions.Action{Handler: &actions.ExecAction{Argv: []string{"sh", "-c", "exit 0"}}})
	r := e.runner(t, "a", time.Minute)
	slot := time.Now().Truncate(time.Second)
	r.Fire(dueAt("fails", slot))
	r.Fire(dueAt("hangs", slot))
	r.Fire(dueAt("ok", slot))

	got := e.runDocs(t, "fails")
	if len(got) != 1 || got[0].Status != record.StatusFailed || got[0].ExitCode == nil || *got[0].ExitCode != 3 ||
		got[0].Stderr != "first\nthe end" || got[0].Stdout != "out" || !strings.Contains(got[0].Error, "exit 3") {
		t.Fatalf("fails: %+v", got)
	}
	got = e.runDocs(t, "hangs")
	if len(got) != 1 || got[0].Status != record.StatusFailed || got[0].ExitCode == nil || *got[0].ExitCode == 0 ||
		got[0].Stderr != "started" || !strings.Contains(got[0].Error, "deadline exceeded") {
		t.Fatalf("hangs: %+v", got)
	}
	waitPIDGone(t, pidfile, 10*time.Second, "the timed-out action's sleep grandchild to be gone")
	got = e.runDocs(t, "ok")
	// A succeeded exec run records its exit code too: 0.
	if len(got) != 1 || got[0].Status != record.StatusSucceeded || got[0].ExitCode == nil || *got[0].ExitCode != 0 || got[0].Error != "" {
		t.Fatalf("ok: %+v", got)
	}
	if l := e.lock(t, "fails"); l.LastOutcome != record.StatusFailed || l.State != record.LockFree {
		t.Errorf("lock of fails: %+v", l)
	}
}

// An exec action's output is kept in its run record, on success too: the
// tails of stdout and stderr, each bounded like the other.
func TestFirePathRecordsExecStdoutTail(t *testing.T) {
	t.Parallel()
	e := newFireEnv(t)
	e.reg.Register("chatty", actions.Action{Handler: &actions.ExecAction{TailBytes: 16,
		Argv: []string{"sh", "-c", `echo "heartbeat $CRONSWAP_JOB_ID"; printf 'a%.0s' $(seq 100); echo " end"; echo warn >&2`}}})
	e.reg.Register("quiet", actions.Action{Handler: &actions.ExecAction{Argv: []string{"true"}}})
	r := e.runner(t, "a", time.Minute)
	slot := time.Now().Truncate(time.Second)
	r.Fire(dueAt("chatty", slot))
	r.Fire(dueAt("quiet", slot))

	got := e.runDocs(t, "chatty")
	if len(got) != 1 || got[0].Status != record.StatusSucceeded || got[0].ExitCode == nil || *got[0].ExitCode != 0 {
		t.Fatalf("chatty: %+v", got)
	}
	// The last 16 bytes are 11 a's, " end" and the newline, which is trimmed.
	if want := strings.Repeat("a", 11) + " end"; got[0].Stdout != want || got[0].Stderr != "warn" {
		t.Errorf("chatty: stdout %q stderr %q, want the 16-byte stdout tail %q and stderr %q", got[0].Stdout, got[0].Stderr, want, "warn")
	}
	var raw bson.M
	if err := e.runs.FindOne(testCtx(t), bson.D{{Key: "_id", Value: got[0].ID}}).Decode(&raw); err != nil {
		t.Fatal(err)
	}
	if raw["stdout"] != got[0].Stdout {
		t.Errorf("job_runs document %v: want the field stdout next to stderr", raw)
	}
	got = e.runDocs(t, "quiet")
	if len(got) != 1 || got[0].Stdout != "" || got[0].Stderr != "" {
		t.Fatalf("quiet: %+v, want no output recorded", got)
	}
	var quiet bson.M
	if err := e.runs.FindOne(testCtx(t), bson.D{{Key: "_id", Value: got[0].ID}}).Decode(&quiet); err != nil {
		t.Fatal(err)
	}
	if _, ok := quiet["stdout"]; ok {
		t.Errorf("quiet run document %v: want no stdout field when nothing was printed", quiet)
	}
}

func TestFirePathRecordsHTTPOutcome(t *testing.T) {
	t.Parallel()
	e := newFireEnv(t)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		switch r.URL.Path {
		case "/ok":
			w.WriteHeader(http.StatusNoContent)
		case "/broken":
			w.WriteHeader(http.StatusBadGateway)
			_, _ = io.WriteString(w, "upstream down")
		case "/slow":
			select {
			case <-r.Context().Done():
			case <-release:
			}
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	e.reg.Register("ok", actions.Action{Handler: &actions.HTTPAction{URL: srv.URL + "/ok", Client: srv.Client()}})
	e.reg.Register("broken", actions.Action{Handler: &actions.HTTPAction{URL: srv.URL + "/broken", Client: srv.Client()}})
	e.reg.Register("slow", actions.Action{Handler: &actions.HTTPAction{URL: srv.URL + "/slow", Client: srv.Client()}, Policy: jobs.Policy{Timeout: 300 * time.Millisecond}})
	r := e.runner(t, "a", time.Minute)
	slot := time.Now().Truncate(time.Second)
	for _, id := range []string{"ok", "broken", "slow"} {
		r.Fire(dueAt(id, slot))
	}
	for id, want := range map[string]string{"ok": record.StatusSucceeded, "broken": record.StatusFailed, "slow": record.StatusFailed} {
		runs := e.runDocs(t, id)
		if len(runs) != 1 || runs[0].Status != want {
			t.Fatalf("%s: %+v, want one %s run", id, runs, want)
		}
	}
	if got := e.runDocs(t, "broken")[0].Error; !strings.Contains(got, "502") || !strings.Contains(got, "upstream down") {
		t.Errorf("broken error %q", got)
	}
	if got := e.runDocs(t, "slow")[0].Error; !strings.Contains(got, "deadline exceeded") {
		t.Errorf("slow error %q", got)
	}
	// The answer is on the record, as an exec action's output is: its
	// status and body, on success and failure; none when none came.
	for id, want := range map[string][2]any{"ok": {204, ""}, "broken": {502, "upstream down"}, "slow": {0, ""}} {
		if got := e.runDocs(t, id)[0]; got.AnswerStatus != want[0] || got.Answer != want[1] {
			t.Errorf("%s: answer %d %q, want %d %q", id, got.AnswerStatus, got.Answer, want[0], want[1])
		}
	}
}

// With the database unreachable at fire time the action does not run; the
// fire is reported not run with its reason.
func TestFirePathDatabaseUnreachableDoesNotRun(t *testing.T) {
	t.Parallel()
	var ran atomic.Int32
	reg := actions.NewRegistry()
	reg.Register("j", actions.Action{Handler: jobs.HandlerFunc(func(context.Context, jobs.Run) error { ran.Add(1); return nil })})
	var reasons []string
	var mu sync.Mutex
	store := &failingStore{err: fmt.Errorf("claim j: %w: no server", record.ErrUnreachable)}
	r := NewRunner(RunnerOptions{Registry: reg, InstanceID: "a", Logger: slog.New(slog.DiscardHandler),
		Store: store,
		Hooks: Hooks{NotRun: func(id string, slot time.Time, reason string) {
			mu.Lock()
			reasons = append(reasons, id+"@"+slot.UTC().Format(time.TimeOnly)+":"+reason)
			mu.Unlock()
		}}})
	defer r.Shutdown(time.Second)
	slot := time.Date(2030, 1, 1, 10, 0, 5, 0, time.UTC)
	r.Fire(dueAt("j", slot))
	if ran.Load() != 0 {
		t.Fatal("the action ran without a claim")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reasons) != 1 || reasons[0] != "j@10:00:05:"+NotRunUnreachable {
		t.Fatalf("not-run reports %q", reasons)
	}
}

// failingStore fails every claim with err.
type failingStore struct {
	record.Store
	err error
}

func (s *failingStore) ClaimBatch(_ context.Context, b record.BatchClaim) []record.ClaimOutcome {
	out := make([]record.ClaimOutcome, len(b.Fires))
	for i := range out {
		out[i].Err = s.err
	}
	return out
}

func (s *failingStore) VerifyIndexes(context.Context) (bool, error) { return false, nil }

func (s *failingStore) SweepPreviousLives(context.Context, string, string, time.Time) ([]record.RunDoc, error) {
	return nil, s.err
}

func (s *failingStore) SweepExpired(context.Context, time.Time, int) ([]record.RunDoc, error) {
	return nil, s.err
}

func (s *failingStore) Disown(context.Context, []record.Lease, string, time.Time) error { return s.err }

// Shutdown cancels an action still running after the grace period, then
// releases its lock and records it abandoned.
func TestFirePathShutdownReleasesLock(t *testing.T) {
	t.Parallel()
	e := newFireEnv(t)
	started := make(chan struct{}, 1)
	e.reg.Register("stuck", actions.Action{Handler: jobs.HandlerFunc(func(ctx context.Context, f jobs.Run) error {
		started <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	})})
	r := e.runner(t, "a", time.Minute)
	go r.Fire(dueAt("stuck", time.Now().Truncate(time.Second)))
	<-started
	if l := e.lock(t, "stuck"); l.State != record.LockRunning || l.Holder != "a" {
		t.Fatalf("lock while running: %+v", l)
	}
	if r.Shutdown(100 * time.Millisecond) {
		t.Error("Shutdown = true with a stuck action")
	}
	if l := e.lock(t, "stuck"); l.State != record.LockFree || l.LastOutcome != record.StatusAbandoned {
		t.Fatalf("lock after shutdown: %+v, want free with outcome abandoned", l)
	}
	runs := e.runDocs(t, "stuck")
	if len(runs) != 1 || runs[0].Status != record.StatusAbandoned || !strings.Contains(runs[0].Error, "shutdown") {
		t.Fatalf("runs %+v", runs)
	}
}

// With overlap allow, runs of consecutive slots overlap, each still once.
// (Slots are fired in order, as the scheduler does: a claim never wins a
// slot at or before the job's last claimed slot.)
func TestFirePathAllowOverlaps(t *testing.T) {
	t.Parallel()
	e := newFireEnv(t)
	var inside, peak atomic.Int32
	release := make(chan struct{})
	e.reg.Register("par", actions.Action{Handler: jobs.HandlerFunc(func(ctx context.Context, f jobs.Run) error {
		n := inside.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		defer inside.Add(-1)
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}), Policy: jobs.Policy{Overlap: jobs.OverlapAllow}})
	a, b := e.runner(t, "a", time.Minute), e.runner(t, "b", time.Minute)
	slot := time.Now().Truncate(time.Second)
	var wg sync.WaitGroup
	for i := range 3 {
		s := slot.Add(time.Duration(i) * time.Second)
		wg.Go(func() { a.Fire(dueAt("par", s)) })
		wg.Go(func() { b.Fire(dueAt("par", s)) })
		waitFor(t, 30*time.Second, fmt.Sprintf("run %d to start", i+1), func() bool { return inside.Load() == int32(i+1) })
	}
	close(release)
	wg.Wait()
	runs := e.runDocs(t, "par")
	if len(runs) != 3 || peak.Load() != 3 {
		t.Fatalf("runs %+v, peak %d; want 3 overlapping runs", runs, peak.Load())
	}
	for _, r := range runs {
		if r.Status != record.StatusSucceeded {
			t.Errorf("run %+v: want succeeded", r)
		}
	}
}

// skewedClock reads the real clock shifted by an offset.
type skewedClock time.Duration

func (c skewedClock) Now() time.Time { return time.Now().Add(time.Duration(c)) }

// Two replicas whose clocks are 2 s apart, through the whole fire path:
// each slot runs once, whether they fire it together or one fires it late
// (after the other has finished and released).
func TestFirePathSkewedClocksRunOnce(t *testing.T) {
	t.Parallel()
	e := newFireEnv(t)
	var mu sync.Mutex
	ran := map[time.Time]int{}
	e.reg.Register("j", actions.Action{Handler: jobs.HandlerFunc(func(ctx context.Context, f jobs.Run) error {
		mu.Lock()
		ran[f.Slot]++
		mu.Unlock()
		return nil
	})})
	mk := func(instance string, offset time.Duration) *Runner {
		r := NewRunner(RunnerOptions{Registry: e.reg, InstanceID: instance, Logger: slog.New(slog.DiscardHandler),
			Store: runstore.New(e.locks, e.runs, runstore.Options{Instance: instance, Logger: slog.New(slog.DiscardHandler)}),
			Clock: skewedClock(offset), TTL: 30 * time.Second})
		t.Cleanup(func() { r.Shutdown(10 * time.Second) })
		return r
	}
	ahead, behind := mk("ahead", time.Second), mk("behind", -time.Second)
	slot := time.Now().Truncate(time.Second)
	for i := range 10 {
		s := slot.Add(time.Duration(i) * time.Second)
		if i%2 == 0 {
			var wg sync.WaitGroup
			wg.Go(func() { ahead.Fire(dueAt("j", s)) })
			wg.Go(func() { behind.Fire(dueAt("j", s)) })
			wg.Wait()
		} else {
			ahead.Fire(dueAt("j", s))
			behind.Fire(dueAt("j", s)) // late, after ahead's run released the lock
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range 10 {
		s := slot.Add(time.Duration(i) * time.Second).UTC()
		if ran[s] != 1 {
			t.Errorf("slot %d ran %d times", i, ran[s])
		}
	}
}

// renewFailStore fails every renewal as an unreachable database would.
type renewFailStore struct {
	*runstore.Store
	renewals atomic.Int32
}

func (s *renewFailStore) RenewBatch(context.Context, []record.Lease, time.Time, time.Duration) ([]record.Lease, error) {
	s.renewals.Add(1)
	return nil, errors.New("connection refused")
}

// Renewals that keep failing cancel the action before the lease could run
// out (another replica may take the lock from then on): the run ends
// abandoned, and the lock is still released by its holder.
func TestFirePathFailingRenewalsCancelAction(t *testing.T) {
	t.Parallel()
	e := newFireEnv(t)
	store := &renewFailStore{Store: runstore.New(e.locks, e.runs, runstore.Options{Instance: "a", Logger: slog.New(slog.DiscardHandler)})}
	var cancelled atomic.Bool
	e.reg.Register("j", actions.Action{Handler: jobs.HandlerFunc(func(ctx context.Context, f jobs.Run) error {
		select {
		case <-ctx.Done():
			cancelled.Store(true)
			return ctx.Err()
		case <-time.After(time.Minute):
			return nil
		}
	})})
	r := NewRunner(RunnerOptions{Registry: e.reg, InstanceID: "a", Logger: slog.New(slog.DiscardHandler),
		Store: store, TTL: 900 * time.Millisecond})
	t.Cleanup(func() { r.Shutdown(10 * time.Second) })
	r.Fire(dueAt("j", time.Now().Truncate(time.Second)))
	if !cancelled.Load() {
		t.Fatal("the action was not cancelled")
	}
	if n := store.renewals.Load(); n < 2 {
		t.Errorf("%d renewal attempts, want a retry before giving up", n)
	}
	runs := e.runDocs(t, "j")
	if len(runs) != 1 || runs[0].Status != record.StatusAbandoned || !strings.Contains(runs[0].Error, "renewal failed") {
		t.Fatalf("runs %+v: want one abandoned run naming the failed renewal", runs)
	}
	if l := e.lock(t, "j"); l.State != record.LockFree || l.LastOutcome != record.StatusAbandoned {
		t.Errorf("lock %+v: want released with outcome abandoned", l)
	}
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func newStoreEnv(t testing.TB) storeEnv {
	t.Helper()
	return newStoreEnvOn(t, testmongo.Client(t))
}

func newStoreEnvOn(t testing.TB, client *mongo.Client) storeEnv {
	t.Helper()
	db := testmongo.NewDatabase(t, client)
	locks, runs := record.Collections(db)
	e := storeEnv{db: db, locks: locks, runs: runs}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := record.EnsureIndexes(ctx, e.runs); err != nil {
		t.Fatal(err)
	}
	return e
}
