package childproc

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// onDoomedThread runs f on a goroutine locked to a thread that is not the
// main one and that ends when f returns (a locked goroutine that exits
// takes its thread with it; the runtime keeps the main thread instead).
func onDoomedThread(f func()) {
	go func() {
		runtime.LockOSThread() // never unlocked, but on the main thread
		if syscall.Gettid() != syscall.Getpid() {
			f()
			return
		}
		// Keep the main thread busy with this goroutine, so that the next
		// one runs on another thread.
		done := make(chan struct{})
		onDoomedThread(func() { defer close(done); f() })
		<-done
		runtime.UnlockOSThread()
	}()
}

// startOnDoomedThread runs start(cmd) on a thread that ends right after it
// (onDoomedThread) and returns once the thread is gone.
func startOnDoomedThread(t *testing.T, cmd *exec.Cmd, start func(*exec.Cmd) error) {
	t.Helper()
	tid := make(chan int, 1)
	errc := make(chan error, 1)
	onDoomedThread(func() {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		errc <- start(cmd)
		tid <- syscall.Gettid()
	})
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	task := "/proc/self/task/" + strconv.Itoa(<-tid)
	waitFor(t, 10*time.Second, "the starting thread to end", func() bool {
		_, err := os.Stat(task)
		return errors.Is(err, os.ErrNotExist)
	})
}

// killedBy ends cmd with SIGTERM and returns the signal it died of: SIGKILL
// when the parent-death signal reached it first.
func killedBy(t *testing.T, cmd *exec.Cmd) syscall.Signal {
	t.Helper()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("wait: %v, want a signalled exit", err)
	}
	ws := ee.Sys().(syscall.WaitStatus)
	if !ws.Signaled() {
		t.Fatalf("exit %v, want killed by a signal", ws)
	}
	return ws.Signal()
}

// A child started with Start outlives the thread of the goroutine that
// called Start: PR_SET_PDEATHSIG is bound to the forking thread, and Start
// forks from threads that live as long as the process. (Control: the same
// child forked by that thread itself is SIGKILLed when the thread ends.)
func TestChildOutlivesTheCallersThread(t *testing.T) {
	control := exec.Command("sleep", "60")
	startOnDoomedThread(t, control, (*exec.Cmd).Start)
	if sig := killedBy(t, control); sig != syscall.SIGKILL {
		t.Fatalf("control: a child forked by the ending thread died of %v, want SIGKILL (the test cannot see the difference)", sig)
	}

	cmd := exec.Command("sleep", "60")
	startOnDoomedThread(t, cmd, Start)
	if sig := killedBy(t, cmd); sig != syscall.SIGTERM {
		t.Fatalf("a child started with Start died of %v when the caller's thread ended, want alive (then SIGTERM)", sig)
	}
}

// Start puts the child in its own process group with the parent-death
// signal set.
func TestStartSetsGroupAndDeathSignal(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := Start(cmd); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = KillGroup(cmd); _ = cmd.Wait() }()
	if a := cmd.SysProcAttr; !a.Setpgid || a.Pdeathsig != syscall.SIGKILL {
		t.Fatalf("SysProcAttr = %+v", a)
	}
	if pgid, err := syscall.Getpgid(cmd.Process.Pid); err != nil || pgid != cmd.Process.Pid {
		t.Fatalf("child's process group %d (%v), want its own (%d)", pgid, err, cmd.Process.Pid)
	}
}

// Cancelling a CommandContext kills the whole group: the child and a
// grandchild it started in the background.
func TestCommandContextCancelKillsTheGroup(t *testing.T) {
	pidfile := filepath.Join(t.TempDir(), "grandchild.pid")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := CommandContext(ctx, "sh", "-c", `sleep 60 & echo $! > "$1.tmp" && mv "$1.tmp" "$1"; wait`, "sh", pidfile)
	if err := Start(cmd); err != nil {
		t.Fatal(err)
	}
	var grandchild int
	waitFor(t, 10*time.Second, "the grandchild's pid", func() bool {
		b, err := os.ReadFile(pidfile)
		if err != nil {
			return false
		}
		grandchild, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	})
	defer func() { _ = syscall.Kill(grandchild, syscall.SIGKILL) }()
	cancel()
	if err := cmd.Wait(); err == nil {
		t.Fatal("Wait after cancel: nil, want the kill")
	}
	// Orphaned by the kill, the grandchild is reparented; it is gone or a
	// zombie waiting for its new parent to reap it.
	waitFor(t, 10*time.Second, "the grandchild to be killed", func() bool {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(grandchild) + "/stat")
		if err != nil {
			return true
		}
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		return len(fields) > 0 && fields[0] == "Z"
	})
	if err := KillGroup(exec.Command("true")); err != nil {
		t.Fatalf("KillGroup of a command never started: %v", err)
	}
}
