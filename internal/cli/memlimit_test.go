package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// The Go runtime's soft memory limit is process-wide: these cases run in
// order, and the limit in force before them is restored after.
func TestMemoryLimitFollowsTheContainers(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	// Neither variable set, whatever the environment of the test.
	for _, v := range []string{"GOMEMLIMIT", "AUTOMEMLIMIT"} {
		t.Setenv(v, "")
		os.Unsetenv(v)
	}
	const gib = 1 << 30
	run := func(container memlimit.Provider) string {
		var b bytes.Buffer
		debug.SetMemoryLimit(math.MaxInt64)
		setMemoryLimit(slog.New(slog.NewTextHandler(&b, nil)), container)
		return b.String()
	}

	// A container limited to 1 GiB: 90 % of it, logged.
	logged := run(memlimit.Limit(gib))
	if got, want := debug.SetMemoryLimit(-1), int64(966367641); got != want {
		t.Errorf("Go memory limit in a container of 1 GiB: %d, want %d", got, want)
	}
	if !strings.Contains(logged, "go_memory_limit_bytes=966367641") {
		t.Errorf("log in a container of 1 GiB: %q, want the limit set", logged)
	}
	// No limit (a machine, a container without one): none set, nothing
	// logged.
	if logged := run(func() (uint64, error) { return 0, memlimit.ErrNoLimit }); logged != "" || debug.SetMemoryLimit(-1) != math.MaxInt64 {
		t.Errorf("no container limit: limit %d, log %q; want none, and no line", debug.SetMemoryLimit(-1), logged)
	}
	// In no cgroup: the same, quietly.
	if logged := run(func() (uint64, error) { return 0, memlimit.ErrNoCgroup }); logged != "" || debug.SetMemoryLimit(-1) != math.MaxInt64 {
		t.Errorf("in no cgroup: limit %d, log %q; want none, and no line", debug.SetMemoryLimit(-1), logged)
	}
	// A limit that cannot be read: none, and a warning that says what to do.
	logged = run(func() (uint64, error) { return 0, errors.New("permission denied") })
	if debug.SetMemoryLimit(-1) != math.MaxInt64 || !strings.Contains(logged, "level=WARN") || !strings.Contains(logged, "GOMEMLIMIT") {
		t.Errorf("unreadable container limit: limit %d, log %q; want none, and a warning naming GOMEMLIMIT", debug.SetMemoryLimit(-1), logged)
	}
	// AUTOMEMLIMIT changes the ratio, or turns it off.
	t.Setenv("AUTOMEMLIMIT", "0.5")
	run(memlimit.Limit(gib))
	if got := debug.SetMemoryLimit(-1); got != gib/2 {
		t.Errorf("AUTOMEMLIMIT=0.5 in a container of 1 GiB: %d, want %d", got, gib/2)
	}
	t.Setenv("AUTOMEMLIMIT", "most")
	if logged := run(memlimit.Limit(gib)); debug.SetMemoryLimit(-1) != math.MaxInt64 || !strings.Contains(logged, "level=WARN") || !strings.Contains(logged, "most") {
		t.Errorf("AUTOMEMLIMIT=most: limit %d, log %q; want none, and a warning quoting it", debug.SetMemoryLimit(-1), logged)
	}
	t.Setenv("AUTOMEMLIMIT", "off")
	if logged := run(memlimit.Limit(gib)); debug.SetMemoryLimit(-1) != math.MaxInt64 || !strings.Contains(logged, "AUTOMEMLIMIT=off") {
		t.Errorf("AUTOMEMLIMIT=off: limit %d, log %q; want none, and said", debug.SetMemoryLimit(-1), logged)
	}
	// GOMEMLIMIT set: the runtime took it at start; it is left alone, and
	// logged.
	os.Unsetenv("AUTOMEMLIMIT")
	t.Setenv("GOMEMLIMIT", "700MiB")
	if logged := run(memlimit.Limit(gib)); debug.SetMemoryLimit(-1) != math.MaxInt64 || !strings.Contains(logged, "GOMEMLIMIT=700MiB") {
		t.Errorf("GOMEMLIMIT set: limit %d, log %q; want the container's not applied, and GOMEMLIMIT logged", debug.SetMemoryLimit(-1), logged)
	}
}

