package childproc

import (
	"os/exec"
	"runtime"
	"syscall"
)

// Start starts cmd in its own process group, to be SIGKILLed by the kernel
// when this process dies.
//
// PR_SET_PDEATHSIG fires when the *thread* that forked the child exits, and
// the Go runtime may retire threads: children are therefore forked from one
// goroutine locked to its thread for the life of the process.
func Start(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	done := make(chan error, 1)
	forker <- forkRequest{cmd: cmd, done: done}
	return <-done
}

type forkRequest struct {
	cmd  *exec.Cmd
	done chan error
}

// forker hands commands to the one goroutine that forks them. It is the
// package's only state, and it has to be: the thread that forks a child
// must live as long as the process.
var forker = make(chan forkRequest)

func init() {
	go func() {
		runtime.LockOSThread()
		for req := range forker {
			req.done <- req.cmd.Start()
		}
	}()
}
