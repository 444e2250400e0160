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
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
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
	points  [][2]int
	bursts  int
	every   time.Duration
	hold    time.Duration
	workers int
	// pprof sets http.pprof in each daemon's config (profiles under
	// /debug/pprof/ on its listener, the address in its config file).
	pprof        bool
	idle         time.Duration
	burstTimeout time.Duration
	timeout      time.Duration
	out          string
	plot         bool
	label        string
	batch        int
	binary       string
	logDir       string
	// compare is the label of the runs in OUT/bench-fire-results.txt drawn
	// beside this run's points ("" draws none).
	compare string
	// preset is the -preset name applied ("" none).
	preset string
	// overlap is the fire action's overlap policy ("" the daemon's
	// default); the triggers benchmark sets it.
	overlap string

	// serverJVM are extra JVM options of the test server (-server-jvm-args),
	// serverArgs extra arguments of its launcher (-server-args).
	serverJVM, serverArgs []string

	// tracing are the daemons' tracing settings each point is run with,
	// in turn ("off", "on"; -tracing); nil runs each point once with the
	// environment as it is.
	tracing []string
	// tracingEnv are extra KEY=VALUE environment variables of the daemons
	// with tracing on (-tracing-env).
	tracingEnv []string

	// sustained runs the sustained mode instead of bursts (fire_sustained.go).
	sustained bool
	duration  time.Duration
}

// firePresets are named sets of flag values (-preset NAME); a flag given
// explicitly on the command line wins over its preset value.
var firePresets = map[string]map[string]string{
	// The long-action case: 50 jobs due at the same slot whose
	// action takes 30 s, one replica, the daemon's default config; each
	// start's lateness is printed.
	"long-actions": {"n": "50", "replicas": "1", "bursts": "1", "every": "5m", "action-ms": "30000", "plot": "false", "idle": "0s"},
}

// sustainedDefaults are the flag values -sustained implies unless given.
var sustainedDefaults = map[string]string{"n": "100000", "replicas": "3"}

// applyDefaults sets each flag of vals that was not given on the command
// line.
func applyDefaults(fs *flag.FlagSet, vals map[string]string) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for name, v := range vals {
		if given[name] {
			continue
		}
		if err := fs.Set(name, v); err != nil {
			return fmt.Errorf("-%s %s: %w", name, v, err)
		}
	}
	return nil
}

// fireArgs are the flags of "bench fire" that are not settings of a run
// as they are (parsed further, or other modes).
type fireArgs struct {
	ns, reps, points string
	actionMS         int
	replot           string
	sinkCheck        int
	sinkClients      int
	sinkPooled       bool
	sinkSend         string // the sink check's sender process: the sink's URL
	sinkRelease      int64  // the sender's release instant, Unix ns
}

