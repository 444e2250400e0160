//go:build !unix

package childproc

import "os/exec"

// Start starts cmd; this platform has neither process groups nor
// PR_SET_PDEATHSIG.
func Start(cmd *exec.Cmd) error { return cmd.Start() }
