package main

// "bench divide": N schedules held by R replicas, with divide_schedules
// off and then on (a fresh database each), on one test server: each replica's armed and known
// counts, RSS and live heap after a GC once the division has settled
// (scripts/bench-divide.sh, docs/BENCHMARKS.md "Dividing the schedules
// over replicas").

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/internal/testmongo"
)

// divideSettings are the flags of "bench divide".
type divideSettings struct {
	n          int
	replicas   int
	binary     string
	serverHeap string
	// serverJVMArgs are the test server's extra JVM options (-server-jvm-args).
	serverJVMArgs []string
	oplogMax      int
	stable        time.Duration
	settle        time.Duration
	out           string
	logDir        string
	heapProfiles  string
	// cpuProfiles, when set, receives a CPU profile of each live replica
	// taken over the cpuProfileFor after the joiner is ready.
	cpuProfiles string
	timeout     time.Duration
	// The kill/join phase (divide_schedules on; -hot 0 leaves it out).
	hot int
	// kill is how many replicas the phase SIGKILLs together (the first
	// ones): 2 orphans the jobs whose two armers both die.
	kill                         int
	heartbeat, lease, claimGrace time.Duration
	before, after                time.Duration
	// settings are the divide_schedules rounds run, in order.
	settings []bool
	// safepoints is the test server's log of its stop-the-world pauses
	// (set by runDivide).
	safepoints string
}

func divideMain(args []string) int {
	fs := flag.NewFlagSet("bench divide", flag.ExitOnError)
	var o divideSettings
	fs.IntVar(&o.n, "n", 100000, "schedules (the scale bench's per-customer documents)")
	fs.IntVar(&o.replicas, "replicas", 4, "replicas started side by side")
	fs.StringVar(&o.binary, "binary", "", "daemon binary (default: a build of this tree)")
	fs.StringVar(&o.serverHeap, "server-heap", defaultServerHeap, serverHeapUsage)
	serverJVM := fs.String("server-jvm-args", "", "the test server's extra JVM options, space-separated "+
		"(e.g. -XX:TieredStopAtLevel=4: C2 as well as C1; the default is internal/testmongo's C1 only)")
	fs.IntVar(&o.oplogMax, "oplog-max-entries", 200000, "the test server's oplog bound (0: none)")
	fs.DurationVar(&o.stable, "stable", 15*time.Second,
		"the replicas' armed counts must stay the same this long (more than a heartbeat, 10 s) before they are read")
	fs.DurationVar(&o.settle, "settle", 5*time.Minute, "wait at most this long for each replica's start-up work to settle")
	fs.StringVar(&o.out, "out", "docs", "directory for bench-divide-results.txt (appended; '' writes none)")
	fs.StringVar(&o.logDir, "logs", "", "keep the daemons' logs here")
	fs.StringVar(&o.heapProfiles, "heap-profiles", "", "save each replica's heap profile (after a GC) in this directory, "+
		"as heap-ID-N.pb.gz (go tool pprof -sample_index=inuse_space)")
	fs.StringVar(&o.cpuProfiles, "cpu-profiles", "", "kill/join: save a CPU profile of each live replica, taken over the "+
		cpuProfileFor.String()+" after the joiner is ready, in this directory")
	fs.DurationVar(&o.timeout, "timeout", 60*time.Minute, "the whole run's deadline")
	fs.IntVar(&o.hot, "hot", 60, "every-second jobs added for the kill/join phase of the divide_schedules round (0: no such phase)")
	fs.IntVar(&o.kill, "kill", 1, "kill/join: replicas SIGKILLed together, the first ones (2: the jobs whose two armers both die are orphaned and handed over)")
	fs.DurationVar(&o.heartbeat, "heartbeat", 0, "the replicas' members.heartbeat (0: the default, 10s)")
	fs.DurationVar(&o.lease, "lease", 0, "the replicas' members.lease (0: the default, 30s)")
	fs.DurationVar(&o.claimGrace, "claim-grace", 0, "the replicas' members.claim_grace (0: the default, 2s)")
	fs.DurationVar(&o.before, "before", 15*time.Second, "kill/join: every replica up this long before the kill")
	fs.DurationVar(&o.after, "after", 20*time.Second, "kill/join: slots counted this long after the armed counts settled on the join")
	rounds := fs.String("settings", "off,on", "the divide_schedules rounds, in order (off, on, or both)")
	_ = fs.Parse(args)
	o.serverJVMArgs = strings.Fields(*serverJVM)
	for _, v := range strings.Split(*rounds, ",") {
		switch strings.TrimSpace(v) {
		case "off":
			o.settings = append(o.settings, false)
		case "on":
			o.settings = append(o.settings, true)
		default:
			fmt.Fprintf(os.Stderr, "bench divide: -settings: %q is neither off nor on\n", v)
			return 2
		}
	}
	if o.n < 1000 || o.replicas < 1 {
		fmt.Fprintln(os.Stderr, "bench divide: -n must be at least 1000 and -replicas at least 1")
		return 2
	}
	if o.kill < 1 || o.kill >= o.replicas {
		fmt.Fprintf(os.Stderr, "bench divide: -kill %d: want at least 1 and fewer than the %d replicas\n", o.kill, o.replicas)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	if err := runDivide(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "bench divide:", err)
		return 1
	}
	return 0
}

