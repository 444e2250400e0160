package actions

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// An exec action's program dies with the daemon: the test binary re-execs
// itself as a parent that runs an ExecAction (`sleep 60`), the test
// SIGKILLs the parent (nothing of it runs any more: no cancel, no group
// kill), and the kernel kills the child (PR_SET_PDEATHSIG) within moments.
func TestExecChildDiesWithKilledParent(t *testing.T) {
	t.Parallel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	pidfile := filepath.Join(t.TempDir(), "child.pid")
	parent := exec.Command(exe, parentArg, pidfile)
	parent.Stderr = os.Stderr
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	parentGone := false
	t.Cleanup(func() {
		if !parentGone {
			_ = parent.Process.Kill()
			_ = parent.Wait()
		}
	})
	var child int
	waitFor(t, 30*time.Second, "the child's pid file", func() bool {
		b, err := os.ReadFile(pidfile)
		if err != nil {
			return false
		}
		child, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && child > 1
	})
	killOnCleanup(t, child)
	// The child is the parent's, alive, and (exec'd) the sleep.
	waitFor(t, 10*time.Second, "the child to be sleep, child of the parent", func() bool {
		st, ok := procStat(child)
		return ok && st.ppid == parent.Process.Pid && st.comm == "sleep" && st.state != "Z"
	})

	if err := parent.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	_ = parent.Wait()
	parentGone = true
	waitFor(t, 5*time.Second, "the child (pid "+strconv.Itoa(child)+") to be gone after its parent was SIGKILLed",
		func() bool { return processGone(child) })
	t.Logf("child gone %s after the parent's SIGKILL", time.Since(killedAt).Round(time.Millisecond))
}

type stat struct {
	comm, state string
	ppid        int
}

// procStat reads /proc/PID/stat: the command name, the state and the
// parent pid.
func procStat(pid int) (stat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return stat{}, false
	}
	s := string(b)
	open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || closing < open {
		return stat{}, false
	}
	rest := strings.Fields(s[closing+1:])
	if len(rest) < 2 {
		return stat{}, false
	}
	ppid, err := strconv.Atoi(rest[1])
	if err != nil {
		return stat{}, false
	}
	return stat{comm: s[open+1 : closing], state: rest[0], ppid: ppid}, true
}
