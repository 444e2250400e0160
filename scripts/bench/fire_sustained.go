package main

// The sustained mode of the fire benchmark ("bench fire -sustained"): N
// schedules spread over the seconds of a minute, job k with
// "S * * * * *", S = k mod 60, so that N/60 fire every second (100,000:
// ≈ 1,667 per second), R replicas, for -duration. Per minute of slots it
// reports fires, duplicates, missed, start lateness p50/p99/max, commands
// per fire, each daemon's RSS and the claim metrics.

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cronswap/cronswap/internal/testmongo"
	"github.com/cronswap/cronswap/schedule"
)

// sustainedExpr is job k's expression in the sustained mode.
func sustainedExpr(k int) string { return fmt.Sprintf("%d * * * * *", k%60) }

// sustainedAcc accounts the sustained mode's arrivals: for each measured
// slot (one per second from start) and each job due at it, the number of
// arrivals and the first one's lateness. Job k is due at the slots whose
// second is k mod 60; it is stored at index k / 60 of its slot.
type sustainedAcc struct {
	n     int
	start time.Time // the first measured slot (a whole second, UTC)
	secs  int       // measured slots
	count [][]uint16
	late  [][]float32 // ms, first arrival − slot
	// inst is the first arrival's replica, an index into instances.
	inst      [][]uint8
	instances []string
	instIndex map[string]uint8
	// distinct counts, per slot, the jobs with at least one arrival.
	distinct []int
	// earlier: arrivals of a known job for a slot before start;
	// unexpected: for an unknown job or a slot the job is not due at.
	earlier, unexpected int
}

func newSustainedAcc(n int, start time.Time, secs int) *sustainedAcc {
	return &sustainedAcc{n: n, start: start.UTC(), secs: secs, count: make([][]uint16, secs),
		late: make([][]float32, secs), inst: make([][]uint8, secs), distinct: make([]int, secs), instIndex: map[string]uint8{}}
}

// dueAt returns how many jobs are due at a slot with this second of the minute.
func (a *sustainedAcc) dueAt(second int) int {
	if second >= a.n {
		return 0
	}
	return (a.n - second + 59) / 60
}

// slot returns the time of measured slot i.
func (a *sustainedAcc) slot(i int) time.Time { return a.start.Add(time.Duration(i) * time.Second) }

// add accounts one arrival.
func (a *sustainedAcc) add(ar arrival) {
	k, ok := jobIndex(ar.job)
	if !ok || k >= a.n || ar.slot.Nanosecond() != 0 || ar.slot.UTC().Second() != k%60 {
		a.unexpected++
		return
	}
	d := ar.slot.Sub(a.start)
	if d < 0 {
		a.earlier++
		return
	}
	i := int(d / time.Second)
	if i >= a.secs {
		return // after the measured slots
	}
	if a.count[i] == nil {
		m := a.dueAt(a.slot(i).Second())
		a.count[i], a.late[i], a.inst[i] = make([]uint16, m), make([]float32, m), make([]uint8, m)
	}
	j := k / 60
	late := float32(ar.at.Sub(ar.slot).Seconds() * 1000)
	if a.count[i][j] == 0 || late < a.late[i][j] {
		if a.count[i][j] == 0 {
			a.distinct[i]++
		}
		a.late[i][j], a.inst[i][j] = late, a.instanceIndex(ar.instance)
	}
	if a.count[i][j] < math.MaxUint16 {
		a.count[i][j]++
	}
}

// instanceIndex returns the index of a replica's instance id (at most 256
// distinct ones; later ones share the last index).
func (a *sustainedAcc) instanceIndex(id string) uint8 {
	if i, ok := a.instIndex[id]; ok {
		return i
	}
	if len(a.instances) == math.MaxUint8+1 {
		return math.MaxUint8
	}
	i := uint8(len(a.instances))
	a.instances = append(a.instances, id)
	a.instIndex[id] = i
	return i
}

// pending reports whether a measured slot still lacks a job that can
// still start before its next slot (one minute later) at now.
func (a *sustainedAcc) pending(now time.Time) bool {
	for i := range a.secs {
		if a.distinct[i] < a.dueAt(a.slot(i).Second()) && now.Before(a.slot(i).Add(time.Minute)) {
			return true
		}
	}
	return false
}

