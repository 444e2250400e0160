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
	if cmd.Process == nil {
		return nil
	}
	err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}
