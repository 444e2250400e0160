package childproc

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// Start starts cmd in its own process group, to be SIGKILLed by the kernel
// when this process dies. It sets cmd.SysProcAttr.
//
// PR_SET_PDEATHSIG fires when the *thread* that forked the child exits, and
// the Go runtime may retire threads: children are therefore forked from
// goroutines locked to their threads for the life of the process (a few,
// so that starts of many children at once do not queue behind one
// another; they are started on the first Start).
func Start(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	startForkers.Do(func() {
		for range forkerCount() {
			go forker()
		}
	})
	done := make(chan error, 1)
	forks <- forkRequest{cmd: cmd, done: done}
	return <-done
}

type forkRequest struct {
	cmd  *exec.Cmd
	done chan error
}

// forks hands commands to the goroutines that fork them. With startForkers
// it is the package's only state, and it has to be: the threads that fork
// children must live as long as the process.
var (
	forks        = make(chan forkRequest)
	startForkers sync.Once
)

// forkerCount is how many forking threads there are: one per CPU the Go
// scheduler uses, at least two (a start blocks its thread until the child
// has exec'd).
func forkerCount() int { return max(2, runtime.GOMAXPROCS(0)) }

// forker forks the commands it receives from a thread it never gives back:
// the goroutine never unlocks and never returns.
func forker() {
	runtime.LockOSThread()
	for req := range forks {
		req.done <- req.cmd.Start()
	}
}