// The collector's target is process-wide too: restored after.
func TestGCPercentLoweredForALargeHeapUnlessGOGCIsSet(t *testing.T) {
	before := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(before) })
	run := func(ctx context.Context, firing <-chan struct{}, poll <-chan time.Time, live uint64) string {
		var b bytes.Buffer
		debug.SetGCPercent(100)
		lowerGCPercent(ctx, slog.New(slog.NewTextHandler(&b, nil)), firing, poll, func() uint64 { return live })
		return b.String()
	}
	closed := make(chan struct{})
	close(closed)

	t.Setenv("GOGC", "")
	os.Unsetenv("GOGC")
	// Not firing yet when the run ends: the start's target stays.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if logged := run(ctx, make(chan struct{}), nil, largeHeap); debug.SetGCPercent(100) != 100 || logged != "" {
		t.Errorf("stopped before firing: target changed or logged %q", logged)
	}
	// Firing with a large heap: lowered, and said.
	for _, poll := range []<-chan time.Time{nil, make(chan time.Time)} {
		logged := run(context.Background(), closed, poll, largeHeap)
		if got := debug.SetGCPercent(100); got != steadyGCPercent {
			t.Errorf("GOGC unset, firing, live heap %d (polled: %v): target %d, want %d", largeHeap, poll != nil, got, steadyGCPercent)
		}
		if !strings.Contains(logged, fmt.Sprintf("gogc=%d", steadyGCPercent)) || !strings.Contains(logged, "GOGC unset") {
			t.Errorf("GOGC unset, a large heap: log %q, want the target and why", logged)
		}
	}
	// Firing with a small heap: the runtime's target kept, and said.
	logged := run(context.Background(), closed, nil, largeHeap-1)
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GOGC unset, firing, live heap %d: target changed to %d", largeHeap-1, got)
	}
	if !strings.Contains(logged, "gogc=100") || !strings.Contains(logged, "small") {
		t.Errorf("GOGC unset, a small heap: log %q, want the target kept and why", logged)
	}
	// A start that reads the whole collection (polled): lowered at the
	// first tick that finds the live heap at the mark, before it fires.
	var b bytes.Buffer
	debug.SetGCPercent(100)
	ticks, firing := make(chan time.Time), make(chan struct{})
	reads := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		lowerGCPercent(context.Background(), slog.New(slog.NewTextHandler(&b, nil)), firing, ticks, func() uint64 {
			if reads++; reads < 3 {
				return largeHeap - 1 // still growing
			}
			return largeHeap
		})
	}()
	for range 3 {
		ticks <- time.Now()
	}
	<-done
	if got := debug.SetGCPercent(100); got != steadyGCPercent || reads != 3 || !strings.Contains(b.String(), "during the start's full read") {
		t.Errorf("a full read past the mark before firing: target %d after %d reads, log %q; want %d at the third read, and said",
			got, reads, b.String(), steadyGCPercent)
	}
	// Not polled (a start from the state file): the heap is weighed only
	// once the service fires.
	b.Reset()
	debug.SetGCPercent(100)
	firing, done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		lowerGCPercent(context.Background(), slog.New(slog.NewTextHandler(&b, nil)), firing, nil, func() uint64 {
			select {
			case <-firing:
			default:
				t.Error("the heap was weighed before firing")
			}
			return largeHeap
		})
	}()
	close(firing)
	<-done
	if got := debug.SetGCPercent(100); got != steadyGCPercent || !strings.Contains(b.String(), "now that the schedules are armed") {
		t.Errorf("not polled: target %d, log %q; want %d at firing", got, b.String(), steadyGCPercent)
	}
	// Set: the runtime took it at start (here the test's 100 stands for
	// it); left alone, and logged at once.
	for _, v := range []string{"200", "off"} {
		t.Setenv("GOGC", v)
		logged := run(context.Background(), make(chan struct{}), nil, largeHeap)
		if got := debug.SetGCPercent(100); got != 100 {
			t.Errorf("GOGC=%s: target changed to %d", v, got)
		}
		if !strings.Contains(logged, "GOGC="+v) {
			t.Errorf("GOGC=%s: log %q, want the variable logged", v, logged)
		}
	}
	// Set to what the runtime cannot read (it takes 100): left alone, and
	// a warning that says so.
	t.Setenv("GOGC", "fifty")
	if logged := run(context.Background(), closed, nil, largeHeap); debug.SetGCPercent(100) != 100 ||
		!strings.Contains(logged, "level=WARN") || !strings.Contains(logged, "GOGC=fifty") {
		t.Errorf("GOGC=fifty: target changed or log %q; want a warning quoting it", logged)
	}
	runtime.GC() // the metric is the last collection's finding
	if runtimeLiveHeap() == 0 {
		t.Error("runtimeLiveHeap read 0 after a collection: the runtime's live heap metric is not read")
	}
}

// A start arms from the state file only when there is one to read: a
// regular file that is not empty.
func TestHasStateFile(t *testing.T) {
	dir := t.TempDir()
	full, empty := filepath.Join(dir, "state"), filepath.Join(dir, "empty")
	if err := os.WriteFile(full, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]bool{full: true, empty: false, dir: false, filepath.Join(dir, "missing"): false, "": false} {
		if got := hasStateFile(path); got != want {
			t.Errorf("hasStateFile(%q) = %v, want %v", path, got, want)
		}
	}
}
