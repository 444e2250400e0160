package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
)

// fireReport is one run of the fire benchmark.
type fireReport struct {
	opts              fireSettings
	env               machine
	started, finished time.Time
	points            []*firePoint
}

// text is the run's header and every point's table.
func (rep fireReport) text() string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	o := rep.opts
	w("\n=== cronswap fire benchmark, %s → %s UTC", rep.started.Format("2006-01-02 15:04"), rep.finished.Format("15:04"))
	if o.label != "" {
		w(" [%s]", o.label)
	}
	w("\nmachine: %d CPUs (%s), %s, linux %s, %s, %s; load average %s before, %s after (shared machine: figures are noisy)\n",
		rep.env.cpus, rep.env.cpuModel, rep.env.memTotal, rep.env.kernel, rep.env.goVersion, rep.env.java,
		rep.env.loadBefore, rep.env.loadAfter)
	pts := make([]string, len(o.points))
	for i, pt := range o.points {
		pts[i] = fmt.Sprintf("%dx%d", pt[0], pt[1])
	}
	bt := "auto"
	if o.burstTimeout > 0 {
		bt = o.burstTimeout.String()
	}
	w("run: -points %s -bursts %d -every %s -action-ms %d -workers %d -idle %s -burst-timeout %s",
		strings.Join(pts, ","), o.bursts, o.every, o.hold.Milliseconds(), o.workers, o.idle, bt)
	if o.preset != "" {
		w(" (-preset %s)", o.preset)
	}
	if len(o.tracing) > 0 {
		w(" -tracing %s", strings.Join(o.tracing, ","))
		if len(o.tracingEnv) > 0 {
			w(" -tracing-env '%s'", strings.Join(o.tracingEnv, " "))
		}
	}
	if len(o.serverJVM) > 0 {
		w(" -server-jvm-args '%s'", strings.Join(o.serverJVM, " "))
	}
	if len(o.serverArgs) > 0 {
		w(" -server-args '%s'", strings.Join(o.serverArgs, " "))
	}
	w("\n")
	for _, p := range rep.points {
		b.WriteString(p.text())
	}
	return b.String()
}

// fmtLate formats a lateness in milliseconds: ms below a second, else s.
func fmtLate(ms float64) string {
	switch {
	case math.IsNaN(ms):
		return "n/a"
	case math.Abs(ms) < 1000:
		return fmt.Sprintf("%.0f ms", ms)
	default:
		return fmt.Sprintf("%.2f s", ms/1000)
	}
}

