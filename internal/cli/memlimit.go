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
	"time"

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
// sets, when GOGC is not set, once the live heap is at least largeHeap
// (lowerGCPercent says when it looks): the heap may then grow by 30 % of
// what a collection found live before the next collection, not by all of
// it (the runtime's 100). Nearly all of a large heap is long-lived (each
// job's engine record, armed timer and edit-history copy) and its garbage
// comes in bursts — the start's full read, its background work, a resync
// every watch.resync_interval — which at 100 take the heap to twice the
// jobs' memory: a replica of a million schedules keeps about 0.6 GB live
// and reached 1.3-1.6 GB RSS at its resyncs, 0.92-0.99 GB at 30
// (docs/BENCHMARKS.md, "the Go collector's target lowered once the
// schedules are armed").
const steadyGCPercent = 30

// largeHeap is the live heap from which the lower target pays: a
// collection costs about the same CPU for each byte allocated whatever the
// heap's size, so 30 costs about three times the runtime's collection
// work at any size (a burst of 10,000 fires took 25-40 % more CPU a fire
// at 10,000 jobs), and saves 70 % of the live heap — worth it only where
// that is hundreds of megabytes. 256 MiB is about 400,000 schedules.
const largeHeap = 256 << 20

// heapPoll is how often lowerGCPercent reads the live heap before the
// service fires, on a start that reads the whole collection.
const heapPoll = 100 * time.Millisecond

// lowerGCPercent sets the collector's target to steadyGCPercent, unless
// GOGC is set (the runtime took it at start; "off" included; a value it
// cannot read, which it takes as 100, is logged at warn), once the live
// heap (liveHeap: what the last collection found) is at least largeHeap:
//
//   - at a tick of poll before the service fires, when poll is not nil:
//     `cronswap run` ticks it every heapPoll on a start that reads the
//     whole collection (no state file to arm from, hasStateFile), whose
//     garbage then grows the heap by 30 % of what is live rather than
//     doubling it before the service fires (a million schedules peaked at
//     0.90-1.09 GB RSS when the target was lowered only at firing,
//     0.88-0.89 GB lowered during the read);
//   - otherwise when firing is closed. A start from the state file is not
//     weighed before: arming from the file is allocation after allocation,
//     and lowered while it ran the start took up to 5.3 s instead of
//     3.2-3.8 s (the warm target is 5 s).
//
// It logs the target in force and why — at once when GOGC is set, at
// firing when the heap is small — and returns when it has done so or ctx
// ends. A heap that grows past largeHeap later (schedules added without a
// restart) keeps the runtime's target until the next start. Only
// `cronswap run` calls it: a Go service that embeds the daemon owns its
// process's collector.
func lowerGCPercent(ctx context.Context, log *slog.Logger, firing <-chan struct{}, poll <-chan time.Time, liveHeap func() uint64) {
	if v := os.Getenv("GOGC"); v != "" {
		if _, err := strconv.Atoi(v); err != nil && v != "off" {
			// The runtime reads anything else as 100, silently.
			log.Warn("GOGC is neither a number nor off: the Go runtime uses 100", "GOGC", v)
			return
		}
		log.Info("Go collector target", "from", "GOGC", "GOGC", v)
		return
	}
	for fired := false; !fired; {
		select {
		case <-poll:
			if live := liveHeap(); live >= largeHeap {
				debug.SetGCPercent(steadyGCPercent)
				log.Info("Go collector target lowered during the start's full read (GOGC unset, a large heap)", "gogc", steadyGCPercent,
					"live_heap_bytes", live)
				return
			}
		case <-firing:
			fired = true
		case <-ctx.Done():
			return
		}
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

// hasStateFile reports whether path names a state file that is there and
// not empty: the start then arms from it, and lowerGCPercent is given no
// poll. One that turns out unusable (its resume token gone) means a full
// read after all, whose target is then lowered at firing.
func hasStateFile(path string) bool {
	if path == "" {
		return false
	}
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Size() > 0
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
