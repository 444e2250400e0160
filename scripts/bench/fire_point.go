package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/childproc"
	"github.com/cronswap/cronswap/internal/testmongo"
	"github.com/cronswap/cronswap/schedule"
)

// firePoint is everything measured for one (N, replicas) point.
type firePoint struct {
	n, replicas int
	expr        string
	every, hold time.Duration
	workers     int
	// tracing is the daemons' tracing setting (-tracing: off, on; "" the
	// environment as it is).
	tracing    string
	started    time.Time
	loadBefore string
	loadAfter  string
	loadTime   time.Duration // insertMany of the N schedules
	armTime    time.Duration // first daemon start → every daemon ready with N armed

	idleWindow time.Duration
	idleCmds   map[string]int // summed over the replicas

	bursts       []fireBurst
	instances    []string // the replicas' instance ids
	burstTimeout time.Duration
	sinkErrs     int    // the sink server's own error records
	sinkFirstErr string // the first of them
	earlier      int    // arrivals for a slot before the measured bursts
	unexpected   int    // arrivals for another job or slot
	// idleFires is the number of action requests during the idle window
	// (an earlier burst in it makes the idle figure meaningless).
	idleFires int
	badBodies int // action requests whose body did not decode
	problems  []string
	err       error
}

// fireBurst is one burst's accounting plus its command window.
type fireBurst struct {
	burstStats
	windowFrom, windowTo time.Time
	windowFires          int            // sink arrivals (any job, any slot) in the window
	cmds                 map[string]int // commands at the proxies in the window, summed over the replicas
	load                 string         // load average at the window's end
	// claims are each replica's claim metrics over the window (index =
	// replica − 1; absent when the daemon does not export them).
	claims []claimMetrics
	// benchCPU is the bench process's CPU time in the window: the sink,
	// the wire proxies and the span receiver (they share the machine with
	// the daemons).
	benchCPU time.Duration
	// daemonCPU is the daemons' CPU time in the window, summed.
	daemonCPU time.Duration
	// spans are the spans the bench's receiver got in the window, per
	// name (tracing on only).
	spans map[string]int
}

// jobPrefix starts the id of every job the fire benchmark loads.
const jobPrefix = "fire-"

func fireJobID(k int) string { return fmt.Sprintf("%s%06d", jobPrefix, k) }

// windowLead is how long before a slot its command window opens: the
// daemons' timers fire at the slot, so nothing of the burst is earlier.
const windowLead = 500 * time.Millisecond