// minute accounts the slots [from, to) (indexes) like a burst: a job that
// did not start before its next slot, a minute later, is missed.
func (a *sustainedAcc) minute(from, to int) burstStats {
	b := burstStats{slot: a.slot(from), next: a.slot(to), byInstance: map[string]int{}}
	var late []time.Duration
	for i := from; i < min(to, a.secs); i++ {
		m := a.dueAt(a.slot(i).Second())
		b.expected += m
		for j := range m {
			c := uint16(0)
			if a.count[i] != nil {
				c = a.count[i][j]
			}
			if c == 0 {
				b.missed++
				b.never++
				continue
			}
			b.ran++
			b.byInstance[a.instances[a.inst[i][j]]]++
			if c > 1 {
				b.duplicates += int(c) - 1
				b.dupJobs++
			}
			l := time.Duration(float64(a.late[i][j]) * float64(time.Millisecond))
			if l >= time.Minute {
				b.missed++
			}
			late = append(late, l)
		}
	}
	b.lateness = newSeries("start lateness", late, b.never)
	return b
}

// jobIndex parses k from fireJobID(k).
func jobIndex(id string) (int, bool) {
	s, ok := strings.CutPrefix(id, jobPrefix)
	if !ok {
		return 0, false
	}
	k, err := strconv.Atoi(s)
	return k, err == nil && k >= 0
}

// sustainedMinute is one minute of the sustained run.
type sustainedMinute struct {
	burstStats
	windowFrom, windowTo time.Time
	windowFires          int
	cmds                 map[string]int
	rss                  []int64 // kB per replica at the window's end
	claims               []claimMetrics
	load                 string
	benchCPU             time.Duration // the bench process (sink + wire proxies) in the window
}

// sustainedRun is everything the sustained mode measured.
type sustainedRun struct {
	opts                  fireSettings
	env                   machine
	started, finished     time.Time
	loadBefore, loadAfter string
	loadTime, armTime     time.Duration
	instances             []string
	start                 time.Time // first measured slot
	rssStart              []int64   // kB per replica at the first slot
	minutes               []sustainedMinute
	total                 burstStats
	earlier, unexpected   int
	badBodies, sinkErrs   int
	sinkFirstErr          string
	problems              []string
	err                   error
}

func runSustained(ctx context.Context, o fireSettings) error {
	if len(o.points) != 1 {
		return fmt.Errorf("-sustained takes one -n and one -replicas (got %d points)", len(o.points))
	}
	if o.duration < time.Second {
		return fmt.Errorf("-duration %s: want at least 1s", o.duration)
	}
	ws, err := newWorkspace(ctx, "cronswap-bench-sustained-", o.logDir, o.binary)
	if err != nil {
		return err
	}
	defer ws.remove()
	o.binary = ws.binary
	run := &sustainedRun{opts: o, env: describeMachine(ctx), started: time.Now().UTC(), loadBefore: loadAvg()}
	run.err = run.measure(ctx, ws.logDir)
	run.finished = time.Now().UTC()
	run.loadAfter = loadAvg()
	run.env.loadAfter = run.loadAfter
	text := run.text()
	fmt.Print(text)
	if o.out != "" {
		if err := os.MkdirAll(o.out, 0o755); err != nil {
			return err
		}
		resPath := filepath.Join(o.out, "bench-fire-results.txt")
		f, err := os.OpenFile(resPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		_, werr := f.WriteString(text)
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			return werr
		}
		logf("appended to %s", resPath)
	}
	if o.logDir != "" {
		logf("daemon logs kept in %s", o.logDir)
	}
	if run.err != nil {
		return run.err
	}
	return ctx.Err()
}

