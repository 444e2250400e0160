package actions

import (
	"fmt"
	"os"
	"syscall"
)

// prSetChildSubreaper is PR_SET_CHILD_SUBREAPER from <linux/prctl.h>.
const prSetChildSubreaper = 36

// setSubreaper makes the test process the reaper of orphaned descendants.
// When an exec action's group is killed, its grandchildren are reparented to
// us instead of to PID 1 — which in a container may never reap them, leaving
// zombies that kill(pid, 0) still reports as existing. processGone reaps them.
func setSubreaper() {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
		fmt.Fprintf(os.Stderr, "prctl(PR_SET_CHILD_SUBREAPER): %v\n", errno)
	}
}
