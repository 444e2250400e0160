//go:build !unix

package childproc

import "os/exec"

// Start starts cmd; this platform has neither process groups nor
// PR_SET_PDEATHSIG.
func Start(cmd *exec.Cmd) error { return cmd.Start() }

// KillGroup kills cmd's process (this platform has no process groups); a
// command not started is a no-op.
func KillGroup(cmd *exec.Cmd) error {
	if cmd.Process == nil {
		return nil
	}
	return cmd.Process.Kill()
}