// divideReplica is what one replica held once the division settled.
type divideReplica struct {
	id           string
	ready        time.Duration // process start → /readyz 200
	armed, known int64         // cronswap_schedules_armed, cronswap_schedules_known
	rssKB        int64         // VmRSS at the read
	heap         int64         // live heap after a GC, bytes
}

// divideRound is the R replicas of one setting.
type divideRound struct {
	divide   bool
	stableIn time.Duration // all ready → the armed counts stable
	replicas []divideReplica
	problems []string
	load     string
	handoff  *handoffResult // the kill/join phase (the divide round only)
}

func runDivide(ctx context.Context, o divideSettings) error {
	ws, err := newWorkspace(ctx, "cronswap-bench-divide-", o.logDir, o.binary)
	if err != nil {
		return err
	}
	defer ws.remove()
	env := describeMachine(ctx)
	started := time.Now().UTC()
	extra := []string{}
	if o.oplogMax > 0 {
		extra = append(extra, "--oplog-max-entries", strconv.Itoa(o.oplogMax))
	}
	o.safepoints = filepath.Join(ws.logDir, "server-safepoints.log")
	jvm := append(append([]string{"-Xmx" + o.serverHeap}, o.serverJVMArgs...), safepointLogOption(o.safepoints))
	srv, err := testmongo.Start(ctx, testmongo.Options{StartTimeout: 2 * time.Minute, IgnoreEnv: true,
		JVMArgs: jvm, ExtraArgs: extra})
	if err != nil {
		return err
	}
	defer func() { _ = srv.Stop() }()
	client, err := testmongo.Connect(ctx, srv.URI)
	if err != nil {
		return err
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	var rounds []*divideRound
	var loadTime time.Duration
	var collBytes int64
	for _, divide := range o.settings {
		// A database of its own per setting: both rounds start from the
		// same state (no job sighted yet), so their start-up work is alike.
		dbName := fmt.Sprintf("bench_divide_%d_%t", o.n, divide)
		logf("=== N=%d over %d replicas, divide_schedules %t: loading into %s (-Xmx%s, oplog bound %d)",
			o.n, o.replicas, divide, dbName, o.serverHeap, o.oplogMax)
		if loadTime, collBytes, err = loadScale(ctx, client.Database(dbName).Collection("schedules"), o.n); err != nil {
			return err
		}
		logf("loaded %d schedules (%.1f MB) in %s", o.n, float64(collBytes)/1e6, loadTime.Round(time.Millisecond))
		r, err := runDivideRound(ctx, o, ws, srv.URI, client.Database(dbName), divide)
		if err != nil {
			return fmt.Errorf("divide_schedules %t: %w", divide, err)
		}
		rounds = append(rounds, r)
		if err := client.Database(dbName).Drop(ctx); err != nil {
			return fmt.Errorf("drop %s: %w", dbName, err)
		}
	}
	env.loadAfter = loadAvg()
	text := fmt.Sprintf("bench divide %s–%s UTC: N=%d (%.1f MB, the second load took %s), %d replicas of %s; test server -Xmx%s%s, oplog bound %d\n"+
		"test server jar: %s\n"+
		"machine: %d CPUs %s, %s, Linux %s, %s; load average %s → %s\n",
		started.Format("2006-01-02 15:04"), time.Now().UTC().Format("15:04"), o.n, float64(collBytes)/1e6,
		loadTime.Round(time.Second), o.replicas, ws.binary, o.serverHeap,
		strings.Join(append([]string{""}, o.serverJVMArgs...), " "), o.oplogMax, serverJar(),
		env.cpus, env.cpuModel, env.memTotal, env.kernel, env.goVersion, env.loadBefore, env.loadAfter) + divideTable(rounds)
	fmt.Print(text)
	if o.out == "" {
		return nil
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	path := filepath.Join(o.out, "bench-divide-results.txt")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.WriteString(text + "\n"); err != nil {
		return err
	}
	logf("appended to %s", path)
	return nil
}

// runDivideRound starts the replicas with divide_schedules set to divide,
// waits for all of them to be ready, their start-up work to settle and
// their armed counts to hold still for o.stable, reads what each holds and
// stops them.
func runDivideRound(ctx context.Context, o divideSettings, ws *workspace, uri string, db *mongo.Database, divide bool) (*divideRound, error) {
	dbName := db.Name()
	r := &divideRound{divide: divide}
	logf("--- divide_schedules %t: starting %d replicas", divide, o.replicas)
	ds := make([]*daemon, o.replicas)
	ids := make([]string, o.replicas)
	defer func() {
		for _, d := range ds {
			if d != nil {
				d.stop()
			}
		}
	}()
	for i := range ds {
		ids[i] = fmt.Sprintf("divide-%t-r%d", divide, i+1)
		d, err := startDaemon(ctx, daemonSpec{
			binary: ws.binary, uri: uri, database: dbName, instanceID: ids[i], mode: modeChangeStream,
			pollInterval: time.Second, pprof: true, divide: divide, extra: o.membersConfig(),
			logPath: filepath.Join(ws.logDir, ids[i]+".log"), ledger: filepath.Join(ws.tmp, "handoff-ledger.log"),
		})
		if err != nil {
			return nil, err
		}
		ds[i] = d
	}
	r.replicas = make([]divideReplica, len(ds))
	for i, d := range ds {
		ready, err := d.waitReady(ctx, readyLimit)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ids[i], err)
		}
		r.replicas[i] = divideReplica{id: ids[i], ready: ready}
		logf("%s ready after %s", ids[i], ready.Round(time.Millisecond))
	}
	settled := waitIdle(ctx, ds, o.settle)
	logf("start-up work settled %s after the last ready", settled.Round(time.Second))
	start := time.Now()
	var last []int64
	since := time.Now()
	for ctx.Err() == nil && time.Since(start) < o.settle {
		cur := make([]int64, len(ds))
		for i, d := range ds {
			cur[i] = metricOf(ctx, d, "cronswap_schedules_armed")
		}
		if !equalCounts(cur, last) {
			last, since = cur, time.Now()
		} else if time.Since(since) >= o.stable {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	r.stableIn = time.Since(start)
	logf("armed counts %v, stable after %s", last, r.stableIn.Round(time.Second))
	for i, d := range ds {
		p := &r.replicas[i]
		p.armed = metricOf(ctx, d, "cronswap_schedules_armed")
		p.known = metricOf(ctx, d, "cronswap_schedules_known")
		p.heap = heapAfterGC(ctx, d, profilePath(o.heapProfiles, p.id, o.n))
		p.rssKB = vmRSS(d.cmd.Process.Pid)
		logf("%s: armed %d, known %d, RSS %d MB, heap after GC %d MB", p.id, p.armed, p.known, p.rssKB/1024, p.heap>>20)
	}
	if divide && o.hot > 0 {
		victims := slices.Clone(ds[:o.kill])
		h, joiner, err := runHandoff(ctx, o, ws, uri, db, ds, ids)
		if joiner != nil {
			if _, err := joiner.shutdown(2 * time.Minute); err != nil {
				r.problems = append(r.problems, "joiner: "+err.Error())
			}
			r.problems = append(r.problems, joiner.Problems()...)
		}
		if err != nil {
			return nil, fmt.Errorf("kill/join: %w", err)
		}
		for _, v := range victims {
			h.problems = append(h.problems, v.Problems()...)
		}
		r.handoff = h
	}
	for i, d := range ds {
		if d == nil {
			continue // killed in the kill/join phase
		}
		if _, err := d.shutdown(2 * time.Minute); err != nil {
			r.problems = append(r.problems, ids[i]+": "+err.Error())
		}
		r.problems = append(r.problems, d.Problems()...)
	}
	r.load = loadAvg()
	return r, nil
}

// waitIdle waits up to limit for every daemon of ds to use less than a
// fifth of a core over 2 s (the first sightings written, the catch-up
// done); it returns how long that took. Unlike waitSettled it does not
// wait for a first-sightings record: the second round's jobs were sighted
// in the first.
func waitIdle(ctx context.Context, ds []*daemon, limit time.Duration) time.Duration {
	start := time.Now()
	last := make([]int64, len(ds))
	for i, d := range ds {
		last[i] = cpuTicks(d.cmd.Process.Pid)
	}
	for time.Since(start) < limit && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-time.After(2 * time.Second):
		}
		idle := true
		for i, d := range ds {
			now := cpuTicks(d.cmd.Process.Pid)
			if float64(now-last[i])/clockTicks/2 >= 0.2 {
				idle = false
			}
			last[i] = now
		}
		if idle {
			break
		}
	}
	return time.Since(start)
}