// measure runs the sustained mode: server, sink, schedules, daemons, then
// one window per minute of slots.
func (run *sustainedRun) measure(ctx context.Context, logDir string) error {
	o := run.opts
	n, replicas := o.points[0][0], o.points[0][1]
	srv, err := testmongo.Start(ctx, testmongo.Options{JVMArgs: o.serverJVM, ExtraArgs: o.serverArgs, StartTimeout: 2 * time.Minute})
	if err != nil {
		return err
	}
	defer func() { _ = srv.Stop() }()
	client, err := testmongo.Connect(ctx, srv.URI)
	if err != nil {
		return err
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	dbName := testmongo.DatabaseName(fmt.Sprintf("bench_sustained_%d_%d", n, replicas))
	db := client.Database(dbName)
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = db.Drop(dctx)
	}()
	sk, err := startSink(o.hold, false)
	if err != nil {
		return err
	}
	defer sk.close()

	logf("sustained: loading %d schedules 'S * * * * *' (S = k mod 60) into %s", n, dbName)
	if _, run.loadTime, err = loadFireJobs(ctx, db.Collection(schedule.CollectionName), n, sustainedExpr, o.batch); err != nil {
		return err
	}
	var cl *fireCluster
	defer func() {
		sk.release()
		if cl != nil {
			run.problems = append(run.problems, cl.stop()...)
		}
	}()
	armStart := time.Now()
	cl, err = startFireCluster(ctx, o, srv.URI, dbName, sk.URL(), replicas, nil, logDir, fmt.Sprintf("sustained-n%d-r%d", n, replicas))
	run.instances = cl.instances
	if err != nil {
		return err
	}
	if err := cl.waitArmed(ctx, n); err != nil {
		return err
	}
	armedAt := time.Now()
	run.armTime = armedAt.Sub(armStart)
	logf("%d daemon(s) ready with %d armed after %s", replicas, n, run.armTime.Round(time.Millisecond))

	// The first measured slot: 3 s after every daemon is ready (fires
	// before it run too and are counted as earlier). Minute m holds the
	// slots [start + m min, start + (m+1) min); its command window opens
	// windowLead before its first slot.
	run.start = armedAt.Add(3 * time.Second).UTC().Truncate(time.Second).Add(time.Second)
	secs := int(o.duration / time.Second)
	acc := newSustainedAcc(n, run.start, secs)
	minutes := (secs + 59) / 60
	windowFires := make([]int, minutes)
	windowOpen := run.start.Add(-windowLead)
	drain := func() {
		arrivals, bad := sk.drain()
		run.badBodies = bad
		for _, a := range arrivals {
			acc.add(a)
			if w := int(a.at.Sub(windowOpen) / time.Minute); a.at.Compare(windowOpen) >= 0 && w < minutes {
				windowFires[w]++
			}
		}
	}
	logf("sustained: measuring %d slots (%s) from %s, %d fires per second", secs, o.duration, run.start.Format("15:04:05"), n/60)
	if err := cl.sleepUntil(ctx, windowOpen, drain); err != nil {
		return err
	}
	snap, claims := cl.commands(), scrapeAllClaims(ctx, cl.daemons)
	run.rssStart = cl.rss()
	var windows []sustainedMinute
	for m := range minutes {
		from, cpu0 := time.Now(), cpuTime()
		end := run.start.Add(time.Duration(min(60*(m+1), secs))*time.Second - windowLead)
		if m == minutes-1 {
			// The last window ends once its fires have started (or could
			// not start before their next slot any more), plus a settle.
			end = run.start.Add(time.Duration(secs) * time.Second)
			if err := cl.sleepUntil(ctx, end, drain); err != nil {
				return err
			}
			for acc.pending(time.Now()) {
				if err := cl.sleepUntil(ctx, time.Now().Add(200*time.Millisecond), drain); err != nil {
					return err
				}
			}
			end = time.Now().Add(2*time.Second + o.hold)
		}
		if err := cl.sleepUntil(ctx, end, drain); err != nil {
			return err
		}
		now, nowClaims := cl.commands(), scrapeAllClaims(ctx, cl.daemons)
		windows = append(windows, sustainedMinute{windowFrom: from, windowTo: time.Now(), cmds: commandDelta(snap, now),
			rss: cl.rss(), claims: claimsDelta(nowClaims, claims), load: loadAvg(), benchCPU: cpuTime() - cpu0})
		snap, claims = now, nowClaims
		logf("sustained: minute %d of %d done (%d fires so far)", m+1, minutes, sumInts(windowFires))
	}
	drain()
	for m := range windows {
		windows[m].burstStats = acc.minute(60*m, min(60*(m+1), secs))
		windows[m].windowFires = windowFires[m]
	}
	run.minutes = windows
	run.total = acc.minute(0, secs)
	run.earlier, run.unexpected = acc.earlier, acc.unexpected
	run.sinkErrs, run.sinkFirstErr = sk.errs.get()
	return nil
}

