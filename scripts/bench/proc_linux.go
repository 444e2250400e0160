package main

import (
	"os/exec"
	"runtime"
	"syscall"
)

// startChild starts cmd in its own process group and asks the kernel to
// SIGKILL it if the bench dies without stopping it (killed, crashed), so that
// no daemon outlives the run.
//
// PR_SET_PDEATHSIG fires when the *thread* that forked the child exits, and
// the Go runtime may retire threads: children are forked from one goroutine
// locked to its thread for the life of the process.
func startChild(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	done := make(chan error, 1)
	spawns <- spawnRequest{cmd: cmd, done: done}
	return <-done
}

type spawnRequest struct {
	cmd  *exec.Cmd
	done chan error
}

var spawns = make(chan spawnRequest)

func init() {
	go func() {
		runtime.LockOSThread()
		for req := range spawns {
			req.done <- req.cmd.Start()
		}
	}()
}