// fireFlagSet defines the flags of "bench fire" on o and a.
func fireFlagSet(o *fireSettings, a *fireArgs) *flag.FlagSet {
	fs := flag.NewFlagSet("bench fire", flag.ContinueOnError)
	fs.StringVar(&a.ns, "n", "1000", "jobs due in the same second, comma-separated for a grid (e.g. 1000,5000)")
	fs.StringVar(&a.reps, "replicas", "1", "daemon replicas, comma-separated for a grid (e.g. 1,3)")
	fs.StringVar(&a.points, "points", "", "explicit points NxR, comma-separated (e.g. 1000x1,1000x3,10000x3), instead of the grid -n × -replicas")
	fs.IntVar(&o.bursts, "bursts", 2, "measured bursts per point")
	fs.DurationVar(&o.every, "every", 30*time.Second,
		"the jobs' period: whole seconds dividing a minute (30s: '<s>/30 * * * * *') or whole minutes dividing an hour")
	fs.IntVar(&a.actionMS, "action-ms", 0, "the sink holds each action request this long before answering (a long action)")
	fs.IntVar(&o.workers, "workers", 0, "config workers of each daemon (0: the daemon's default)")
	fs.BoolVar(&o.pprof, "pprof", false, "serve each daemon's runtime profiles (config http.pprof) on its listener; its address is in the config file kept with -logs")
	fs.DurationVar(&o.idle, "idle", 10*time.Second, "idle window before the first burst, for commands per idle minute (0: none)")
	fs.DurationVar(&o.burstTimeout, "burst-timeout", 0,
		"how long after its slot a burst's fires are waited for (0: 2 × -every + 30s + the action hold + 1ms per job: 90s for 1,000 at 30s, 3m40s for 100,000)")
	fs.DurationVar(&o.timeout, "timeout", 40*time.Minute, "overall deadline of the run")
	fs.StringVar(&o.out, "out", "docs", "directory for bench-fire-results.txt (appended) and fire-lateness.png ('' writes neither)")
	fs.BoolVar(&o.plot, "plot", true, "draw OUT/fire-lateness.png: p99 against N per replica count; with -label, every run so labelled in the results file (per point the latest), beside the runs labelled -compare")
	fs.StringVar(&o.label, "label", "", "free text recorded with the run (e.g. before, after)")
	fs.Func("server-args", "extra arguments of the test server's launcher, space-separated (e.g. --oplog-max-entries 2000000: a bounded oplog, as a real server's, for long runs); say it in -label", func(v string) error {
		o.serverArgs = strings.Fields(v)
		return nil
	})
	fs.Func("server-jvm-args", "extra JVM options of the test server, space-separated (e.g. -XX:TieredStopAtLevel=4: the JVM's full JIT instead of the tests' C1-only); say it in -label", func(v string) error {
		o.serverJVM = strings.Fields(v)
		return nil
	})
	fs.StringVar(&a.replot, "replot", "", "only redraw OUT/fire-lateness.png from this results file (the runs labelled -label, or the last run; beside them those labelled -compare), then exit")
	fs.IntVar(&o.batch, "batch", 1000, "insertMany batch size while loading")
	fs.StringVar(&o.binary, "binary", "", "cronswap binary to run (default: go build into a temporary directory); a comma-separated list is given to the replicas in turn (e.g. before,after with -replicas 2: two builds side by side under the same load)")
	fs.StringVar(&o.logDir, "logs", "", "keep the daemons' logs and configs in this directory (default: a temporary one, removed)")
	fs.StringVar(&o.compare, "compare", "before",
		"plot beside this run's points those of the runs in OUT/bench-fire-results.txt with this label ('' none)")
	fs.StringVar(&o.preset, "preset", "", "a named set of flag values, explicit flags win: long-actions (-n 50 -replicas 1 -bursts 1 -every 5m -action-ms 30000 -plot=false -idle 0s)")
	fs.BoolVar(&o.sustained, "sustained", false,
		"sustained mode: -n schedules (default 100000) spread over the seconds of a minute ('S * * * * *', S = k mod 60), -replicas (default 3), for -duration; per minute lateness, missed, duplicates, RSS, commands per fire")
	fs.DurationVar(&o.duration, "duration", 10*time.Minute, "sustained mode: measured duration (whole minutes are reported; a last partial minute too)")
	fs.Func("tracing", "run each point once per setting, in this order, comma-separated: off (no OTEL_* variable) or on (OTLP/HTTP to a span-counting receiver the bench runs on loopback), e.g. off,on; the daemons' CPU and the spans received per fire are reported (default: each point once, the environment as it is)", func(v string) error {
		var err error
		o.tracing, err = tracingList(v)
		return err
	})
	fs.Func("tracing-env", "extra environment of the daemons with tracing on, space-separated KEY=VALUE (e.g. OTEL_BSP_MAX_QUEUE_SIZE=100000); say it in -label", func(v string) error {
		for _, kv := range strings.Fields(v) {
			if k, _, ok := strings.Cut(kv, "="); !ok || !strings.HasPrefix(k, "OTEL_") {
				return fmt.Errorf("%q: want OTEL_NAME=VALUE", kv)
			}
		}
		o.tracingEnv = strings.Fields(v)
		return nil
	})
	fs.IntVar(&a.sinkCheck, "sink-check", 0, "only measure the recording sink alone with this many requests released at once, then exit")
	fs.IntVar(&a.sinkClients, "sink-clients", 2000, "sink check: goroutines sending at once (each holds a connection: mind the open files limit)")
	fs.StringVar(&a.sinkSend, "sink-send", "", "internal: the sink check's sender process, posting to this URL")
	fs.Int64Var(&a.sinkRelease, "sink-release", 0, "internal: the sender's release instant (Unix ns)")
	fs.BoolVar(&a.sinkPooled, "sink-pooled", false, "sink check: a client keeping -sink-clients idle connections instead of the daemon's http.DefaultClient settings")
	return fs
}