func sumInts(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

// fmtRSS formats kB as MB ("n/a" when unknown).
func fmtRSS(kb int64) string {
	if kb < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f", float64(kb)/1024)
}

// text is the sustained run's report: a header, a row per minute, the
// total, the RSS from the first slot to the end, and one "fire-minute
// {json}" line per minute plus a "fire-sustained {json}" summary.
func (run *sustainedRun) text() string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	o := run.opts
	n, replicas := o.points[0][0], o.points[0][1]
	w("\n%s, sustained, %s → %s UTC", fireRunHeader, run.started.Format("2006-01-02 15:04"), run.finished.Format("15:04"))
	if o.label != "" {
		w(" [%s]", o.label)
	}
	w("\nmachine: %d CPUs (%s), %s, linux %s, %s, %s; load average %s before, %s after (shared machine: figures are noisy)\n",
		run.env.cpus, run.env.cpuModel, run.env.memTotal, run.env.kernel, run.env.goVersion, run.env.java,
		run.loadBefore, run.loadAfter)
	w("run: -sustained -n %d -replicas %d -duration %s -action-ms %d -workers %d", n, replicas, o.duration, o.hold.Milliseconds(), o.workers)
	if len(o.serverJVM) > 0 {
		w(" -server-jvm-args '%s'", strings.Join(o.serverJVM, " "))
	}
	if len(o.serverArgs) > 0 {
		w(" -server-args '%s'", strings.Join(o.serverArgs, " "))
	}
	w("\n")
	workers := "default"
	if o.workers > 0 {
		workers = fmt.Sprint(o.workers)
	}
	w("\n--- sustained: N=%d schedules \"S * * * * *\" (S = k mod 60: %.0f fires per second), %d replica(s), http action to the sink (hold %s), workers %s\n",
		n, float64(n)/60, replicas, o.hold, workers)
	w("    loaded in %s, all replicas ready with N armed %s after the first start; measured slots from %s UTC for %s\n",
		run.loadTime.Round(time.Millisecond), run.armTime.Round(time.Millisecond), run.start.Format("15:04:05"), o.duration)
	if run.err != nil {
		w("    ERROR: %v\n", run.err)
	}
	if len(run.minutes) > 0 {
		w("    %-6s %-8s %8s %8s %5s %14s %10s %10s %10s %9s %8s  %-22s %s\n",
			"minute", "from", "expected", "ran", "dup", "missed(never)", "late p50", "p99", "max", "cmd/fire", "fires/w", "RSS MB per replica", "load")
	}
	row := func(name string, m burstStats, cmdPerFire string, fires string, rss []int64, load string) {
		var r []string
		for _, v := range rss {
			r = append(r, fmtRSS(v))
		}
		w("    %-6s %-8s %8d %8d %5d %14s %10s %10s %10s %9s %8s  %-22s %s\n", name, m.slot.Format("15:04:05"),
			m.expected, m.ran, m.duplicates, fmt.Sprintf("%d (%d)", m.missed, m.never),
			fmtLate(m.lateness.pct(50)), fmtLate(m.lateness.pct(99)), fmtLate(m.lateness.pct(100)), cmdPerFire, fires, strings.Join(r, " "), load)
	}
	allCmds, allFires := map[string]int{}, 0
	for i, m := range run.minutes {
		total, _ := perFire(m.cmds, m.windowFires)
		row(fmt.Sprint(i+1), m.burstStats, fmt.Sprintf("%.2f", total), fmt.Sprint(m.windowFires), m.rss, m.load)
		for k, v := range m.cmds {
			allCmds[k] += v
		}
		allFires += m.windowFires
	}
	if len(run.minutes) > 0 {
		total, by := perFire(allCmds, allFires)
		row("all", run.total, fmt.Sprintf("%.2f", total), fmt.Sprint(allFires), run.minutes[len(run.minutes)-1].rss, "")
		parts := make([]string, len(by))
		for j, r := range by {
			parts[j] = fmt.Sprintf("%s %.2f", r.name, r.rate)
		}
		w("    commands per fire over the run: %s\n", strings.Join(parts, ", "))
		last := run.minutes[len(run.minutes)-1].rss
		var growth []string
		for i := range last {
			if i < len(run.rssStart) && run.rssStart[i] > 0 && last[i] > 0 {
				growth = append(growth, fmt.Sprintf("%s %s → %s MB (%+.1f %%)", run.instances[i], fmtRSS(run.rssStart[i]), fmtRSS(last[i]),
					100*float64(last[i]-run.rssStart[i])/float64(run.rssStart[i])))
			}
		}
		w("    RSS from the first slot to the end: %s\n", strings.Join(growth, "; "))
		w("    first runs by replica (all minutes): %s; duplicated jobs %d; start lateness p90 %s\n",
			countsText(run.total.byInstance), run.total.dupJobs, fmtLate(run.total.lateness.pct(90)))
		var cpu []string
		for _, m := range run.minutes {
			cpu = append(cpu, fmt.Sprintf("%.1f s", m.benchCPU.Seconds()))
		}
		w("    bench process (sink + wire proxies) CPU per minute: %s\n", strings.Join(cpu, ", "))
	}
	for i, m := range run.minutes {
		for j, c := range m.claims {
			if c.present() && j < len(run.instances) {
				w("    minute %d: %s: %s\n", i+1, run.instances[j], c.text())
			}
		}
	}
	if run.earlier > 0 || run.unexpected > 0 || run.badBodies > 0 {
		w("    arrivals before the first measured slot: %d; unexpected (another job or slot): %d; bodies that did not decode: %d\n",
			run.earlier, run.unexpected, run.badBodies)
	}
	if run.sinkErrs > 0 {
		w("    WARNING: the sink's HTTP server logged %d errors (first: %s): the sink may have been a bottleneck\n", run.sinkErrs, run.sinkFirstErr)
	}
	for _, pr := range run.problems {
		w("    daemon log: %s\n", pr)
	}
	for i, m := range run.minutes {
		line, _ := json.Marshal(run.minuteJSON(i, m))
		w("fire-minute %s\n", line)
	}
	if len(run.minutes) > 0 {
		sum := run.minuteJSON(-1, sustainedMinute{burstStats: run.total, rss: run.minutes[len(run.minutes)-1].rss})
		sum["rss_start_kb"] = run.rssStart
		sum["minutes"] = len(run.minutes)
		sum["window_fires"] = allFires
		total, _ := perFire(allCmds, allFires)
		sum["commands"], sum["commands_per_fire"] = allCmds, math.Round(total*100)/100
		line, _ := json.Marshal(sum)
		w("fire-sustained %s\n", line)
	}
	return b.String()
}

