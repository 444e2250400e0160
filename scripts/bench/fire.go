package main

// The fire benchmark ("bench fire", scripts/bench-fire.sh): N jobs due in the
// same second, R daemon replicas, B bursts. For each point of the grid -n ×
// -replicas it starts a fresh test server, a recording HTTP sink on loopback,
// one counting wire proxy (internal/faultproxy) per replica and R daemon
// processes (the real binary, each with its own config, instance id and HTTP
// port, its http action posting to the sink), loads the N schedules in bulk
// before the daemons start, waits until every daemon is ready and has armed
// N, lets B bursts happen and accounts for each from the sink's records and
// the proxies' counters.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// fireSettings are the fire benchmark's command-line settings.
type fireSettings struct {
	ns       []int
	replicas []int
	// points are the (N, replicas) pairs run, in order: -points, else the
	// grid -n × -replicas.
	points       [][2]int
	bursts       int
	every        time.Duration
	hold         time.Duration
	workers      int
	idle         time.Duration
	burstTimeout time.Duration
	timeout      time.Duration
	out          string
	plot         bool
	label        string
	batch        int
	binary       string
	logDir       string
}

func fireMain(args []string) int {
	fs := flag.NewFlagSet("bench fire", flag.ContinueOnError)
	var (
		o                fireSettings
		ns, reps, points string
		actionMS         int
	)
	fs.StringVar(&ns, "n", "1000", "jobs due in the same second, comma-separated for a grid (e.g. 1000,5000)")
	fs.StringVar(&reps, "replicas", "1", "daemon replicas, comma-separated for a grid (e.g. 1,3)")
	fs.StringVar(&points, "points", "", "explicit points NxR, comma-separated (e.g. 1000x1,1000x3,10000x3), instead of the grid -n × -replicas")
	fs.IntVar(&o.bursts, "bursts", 2, "measured bursts per point")
	fs.DurationVar(&o.every, "every", 30*time.Second,
		"the jobs' period: whole seconds dividing a minute (30s: '<s>/30 * * * * *') or whole minutes dividing an hour")
	fs.IntVar(&actionMS, "action-ms", 0, "the sink holds each action request this long before answering (a long action)")
	fs.IntVar(&o.workers, "workers", 0, "config workers of each daemon (0: the daemon's default)")
	fs.DurationVar(&o.idle, "idle", 10*time.Second, "idle window before the first burst, for commands per idle minute (0: none)")
	fs.DurationVar(&o.burstTimeout, "burst-timeout", 0,
		"how long after its slot a burst's fires are waited for (0: 2 × -every + 30s + the action hold)")
	fs.DurationVar(&o.timeout, "timeout", 40*time.Minute, "overall deadline of the run")
	fs.StringVar(&o.out, "out", "docs", "directory for bench-fire-results.txt (appended) and fire-lateness.png ('' writes neither)")
	fs.BoolVar(&o.plot, "plot", true, "draw OUT/fire-lateness.png from this run's points")
	fs.StringVar(&o.label, "label", "", "free text recorded with the run (e.g. before, after)")
	replot := fs.String("replot", "", "only redraw OUT/fire-lateness.png from the last run in this results file, then exit")
	fs.IntVar(&o.batch, "batch", 1000, "insertMany batch size while loading")
	fs.StringVar(&o.binary, "binary", "", "cronswap binary to run (default: go build into a temporary directory)")
	fs.StringVar(&o.logDir, "logs", "", "keep the daemons' logs and configs in this directory (default: a temporary one, removed)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *replot != "" {
		if err := replotFire(*replot, o.out, o.label); err != nil {
			fmt.Fprintln(os.Stderr, "bench fire:", err)
			return 1
		}
		return 0
	}
	var err error
	if o.ns, err = intList(ns); err != nil {
		fmt.Fprintln(os.Stderr, "bench fire: -n:", err)
		return 2
	}
	if o.replicas, err = intList(reps); err != nil {
		fmt.Fprintln(os.Stderr, "bench fire: -replicas:", err)
		return 2
	}
	if o.points, err = pointList(points, o.ns, o.replicas); err != nil {
		fmt.Fprintln(os.Stderr, "bench fire: -points:", err)
		return 2
	}
	o.hold = time.Duration(actionMS) * time.Millisecond
	if o.burstTimeout == 0 {
		o.burstTimeout = 2*o.every + 30*time.Second + o.hold
	}
	if err := o.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "bench fire:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	if err := runFire(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "bench fire:", err)
		return 1
	}
	return 0
}

// replotFire redraws OUT/fire-lateness.png from a results file.
func replotFire(results, out, label string) error {
	text, err := os.ReadFile(results)
	if err != nil {
		return err
	}
	pts, day, err := latPointsFromResults(string(text))
	if err != nil {
		return fmt.Errorf("%s: %w", results, err)
	}
	path := filepath.Join(out, "fire-lateness.png")
	if err := plotFireLateness(path, plotTitle(day, runtime.NumCPU(), label), pts); err != nil {
		return err
	}
	logf("wrote %s from %s", path, results)
	return nil
}