// text is the point's table, its per-burst details and one machine-readable
// "fire-burst {json}" line per burst.
func (p *firePoint) text() string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	workers := "default"
	if p.workers > 0 {
		workers = fmt.Sprint(p.workers)
	}
	w("\n--- N=%d jobs due in the same second, %d replica(s): %q, http action to the sink (hold %s), workers %s%s\n",
		p.n, p.replicas, p.expr, p.hold, workers, tracingText(p.tracing))
	w("    started %s UTC, load average %s before, %s after; loaded in %s, all replicas ready with N armed %s after the first start; burst timeout %s\n",
		p.started.Format("15:04:05"), p.loadBefore, p.loadAfter, p.loadTime.Round(time.Millisecond), p.armTime.Round(time.Millisecond), p.burstTimeout)
	if p.err != nil {
		w("    ERROR: %v\n", p.err)
	}
	if len(p.bursts) > 0 {
		w("    %-5s %-8s %8s %8s %5s %14s %10s %10s %10s %9s %8s %12s %10s  %s\n",
			"burst", "slot", "expected", "ran", "dup", "missed(never)", "late p50", "p99", "max", "cmd/fire", "fires/w", "CPU µs/fire", "spans/fire", "load average at window end")
	}
	for i, bu := range p.bursts {
		total, _ := perFire(bu.cmds, bu.windowFires)
		spans := "-"
		if bu.spans != nil {
			spans = fmt.Sprintf("%.2f", bu.spansPerFire())
		}
		w("    %-5d %-8s %8d %8d %5d %14s %10s %10s %10s %9.2f %8d %12.0f %10s  %s\n",
			i+1, bu.slot.Format("15:04:05"), bu.expected, bu.ran, bu.duplicates,
			fmt.Sprintf("%d (%d)", bu.missed, bu.never),
			fmtLate(bu.lateness.pct(50)), fmtLate(bu.lateness.pct(99)), fmtLate(bu.lateness.pct(100)), total, bu.windowFires,
			bu.cpuPerFire(), spans, bu.load)
	}
	for i, bu := range p.bursts {
		_, by := perFire(bu.cmds, bu.windowFires)
		parts := make([]string, len(by))
		for j, r := range by {
			parts[j] = fmt.Sprintf("%s %.2f", r.name, r.rate)
		}
		w("    burst %d: window %s (%d commands, %d fires); commands per fire: %s; bench process (sink, wire proxies, span receiver) CPU %s\n", i+1,
			bu.windowTo.Sub(bu.windowFrom).Round(100*time.Millisecond), sumCounts(bu.cmds), bu.windowFires, strings.Join(parts, ", "),
			bu.benchCPU.Round(10*time.Millisecond))
		w("    burst %d: daemons' CPU (user + system, all replicas) %s", i+1, bu.daemonCPU.Round(10*time.Millisecond))
		if bu.spans != nil {
			w("; spans received %d: %s", sumCounts(bu.spans), countsText(bu.spans))
		}
		w("\n")
		w("    burst %d: first runs by replica: %s; start lateness p90 %s; duplicated jobs %d\n", i+1,
			countsText(bu.byInstance), fmtLate(bu.lateness.pct(90)), bu.dupJobs)
		for j, c := range bu.claims {
			if c.present() && j < len(p.instances) {
				w("    burst %d: %s: %s\n", i+1, p.instances[j], c.text())
			}
		}
		if bu.expected <= eachStartMax && len(bu.lateness.ms) > 0 {
			each := make([]string, len(bu.lateness.ms))
			for j, v := range bu.lateness.ms {
				each[j] = fmtLate(v)
			}
			w("    burst %d: each start's lateness, ascending (%d): %s\n", i+1, len(each), strings.Join(each, ", "))
		}
	}
	if p.sinkErrs > 0 {
		w("    WARNING: the sink's HTTP server logged %d errors (first: %s): the sink may have been a bottleneck\n", p.sinkErrs, p.sinkFirstErr)
	}
	switch {
	case p.idleWindow > 0 && p.idleFires > 0:
		w("    idle: n/a (%d action requests in the idle window: an earlier slot came due in it)\n", p.idleFires)
	case p.idleWindow > 0 && p.replicas > 0:
		total, parts := describeIdle(p.idleCmds, p.idleWindow)
		w("    idle (%s before the first burst, all N armed): %.1f commands per minute per replica (all replicas: %s)\n",
			p.idleWindow.Round(100*time.Millisecond), total/float64(p.replicas), strings.Join(parts, ", "))
	}
	if p.earlier > 0 {
		w("    WARNING: %d arrivals for a slot before the measured bursts: an unmeasured burst came due after the daemons were ready and its fires ran ahead of the measured ones\n", p.earlier)
	}
	if p.unexpected > 0 || p.badBodies > 0 {
		w("    unexpected arrivals (another job or slot): %d; bodies that did not decode: %d\n", p.unexpected, p.badBodies)
	}
	for _, pr := range p.problems {
		w("    daemon log: %s\n", pr)
	}
	for i, bu := range p.bursts {
		line, _ := json.Marshal(p.burstJSON(i, bu))
		w("fire-burst %s\n", line)
	}
	return b.String()
}

func sumCounts(m map[string]int) int {
	n := 0
	for _, k := range m {
		n += k
	}
	return n
}

// eachStartMax is the largest burst whose every start lateness is listed
// (the long-action case has 50).
const eachStartMax = 100