// minuteJSON is the machine-readable record of minute i (i < 0: the total).
func (run *sustainedRun) minuteJSON(i int, m sustainedMinute) map[string]any {
	o := run.opts
	ms := func(v float64) any {
		if math.IsNaN(v) {
			return nil
		}
		return math.Round(v*10) / 10
	}
	out := map[string]any{
		"n": o.points[0][0], "replicas": o.points[0][1], "from": m.slot.Format(time.RFC3339), "action_ms": o.hold.Milliseconds(),
		"workers": o.workers, "expected": m.expected, "ran": m.ran, "duplicates": m.duplicates, "missed": m.missed, "never": m.never,
		"late_p50_ms": ms(m.lateness.pct(50)), "late_p90_ms": ms(m.lateness.pct(90)),
		"late_p99_ms": ms(m.lateness.pct(99)), "late_max_ms": ms(m.lateness.pct(100)),
		"by_replica": m.byInstance, "rss_kb": m.rss,
	}
	if i >= 0 {
		out["minute"] = i + 1
		total, _ := perFire(m.cmds, m.windowFires)
		out["commands"], out["commands_per_fire"] = m.cmds, math.Round(total*100)/100
		out["window_fires"], out["load"] = m.windowFires, m.load
		out["window_s"] = math.Round(m.windowTo.Sub(m.windowFrom).Seconds()*10) / 10
		out["bench_cpu_s"] = math.Round(m.benchCPU.Seconds()*100) / 100
		claims := map[string]any{}
		for j, c := range m.claims {
			if c.present() && j < len(run.instances) {
				claims[run.instances[j]] = c.json()
			}
		}
		if len(claims) > 0 {
			out["claims"] = claims
		}
	}
	return out
}