func runFirePoint(ctx context.Context, o fireSettings, n, replicas int, tracing, logDir string) (*firePoint, error) {
	p := &firePoint{n: n, replicas: replicas, every: o.every, hold: o.hold, workers: o.workers, tracing: tracing,
		started: time.Now().UTC(), loadBefore: loadAvg(), burstTimeout: o.burstTimeoutFor(n)}
	srv, err := testmongo.Start(ctx, testmongo.Options{JVMArgs: o.serverJVM, ExtraArgs: o.serverArgs, StartTimeout: 2 * time.Minute})
	if err != nil {
		return nil, err
	}
	defer func() { _ = srv.Stop() }()
	client, err := testmongo.Connect(ctx, srv.URI)
	if err != nil {
		return nil, err
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	dbName := testmongo.DatabaseName(fmt.Sprintf("bench_fire_%d_%d", n, replicas))
	db := client.Database(dbName)
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = db.Drop(dctx)
	}()

	sk, err := startSink(o.hold, true)
	if err != nil {
		return nil, err
	}
	defer sk.close()
	var spans *spanReceiver
	if tracing == tracingOn {
		if spans, err = startSpanReceiver(); err != nil {
			return nil, err
		}
		defer spans.close()
		logf("daemons export spans to %s", spans.url)
	}
	var endpoint string
	if spans != nil {
		endpoint = spans.url
	}
	env := daemonEnv(tracing, endpoint, o.tracingEnv)

	// The first slot lies past the expected start-up and the idle window,
	// but less than one period ahead: the slot before it must lie before
	// the daemons start, or an unmeasured burst would come due just
	// before the measured ones. If the daemons take longer, the bursts
	// start at a later slot.
	lead := min(15*time.Second+o.idle+time.Duration(n*replicas)*300*time.Microsecond, o.every-time.Second)
	if p.expr, err = fireExpr(o.every, time.Now().Add(lead)); err != nil {
		return nil, err
	}
	sched, err := schedule.ParseExpr(p.expr, time.UTC)
	if err != nil {
		return nil, fmt.Errorf("expression %q: %w", p.expr, err)
	}
	logf("loading %d schedules %q into %s", n, p.expr, dbName)
	jobIDs, took, err := loadFireJobs(ctx, db.Collection(schedule.CollectionName), n, func(int) string { return p.expr }, o.batch)
	if err != nil {
		return nil, err
	}
	p.loadTime = took

	var cl *fireCluster
	defer func() {
		// Held requests are answered first, so that a daemon's shutdown
		// does not wait on them.
		sk.release()
		if cl != nil {
			p.problems = append(p.problems, cl.stop()...)
		}
		if p.loadAfter == "" {
			p.loadAfter = loadAvg()
		}
	}()
	armStart := time.Now()
	tag := fmt.Sprintf("n%d-r%d", n, replicas)
	if tracing != "" {
		tag += "-tracing-" + tracing
	}
	cl, err = startFireCluster(ctx, o, srv.URI, dbName, sk.URL(), replicas, env, logDir, tag)
	p.instances = cl.instances
	if err != nil {
		return nil, err
	}
	if err := cl.waitArmed(ctx, n); err != nil {
		return p, err
	}
	armedAt := time.Now()
	p.armTime = armedAt.Sub(armStart)
	logf("%d daemon(s) ready with %d armed after %s", replicas, n, p.armTime.Round(time.Millisecond))

	// Slots: the measured bursts, then the next one (the cut-off for missed).
	settleStart := 3 * time.Second
	slots := []time.Time{sched.Next(armedAt.Add(settleStart + o.idle + windowLead))}
	for len(slots) < o.bursts+1 {
		slots = append(slots, sched.Next(slots[len(slots)-1]))
	}
	commands := cl.commands
	daemons := cl.daemons
	sleepUntil := func(t time.Time) error { return cl.sleepUntil(ctx, t, nil) }

	// Idle window: after the start-up has settled, before the first burst.
	if err := sleepUntil(armedAt.Add(settleStart)); err != nil {
		return p, err
	}
	idleFrom, idleBefore := time.Now(), commands()
	idleArrivals, _ := sk.snapshot()
	windowStart := slots[0].Add(-windowLead)
	logf("first burst at %s (in %s)", slots[0].Format("15:04:05"), time.Until(slots[0]).Round(time.Second))
	if err := sleepUntil(windowStart); err != nil {
		return p, err
	}
	snap := commands()
	if o.idle > 0 {
		p.idleWindow = time.Since(idleFrom)
		p.idleCmds = commandDelta(idleBefore, snap)
		now, _ := sk.snapshot()
		p.idleFires = len(now) - len(idleArrivals)
	}

	// Burst windows: [slot − windowLead, next slot − windowLead); the last
	// one ends earlier once its burst is complete and settled.
	settle := 2*time.Second + o.hold
	if hasTracingOn(o.tracing) {
		settle += traceSettle
	}
	type window struct {
		from, to time.Time
		cmds     map[string]int
		load     string
		claims   []claimMetrics
		cpu      time.Duration
		daemon   time.Duration
		spans    map[string]int
	}
	var windows []window
	claimsBefore := scrapeAllClaims(ctx, daemons)
	for k := range o.bursts {
		from, before, cpu0, dcpu0, spans0 := time.Now(), snap, cpuTime(), daemonCPU(daemons), spans.counts()
		end := slots[k+1].Add(-windowLead)
		if k == o.bursts-1 {
			var complete time.Time
			for time.Now().Before(end) {
				if complete.IsZero() && sk.distinct(slots[k]) >= n {
					complete = time.Now()
					logf("burst %d: all %d fires arrived %s after the slot", k+1, n, complete.Sub(slots[k]).Round(time.Millisecond))
				}
				if !complete.IsZero() && time.Since(complete) >= settle {
					break
				}
				if err := sleepUntil(time.Now().Add(100 * time.Millisecond)); err != nil {
					return p, err
				}
			}
		} else if err := sleepUntil(end); err != nil {
			return p, err
		}
		snap = commands()
		to := time.Now()
		claimsAfter := scrapeAllClaims(ctx, daemons)
		w := window{from: from, to: to, cmds: commandDelta(before, snap), load: loadAvg(),
			claims: claimsDelta(claimsAfter, claimsBefore), cpu: cpuTime() - cpu0, daemon: daemonCPU(daemons) - dcpu0}
		if spans != nil {
			w.spans = countsDelta(spans.counts(), spans0)
		}
		windows = append(windows, w)
		claimsBefore = claimsAfter
		logf("burst %d (%s): %d of %d arrived by the window's end", k+1, slots[k].Format("15:04:05"), sk.distinct(slots[k]), n)
	}

	// Late fires: wait for every burst to be complete or past its deadline.
	for {
		pending := false
		for _, s := range slots[:o.bursts] {
			if sk.distinct(s) < n && time.Now().Before(s.Add(p.burstTimeout)) {
				pending = true
			}
		}
		if !pending {
			break
		}
		if err := sleepUntil(time.Now().Add(200 * time.Millisecond)); err != nil {
			return p, err
		}
	}
	// A duplicate would arrive soon after the first run; give it the
	// settle time before accounting.
	if err := sleepUntil(time.Now().Add(settle)); err != nil {
		return p, err
	}

	arrivals, bad := sk.snapshot()
	p.badBodies = bad
	stats, earlier, unexpected := accountBursts(jobIDs, slots, arrivals)
	p.earlier, p.unexpected = earlier, unexpected
	for k, b := range stats {
		w := windows[k]
		p.bursts = append(p.bursts, fireBurst{burstStats: b, windowFrom: w.from, windowTo: w.to,
			windowFires: arrivalsIn(arrivals, w.from, w.to), cmds: w.cmds, load: w.load, claims: w.claims, benchCPU: w.cpu,
			daemonCPU: w.daemon, spans: w.spans})
	}
	p.sinkErrs, p.sinkFirstErr = sk.errs.get()
	p.loadAfter = loadAvg()
	return p, nil
}

