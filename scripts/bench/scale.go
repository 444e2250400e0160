package main

// "bench scale": how the daemon holds N schedules on one replica, for
// several N and several builds side by side (scripts/bench-scale.sh,
// docs/BENCHMARKS.md "A million schedules on one replica").

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/scaledoc"
	"github.com/cronswap/cronswap/internal/testmongo"
)

// scaleSettings are the flags of "bench scale".
type scaleSettings struct {
	ns             []int
	builds         []build
	edits          int
	warmup         int
	rate           float64
	reloadEditRate float64
	settleLimit    time.Duration
	serverHeap     string
	serverJVMArgs  []string
	oplogMax       int
	out            string
	logDir         string
	heapProfiles   string
	gcAtReady      bool
	resyncs        int
	resyncInterval time.Duration
	resyncEditRate float64
	serverReads    int
	timeout        time.Duration
}

// build is one daemon binary and its label in the report.
type build struct{ label, binary string }

func scaleMain(args []string) int {
	fs := flag.NewFlagSet("bench scale", flag.ExitOnError)
	var o scaleSettings
	ns := fs.String("n", "100000,400000,1000000", "comma-separated schedule counts, one fresh test server each")
	builds := fs.String("binaries", "", "comma-separated LABEL=PATH daemon binaries run side by side at each N "+
		"(default: after=a build of this tree)")
	fs.IntVar(&o.edits, "edits", 300, "measured edits per build and N, with the floor")
	fs.IntVar(&o.warmup, "warmup", 10, "uncounted edits first")
	fs.Float64Var(&o.rate, "rate", 10, "edits per second")
	fs.Float64Var(&o.reloadEditRate, "reload-edit-rate", 20, "edits per second made while the cold start's full reload runs")
	fs.DurationVar(&o.settleLimit, "settle", 10*time.Minute,
		"wait at most this long after a cold start for its start-up work (first sightings, CPU) to settle before measuring edits")
	fs.StringVar(&o.serverHeap, "server-heap", defaultServerHeap, serverHeapUsage)
	serverJVM := fs.String("server-jvm-args", "", "the test server's extra JVM options, space-separated "+
		"(e.g. -XX:TieredStopAtLevel=4: C2 as well as C1; the default is internal/testmongo's C1 only)")
	fs.IntVar(&o.oplogMax, "oplog-max-entries", 200000, "the test server's oplog bound (0: none; 1,000,000 inserts need a bound or the heap)")
	fs.StringVar(&o.out, "out", "docs", "directory for bench-scale-results.txt (appended; '' writes none)")
	fs.StringVar(&o.logDir, "logs", "", "keep the daemons' logs and state files here")
	fs.StringVar(&o.heapProfiles, "heap-profiles", "", "save each build's heap profile at ready (after a GC) in this directory, "+
		"as heap-LABEL-N.pb.gz (go tool pprof -sample_index=inuse_space)")
	fs.BoolVar(&o.gcAtReady, "gc-at-ready", true, "weigh the cold daemon's live heap at ready by forcing a collection (pprof heap?gc=1); "+
		"false leaves its collector alone until the start-up work settled, so that its peak RSS is its own: a collection forced "+
		"while its engine starts counts the start's garbage live and raises the collector's next goal")
	fs.IntVar(&o.resyncs, "resyncs", 0, "after the warm start, wait for this many periodic full reads (watch.resync_interval) "+
		"and report the RSS, its peak and the CPU they took (0: the warm daemon runs without resyncs, as before)")
	fs.DurationVar(&o.resyncInterval, "resync-interval", 30*time.Second, "the warm daemon's watch.resync_interval when -resyncs is set")
	fs.Float64Var(&o.resyncEditRate, "resync-edit-rate", 0, "with -resyncs, edits per second made all the while the warm daemon waits for its "+
		"resyncs, each timed from its write's acknowledgement to armed: those made during a resync against the others "+
		"(0: none, as before; the resyncs' CPU and RSS then include applying them)")
	fs.IntVar(&o.serverReads, "server-reads", 0, "after the load and before the first daemon starts, read the whole collection "+
		"this many times through the driver, each timed with the test server's CPU: the test server's (a JVM's) read path is "+
		"compiled during its first full read after a load, which a long-running server has long done (0: none, as before)")
	fs.DurationVar(&o.timeout, "timeout", 90*time.Minute, "the whole run's deadline")
	_ = fs.Parse(args)
	o.serverJVMArgs = strings.Fields(*serverJVM)
	if o.resyncEditRate < 0 || o.resyncEditRate > 0 && o.resyncs == 0 {
		fmt.Fprintf(os.Stderr, "bench scale: -resync-edit-rate %g: a rate of 0 or more, and only with -resyncs\n", o.resyncEditRate)
		return 2
	}
	if o.serverReads < 0 {
		fmt.Fprintf(os.Stderr, "bench scale: -server-reads %d: a count of 0 or more\n", o.serverReads)
		return 2
	}
	if o.resyncs < 0 || o.resyncs > 0 && o.resyncInterval <= 0 {
		fmt.Fprintf(os.Stderr, "bench scale: -resyncs %d -resync-interval %s: resyncs need a positive interval, and a count of 0 or more\n",
			o.resyncs, o.resyncInterval)
		return 2
	}
	for _, s := range strings.Split(*ns, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1000 {
			fmt.Fprintf(os.Stderr, "bench scale: -n: %q is not a count of at least 1000\n", s)
			return 2
		}
		o.ns = append(o.ns, n)
	}
	for _, s := range strings.Split(*builds, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		label, path, ok := strings.Cut(s, "=")
		if !ok || label == "" || path == "" {
			fmt.Fprintf(os.Stderr, "bench scale: -binaries: %q is not LABEL=PATH\n", s)
			return 2
		}
		o.builds = append(o.builds, build{label, path})
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	if err := runScale(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "bench scale:", err)
		return 1
	}
	return 0
}

