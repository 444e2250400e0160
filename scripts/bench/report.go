package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/cronswap/cronswap/internal/testmongo"
)

// machine describes where the numbers come from.
type machine struct {
	cpus       int
	cpuModel   string
	memTotal   string
	kernel     string
	goVersion  string
	java       string
	loadBefore string
	loadAfter  string
}

func describeMachine(ctx context.Context) machine {
	m := machine{cpus: runtime.NumCPU(), goVersion: runtime.Version(), loadBefore: loadAvg()}
	m.cpuModel = firstField("/proc/cpuinfo", "model name")
	m.memTotal = firstField("/proc/meminfo", "MemTotal")
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.kernel = strings.TrimSpace(string(b))
	}
	if out, err := exec.CommandContext(ctx, "java", "-version").CombinedOutput(); err == nil {
		m.java, _, _ = strings.Cut(strings.TrimSpace(string(out)), "\n")
	}
	return m
}

// firstField returns the value of the first "key : value" line of a /proc file.
func firstField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// serverJar names the test server's jar a benchmark launches
// (testmongo.JarPath: CRONSWAP_MONGO_JAR, or the repository's build) with
// the start of its SHA-256, so that a results file says which build of
// the server it measured.
func serverJar() string {
	p, err := testmongo.JarPath()
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	f, err := os.Open(p)
	if err != nil {
		return p + " (unreadable: " + err.Error() + ")"
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return p + " (unreadable: " + err.Error() + ")"
	}
	return fmt.Sprintf("%s (sha256 %x…)", p, h.Sum(nil)[:6])
}

// series is a named sample of latencies in milliseconds.
type series struct {
	name    string
	ms      []float64 // sorted
	missing int
}

func newSeries(name string, ds []time.Duration, missing int) series {
	s := series{name: name, missing: missing}
	for _, d := range ds {
		s.ms = append(s.ms, float64(d)/float64(time.Millisecond))
	}
	slices.Sort(s.ms)
	return s
}

// pct is the nearest-rank p-th percentile (p in 0..100); NaN when empty.
func (s series) pct(p float64) float64 {
	if len(s.ms) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(p/100*float64(len(s.ms)))) - 1
	return s.ms[max(0, min(i, len(s.ms)-1))]
}

// latencies splits a mode's edits into its series.
func (r *modeResult) latencies() (armed, recv, floorS, paired series) {
	var a, rv, f, p []time.Duration
	missA, missF := 0, 0
	for _, e := range r.edits {
		if !e.acked || e.armedLog.IsZero() {
			missA++
		} else {
			a = append(a, e.armedLog.Sub(e.ack))
			rv = append(rv, e.armedRecv.Sub(e.armedLog))
		}
		if r.hasFloor {
			if !e.acked || e.floorRecv.IsZero() {
				missF++
			} else {
				f = append(f, e.floorRecv.Sub(e.ack))
				if !e.armedLog.IsZero() {
					p = append(p, e.armedLog.Sub(e.floorRecv))
				}
			}
		}
	}
	armed = newSeries(r.mode+": daemon edit-to-armed", a, missA)
	recv = newSeries(r.mode+": log record written → read by bench", rv, 0)
	floorS = newSeries(r.mode+": floor (bare Watch) write → event", f, missF)
	paired = newSeries(r.mode+": daemon armed − floor event, same edit", p, 0)
	return armed, recv, floorS, paired
}

// report renders the results.
type report struct {
	opts              settings
	env               machine
	started, finished time.Time
	results           []*modeResult
}