// scrapeAllClaims scrapes each daemon's claim metrics (a daemon that does
// not answer, or exports none, gives an empty entry).
func scrapeAllClaims(ctx context.Context, daemons []*daemon) []claimMetrics {
	out := make([]claimMetrics, len(daemons))
	var wg sync.WaitGroup
	for i, d := range daemons {
		wg.Go(func() {
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			if m, err := scrapeClaims(sctx, d); err == nil {
				out[i] = m
			}
		})
	}
	wg.Wait()
	return out
}

// claimsDelta is after − before per replica; a replica without the
// metrics in either scrape gives an empty entry.
func claimsDelta(after, before []claimMetrics) []claimMetrics {
	out := make([]claimMetrics, len(after))
	for i := range after {
		if i < len(before) && after[i].present() && before[i].present() {
			out[i] = after[i].minus(before[i])
		}
	}
	return out
}

// loadFireJobs inserts n schedules (job k with exprOf(k)) and the sink
// action, in unordered insertMany batches of batch documents, up to
// loadParallel batches in flight, and returns their ids (in k order).
func loadFireJobs(ctx context.Context, coll *mongo.Collection, n int, exprOf func(k int) string, batch int) ([]string, time.Duration, error) {
	start := time.Now()
	now := time.Now().UTC()
	ids := make([]string, n)
	for k := range n {
		ids[k] = fireJobID(k)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	sem := make(chan struct{}, loadParallel)
	for from := 0; from < n; from += batch {
		to := min(from+batch, n)
		docs := make([]any, 0, to-from)
		for k := from; k < to; k++ {
			docs = append(docs, bson.D{
				{Key: schedule.FieldID, Value: ids[k]},
				{Key: schedule.FieldCronExpr, Value: exprOf(k)},
				{Key: schedule.FieldJob, Value: fireAction},
				{Key: schedule.FieldUpdatedAt, Value: now},
			})
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			if _, err := coll.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false)); err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = fmt.Errorf("insert into %s (jobs %d–%d): %w", coll.Name(), from, to-1, err)
				}
				mu.Unlock()
				cancel()
			}
		})
	}
	wg.Wait()
	if firstErr == nil && ctx.Err() != nil {
		firstErr = ctx.Err()
	}
	if firstErr != nil {
		return nil, 0, firstErr
	}
	return ids, time.Since(start), nil
}