// scalePoint is what one build did with N schedules.
type scalePoint struct {
	label string
	n     int

	coldReady  time.Duration // process start → /readyz 200, full reload
	settled    time.Duration // ready → the first sightings written (edits measured after)
	coldReload logRecord     // its "full reload" record
	coldRSS    int64         // kB at ready
	coldCPU    int64         // clock ticks of CPU, process start → ready
	heapAlloc  int64         // bytes live after a GC, at ready
	heapIdle   int64         // bytes live after a GC, once the start-up work settled
	reloadEdit reloadEdits

	edits     []*edit
	unmatched int

	shutdown  time.Duration // SIGTERM → exit, the state file written
	stateSize int64
	warmReady time.Duration // process start → /readyz 200 from the state file
	warmRec   logRecord     // its "armed from state file" record
	warmRSS   int64         // kB at ready
	warmCPU   int64         // clock ticks of CPU, process start → ready
	peakRSS   int64         // kB, VmHWM of the warm daemon at ready
	coldPeak  int64         // kB, VmHWM of the cold daemon at its stop

	// serverColdCPU and serverWarmCPU are the test server's CPU (clock
	// ticks) from just before the cold and the warm start to their ready.
	serverColdCPU, serverWarmCPU int64

	// After the warm start, with -resyncs: the periodic full reads the
	// warm daemon logged, the CPU from its ready to the last of them
	// (idle time between them included), and its RSS and VmHWM then.
	resyncs    []logRecord
	resyncCPU  int64
	resyncRSS  int64
	resyncPeak int64
	// betweenCPU is the CPU (clock ticks) from the end of each resync to
	// the end of the next: one resync and the idle time before it.
	betweenCPU []int64
	// resyncEdits are the edits made while the warm daemon waited for its
	// resyncs (-resync-edit-rate), acknowledgement → armed, split by
	// whether the write was acknowledged during a resync's full read.
	resyncEdits resyncEdits

	loadAfter string
	problems  []string
}

// resyncEdits are the edit → armed times of the edits made while the warm
// daemon waited for its resyncs: during a resync's full read (acknowledged
// between its start and its end) and outside them. An edit the resync's
// own read found is armed by its diff, which logs a line per job only
// since the builds of 2026-12-06 18:00 UTC (such an edit is then timed by
// its line as any other): with a build before, byRead holds those, each
// timed to the end of the first resync that ended after its
// acknowledgement (an upper bound), and is a part of during or outside
// as well. lost are the jobs whose edit the daemon does not show armed;
// missing counts the edits never acknowledged, or neither seen armed nor
// followed by a resync.
type resyncEdits struct {
	during, outside, byRead []time.Duration
	lost                    []string
	missing                 int
}

// splitByResync times each edit from its acknowledgement to armed and puts
// it with the edits acknowledged during one of the resyncs (each record's
// time is its end, its duration the read and apply) or outside them. An
// edit with no armed line whose job is not in lost (the daemon shows it
// armed) was armed by the read of the first resync that ended after it.
func splitByResync(edits []*edit, resyncs []logRecord, lost []string) resyncEdits {
	r := resyncEdits{lost: lost}
	for _, e := range edits {
		if !e.acked || slices.Contains(lost, e.job) {
			r.missing++
			continue
		}
		var took time.Duration
		switch {
		case !e.armedLog.IsZero():
			took = e.armedLog.Sub(e.ack)
		default:
			var end time.Time
			for _, rs := range resyncs {
				if rs.Time.After(e.ack) && (end.IsZero() || rs.Time.Before(end)) {
					end = rs.Time
				}
			}
			if end.IsZero() {
				r.missing++
				continue
			}
			took = end.Sub(e.ack)
			r.byRead = append(r.byRead, took)
		}
		in := false
		for _, rs := range resyncs {
			if end := rs.Time; !e.ack.Before(end.Add(-time.Duration(rs.Duration))) && !e.ack.After(end) {
				in = true
				break
			}
		}
		if in {
			r.during = append(r.during, took)
		} else {
			r.outside = append(r.outside, took)
		}
	}
	slices.Sort(r.during)
	slices.Sort(r.outside)
	slices.Sort(r.byRead)
	return r
}

// reloadEdits are the edits made while a cold start's full reload ran.
type reloadEdits struct {
	made int
	lost []string // jobs whose armed expression is not the last written
}

// scaleRun is the result of one N.
type scaleRun struct {
	n          int
	loadTime   time.Duration
	collBytes  int64
	loadBefore string
	// serverReads are the whole-collection reads made before the first
	// daemon started (-server-reads).
	serverReads []serverRead
	points      []*scalePoint
}

// serverRead is one whole-collection read through the driver: how long it
// took, the documents it returned and the test server's CPU meanwhile
// (clock ticks).
type serverRead struct {
	took      time.Duration
	documents int
	serverCPU int64
}

