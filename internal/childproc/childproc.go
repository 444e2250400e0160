// Package childproc starts child processes (exec actions, the test server,
// benchmark daemons) so that they do not outlive the process that started
// them: each child gets its own process group, so a stop or kill of the
// group reaches everything it forks, and on Linux the kernel SIGKILLs it
// when its parent dies (PR_SET_PDEATHSIG).
//
// The parent-death signal reaches the child itself, not what it forked:
// a grandchild that the child started in the background is reparented
// when the child is killed, unless the caller kills the group (KillGroup),
// which needs a living parent.
package childproc

import (
	"context"
	"os/exec"
	"syscall"
	"time"
)

// CommandContext is exec.CommandContext whose cancellation kills the
// child's whole process group (KillGroup), not the child alone. Start the
// command with Start.
func CommandContext(ctx context.Context, name string, arg ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, arg...)
	cmd.Cancel = func() error { return KillGroup(cmd) }
	return cmd
}

// StopGracefully changes how cancelling cmd (a CommandContext not yet
// started) stops it: its process group gets SIGTERM, and a program that
// has not exited grace later is SIGKILLed (Wait returns then; KillGroup
// after Wait ends what is left of the group). A grace of 0 or less keeps
// the immediate SIGKILL of the group.
func StopGracefully(cmd *exec.Cmd, grace time.Duration) {
	if grace <= 0 {
		return
	}
	cmd.Cancel = func() error { return SignalGroup(cmd, syscall.SIGTERM) }
	cmd.WaitDelay = grace
}
