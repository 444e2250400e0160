package cli

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strconv"

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

// steadyGCPercent is the collector's target (GOGC) that `cronswap run`
// sets once the service fires (daemon.Service.Firing), when GOGC is not
// set and the live heap is at least largeHeap: the heap may then grow by
// 30 % of what a collection found live before the next collection, not by
// all of it (the runtime's 100, kept for the start). Nearly all of a large
// heap is long-lived (each job's engine record, armed timer and
// edit-history copy) and its garbage comes in bursts — the start's
// background work, a resync every watch.resync_interval, a full reload —
// which at 100 take the heap to twice the jobs' memory: a replica of a
// million schedules keeps about 0.6 GB live and reached 1.3-1.6 GB RSS at
// its resyncs, 0.92-0.99 GB at 30. The start keeps 100: arming a million
// from the state file took up to twice as long at 50 (docs/BENCHMARKS.md,
// "the Go collector's target lowered once the schedules are armed").
const steadyGCPercent = 30

// largeHeap is the live heap from which the lower target pays: a
// collection costs about the same CPU for each byte allocated whatever the
// heap's size, so 30 costs about three times the runtime's collection
// work at any size (a burst of 10,000 fires took 25-40 % more CPU a fire
// at 10,000 jobs), and saves 70 % of the live heap — worth it only where
// that is hundreds of megabytes. 256 MiB is about 400,000 schedules.
const largeHeap = 256 << 20

// lowerGCPercentOnceFiring sets the collector's target to
// steadyGCPercent when firing is closed, unless GOGC is set (the runtime
// took it at start; "off" included; a value it cannot read, which it
// takes as 100, is logged at warn) or the live heap (liveHeap, read
// then) is under largeHeap, and logs the target in force and why: at once
// when GOGC is set, else once firing. It returns when it has done so or
// ctx ends. A heap that grows past largeHeap later (schedules added
// without a restart) keeps the runtime's target until the next start.
// Only `cronswap run` calls it: a Go service that embeds the daemon owns
// its process's collector.
func lowerGCPercentOnceFiring(ctx context.Context, log *slog.Logger, firing <-chan struct{}, liveHeap func() uint64) {
	if v := os.Getenv("GOGC"); v != "" {
		if _, err := strconv.Atoi(v); err != nil && v != "off" {
			// The runtime reads anything else as 100, silently.
			log.Warn("GOGC is neither a number nor off: the Go runtime uses 100", "GOGC", v)
			return
		}
		log.Info("Go collector target", "from", "GOGC", "GOGC", v)
		return
	}
	select {
	case <-firing:
	case <-ctx.Done():
		return
	}
	live := liveHeap()
	if live < largeHeap {
		log.Info("Go collector target kept at the runtime's default: the live heap is small", "gogc", 100,
			"live_heap_bytes", live, "lowered_from_bytes", largeHeap)
		return
	}
	debug.SetGCPercent(steadyGCPercent)
	log.Info("Go collector target lowered now that the schedules are armed (GOGC unset, a large heap)", "gogc", steadyGCPercent,
		"live_heap_bytes", live)
}

// runtimeLiveHeap is the heap the last collection found live
// (runtime/metrics' /gc/heap/live:bytes).
func runtimeLiveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}