func runScale(ctx context.Context, o scaleSettings) error {
	ws, err := newWorkspace(ctx, "cronswap-bench-scale-", o.logDir, firstBinary(o.builds))
	if err != nil {
		return err
	}
	defer ws.remove()
	if len(o.builds) == 0 {
		o.builds = []build{{"after", ws.binary}}
	}
	env := describeMachine(ctx)
	started := time.Now().UTC()
	var runs []*scaleRun
	for _, n := range o.ns {
		r, err := scaleN(ctx, o, n, ws.logDir)
		if err != nil {
			return fmt.Errorf("N=%d: %w", n, err)
		}
		runs = append(runs, r)
		fmt.Print(scaleText(r))
	}
	env.loadAfter = loadAvg()
	text := scaleHeader(o, env, started) + scaleTable(runs)
	for _, r := range runs {
		text += scaleText(r)
	}
	fmt.Print(scaleTable(runs))
	if o.out != "" {
		if err := os.MkdirAll(o.out, 0o755); err != nil {
			return err
		}
		path := filepath.Join(o.out, "bench-scale-results.txt")
		f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := f.WriteString(text + "\n"); err != nil {
			return err
		}
		logf("appended to %s", path)
	}
	return nil
}

func firstBinary(bs []build) string {
	if len(bs) == 0 {
		return ""
	}
	return bs[0].binary
}

// scaleN loads n schedules into a fresh server and measures every build.
func scaleN(ctx context.Context, o scaleSettings, n int, logDir string) (*scaleRun, error) {
	r := &scaleRun{n: n, loadBefore: loadAvg()}
	extra := []string{}
	if o.oplogMax > 0 {
		extra = append(extra, "--oplog-max-entries", strconv.Itoa(o.oplogMax))
	}
	srv, err := testmongo.Start(ctx, testmongo.Options{StartTimeout: 2 * time.Minute, IgnoreEnv: true,
		JVMArgs: append([]string{"-Xmx" + o.serverHeap}, o.serverJVMArgs...), ExtraArgs: extra})
	if err != nil {
		return nil, err
	}
	defer func() { _ = srv.Stop() }()
	client, err := testmongo.Connect(ctx, srv.URI)
	if err != nil {
		return nil, err
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	dbName := fmt.Sprintf("bench_scale_%d", n)
	coll := client.Database(dbName).Collection("schedules")
	logf("=== N=%d: loading into a fresh server (-Xmx%s %s, oplog bound %d)", n, o.serverHeap,
		strings.Join(o.serverJVMArgs, " "), o.oplogMax)
	if r.loadTime, r.collBytes, err = loadScale(ctx, coll, n); err != nil {
		return nil, err
	}
	logf("loaded %d schedules (%.1f MB) in %s", n, float64(r.collBytes)/1e6, r.loadTime.Round(time.Millisecond))
	for k := 0; k < o.serverReads; k++ {
		sr, err := readWholeCollection(ctx, coll, srv.PID())
		if err != nil {
			return nil, err
		}
		logf("read the %d schedules through the driver in %s, the test server's CPU %.1f s", sr.documents,
			sr.took.Round(time.Millisecond), float64(sr.serverCPU)/clockTicks)
		r.serverReads = append(r.serverReads, sr)
	}
	next := 0 // edits use distinct jobs and expressions across builds
	for _, b := range o.builds {
		p, err := scalePointRun(ctx, o, b, n, srv, dbName, coll, logDir, &next)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", b.label, err)
		}
		r.points = append(r.points, p)
	}
	return r, nil
}

// loadScale inserts n scale documents, four unordered batches of 1,000 in
// flight.
func loadScale(ctx context.Context, coll *mongo.Collection, n int) (time.Duration, int64, error) {
	start, now := time.Now(), time.Now().UTC()
	const batch, inFlight = 1000, 4
	var size int64
	var mu sync.Mutex
	var firstErr error
	sem := make(chan struct{}, inFlight)
	var wg sync.WaitGroup
	for lo := 0; lo < n; lo += batch {
		docs := make([]any, 0, batch)
		for k := lo; k < min(lo+batch, n); k++ {
			d := scaledoc.Doc(k, now)
			if raw, err := bson.Marshal(d); err == nil {
				size += int64(len(raw))
			}
			docs = append(docs, d)
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := insertBatch(ctx, coll, docs); err != nil {
				mu.Lock()
				firstErr = cmpOr(firstErr, err)
				mu.Unlock()
			}
		})
		if (lo/batch+1)%100 == 0 {
			logf("loaded %d/%d", lo+batch, n)
		}
	}
	wg.Wait()
	if firstErr != nil {
		return 0, 0, fmt.Errorf("insert into %s: %w", coll.Name(), firstErr)
	}
	return time.Since(start), size, nil
}

// insertBatch inserts docs unordered, trying again (up to five times, a
// second apart) when the insert fails for another reason than documents
// already there: under load the test server's garbage collector can stall
// it past the driver's heartbeat, which closes the pool's connections. A
// retry's duplicate keys are the documents an earlier attempt inserted.
func insertBatch(ctx context.Context, coll *mongo.Collection, docs []any) error {
	var err error
	for attempt := 1; attempt <= 5; attempt++ {
		if _, err = coll.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false)); err == nil || onlyDuplicates(err) {
			return nil
		}
		if ctx.Err() != nil {
			return err
		}
		logf("insert into %s failed (attempt %d): %v", coll.Name(), attempt, err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	return err
}

