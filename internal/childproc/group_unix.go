//go:build unix

package childproc

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

// KillGroup SIGKILLs the process group of cmd, started with Start: the
// child and everything it forked that stayed in its group. A group that is
// already gone is not an error; a command not started is a no-op.
func KillGroup(cmd *exec.Cmd) error {
	return SignalGroup(cmd, syscall.SIGKILL)
}

// SignalGroup sends sig to the process group of cmd, started with Start.
// A group that is already gone is os.ErrProcessDone; a command not
// started is a no-op.
func SignalGroup(cmd *exec.Cmd, sig syscall.Signal) error {
	if cmd.Process == nil {
		return nil
	}
	err := syscall.Kill(-cmd.Process.Pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}