// pointList parses "1000x1,10000x3"; empty gives the grid ns × reps.
func pointList(s string, ns, reps []int) ([][2]int, error) {
	var out [][2]int
	if strings.TrimSpace(s) == "" {
		for _, n := range ns {
			for _, r := range reps {
				out = append(out, [2]int{n, r})
			}
		}
		return out, nil
	}
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		a, b, ok := strings.Cut(f, "x")
		n, errN := intList(a)
		r, errR := intList(b)
		if !ok || errN != nil || errR != nil || len(n) != 1 || len(r) != 1 {
			return nil, fmt.Errorf("%q: want NxR, e.g. 1000x3", f)
		}
		out = append(out, [2]int{n[0], r[0]})
	}
	if len(out) == 0 {
		return nil, errors.New("empty")
	}
	return out, nil
}

// intList parses "1000,5000" into positive integers.
func intList(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(strings.ReplaceAll(f, "_", "")); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("empty")
	}
	return out, nil
}

func (o fireSettings) validate() error {
	switch {
	case o.bursts < 1:
		return errors.New("-bursts must be at least 1")
	case o.hold < 0 || o.workers < 0 || o.idle < 0:
		return errors.New("-action-ms, -workers and -idle must not be negative")
	case o.batch < 1:
		return errors.New("-batch must be at least 1")
	case o.timeout <= 0 || o.burstTimeout <= 0:
		return errors.New("-timeout and -burst-timeout must be positive")
	}
	_, err := fireExpr(o.every, time.Now())
	return err
}

func runFire(ctx context.Context, o fireSettings) error {
	ws, err := newWorkspace(ctx, "cronswap-bench-fire-", o.logDir, o.binary)
	if err != nil {
		return err
	}
	defer ws.remove()
	logDir := ws.logDir
	o.binary = ws.binary
	rep := fireReport{opts: o, env: describeMachine(ctx), started: time.Now().UTC()}
	var firstErr error
	for _, pt := range o.points {
		n, r := pt[0], pt[1]
		if ctx.Err() != nil {
			break
		}
		logf("=== fire: N=%d, %d replica(s), %d burst(s) every %s, action hold %s", n, r, o.bursts, o.every, o.hold)
		p, err := runFirePoint(ctx, o, n, r, logDir)
		if err != nil {
			logf("N=%d R=%d: %v", n, r, err)
			if firstErr == nil {
				firstErr = fmt.Errorf("N=%d R=%d: %w", n, r, err)
			}
		}
		if p != nil {
			p.err = err
			rep.points = append(rep.points, p)
			fmt.Print(p.text())
		}
	}
	rep.finished = time.Now().UTC()
	rep.env.loadAfter = loadAvg()
	if o.out != "" && len(rep.points) > 0 {
		if err := os.MkdirAll(o.out, 0o755); err != nil {
			return err
		}
		resPath := filepath.Join(o.out, "bench-fire-results.txt")
		f, err := os.OpenFile(resPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		_, werr := f.WriteString(rep.text())
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			return werr
		}
		logf("appended to %s", resPath)
		if o.plot {
			pngPath := filepath.Join(o.out, "fire-lateness.png")
			title := plotTitle(rep.finished.Format("2006-01-02"), rep.env.cpus, o.label)
			if err := plotFireLateness(pngPath, title, rep.latPoints()); err != nil {
				return fmt.Errorf("plot: %w", err)
			}
			logf("wrote %s", pngPath)
		}
	}
	if o.logDir != "" {
		logf("daemon logs kept in %s", o.logDir)
	}
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return firstErr
}

// fireExpr returns a six-field expression with period every whose slots
// include the first whole second at or after at: "<s>/<every> * * * * *"
// for a period of whole seconds dividing a minute, "<s> <m>/<every> * * * *"
// for whole minutes dividing an hour (UTC).
func fireExpr(every time.Duration, at time.Time) (string, error) {
	if every <= 0 || every%time.Second != 0 {
		return "", fmt.Errorf("-every %s: want whole seconds", every)
	}
	at = at.UTC()
	if at.Nanosecond() != 0 {
		at = at.Truncate(time.Second).Add(time.Second)
	}
	sec := int(every / time.Second)
	switch {
	case sec <= 60 && 60%sec == 0:
		if sec == 60 {
			return fmt.Sprintf("%d * * * * *", at.Second()), nil
		}
		return fmt.Sprintf("%d/%d * * * * *", at.Second()%sec, sec), nil
	case sec%60 == 0 && sec <= 3600 && 3600%sec == 0:
		m := sec / 60
		if m == 60 {
			return fmt.Sprintf("%d %d * * * *", at.Second(), at.Minute()), nil
		}
		return fmt.Sprintf("%d %d/%d * * * *", at.Second(), at.Minute()%m, m), nil
	}
	return "", fmt.Errorf("-every %s: want whole seconds dividing a minute or whole minutes dividing an hour", every)
}