func fireMain(args []string) int {
	var (
		o fireSettings
		a fireArgs
	)
	fs := fireFlagSet(&o, &a)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if a.sinkCheck > 0 {
		c := sinkCheckSettings{n: a.sinkCheck, clients: max(1, min(a.sinkClients, a.sinkCheck)), pooled: a.sinkPooled, timeout: 5 * time.Minute}
		if a.sinkSend != "" {
			out, _ := json.Marshal(sinkSend(a.sinkSend, c, time.Unix(0, a.sinkRelease)))
			fmt.Println(string(out))
			return 0
		}
		res, err := runSinkCheck(context.Background(), c)
		fmt.Print(res.text(c))
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench fire: sink check:", err)
			return 1
		}
		return 0
	}
	if o.preset != "" {
		vals, ok := firePresets[o.preset]
		if !ok {
			fmt.Fprintf(os.Stderr, "bench fire: -preset %q: want one of %s\n", o.preset, strings.Join(slices.Sorted(maps.Keys(firePresets)), ", "))
			return 2
		}
		if err := applyDefaults(fs, vals); err != nil {
			fmt.Fprintln(os.Stderr, "bench fire: -preset:", err)
			return 2
		}
	}
	if o.sustained {
		if err := applyDefaults(fs, sustainedDefaults); err != nil {
			fmt.Fprintln(os.Stderr, "bench fire:", err)
			return 2
		}
	}
	if a.replot != "" {
		if err := replotFire(a.replot, o.out, o.label, o.compare); err != nil {
			fmt.Fprintln(os.Stderr, "bench fire:", err)
			return 1
		}
		return 0
	}
	var err error
	if o.ns, err = intList(a.ns); err != nil {
		fmt.Fprintln(os.Stderr, "bench fire: -n:", err)
		return 2
	}
	if o.replicas, err = intList(a.reps); err != nil {
		fmt.Fprintln(os.Stderr, "bench fire: -replicas:", err)
		return 2
	}
	if o.points, err = pointList(a.points, o.ns, o.replicas); err != nil {
		fmt.Fprintln(os.Stderr, "bench fire: -points:", err)
		return 2
	}
	o.hold = time.Duration(a.actionMS) * time.Millisecond
	if err := o.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "bench fire:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	run := runFire
	if o.sustained {
		run = runSustained
	}
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "bench fire:", err)
		return 1
	}
	return 0
}