// onlyDuplicates reports whether err is a bulk write whose every error is
// a duplicate key.
func onlyDuplicates(err error) bool {
	var bwe mongo.BulkWriteException
	if !errors.As(err, &bwe) || bwe.WriteConcernError != nil || len(bwe.WriteErrors) == 0 {
		return false
	}
	for _, we := range bwe.WriteErrors {
		if we.Code != 11000 {
			return false
		}
	}
	return true
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// readWholeCollection reads every document of coll as a client would
// (the driver's default batches) and weighs the test server's CPU
// meanwhile (serverPID 0: not weighed).
func readWholeCollection(ctx context.Context, coll *mongo.Collection, serverPID int) (serverRead, error) {
	var r serverRead
	cpu0, start := cpuTicks(serverPID), time.Now()
	cur, err := coll.Find(ctx, bson.D{})
	if err != nil {
		return r, fmt.Errorf("reading %s: %w", coll.Name(), err)
	}
	defer func() { _ = cur.Close(context.Background()) }()
	for cur.Next(ctx) {
		r.documents++
	}
	if err := cur.Err(); err != nil {
		return r, fmt.Errorf("reading %s after %d documents: %w", coll.Name(), r.documents, err)
	}
	r.took = time.Since(start)
	if serverPID > 0 {
		r.serverCPU = cpuTicks(serverPID) - cpu0
	}
	return r, nil
}

// scalePointRun measures build b on the loaded collection: a cold start
// (full reload) while edits are made, edits against the floor, a stop and a
// warm restart from the state file.
func scalePointRun(ctx context.Context, o scaleSettings, b build, n int, srv *testmongo.Server, dbName string,
	coll *mongo.Collection, logDir string, next *int) (*scalePoint, error) {
	p := &scalePoint{label: b.label, n: n}
	uri := srv.URI
	t := newTracker()
	spec := daemonSpec{
		binary: b.binary, uri: uri, database: dbName, mode: modeChangeStream, pollInterval: time.Second, pprof: true,
		instanceID: fmt.Sprintf("scale-%s-%d", b.label, n),
		logPath:    filepath.Join(logDir, fmt.Sprintf("scale-%s-%d.log", b.label, n)),
		stateFile:  filepath.Join(logDir, fmt.Sprintf("scale-%s-%d.state", b.label, n)),
		onRecord: func(rec logRecord, recv time.Time) {
			if rec.Msg == msgApplied {
				t.armedExpr(rec.CronExpr, rec.Time, recv)
			}
		},
	}
	if err := os.Remove(spec.stateFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	logf("--- %s, N=%d: cold start (full reload) with %.3g edits/s made meanwhile", b.label, n, o.reloadEditRate)
	serverCPU := cpuTicks(srv.PID())
	d, err := startDaemon(ctx, spec)
	if err != nil {
		return nil, err
	}
	defer d.stop()
	re := startReloadEditor(ctx, coll, n, o.reloadEditRate, next)
	p.coldReady, err = d.waitReady(ctx, readyLimit)
	made := re.stop()
	if err != nil {
		return nil, err
	}
	if rec, err := d.initialReload(ctx, time.Minute); err == nil {
		p.coldReload = rec
	}
	p.coldRSS = vmRSS(d.cmd.Process.Pid)
	p.coldCPU = cpuTicks(d.cmd.Process.Pid)
	p.serverColdCPU = cpuTicks(srv.PID()) - serverCPU
	if o.gcAtReady {
		p.heapAlloc = heapAfterGC(ctx, d, profilePath(o.heapProfiles, b.label, n))
		logf("ready after %s, RSS %d MB, heap after GC %d MB (%d B/job)", p.coldReady.Round(time.Millisecond),
			p.coldRSS/1024, p.heapAlloc>>20, p.heapAlloc/int64(n))
	} else {
		logf("ready after %s, RSS %d MB, heap not weighed (-gc-at-ready=false)", p.coldReady.Round(time.Millisecond), p.coldRSS/1024)
	}
	p.reloadEdit = checkReloadEdits(ctx, d, made)
	logf("edits made during the reload: %d, lost %d", p.reloadEdit.made, len(p.reloadEdit.lost))

	// The first start writes every job's first sighting to the edit
	// history (one write per job, once) and reads the decided slots; edits
	// are measured once that start-up work is done, as a running replica
	// meets them.
	p.settled = waitSettled(ctx, d, o.settleLimit)
	p.heapIdle = heapAfterGC(ctx, d, profilePath(o.heapProfiles, b.label+"-settled", n))
	logf("start-up work settled %s after ready; heap after GC %d MB (%d B/job)", p.settled.Round(time.Millisecond),
		p.heapIdle>>20, p.heapIdle/int64(n))

	fl, err := startFloor(ctx, uri, dbName, t)
	if err != nil {
		return nil, err
	}
	es := settings{n: n, rate: o.rate, maxInflight: 20}
	from := *next
	if _, err := driveEdits(ctx, coll, t, es, from, from+o.warmup); err != nil {
		return nil, err
	}
	logf("driving %d edits at %.3g/s", o.edits, o.rate)
	if _, err := driveEdits(ctx, coll, t, es, from+o.warmup, from+o.warmup+o.edits); err != nil {
		return nil, err
	}
	*next = from + o.warmup + o.edits
	t.wait(ctx, time.Now().Add(20*time.Second), func() bool { return t.doneLocked(true) })
	_ = fl.close()
	t.mu.Lock()
	p.edits = append([]*edit(nil), t.edits[o.warmup:]...)
	p.unmatched = t.unmatched
	t.mu.Unlock()

	p.coldPeak = vmHWM(d.cmd.Process.Pid)
	if p.shutdown, err = d.shutdown(2 * time.Minute); err != nil {
		p.problems = append(p.problems, err.Error())
	}
	p.problems = append(p.problems, d.Problems()...)
	if fi, err := os.Stat(spec.stateFile); err == nil {
		p.stateSize = fi.Size()
	}
	logf("stopped in %s (state file %.1f MB); warm restart", p.shutdown.Round(time.Millisecond), float64(p.stateSize)/1e6)
	spec.logPath = strings.TrimSuffix(spec.logPath, ".log") + "-warm.log"
	if o.resyncs > 0 {
		spec.resyncInterval = o.resyncInterval
	}
	serverCPU = cpuTicks(srv.PID())
	w, err := startDaemon(ctx, spec)
	if err != nil {
		return nil, err
	}
	defer w.stop()
	if p.warmReady, err = w.waitReady(ctx, readyLimit); err != nil {
		return nil, err
	}
	p.serverWarmCPU = cpuTicks(srv.PID()) - serverCPU
	if rec, err := w.armedFromFile(ctx, 10*time.Second); err == nil {
		p.warmRec = rec
	} else {
		p.problems = append(p.problems, "warm restart: "+err.Error())
	}
	p.warmRSS = vmRSS(w.cmd.Process.Pid)
	p.warmCPU = cpuTicks(w.cmd.Process.Pid)
	p.peakRSS = vmHWM(w.cmd.Process.Pid)
	logf("warm ready after %s, RSS %d MB", p.warmReady.Round(time.Millisecond), p.warmRSS/1024)
	if o.resyncs > 0 {
		logf("waiting for %d resyncs (every %s)", o.resyncs, o.resyncInterval)
		stopEdits := func() []*edit { return nil }
		if o.resyncEditRate > 0 {
			stopEdits = startResyncEdits(ctx, coll, t, n, o, next)
		}
		// One at a time, to take the CPU at the end of each.
		var lastCPU int64
		for k := 1; k <= o.resyncs; k++ {
			if p.resyncs, err = w.reloadsFor(ctx, o.resyncInterval+2*time.Minute, resyncReason, k); err != nil {
				p.problems = append(p.problems, "resyncs: "+err.Error())
				break
			}
			cpu := cpuTicks(w.cmd.Process.Pid)
			if k > 1 {
				p.betweenCPU = append(p.betweenCPU, cpu-lastCPU)
			}
			lastCPU = cpu
		}
		p.resyncCPU = cpuTicks(w.cmd.Process.Pid) - p.warmCPU
		p.resyncRSS = vmRSS(w.cmd.Process.Pid)
		p.resyncPeak = vmHWM(w.cmd.Process.Pid)
		if edits := stopEdits(); len(edits) > 0 {
			// The edits a resync's read found are armed by its diff, which
			// logs a line per job since the builds of 2026-12-06 18:00 UTC
			// and none before: for those the daemon's API says whether
			// they are armed.
			unseen := map[string]string{}
			for _, e := range edits {
				if e.acked && e.armedLog.IsZero() {
					unseen[e.job] = e.expr
				}
			}
			p.resyncEdits = splitByResync(edits, p.resyncs, checkReloadEdits(ctx, w, unseen).lost)
			logf("edits while waiting for the resyncs: %d during a resync, %d outside (%d armed by a resync's read), %d lost, %d missing",
				len(p.resyncEdits.during), len(p.resyncEdits.outside), len(p.resyncEdits.byRead), len(p.resyncEdits.lost), p.resyncEdits.missing)
		}
		logf("after %d resyncs: RSS %d MB, peak %d MB, %.1f s of CPU since ready", len(p.resyncs),
			p.resyncRSS/1024, p.resyncPeak/1024, float64(p.resyncCPU)/clockTicks)
	}
	w.stop()
	p.problems = append(p.problems, w.Problems()...)
	p.loadAfter = loadAvg()
	return p, nil
}

// startResyncEdits makes edits at o.resyncEditRate (each to its own job,
// at most 1,000 unarmed) until the returned stop is called; stop then waits
// up to a minute for the last of them to be armed and returns them all.
func startResyncEdits(ctx context.Context, coll *mongo.Collection, t *tracker, n int, o scaleSettings, next *int) (stop func() []*edit) {
	t.mu.Lock()
	first := len(t.edits)
	t.mu.Unlock()
	from := *next
	count := int(o.resyncEditRate*(float64(o.resyncs)*o.resyncInterval.Seconds()+180)) + 1
	*next = from + count
	ectx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		es := settings{n: n, rate: o.resyncEditRate, maxInflight: 1000}
		if _, err := driveEdits(ectx, coll, t, es, from, from+count); err != nil && ectx.Err() == nil {
			logf("edits during the resyncs stopped: %v", err)
		}
	}()
	return func() []*edit {
		cancel()
		<-done
		t.wait(ctx, time.Now().Add(time.Minute), func() bool {
			for _, e := range t.edits[first:] {
				if e.acked && e.armedLog.IsZero() {
					return false
				}
			}
			return true
		})
		t.mu.Lock()
		defer t.mu.Unlock()
		return append([]*edit(nil), t.edits[first:]...)
	}
}

// waitSettled waits up to limit for the daemon's start-up work to be done
// (the first start writes every job's first sighting to the edit
// history, reads the decided slots, runs the catch-up): until its first
// sightings are recorded and its CPU use over 2 s has dropped below a
// fifth of a core, or that CPU use has stayed below it for two polls in a
// row (a build started on a database another build already sighted logs
// no sightings). It returns how long that took.
func waitSettled(ctx context.Context, d *daemon, limit time.Duration) time.Duration {
	start := time.Now()
	deadline := start.Add(limit)
	last := cpuTicks(d.cmd.Process.Pid)
	idle := 0
	for time.Now().Before(deadline) && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-time.After(2 * time.Second):
		}
		now := cpuTicks(d.cmd.Process.Pid)
		d.mu.Lock()
		sighted := !d.sighted.IsZero()
		d.mu.Unlock()
		busy := float64(now-last) / clockTicks / 2 // cores used over the 2 s
		last = now
		if busy < 0.2 {
			idle++
		} else {
			idle = 0
		}
		if idle > 0 && sighted || idle >= 2 {
			break
		}
	}
	return time.Since(start)
}