// burstJSON is the machine-readable record of one burst.
func (p *firePoint) burstJSON(i int, bu fireBurst) map[string]any {
	total, _ := perFire(bu.cmds, bu.windowFires)
	ms := func(v float64) any {
		if math.IsNaN(v) {
			return nil
		}
		return math.Round(v*10) / 10
	}
	var idle any
	if p.idleWindow > 0 && p.idleFires == 0 && p.replicas > 0 {
		total, _ := describeIdle(p.idleCmds, p.idleWindow)
		idle = math.Round(total/float64(p.replicas)*10) / 10
	}
	m := map[string]any{
		"idle_commands_per_min_per_replica": idle,
		"n":                                 p.n, "replicas": p.replicas, "burst": i + 1, "slot": bu.slot.Format(time.RFC3339),
		"expr": p.expr, "action_ms": p.hold.Milliseconds(), "workers": p.workers,
		"expected": bu.expected, "ran": bu.ran, "duplicates": bu.duplicates, "missed": bu.missed, "never": bu.never,
		"late_p50_ms": ms(bu.lateness.pct(50)), "late_p90_ms": ms(bu.lateness.pct(90)),
		"late_p99_ms": ms(bu.lateness.pct(99)), "late_max_ms": ms(bu.lateness.pct(100)),
		"window_s": math.Round(bu.windowTo.Sub(bu.windowFrom).Seconds()*10) / 10, "window_fires": bu.windowFires,
		"commands": bu.cmds, "commands_per_fire": math.Round(total*100) / 100, "by_replica": bu.byInstance,
		"load": bu.load, "unexpected": p.unexpected, "earlier": p.earlier,
		"burst_timeout_s": p.burstTimeout.Seconds(), "sink_errors": p.sinkErrs,
		"bench_cpu_s":  math.Round(bu.benchCPU.Seconds()*100) / 100,
		"daemon_cpu_s": math.Round(bu.daemonCPU.Seconds()*100) / 100, "daemon_cpu_us_per_fire": math.Round(bu.cpuPerFire()),
	}
	if p.tracing != "" {
		m["tracing"] = p.tracing
	}
	if bu.spans != nil {
		m["spans"] = bu.spans
		m["spans_per_fire"] = math.Round(bu.spansPerFire()*100) / 100
	}
	claims := map[string]any{}
	for j, c := range bu.claims {
		if c.present() && j < len(p.instances) {
			claims[p.instances[j]] = c.json()
		}
	}
	if len(claims) > 0 {
		m["claims"] = claims
	}
	if bu.expected <= eachStartMax && len(bu.lateness.ms) > 0 {
		each := make([]float64, len(bu.lateness.ms))
		for j, v := range bu.lateness.ms {
			each[j] = math.Round(v*10) / 10
		}
		m["late_each_ms"] = each
	}
	return m
}

// countsText is "name count, …" in name order (fires by instance id,
// spans by name).
func countsText(m map[string]int) string {
	var inst []string
	for _, id := range slices.Sorted(maps.Keys(m)) {
		inst = append(inst, fmt.Sprintf("%s %d", id, m[id]))
	}
	return strings.Join(inst, ", ")
}

// tracingText describes a point's tracing setting for its header.
func tracingText(setting string) string {
	switch setting {
	case tracingOff:
		return "; tracing off (no OTEL_* variable)"
	case tracingOn:
		return "; tracing on (OTLP/HTTP to the bench's span-counting receiver on loopback)"
	}
	return ""
}

// cpuPerFire is the daemons' CPU in the window per fire that arrived in
// it, in µs (0 without fires).
func (bu fireBurst) cpuPerFire() float64 {
	if bu.windowFires == 0 {
		return 0
	}
	return float64(bu.daemonCPU.Microseconds()) / float64(bu.windowFires)
}

// spansPerFire is the spans received in the window per fire that arrived
// in it (0 without fires).
func (bu fireBurst) spansPerFire() float64 {
	if bu.windowFires == 0 {
		return 0
	}
	return float64(sumCounts(bu.spans)) / float64(bu.windowFires)
}
