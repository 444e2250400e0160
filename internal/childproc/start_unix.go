//go:build unix && !linux

package childproc

import (
	"os/exec"
	"syscall"
)

// Start starts cmd in its own process group. It sets cmd.SysProcAttr.
// Without PR_SET_PDEATHSIG the caller must see to the child's end itself
// (for example by closing its stdin).
func Start(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd.Start()
}
