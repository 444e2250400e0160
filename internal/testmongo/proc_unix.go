//go:build unix && !linux

package testmongo

import (
	"os/exec"
	"syscall"
)

// sysProcAttr puts the server in its own process group so Stop/Kill reach the JVM. Without PR_SET_PDEATHSIG the
// server still exits when the test binary dies, because its stdin (a pipe from us) reaches EOF.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

func startProcess(cmd *exec.Cmd) error { return cmd.Start() }