// clockTicks is the kernel's USER_HZ, the unit of /proc/<pid>/stat times.
const clockTicks = 100

// cpuTicks is the process's user + system time in clock ticks (0 when it
// cannot be read).
func cpuTicks(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command name, which is in parentheses.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		s = s[i+1:]
	}
	f := strings.Fields(s)
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return u + st
}

// reloadEditor writes edits at a fixed rate while a full reload runs: each
// to a job of its own, with an expression of its own.
type reloadEditor struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	made   map[string]string // job → last expression written
}

func startReloadEditor(ctx context.Context, coll *mongo.Collection, n int, rate float64, next *int) *reloadEditor {
	ectx, cancel := context.WithCancel(ctx)
	e := &reloadEditor{cancel: cancel, done: make(chan struct{}), made: map[string]string{}}
	first := *next
	*next += 100_000 // the editor's share of the expressions and jobs
	go func() {
		defer close(e.done)
		tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
		defer tick.Stop()
		stride := strideFor(n)
		for i := first; ; i++ {
			select {
			case <-ectx.Done():
				return
			case <-tick.C:
			}
			job := scaledoc.ID(int((int64(i) * int64(stride)) % int64(n)))
			expr := editExpr(i)
			if _, err := coll.UpdateOne(ectx, bson.D{{Key: "_id", Value: job}},
				bson.D{{Key: "$set", Value: bson.D{{Key: "cron_expr", Value: expr}, {Key: "updated_at", Value: time.Now().UTC()}}}}); err != nil {
				continue
			}
			e.mu.Lock()
			e.made[job] = expr
			e.mu.Unlock()
		}
	}()
	return e
}