// metricOf reads one unlabelled gauge from the daemon's /metrics; -1 when
// it cannot.
func metricOf(ctx context.Context, d *daemon, name string) int64 {
	body, err := d.get(ctx, "/metrics")
	if err != nil {
		return -1
	}
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
				return int64(f)
			}
		}
	}
	return -1
}

func equalCounts(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// divideTable is the per-replica table of both rounds, with each round's
// mean beside the off round's.
func divideTable(rounds []*divideRound) string {
	var b strings.Builder
	b.WriteString("\n| divide_schedules | replica | ready | armed | known | RSS | heap after GC | heap per known job |\n|---|---|---|---|---|---|---|---|\n")
	means := map[bool][2]float64{}
	for _, r := range rounds {
		var rss, heap float64
		for _, p := range r.replicas {
			fmt.Fprintf(&b, "| %t | %s | %s | %d | %d | %d MB | %d MB | %d B |\n", r.divide, p.id,
				p.ready.Round(100*time.Millisecond), p.armed, p.known, p.rssKB/1024, p.heap>>20, p.heap/max(p.known, 1))
			rss += float64(p.rssKB) / float64(len(r.replicas))
			heap += float64(p.heap) / float64(len(r.replicas))
		}
		means[r.divide] = [2]float64{rss, heap}
	}
	if off, on := means[false], means[true]; off[0] > 0 && off[1] > 0 && on[0] > 0 {
		fmt.Fprintf(&b, "\nmean per replica, on / off: RSS %.0f / %.0f MB (%.0f %%), heap after GC %.0f / %.0f MB (%.0f %%)\n",
			on[0]/1024, off[0]/1024, 100*on[0]/off[0], on[1]/(1<<20), off[1]/(1<<20), 100*on[1]/off[1])
	}
	for _, r := range rounds {
		fmt.Fprintf(&b, "divide_schedules %t: armed counts stable %s after settling; load average after %s\n",
			r.divide, r.stableIn.Round(time.Second), r.load)
		for _, p := range firstN(r.problems, 5) {
			fmt.Fprintf(&b, "  problem: %s\n", p)
		}
	}
	for _, r := range rounds {
		if r.handoff != nil {
			b.WriteString(handoffTable(r.handoff))
		}
	}
	return b.String()
}
