// Command bench is cronswap's end-to-end benchmark. For each watch
// mode it starts a fresh test server (internal/testmongo), loads N schedules,
// starts the real daemon binary on them, drives edits at a fixed rate and
// measures, on this machine's clock:
//
//   - edit-to-armed: the write acknowledged to the bench → the daemon's JSON
//     log record saying the new spec is armed (its own nanosecond timestamp);
//   - the floor, in change stream mode: a bare driver Watch opened by the
//     bench on the same collection, write acknowledged → event received;
//   - the daemon's own share from /metrics (cronswap_event_apply_seconds),
//     when that histogram has observations;
//   - full reload without a resume token: daemon start → /readyz 200;
//   - warm restart, in change stream mode: the edit phase's daemon (with
//     state_file) stopped with SIGTERM, -warm-edits edits made while it is
//     down, a new daemon with the same instance id started: start → /readyz
//     200, its "armed from state file" split, that it did no full reload,
//     and start → the edits made while down applied;
//   - commands the daemon sends per idle minute, counted by
//     internal/faultproxy between a second daemon and the server.
//
// It prints a table (also written to OUT/bench-results.txt) and draws the
// latency distributions to OUT/edit-to-armed.png.
//
//	scripts/bench.sh -n 100000 -edits 500 -rate 5 -modes changestream,poll -out docs
//
// "bench fire [flags]" is the fire-path benchmark instead (fire.go,
// scripts/bench-fire.sh): N jobs due in the same second, R replicas.
// "bench server [flags]" compares builds of the test server side by side
// (server.go). "bench triggers [flags]" floods the triggers collection with
// run-now or backfill requests across replicas (triggers.go,
// scripts/bench-triggers.sh). "bench scale [flags]" holds N schedules on
// one replica (scale.go, scripts/bench-scale.sh); "bench divide [flags]"
// holds them on R replicas with divide_schedules off and on (divide.go,
// scripts/bench-divide.sh).
//
// It is a module of its own (its plotting library stays out of the daemon's
// go.mod) and runs from the repository root, where -out is relative to.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// settings are the command-line settings.
type settings struct {
	n            int
	edits        int
	warmup       int
	warmEdits    int
	rate         float64
	modes        []string
	pollInterval time.Duration
	idle         time.Duration
	out          string
	batch        int
	maxInflight  int
	binary       string
	logDir       string
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "fire" {
		os.Exit(fireMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "server" {
		os.Exit(serverMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "triggers" {
		os.Exit(triggersMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "scale" {
		os.Exit(scaleMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "divide" {
		os.Exit(divideMain(os.Args[2:]))
	}
	var (
		o     settings
		modes string
	)
	flag.IntVar(&o.n, "n", 100000, "schedules loaded into the collection")
	flag.IntVar(&o.edits, "edits", 500, "measured edits per mode")
	flag.IntVar(&o.warmup, "warmup", 10, "edits per mode before the measured ones, not counted")
	flag.IntVar(&o.warmEdits, "warm-edits", 20,
		"change stream mode: edits made while the daemon is down in the warm-restart phase (0 skips the phase and the state_file)")
	flag.Float64Var(&o.rate, "rate", 5, "edits per second (open loop, see -max-inflight)")
	flag.StringVar(&modes, "modes", "changestream,poll", "comma-separated watch modes to run: changestream, poll")
	flag.DurationVar(&o.pollInterval, "poll-interval", time.Second, "watch.poll_interval in poll mode")
	flag.DurationVar(&o.idle, "idle", 20*time.Second, "idle window for counting commands (scaled to one minute)")
	flag.StringVar(&o.out, "out", "docs", "directory for bench-results.txt and edit-to-armed.png ('' writes neither)")
	flag.IntVar(&o.batch, "batch", 1000, "insertMany batch size while loading")
	flag.IntVar(&o.maxInflight, "max-inflight", 20,
		"edits not yet armed before the next one waits (poll mode logs at most 20 changed ids per diff)")
	flag.StringVar(&o.binary, "binary", "", "cronswap binary to run (default: go build into a temporary directory)")
	flag.StringVar(&o.logDir, "logs", "", "keep the daemons' JSON logs in this directory (default: a temporary one, removed)")
	flag.Parse()
	for _, m := range strings.Split(modes, ",") {
		if m = strings.TrimSpace(m); m != "" {
			o.modes = append(o.modes, m)
		}
	}
	if err := o.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		stop()
		os.Exit(1)
	}
}

func (o settings) validate() error {
	switch {
	case o.n < 1:
		return errors.New("-n must be at least 1")
	case o.edits < 1 || o.warmup < 0:
		return errors.New("-edits must be at least 1 and -warmup at least 0")
	case o.warmup+o.edits > o.n:
		return fmt.Errorf("-warmup + -edits (%d) must not exceed -n (%d): each edit touches a different job", o.warmup+o.edits, o.n)
	case o.warmup+o.edits > maxEdits:
		return fmt.Errorf("-warmup + -edits must not exceed %d (distinct expressions)", maxEdits)
	case o.warmEdits < 0:
		return errors.New("-warm-edits must be at least 0")
	case o.rate <= 0:
		return errors.New("-rate must be positive")
	case o.batch < 1 || o.maxInflight < 1:
		return errors.New("-batch and -max-inflight must be at least 1")
	case o.maxInflight > 20:
		return errors.New("-max-inflight above 20 would lose poll-mode edits (the daemon logs at most 20 changed ids per diff)")
	case len(o.modes) == 0:
		return errors.New("-modes is empty")
	}
	for _, m := range o.modes {
		if m != modeChangeStream && m != modePoll {
			return fmt.Errorf("-modes: unknown mode %q (want changestream or poll)", m)
		}
	}
	if o.warmEdits > 0 && slices.Contains(o.modes, modeChangeStream) {
		switch total := o.warmup + o.edits + 1 + o.warmEdits; { // +1: the edit just before the stop
		case total > o.n:
			return fmt.Errorf("-warmup + -edits + -warm-edits + 1 (%d) must not exceed -n (%d): each edit touches a different job", total, o.n)
		case total > maxEdits:
			return fmt.Errorf("-warmup + -edits + -warm-edits + 1 must not exceed %d (distinct expressions)", maxEdits)
		}
	}
	return nil
}

// Watch modes (config watch.mode).
const (
	modeChangeStream = "changestream"
	modePoll         = "poll"
)

func run(ctx context.Context, o settings) error {
	ws, err := newWorkspace(ctx, "cronswap-bench-", o.logDir, o.binary)
	if err != nil {
		return err
	}
	defer ws.remove()
	logDir := ws.logDir
	o.binary = ws.binary

	env := describeMachine(ctx)
	started := time.Now().UTC()
	var results []*modeResult
	for _, mode := range o.modes {
		logf("=== mode %s: N=%d, %d+%d edits at %.3g/s", mode, o.n, o.warmup, o.edits, o.rate)
		r, err := runMode(ctx, o, mode, logDir)
		if err != nil {
			return fmt.Errorf("mode %s: %w", mode, err)
		}
		results = append(results, r)
	}
	env.loadAfter = loadAvg()

	rep := report{opts: o, env: env, started: started, finished: time.Now().UTC(), results: results}
	text := rep.text()
	fmt.Print(text)
	if o.out != "" {
		if err := os.MkdirAll(o.out, 0o755); err != nil {
			return err
		}
		resPath := filepath.Join(o.out, "bench-results.txt")
		if err := os.WriteFile(resPath, []byte(text), 0o644); err != nil {
			return err
		}
		pngPath := filepath.Join(o.out, "edit-to-armed.png")
		if err := plotCDF(pngPath, rep); err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		logf("wrote %s and %s", resPath, pngPath)
	}
	if o.logDir != "" {
		logf("daemon logs kept in %s", o.logDir)
	}
	return nil
}

// logf reports progress on stderr, so that stdout carries only the results.
func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "%s bench: %s\n", time.Now().UTC().Format("15:04:05.000"), fmt.Sprintf(format, a...))
}