// replotFire redraws OUT/fire-lateness.png from a results file: the runs
// labelled label (the last run when label is ""), beside those labelled
// compare.
func replotFire(results, out, label, compare string) error {
	text, err := os.ReadFile(results)
	if err != nil {
		return err
	}
	series, day, err := plotSeriesFromResults(string(text), label, compare)
	if err != nil {
		return fmt.Errorf("%s: %w", results, err)
	}
	path := filepath.Join(out, "fire-lateness.png")
	if err := plotFireLateness(path, plotTitle(day, runtime.NumCPU(), seriesLabels(series)...), series); err != nil {
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

// tracingList parses -tracing: off and on, comma-separated, in the order
// each point runs them (a setting may repeat: off,on,on,off).
func tracingList(s string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(s, ",") {
		switch f = strings.TrimSpace(f); f {
		case "":
		case tracingOff, tracingOn:
			out = append(out, f)
		default:
			return nil, fmt.Errorf("%q: want %s or %s", f, tracingOff, tracingOn)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("empty: want off, on or both (off,on)")
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
	case o.timeout <= 0 || o.burstTimeout < 0:
		return errors.New("-timeout must be positive and -burst-timeout not negative")
	case o.sustained && len(o.tracing) > 0:
		return errors.New("-tracing runs bursts: not with -sustained")
	}
	_, err := fireExpr(o.every, time.Now())
	return err
}

// runSeries is what a run's plot draws: with a label, every run so labelled
// in the results file (this one just appended; for each point the latest),
// else this run's points; beside them the runs labelled -compare.
func runSeries(rep fireReport, resPath string) ([]latSeries, error) {
	o := rep.opts
	text, err := os.ReadFile(resPath)
	if err != nil {
		return nil, err
	}
	if o.label != "" {
		series, _, err := plotSeriesFromResults(string(text), o.label, o.compare)
		return series, err
	}
	var series []latSeries
	if runs, err := parseFireRuns(string(text)); err == nil && o.compare != "" {
		if cmp, _ := latestPoints(runs, o.compare); len(cmp) > 0 {
			series = append(series, latSeries{label: o.compare, points: cmp, dashed: true})
		}
	}
	return append(series, latSeries{label: "this run", points: rep.latPoints()}), nil
}

// seriesLabels returns the series' labels, in order.
func seriesLabels(series []latSeries) []string {
	out := make([]string, len(series))
	for i, s := range series {
		out[i] = s.label
	}
	return out
}

// burstTimeoutFor is how long after its slot a burst of n fires is waited
// for: -burst-timeout, else 2 × -every + 30 s + the action hold + 1 ms per
// fire (90 s for 1,000 at 30 s, 3 min 40 s for 100,000).
func (o fireSettings) burstTimeoutFor(n int) time.Duration {
	if o.burstTimeout > 0 {
		return o.burstTimeout
	}
	return 2*o.every + 30*time.Second + o.hold + time.Duration(n)*time.Millisecond
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
	settings := o.tracing
	if len(settings) == 0 {
		settings = []string{""}
	}
	for _, pt := range o.points {
		n, r := pt[0], pt[1]
		for _, tr := range settings {
			if ctx.Err() != nil {
				break
			}
			what := ""
			if tr != "" {
				what = ", tracing " + tr
			}
			logf("=== fire: N=%d, %d replica(s), %d burst(s) every %s, action hold %s%s", n, r, o.bursts, o.every, o.hold, what)
			p, err := runFirePoint(ctx, o, n, r, tr, logDir)
			if err != nil {
				logf("N=%d R=%d%s: %v", n, r, what, err)
				if firstErr == nil {
					firstErr = fmt.Errorf("N=%d R=%d%s: %w", n, r, what, err)
				}
			}
			if p != nil {
				p.err = err
				rep.points = append(rep.points, p)
				fmt.Print(p.text())
			}
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
		if o.plot && len(slices.Compact(slices.Sorted(slices.Values(o.tracing)))) > 1 {
			logf("no plot: it draws one figure per N × R, and -tracing ran each with %d settings", len(o.tracing))
		} else if o.plot && len(rep.latPoints()) > 0 {
			pngPath := filepath.Join(o.out, "fire-lateness.png")
			series, err := runSeries(rep, resPath)
			if err != nil {
				return fmt.Errorf("plot: %w", err)
			}
			title := plotTitle(rep.finished.Format("2006-01-02"), rep.env.cpus, seriesLabels(series)...)
			if err := plotFireLateness(pngPath, title, series); err != nil {
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
