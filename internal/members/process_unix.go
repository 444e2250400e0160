//go:build unix

package members

import (
	"errors"
	"os"
	"strings"
	"syscall"
)

// machineID identifies the kernel boot and the process namespace this
// process runs in (Linux: /proc/sys/kernel/random/boot_id and the pid
// namespace); empty where they cannot be read. Two processes with the
// same machineID see the same process ids.
func machineID() string {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	ns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(boot)) + "/" + ns
}

// processAlive reports whether a process with this id exists here (a
// process of another user counts).
func processAlive(pid int) bool {
	if pid <= 0 {
		return true // unknown: assume alive
	}
	err := syscall.Kill(pid, 0)
	return err == nil || !errors.Is(err, syscall.ESRCH)
}