// stop ends the edits and returns what was written.
func (e *reloadEditor) stop() map[string]string {
	e.cancel()
	<-e.done
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.made
}

// checkReloadEdits waits (up to 30 s) until the daemon shows every edit
// made during its reload, and lists those it does not.
func checkReloadEdits(ctx context.Context, d *daemon, made map[string]string) reloadEdits {
	r := reloadEdits{made: len(made)}
	deadline := time.Now().Add(30 * time.Second)
	pending := slices.Sorted(func(yield func(string) bool) {
		for j := range made {
			if !yield(j) {
				return
			}
		}
	})
	for len(pending) > 0 {
		var still []string
		for _, job := range pending {
			body, err := d.get(ctx, "/api/schedules/"+url.PathEscape(job))
			var s struct {
				CronExpr string `json:"cron_expr"`
			}
			if err != nil || json.Unmarshal(body, &s) != nil || s.CronExpr != made[job] {
				still = append(still, job)
			}
		}
		pending = still
		if len(pending) == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	r.lost = pending
	return r
}

// heapAfterGC asks the daemon's pprof to collect garbage (heap?gc=1) and
// reads the live heap from /metrics (go_memstats_heap_alloc_bytes); -1
// when it cannot. The heap profile it was sent is saved at profile unless
// that is empty.
func heapAfterGC(ctx context.Context, d *daemon, profile string) int64 {
	prof, err := d.getWithin(ctx, "/debug/pprof/heap?gc=1", 3*time.Minute)
	if err != nil {
		return -1
	}
	if profile != "" {
		if err := os.WriteFile(profile, prof, 0o644); err != nil {
			logf("heap profile: %v", err)
		}
	}
	body, err := d.get(ctx, "/metrics")
	if err != nil {
		return -1
	}
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(line, "go_memstats_heap_alloc_bytes "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return int64(f)
			}
		}
	}
	return -1
}

// profilePath is where the heap profile of the build labelled label
// holding n jobs goes in dir (” when dir is).
func profilePath(dir, label string, n int) string {
	if dir == "" {
		return ""
	}
	return filepath.Join(dir, fmt.Sprintf("heap-%s-%d.pb.gz", label, n))
}

// vmHWM reads the VmHWM (peak resident set) line of /proc/<pid>/status,
// in kB (-1 when absent).
func vmHWM(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			if f := strings.Fields(v); len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n
			}
		}
	}
	return -1
}