// loadParallel is how many insertMany batches loadFireJobs keeps in flight
// (100,000 schedules in 100 batches of 1,000).
const loadParallel = 4

// fireAction is the action name of the loaded schedules.
const fireAction = "sink"

// fireDaemonConfig is what one fire-benchmark daemon's config varies.
type fireDaemonConfig struct {
	uri, database, instanceID, sinkURL string
	listen                             string
	workers                            int
	// pprof serves the daemon's runtime profiles on its listener (-pprof).
	pprof bool
	// overlap is the fire action's overlap policy ("" the default).
	overlap string
}

func (c fireDaemonConfig) yaml() string {
	pprof := "" // written only when asked: a build from before the key (-binary) refuses it
	if c.pprof {
		pprof = "  pprof: true\n"
	}
	s := fmt.Sprintf(`mongo:
  uri: %q
  database: %q
instance_id: %q
timezone: UTC
http:
  listen: %q
%swatch:
  resync_interval: 0s
shutdown:
  grace: 5s
jobs:
  %s:
    http:
      url: %q
`, c.uri, c.database, c.instanceID, c.listen, pprof, fireAction, c.sinkURL)
	if c.overlap != "" {
		s += fmt.Sprintf("    overlap: %s\n", c.overlap)
	}
	if c.workers > 0 {
		s += fmt.Sprintf("workers: %d\n", c.workers)
	}
	return s
}

// startFireDaemon starts the binary with cfg on a free loopback port, in
// environment env (nil: the bench's). Its log (JSON, info, the default
// level) goes straight to logPath: the bench does not parse it while the
// bursts run.
func startFireDaemon(binary string, cfg fireDaemonConfig, env []string, logPath string) (*daemon, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	cfg.listen = ln.Addr().String()
	_ = ln.Close()
	cfgPath := strings.TrimSuffix(logPath, ".log") + ".yaml"
	if err := os.WriteFile(cfgPath, []byte(cfg.yaml()), 0o600); err != nil {
		return nil, err
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(binary, "run", "--config", cfgPath, "--log-format", "json", "--log-level", "info")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = env
	d := &daemon{cmd: cmd, addr: cfg.listen, done: make(chan struct{}), started: time.Now()}
	if err := childproc.Start(cmd); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", binary, err)
	}
	go func() {
		err := cmd.Wait()
		logFile.Close()
		d.mu.Lock()
		d.waitErr = err
		d.mu.Unlock()
		close(d.done)
	}()
	return d, nil
}

// waitArmed polls /api/status until the daemon has n schedules armed.
func (d *daemon) waitArmed(ctx context.Context, n int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	last := -1
	for {
		body, err := d.get(ctx, "/api/status")
		if err == nil {
			var st struct {
				SchedulesArmed int  `json:"schedules_armed"`
				Ready          bool `json:"ready"`
			}
			if json.Unmarshal(body, &st) == nil {
				last = st.SchedulesArmed
				if st.Ready && st.SchedulesArmed >= n {
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("daemon at %s: %d of %d schedules armed after %s", d.addr, last, n, limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-d.done:
			return fmt.Errorf("daemon at %s exited before arming: %v", d.addr, d.exitErr())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stopAll stops the daemons at once (SIGTERM, then SIGKILL after 30 s).
func stopAll(ds []*daemon) {
	var wg sync.WaitGroup
	for _, d := range ds {
		wg.Go(func() {
			select {
			case <-d.done:
			default:
				d.stop()
			}
		})
	}
	wg.Wait()
}

// logProblems summarises a daemon log's WARN and ERROR records: each
// distinct level and message once, with its count.
func logProblems(path string) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	counts := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 1<<20)
	for sc.Scan() {
		var rec logRecord
		if json.Unmarshal(sc.Bytes(), &rec) != nil || (rec.Level != "WARN" && rec.Level != "ERROR") {
			continue
		}
		counts[rec.Level+" "+rec.Msg]++
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		out = append(out, fmt.Sprintf("%s: %s ×%d", filepath.Base(path), k, counts[k]))
	}
	return out
}
