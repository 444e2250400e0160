package testmongo

import (
	"os/exec"
	"runtime"
	"syscall"
)

// sysProcAttr puts the server in its own process group (so Stop/Kill reach the JVM and anything it forks) and asks
// the kernel to SIGKILL it when its parent dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

type spawnRequest struct {
	cmd  *exec.Cmd
	done chan error
}

var spawns = make(chan spawnRequest)

func init() {
	// PR_SET_PDEATHSIG fires when the *thread* that forked the child exits, and the Go runtime may retire threads.
	// Fork from one goroutine locked to its thread for the life of the process, so the signal fires only when the
	// test binary itself dies.
	go func() {
		runtime.LockOSThread()
		for req := range spawns {
			req.done <- req.cmd.Start()
		}
	}()
}

func startProcess(cmd *exec.Cmd) error {
	done := make(chan error, 1)
	spawns <- spawnRequest{cmd: cmd, done: done}
	return <-done
}
