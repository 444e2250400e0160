package cli

import (
	"errors"
	"log/slog"
	"math"
	"os"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// memoryLimitRatio is the share of the container's memory limit that
// `cronswap run` gives the Go runtime as its soft memory limit when
// GOMEMLIMIT is not set: the collector then works harder as the heap
// nears it instead of letting the start's full read grow the heap to
// twice what it keeps (a million schedules: 1.1-1.5 GB at the start's
// peak, 0.6 GB settled). The Go limit counts all the runtime's memory;
// the tenth left over is for what it does not count that the container
// does: the exec actions' processes, the kernel's page cache of the
// state file.
const memoryLimitRatio = 0.9

// setMemoryLimit sets the Go runtime's soft memory limit to
// memoryLimitRatio of the memory limit container reports (memlimit's
// FromCgroup: the cgroup's, v1 or v2), unless GOMEMLIMIT is set (the
// runtime took it at start) or AUTOMEMLIMIT is "off" (AUTOMEMLIMIT=0.8
// changes the ratio). It logs the limit in force, and where it came
// from; a limit it could not read, or an AUTOMEMLIMIT that is neither
// a share in (0, 1] nor "off", is logged at warn, and the daemon runs
// without one. Only `cronswap run` calls it: a Go service that
// embeds the daemon owns its process's limit.
func setMemoryLimit(log *slog.Logger, container memlimit.Provider) {
	// The library decides (GOMEMLIMIT first, then AUTOMEMLIMIT, then the
	// container's limit); the environment only says which it took.
	limit, err := memlimit.Set(memlimit.WithProvider(container), memlimit.WithRatio(memoryLimitRatio))
	switch {
	case errors.Is(err, memlimit.ErrCgroupsNotSupported), errors.Is(err, memlimit.ErrNoCgroup):
		return // not Linux, or in no cgroup: no container limit to follow
	case err != nil:
		// An unreadable limit, or an AUTOMEMLIMIT that is not a share.
		log.Warn("could not set the Go memory limit from the container's; running without one (set GOMEMLIMIT, or AUTOMEMLIMIT to a share or off)", "error", err)
	case os.Getenv("GOMEMLIMIT") != "":
		log.Info("Go memory limit", "from", "GOMEMLIMIT", "GOMEMLIMIT", os.Getenv("GOMEMLIMIT"))
	case os.Getenv("AUTOMEMLIMIT") == "off":
		log.Info("Go memory limit: none (AUTOMEMLIMIT=off)")
	case limit != math.MaxInt64:
		log.Info("Go memory limit", "from", "the container's memory limit", "go_memory_limit_bytes", limit)
	}
}
