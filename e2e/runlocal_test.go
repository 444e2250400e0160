//go:build linux

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/testmongo"
)

// TestRunLocalStopsOnSignal starts scripts/run-local.sh as a new user would
// (its own test server, the example schedules, the daemon), waits until the
// daemon is ready, sends SIGINT to the script's pid only — not to its process
// group — and checks that the daemon and the test server it started are gone.
// Once started directly, once as a background job of a non-interactive shell
// (`run-local.sh &` in a script), which starts it with SIGINT ignored.
// It reads processes from /proc, hence Linux only.
func TestRunLocalStopsOnSignal(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the daemon and starts a test server; skipped with -short")
	}
	root, err := testmongo.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(root, "scripts", "run-local.sh")
	t.Run("direct", func(t *testing.T) { testRunLocalSignal(t, root, false, "bash", script) })
	t.Run("background", func(t *testing.T) {
		testRunLocalSignal(t, root, true, "bash", "-c", `bash "$0" & echo "run-local pid $!"; wait`, script)
	})
}

// TestRunLocalKeepsDataAcrossRestarts runs scripts/run-local.sh, edits a
// schedule and adds one, stops it (SIGINT) and starts it again: the test
// server kept the edits in its data file, the daemon arms them and resumes
// its change stream from the token it stored before the restart. Then
// `run-local.sh --clean` starts empty again: the example schedules only, as
// first added; the arguments after --clean still go to `cronswap run`.
func TestRunLocalKeepsDataAcrossRestarts(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the daemon and starts a test server three times; skipped with -short")
	}
	root, err := testmongo.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(root, "scripts", "run-local.sh")
	env := newRunLocalEnv(t)
	uri := "mongodb://127.0.0.1:" + env.mongoPort + "/"
	type job struct {
		ID       string `bson:"_id" json:"id"`
		CronExpr string `bson:"cron_expr" json:"cron_expr"`
	}
	// jobs reads the schedules from the database and from the daemon, which
	// must agree, and returns them.
	jobs := func(r *runLocal) map[string]string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		client := testmongo.ClientFor(t, uri)
		var docs []job
		cur, err := client.Database("cronswap").Collection("schedules").Find(ctx, bson.D{})
		if err == nil {
			err = cur.All(ctx, &docs)
		}
		if err != nil {
			r.fail("reading the schedules: %v", err)
		}
		_ = client.Disconnect(ctx)
		inDB := map[string]string{}
		for _, d := range docs {
			inDB[d.ID] = d.CronExpr
		}
		var armed map[string]string
		deadline := time.Now().Add(30 * time.Second)
		for !equalMaps(inDB, armed) {
			if time.Now().After(deadline) {
				r.fail("the daemon shows %v, the database holds %v", armed, inDB)
			}
			time.Sleep(50 * time.Millisecond)
			resp, err := http.Get("http://" + env.httpAddr + "/api/schedules")
			if err != nil {
				continue
			}
			var list []job
			err = json.NewDecoder(resp.Body).Decode(&list)
			resp.Body.Close()
			if err != nil {
				continue
			}
			armed = map[string]string{}
			for _, j := range list {
				armed[j.ID] = j.CronExpr
			}
		}
		return inDB
	}
	examples := map[string]string{"daily_report": "0 9 * * *", "heartbeat": "*/10 * * * * *", "warm_cache": "*/15 * * * *"}

	first := startRunLocal(t, root, env, false, "bash", script)
	first.waitReady()
	if got := jobs(first); !equalMaps(got, examples) {
		first.fail("a first run holds %v, want the examples %v", got, examples)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := testmongo.ClientFor(t, uri)
	schedules := client.Database("cronswap").Collection("schedules")
	if _, err := schedules.UpdateOne(ctx, bson.D{{Key: "_id", Value: "daily_report"}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "cron_expr", Value: "0 8 * * *"}, {Key: "updated_at", Value: time.Now()}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := schedules.InsertOne(ctx, bson.D{{Key: "_id", Value: "nightly_ping"}, {Key: "cron_expr", Value: "0 2 * * *"},
		{Key: "job", Value: "heartbeat"}, {Key: "updated_at", Value: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	edited := map[string]string{"daily_report": "0 8 * * *", "heartbeat": "*/10 * * * * *", "warm_cache": "*/15 * * * *", "nightly_ping": "0 2 * * *"}
	if got := jobs(first); !equalMaps(got, edited) {
		first.fail("after the edits: %v, want %v", got, edited)
	}
	_ = client.Disconnect(ctx)
	first.interrupt()
	if _, err := os.Stat(filepath.Join(env.runDir, "mongo.h2")); err != nil {
		t.Errorf("the test server's data file: %v", err)
	}

	again := startRunLocal(t, root, env, false, "bash", script)
	again.waitReady()
	if got := jobs(again); !equalMaps(got, edited) {
		again.fail("run again: %v, want the edits kept %v", got, edited)
	}
	waitFor(t, 30*time.Second, "the daemon's schedules watcher resuming from its stored token", func() bool {
		return strings.Contains(again.out.String(), "resuming change stream from stored token")
	})
	if strings.Contains(again.out.String(), "server refused the stored resume token") {
		again.fail("the restarted test server refused the daemon's resume token")
	}
	again.interrupt()

	clean := startRunLocal(t, root, env, false, "bash", script, "--clean", "--log-format", "json")
	clean.waitReady()
	if got := jobs(clean); !equalMaps(got, examples) {
		clean.fail("run with --clean: %v, want only the examples %v", got, examples)
	}
	if !strings.Contains(clean.out.String(), `"msg":"cronswap started"`) {
		clean.fail("--log-format json after --clean did not reach `cronswap run`")
	}
	clean.interrupt()
}

// testRunLocalSignal runs argv (which starts scripts/run-local.sh; with
// printsPid, a wrapper that prints "run-local pid N" first) and checks that
// SIGINT to the script stops everything it started.
func testRunLocalSignal(t *testing.T, root string, printsPid bool, argv ...string) {
	env := newRunLocalEnv(t)
	r := startRunLocal(t, root, env, printsPid, argv...)
	r.waitReady()
	r.interrupt()
}

// runLocalEnv is where a test's scripts/run-local.sh runs: its own run
// directory and free loopback ports, the same for each start.
type runLocalEnv struct {
	runDir, httpAddr, mongoPort string
}

func newRunLocalEnv(t *testing.T) runLocalEnv {
	_, mongoPort, _ := net.SplitHostPort(freeLoopbackAddr(t))
	return runLocalEnv{runDir: t.TempDir(), httpAddr: freeLoopbackAddr(t), mongoPort: mongoPort}
}

// runLocal is one start of scripts/run-local.sh.
type runLocal struct {
	t      *testing.T
	env    runLocalEnv
	cmd    *exec.Cmd
	out    *syncBuffer
	script int // the script's pid
	exited chan struct{}
	// daemon and server are the pids of the daemon and the test server it
	// started, found by waitReady.
	daemon, server []int
}

// startRunLocal runs argv (which starts scripts/run-local.sh; with
// printsPid, a wrapper that prints "run-local pid N" first) in env; whatever
// happens, nothing it started outlives the test.
func startRunLocal(t *testing.T, root string, env runLocalEnv, printsPid bool, argv ...string) *runLocal {
	t.Helper()
	r := &runLocal{t: t, env: env, out: &syncBuffer{}, exited: make(chan struct{})}
	r.cmd = exec.Command(argv[0], argv[1:]...)
	r.cmd.Dir = root
	r.cmd.Env = append(withoutEnv(os.Environ(), "CRONSWAP_MONGO_URI", "CRONSWAP_CONFIG", "CRONSWAP_INSTANCE_ID"),
		"CRONSWAP_RUN_DIR="+env.runDir,
		"CRONSWAP_MONGO_PORT="+env.mongoPort,
		"CRONSWAP_HTTP_LISTEN="+env.httpAddr,
		"MONGOSH_SKIP_NODE_VERSION_CHECK=1",
	)
	// Its own process group, so that nothing but the kill below reaches it.
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	r.cmd.Stdout, r.cmd.Stderr = r.out, r.out
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.script = r.cmd.Process.Pid
	go func() { _ = r.cmd.Wait(); close(r.exited) }()
	if printsPid {
		deadline := time.Now().Add(30 * time.Second)
		for r.script == r.cmd.Process.Pid {
			for _, line := range strings.Split(r.out.String(), "\n") {
				if n, err := strconv.Atoi(strings.TrimPrefix(line, "run-local pid ")); err == nil && n > 0 {
					r.script = n
				}
			}
			if time.Now().After(deadline) {
				_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
				t.Fatalf("no pid of run-local.sh printed within 30s:\n%s", r.out.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	t.Cleanup(func() {
		left := append(append([]int{r.script, r.cmd.Process.Pid}, r.daemon...), r.server...)
		left = append(left, descendants(r.script)...)
		left = append(left, findProcs(func(p proc) bool { return strings.Contains(p.cmdline, env.runDir) })...)
		for _, pid := range left {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		<-r.exited
	})
	return r
}

func (r *runLocal) fail(format string, args ...any) {
	r.t.Helper()
	r.t.Fatalf(format+"\n--- run-local.sh output:\n%s", append(args, r.out.String())...)
}

// waitReady waits until the daemon answers /readyz, and finds the daemon
// and the test server the script started.
func (r *runLocal) waitReady() {
	r.t.Helper()
	client := &http.Client{Timeout: 2 * time.Second}
	ready := func() bool {
		resp, err := client.Get("http://" + r.env.httpAddr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	// A cold start builds the binary (minutes on a loaded 2-core machine).
	deadline := time.Now().Add(5 * time.Minute)
	for !ready() {
		select {
		case <-r.exited:
			r.fail("run-local.sh exited before the daemon was ready")
		default:
		}
		if time.Now().After(deadline) {
			r.fail("daemon not ready at %s within 5m", r.env.httpAddr)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// The daemon is the script's child (or a grandchild, under `go run`); the
	// test server runs in a session of its own, from a copy of its jar in the
	// run directory.
	for _, pid := range descendants(r.script) {
		if p, ok := readProc(pid); ok && filepath.Base(p.argv0()) == "cronswap" {
			r.daemon = append(r.daemon, pid)
		}
	}
	r.server = findProcs(func(p proc) bool {
		return strings.Contains(p.cmdline, "mongo-server.jar") && strings.Contains(p.cmdline, r.env.runDir)
	})
	if len(r.daemon) != 1 || len(r.server) != 1 {
		r.fail("want one daemon and one test server started by run-local.sh, found daemon %v, server %v", r.daemon, r.server)
	}
	r.t.Logf("run-local.sh pid %d, daemon pid %d, test server pid %d", r.script, r.daemon[0], r.server[0])
}

// interrupt sends SIGINT to the script's pid only — not to its process
// group — and checks that the daemon and the test server it started are
// gone, and the script with them.
func (r *runLocal) interrupt() {
	r.t.Helper()
	if err := syscall.Kill(r.script, syscall.SIGINT); err != nil {
		r.t.Fatal(err)
	}
	started := append(append([]int(nil), r.daemon...), r.server...)
	deadline := time.Now().Add(60 * time.Second)
	for {
		var alive []int
		for _, pid := range started {
			if running(pid) {
				alive = append(alive, pid)
			}
		}
		if len(alive) == 0 {
			break
		}
		if time.Now().After(deadline) {
			r.fail("60s after SIGINT to run-local.sh (pid %d), still running: %v (daemon %v, test server %v)",
				r.script, alive, r.daemon, r.server)
		}
		time.Sleep(50 * time.Millisecond)
	}
	select {
	case <-r.exited:
	case <-time.After(30 * time.Second):
		r.fail("run-local.sh (pid %d) still running 30s after its children stopped", r.script)
	}
	if left := findProcs(func(p proc) bool { return strings.Contains(p.cmdline, r.env.runDir) }); len(left) > 0 {
		r.fail("processes started by run-local.sh still running: %v", left)
	}
}

// freeLoopbackAddr returns a loopback address whose port was free a moment ago.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func withoutEnv(env []string, names ...string) []string {
	var out []string
next:
	for _, kv := range env {
		for _, n := range names {
			if strings.HasPrefix(kv, n+"=") {
				continue next
			}
		}
		out = append(out, kv)
	}
	return out
}

// proc is one process as /proc shows it.
type proc struct {
	pid     int
	cmdline string // NUL-separated arguments joined with spaces
}

func (p proc) argv0() string { a, _, _ := strings.Cut(p.cmdline, " "); return a }

// allPids lists the pids in /proc.
func allPids() []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid != os.Getpid() {
			pids = append(pids, pid)
		}
	}
	return pids
}

// readProc reads the command line of a live process (not a zombie).
func readProc(pid int) (proc, bool) {
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil || len(raw) == 0 || !running(pid) {
		return proc{}, false
	}
	return proc{pid: pid, cmdline: strings.TrimRight(strings.ReplaceAll(string(raw), "\x00", " "), " ")}, true
}

// findProcs lists the live processes that match.
func findProcs(match func(proc) bool) []int {
	var pids []int
	for _, pid := range allPids() {
		if p, ok := readProc(pid); ok && match(p) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// stat returns the state letter and the parent pid of pid.
func stat(pid int) (state byte, ppid int, ok bool) {
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, 0, false
	}
	// "pid (comm) state ppid ...": comm may hold spaces and parentheses, so
	// the fields are counted from the last ')'.
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0, 0, false
	}
	ppid, err = strconv.Atoi(f[1])
	return f[0][0], ppid, err == nil
}

// running reports whether pid exists and is not a zombie.
func running(pid int) bool {
	state, _, ok := stat(pid)
	return ok && state != 'Z'
}

// descendants lists the live children of pid, their children, and so on.
func descendants(pid int) []int {
	children := map[int][]int{}
	for _, p := range allPids() {
		if _, ppid, ok := stat(p); ok {
			children[ppid] = append(children[ppid], p)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		next := queue[0]
		queue = queue[1:]
		for _, c := range children[next] {
			if running(c) {
				out = append(out, c)
			}
			queue = append(queue, c)
		}
	}
	return out
}

// syncBuffer is a bytes.Buffer safe for the writes of a child's stdout and stderr.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