// latencies returns the sorted edit-to-armed (write ack → armed log) and
// floor (write ack → bare stream event) latencies of the edits that have
// both.
func latencies(edits []*edit) (armed, floor []time.Duration, missing int) {
	for _, e := range edits {
		if !e.acked || e.armedLog.IsZero() || e.floorRecv.IsZero() {
			missing++
			continue
		}
		armed = append(armed, e.armedLog.Sub(e.ack))
		floor = append(floor, e.floorRecv.Sub(e.ack))
	}
	slices.Sort(armed)
	slices.Sort(floor)
	return armed, floor, missing
}

func msOf(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/1e6) }

func scaleHeader(o scaleSettings, env machine, started time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "bench scale %s–%s UTC: N=%v, %d edits at %.3g/s (+%d warm-up), %.3g edits/s during each cold start; "+
		"test server -Xmx%s%s, oplog bound %d, %d whole-collection reads before the first start\n",
		started.Format("2006-01-02 15:04"), time.Now().UTC().Format("15:04"),
		o.ns, o.edits, o.rate, o.warmup, o.reloadEditRate, o.serverHeap,
		strings.Join(append([]string{""}, o.serverJVMArgs...), " "), o.oplogMax, o.serverReads)
	if o.resyncs > 0 {
		fmt.Fprintf(&b, "warm daemon: %d resyncs every %s, %.3g edits/s meanwhile\n", o.resyncs, o.resyncInterval, o.resyncEditRate)
	}
	fmt.Fprintf(&b, "test server jar: %s\n", serverJar())
	fmt.Fprintf(&b, "machine: %d CPUs %s, %s, Linux %s, %s; load average %s → %s\n",
		env.cpus, env.cpuModel, env.memTotal, env.kernel, env.goVersion, env.loadBefore, env.loadAfter)
	for _, bd := range o.builds {
		fmt.Fprintf(&b, "build %s: %s\n", bd.label, bd.binary)
	}
	return b.String()
}

// scaleTable is the side-by-side summary of every N and build.
func scaleTable(runs []*scaleRun) string {
	var b strings.Builder
	b.WriteString("\n| N | build | load | cold: start → ready | full reload logged (docs/s) | RSS at ready / peak | heap per job at ready / settled | " +
		"edits during reload: lost | edit→armed p50 / p99 (floor) ms | p99 − floor p99 | stop | warm: start → ready | RSS warm | " +
		"CPU to ready, cold / warm | resyncs: RSS / peak, CPU |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range runs {
		for _, p := range r.points {
			armed, floor, _ := latencies(p.edits)
			heap := "-"
			if p.heapAlloc > 0 {
				heap = fmt.Sprintf("%d B", p.heapAlloc/int64(p.n))
			}
			if p.heapIdle > 0 {
				heap += fmt.Sprintf(" / %d B", p.heapIdle/int64(p.n))
			}
			fmt.Fprintf(&b, "| %d | %s | %s | %s | %s (%d/s) | %d / %d MB | %s | %d: %d | %s / %s (%s / %s) | %s | %s | %s | %d MB | %s | %s |\n",
				p.n, p.label, r.loadTime.Round(100*time.Millisecond), p.coldReady.Round(10*time.Millisecond),
				time.Duration(p.coldReload.Duration).Round(10*time.Millisecond), docsPerSecond(p.coldReload),
				p.coldRSS/1024, max(p.coldPeak, p.peakRSS)/1024, heap, p.reloadEdit.made, len(p.reloadEdit.lost),
				msOf(quantileOf(armed, .5)), msOf(quantileOf(armed, .99)), msOf(quantileOf(floor, .5)), msOf(quantileOf(floor, .99)),
				msOf(quantileOf(armed, .99)-quantileOf(floor, .99)), p.shutdown.Round(10*time.Millisecond),
				p.warmReady.Round(10*time.Millisecond), p.warmRSS/1024,
				fmt.Sprintf("%.1f / %.1f s", float64(p.coldCPU)/clockTicks, float64(p.warmCPU)/clockTicks), resyncCell(p))
		}
	}
	return b.String()
}

// resyncCell is the table's account of the resyncs after the warm start
// ("-" when none were asked for).
func resyncCell(p *scalePoint) string {
	if len(p.resyncs) == 0 {
		return "-"
	}
	cell := fmt.Sprintf("%d: %d / %d MB, %.1f s", len(p.resyncs), p.resyncRSS/1024, p.resyncPeak/1024, float64(p.resyncCPU)/clockTicks)
	if len(p.betweenCPU) > 0 {
		cell += " (from one resync's end to the next: " + cpuSeconds(p.betweenCPU) + ")"
	}
	return cell
}

func docsPerSecond(r logRecord) int64 {
	if r.Duration <= 0 {
		return 0
	}
	return int64(float64(r.Documents) / (float64(r.Duration) / 1e9))
}