func fmtMS(v float64) string {
	switch {
	case math.IsNaN(v):
		return "n/a"
	case math.IsInf(v, 1):
		return "> last bucket"
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func (rep report) text() string {
	var b strings.Builder
	o := rep.opts
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("cronswap end-to-end benchmark, %s → %s UTC\n", rep.started.Format("2006-01-02 15:04"), rep.finished.Format("15:04"))
	w("machine: %d CPUs (%s), %s, linux %s, %s, %s; load average %s before, %s after\n",
		rep.env.cpus, rep.env.cpuModel, rep.env.memTotal, rep.env.kernel, rep.env.goVersion, rep.env.java,
		rep.env.loadBefore, rep.env.loadAfter)
	w("run: N=%d schedules, %d measured edits per mode (+%d warmup) at %.3g/s, at most %d unarmed at once, poll_interval %s, idle window %s",
		o.n, o.edits, o.warmup, o.rate, o.maxInflight, o.pollInterval, o.idle)
	if o.warmEdits > 0 && slices.Contains(o.modes, modeChangeStream) {
		w(", %d edits while down in the warm restart", o.warmEdits)
	}
	w("\n")
	for _, r := range rep.results {
		switch {
		case r.external:
			w("server (%s): external, from %s\n", r.mode, "CRONSWAP_MONGO_URI")
		case r.warm != nil:
			w("server (%s): fresh test server (mongo-java-server); oplog ≈ %d entries at the first edit, growing by 1 per edit + 1 token save per second of edits (state_file set: saves coalesce to 1 s)\n",
				r.mode, o.n)
		default:
			w("server (%s): fresh test server (mongo-java-server); oplog ≈ %d entries at the first edit, growing by ~2 per edit (write + token save)\n",
				r.mode, o.n)
		}
	}
	for _, r := range rep.results {
		if r.warm != nil {
			w("daemon (%s): state_file set for the edit phase's daemon (needed by the warm restart); it saves the file with the token, at most once a second while edits come\n", r.mode)
		}
	}
	w("\nEdit-to-armed latency, ms (write acknowledged to the bench → daemon log record \"schedule applied\" [changestream] or\n")
	w("\"full reload\" of a poll diff naming the job [poll]; both timestamps from this machine's clock)\n\n")
	w("%-58s %6s %8s %8s %8s %8s %8s\n", "series", "n", "p50", "p90", "p99", "max", "missing")
	row := func(s series) {
		w("%-58s %6d %8s %8s %8s %8s %8d\n", s.name, len(s.ms), fmtMS(s.pct(50)), fmtMS(s.pct(90)), fmtMS(s.pct(99)),
			fmtMS(s.pct(100)), s.missing)
	}
	var cs, poll *modeResult
	for _, r := range rep.results {
		armed, recv, fl, paired := r.latencies()
		row(armed)
		if r.hasFloor {
			row(fl)
			row(paired)
		}
		row(recv)
		switch r.mode {
		case modeChangeStream:
			cs = r
		case modePoll:
			poll = r
		}
	}

	w("\nTargets\n")
	if cs != nil {
		armed, _, fl, _ := cs.latencies()
		d50, d99 := armed.pct(50)-fl.pct(50), armed.pct(99)-fl.pct(99)
		w("  daemon − floor at p50: %s ms (target ≤ 2 ms: %s); ratio %.2f×\n", fmtMS(d50), verdict(d50 <= 2, d50), armed.pct(50)/fl.pct(50))
		w("  daemon − floor at p99: %s ms (target ≤ 5 ms: %s); ratio %.2f×\n", fmtMS(d99), verdict(d99 <= 5, d99), armed.pct(99)/fl.pct(99))
		_, _, _, paired := cs.latencies()
		w("  per edit, daemon armed − floor event (the stricter view): p50 %s ms, p99 %s ms\n", fmtMS(paired.pct(50)), fmtMS(paired.pct(99)))
		ea := cs.metrics.eventApply
		switch {
		case !ea.present:
			w("  event received → armed (%s): unavailable, the daemon does not export it\n", metricEventApply)
		case ea.count == 0:
			w("  event received → armed (%s): unavailable, no observations during the edits (not wired to the watcher in this build)\n", metricEventApply)
		default:
			share := ea.shareAtMost(0.001)
			w("  event received → armed (%s, %d observations): p50 ≈ %s ms, p99 ≈ %s ms (bucket interpolation); %.2f%% ≤ 1 ms (target p99 ≤ 1 ms: %s)\n",
				metricEventApply, ea.count, fmtMS(ea.quantile(.5)*1000), fmtMS(ea.quantile(.99)*1000), share*100, verdict(share >= .99, share))
		}
		if ea := cs.metrics.editToArmed; ea.present && ea.count > 0 {
			w("  daemon's own %s (event wallTime → armed, %d observations): p50 ≈ %s ms, p99 ≈ %s ms (bucket interpolation)\n",
				metricEditToArmed, ea.count, fmtMS(ea.quantile(.5)*1000), fmtMS(ea.quantile(.99)*1000))
		}
		if cs.floorErr != nil {
			w("  floor stream ended with an error: %v\n", cs.floorErr)
		}
	}
	if cs != nil && poll != nil {
		a, _, _, _ := cs.latencies()
		p, _, _, _ := poll.latencies()
		w("  poll (%s) vs change stream: p50 %s vs %s ms (%.0f×), p99 %s vs %s ms (%.0f×)\n", o.pollInterval,
			fmtMS(p.pct(50)), fmtMS(a.pct(50)), p.pct(50)/a.pct(50), fmtMS(p.pct(99)), fmtMS(a.pct(99)), p.pct(99)/a.pct(99))
	}

	w("\nCommands sent to the server per idle minute (daemon behind internal/faultproxy, %s window scaled to 60 s)\n", o.idle)
	for _, r := range rep.results {
		total, parts := describeIdle(r.idleCommands, r.idleWindow)
		w("  %-13s %6.1f/min: %s\n", r.mode, total, strings.Join(parts, ", "))
		if finds := r.idleCommands["find"]; finds > 0 {
			perMin := float64(finds) * float64(time.Minute) / float64(r.idleWindow)
			w("  %-13s each find reads the whole collection (%.1f MB of BSON): ≈ %.0f MB/min\n", "", float64(r.collBytes)/1e6,
				perMin*float64(r.collBytes)/1e6)
		}
	}

	w("\nFull reload without a resume token (N=%d)\n", o.n)
	for _, r := range rep.results {
		w("  %-13s collection %.1f MB of BSON (every poll diff and every full reload reads all of it)\n", r.mode, float64(r.collBytes)/1e6)
		w("  %-13s load (insertMany, batches of %d) %s; daemon start → /readyz %s, logged reload %s; second daemon (idle phase) %s, logged %s\n",
			r.mode, o.batch, sec(r.loadTime), sec(r.startToReady), sec(r.reloadLogged), sec(r.idleStartToReady), sec(r.idleReloadLogged))
		if r.warm != nil {
			w("  %-13s (the first daemon has state_file set: its start → /readyz includes writing the file after the reload; the idle phase's has none)\n", "")
		}
	}
	for _, r := range rep.results {
		if r.warm != nil {
			rep.warmSection(&b, r)
		}
	}

	w("\nNotes\n")
	for _, r := range rep.results {
		w("  %s: edits sent over %s; %d waited for the in-flight bound; %d unmatched log records/events\n",
			r.mode, sec(r.editWindow), r.held, r.unmatched)
		if len(r.problems) > 0 {
			w("  %s: %d warn/error log records, first: %s\n", r.mode, len(r.problems), r.problems[0])
		}
	}
	return b.String()
}

// warmSection renders the warm-restart phase of r.
func (rep report) warmSection(b *strings.Builder, r *modeResult) {
	o, wr := rep.opts, r.warm
	w := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	w("\nWarm restart from state_file (N=%d, %s): the edit phase's daemon stopped with SIGTERM right after it armed one more edit,\n", o.n, r.mode)
	w("%d edits made while it was down, then a new daemon with the same instance id and state_file; times from its process start\n", len(wr.edits))
	stop := "exit status 0"
	if wr.stopErr != nil {
		stop = wr.stopErr.Error()
	}
	w("  stop: SIGTERM → exit %s (%s)\n", sec(wr.stopTook), stop)
	if wr.fileErr == nil {
		match := "yes"
		switch {
		case wr.tokenErr != nil:
			match = "unknown (" + wr.tokenErr.Error() + ")"
		case !wr.tokenMatch:
			match = "NO"
		}
		when := "before SIGTERM (nothing left to flush)"
		if !wr.fileSavedAt.Before(wr.stopAt.Truncate(time.Millisecond)) {
			when = "by the shutdown"
		}
		w("  state file after the stop: %.1f MB, %d documents, saved %s, holds the edit armed just before the stop: %s; its token = the stored resume token: %s\n",
			float64(wr.fileBytes)/1e6, wr.fileDocs, when, yesNo(wr.fileHasLast), match)
	}
	warmOK := wr.armed.Msg != "" && len(wr.reloads) == 0
	w("  start → /readyz 200: %s (target ≤ 1 s without reading the collection: %s)\n", sec(wr.startToReady),
		verdict(warmOK && wr.startToReady <= time.Second, float64(wr.startToReady)))
	if wr.armed.Msg != "" {
		a := wr.armed
		w("  \"armed from state file\" logged %s after start: %d documents in %s = read %s + decode %s + engine %s + rest %s\n",
			sec(wr.startToArmed), a.Documents, ms(a.Duration), ms(a.Read), ms(a.Decode), ms(a.Engine), ms(a.Duration-a.Read-a.Decode-a.Engine))
	} else {
		w("  no \"armed from state file\" record\n")
	}
	if c := r.reload; c.Msg != "" {
		w("  (the first start's full reload in this run: %d documents in %s = read %s + decode %s + engine %s + rest %s)\n",
			c.Documents, ms(c.Duration), ms(c.Read), ms(c.Decode), ms(c.Engine), ms(c.Duration-c.Read-c.Decode-c.Engine))
	}
	if len(wr.reloads) == 0 {
		w("  full reloads by the restarted daemon: none (the collection was not read)\n")
	} else {
		w("  full reloads by the restarted daemon: %d (it read the collection)\n", len(wr.reloads))
	}
	if len(wr.edits) > 0 {
		applied, missing, startToLast := warmStats(wr.started, wr.edits)
		if applied > 0 {
			w("  edits made while down: %d of %d applied, the last %s after start (%+.1f ms from the first /readyz 200 seen); %d missing after waiting %s\n",
				applied, len(wr.edits), sec(startToLast), float64(startToLast-wr.startToReady)/1e6, missing, wr.wait)
		} else {
			w("  edits made while down: none of %d applied within %s of /readyz\n", len(wr.edits), wr.wait)
		}
	}
	if wr.unmatched > 0 {
		w("  %d other \"schedule applied\" records (events from before the stop replayed)\n", wr.unmatched)
	}
	for _, p := range wr.problems(o) {
		w("  PROBLEM: %s\n", p)
	}
}

func yesNo(ok bool) string {
	if ok {
		return "yes"
	}
	return "NO"
}

// ms formats nanoseconds as milliseconds.
func ms(ns int64) string { return fmtMS(float64(ns)/1e6) + " ms" }

func sec(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

func verdict(ok bool, v float64) string {
	switch {
	case math.IsNaN(v):
		return "n/a"
	case ok:
		return "met"
	default:
		return "NOT met"
	}
}
