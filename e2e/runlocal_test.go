//go:build linux

package e2e

import (
	"bytes"
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

// testRunLocalSignal runs argv (which starts scripts/run-local.sh; with
// printsPid, a wrapper that prints "run-local pid N" first) and checks that
// SIGINT to the script stops everything it started.
func testRunLocalSignal(t *testing.T, root string, printsPid bool, argv ...string) {
	runDir := t.TempDir()
	httpAddr := freeLoopbackAddr(t)
	_, mongoPort, _ := net.SplitHostPort(freeLoopbackAddr(t))

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = root
	cmd.Env = append(withoutEnv(os.Environ(), "CRONSWAP_MONGO_URI", "CRONSWAP_CONFIG", "CRONSWAP_INSTANCE_ID"),
		"CRONSWAP_RUN_DIR="+runDir,
		"CRONSWAP_MONGO_PORT="+mongoPort,
		"CRONSWAP_HTTP_LISTEN="+httpAddr,
		"MONGOSH_SKIP_NODE_VERSION_CHECK=1",
	)
	// Its own process group, so that nothing but the kill below reaches it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	script := cmd.Process.Pid
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	if printsPid {
		deadline := time.Now().Add(30 * time.Second)
		for script == cmd.Process.Pid {
			for _, line := range strings.Split(out.String(), "\n") {
				if n, err := strconv.Atoi(strings.TrimPrefix(line, "run-local pid ")); err == nil && n > 0 {
					script = n
				}
			}
			if time.Now().After(deadline) {
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				t.Fatalf("no pid of run-local.sh printed within 30s:\n%s", out.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	// Whatever happens, leave no process behind.
	var started []int
	t.Cleanup(func() {
		left := append(started, script, cmd.Process.Pid)
		left = append(left, descendants(script)...)
		left = append(left, findProcs(func(p proc) bool { return strings.Contains(p.cmdline, runDir) })...)
		for _, pid := range left {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		<-exited
	})
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(format+"\n--- run-local.sh output:\n%s", append(args, out.String())...)
	}

	client := &http.Client{Timeout: 2 * time.Second}
	ready := func() bool {
		resp, err := client.Get("http://" + httpAddr + "/readyz")
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
		case <-exited:
			fail("run-local.sh exited before the daemon was ready")
		default:
		}
		if time.Now().After(deadline) {
			fail("daemon not ready at %s within 5m", httpAddr)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// The daemon is the script's child (or a grandchild, under `go run`); the
	// test server runs in a session of its own, from a copy of its jar in the
	// run directory.
	var daemon []int
	for _, pid := range descendants(script) {
		if p, ok := readProc(pid); ok && filepath.Base(p.argv0()) == "cronswap" {
			daemon = append(daemon, pid)
		}
	}
	server := findProcs(func(p proc) bool {
		return strings.Contains(p.cmdline, "mongo-server.jar") && strings.Contains(p.cmdline, runDir)
	})
	if len(daemon) != 1 || len(server) != 1 {
		fail("want one daemon and one test server started by run-local.sh, found daemon %v, server %v", daemon, server)
	}
	started = append(daemon, server...)
	t.Logf("run-local.sh pid %d, daemon pid %d, test server pid %d", script, daemon[0], server[0])

	if err := syscall.Kill(script, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(60 * time.Second)
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
			fail("60s after SIGINT to run-local.sh (pid %d), still running: %v (daemon %d, test server %d)",
				script, alive, daemon[0], server[0])
		}
		time.Sleep(50 * time.Millisecond)
	}
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		fail("run-local.sh (pid %d) still running 30s after its children stopped", script)
	}
	if left := findProcs(func(p proc) bool { return strings.Contains(p.cmdline, runDir) }); len(left) > 0 {
		fail("processes started by run-local.sh still running: %v", left)
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