// scaleText is the detail of one N.
func scaleText(r *scaleRun) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nN=%d: loaded %.1f MB in %s (load average before %s)\n", r.n, float64(r.collBytes)/1e6,
		r.loadTime.Round(time.Millisecond), r.loadBefore)
	for k, sr := range r.serverReads {
		fmt.Fprintf(&b, "  before the first start, read %d of %d through the driver: %d documents in %s, the test server's CPU %.1f s\n",
			k+1, len(r.serverReads), sr.documents, sr.took.Round(time.Millisecond), float64(sr.serverCPU)/clockTicks)
	}
	for _, p := range r.points {
		armed, floor, missing := latencies(p.edits)
		heap := "not weighed at ready (-gc-at-ready=false)"
		if p.heapAlloc > 0 {
			heap = fmt.Sprintf("live heap after GC %.1f MB = %d B/job", float64(p.heapAlloc)/(1<<20), p.heapAlloc/int64(p.n))
		}
		fmt.Fprintf(&b, "  %s: cold start → ready %s; full reload logged %s (read %s, apply %s), %d documents; "+
			"RSS %d MB at ready, peak %d MB; %s\n",
			p.label, p.coldReady.Round(time.Millisecond), time.Duration(p.coldReload.Duration).Round(time.Millisecond),
			time.Duration(p.coldReload.Read).Round(time.Millisecond), time.Duration(p.coldReload.Apply).Round(time.Millisecond),
			p.coldReload.Documents, p.coldRSS/1024, p.coldPeak/1024, heap)
		fmt.Fprintf(&b, "    edits during the cold start's reload: %d made, %d lost %v; start-up work settled %s after ready, "+
			"live heap after GC then %.1f MB = %d B/job\n",
			p.reloadEdit.made, len(p.reloadEdit.lost), firstN(p.reloadEdit.lost, 10), p.settled.Round(time.Second),
			float64(p.heapIdle)/(1<<20), p.heapIdle/int64(p.n))
		fmt.Fprintf(&b, "    edit→armed (%d edits, %d missing): p50 %s p90 %s p99 %s max %s ms; floor p50 %s p90 %s p99 %s max %s ms\n",
			len(armed), missing, msOf(quantileOf(armed, .5)), msOf(quantileOf(armed, .9)), msOf(quantileOf(armed, .99)),
			msOf(quantileOf(armed, 1)), msOf(quantileOf(floor, .5)), msOf(quantileOf(floor, .9)), msOf(quantileOf(floor, .99)),
			msOf(quantileOf(floor, 1)))
		fmt.Fprintf(&b, "    SIGTERM → exit %s, state file %.1f MB; warm start → ready %s (armed from the file in %s), RSS %d MB, peak %d MB; load average %s\n",
			p.shutdown.Round(time.Millisecond), float64(p.stateSize)/1e6, p.warmReady.Round(time.Millisecond),
			time.Duration(p.warmRec.Duration).Round(time.Millisecond), p.warmRSS/1024, p.peakRSS/1024, p.loadAfter)
		fmt.Fprintf(&b, "    CPU process start → ready: cold %.1f s, warm %.1f s; the test server's meanwhile: cold %.1f s, warm %.1f s\n",
			float64(p.coldCPU)/clockTicks, float64(p.warmCPU)/clockTicks,
			float64(p.serverColdCPU)/clockTicks, float64(p.serverWarmCPU)/clockTicks)
		if len(p.resyncs) > 0 {
			fmt.Fprintf(&b, "    after %d resyncs (each a full read of %d documents, %s): RSS %d MB, peak %d MB, CPU since warm ready %.1f s\n",
				len(p.resyncs), p.resyncs[0].Documents, resyncDurations(p.resyncs), p.resyncRSS/1024, p.resyncPeak/1024,
				float64(p.resyncCPU)/clockTicks)
			if len(p.betweenCPU) > 0 {
				fmt.Fprintf(&b, "    CPU from the end of one resync to the end of the next (a resync and the idle time before it): %s\n",
					cpuSeconds(p.betweenCPU))
			}
			if re := p.resyncEdits; len(re.during)+len(re.outside)+re.missing > 0 {
				fmt.Fprintf(&b, "    edits meanwhile, write acknowledged → armed: %d during a resync p50 %s p99 %s max %s ms; "+
					"%d outside p50 %s p99 %s max %s ms; %d of them armed by a resync's own read (to its end: p50 %s max %s ms); "+
					"%d lost %v, %d missing\n",
					len(re.during), msOf(quantileOf(re.during, .5)), msOf(quantileOf(re.during, .99)), msOf(quantileOf(re.during, 1)),
					len(re.outside), msOf(quantileOf(re.outside, .5)), msOf(quantileOf(re.outside, .99)), msOf(quantileOf(re.outside, 1)),
					len(re.byRead), msOf(quantileOf(re.byRead, .5)), msOf(quantileOf(re.byRead, 1)),
					len(re.lost), firstN(re.lost, 10), re.missing)
			}
		}
		for _, pr := range firstN(p.problems, 10) {
			fmt.Fprintf(&b, "    problem: %s\n", pr)
		}
	}
	return b.String()
}

// cpuSeconds lists clock-tick counts as seconds.
func cpuSeconds(ticks []int64) string {
	parts := make([]string, len(ticks))
	for i, t := range ticks {
		parts[i] = fmt.Sprintf("%.1f s", float64(t)/clockTicks)
	}
	return strings.Join(parts, ", ")
}

// resyncDurations lists how long each full read logged it took.
func resyncDurations(recs []logRecord) string {
	d := make([]string, len(recs))
	for i, r := range recs {
		d[i] = time.Duration(r.Duration).Round(10 * time.Millisecond).String()
	}
	return strings.Join(d, ", ")
}

func firstN(s []string, n int) []string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
