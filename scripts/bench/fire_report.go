package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"image/color"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
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
	w("run: -points %s -bursts %d -every %s -action-ms %d -workers %d -idle %s -burst-timeout %s\n",
		strings.Join(pts, ","), o.bursts, o.every, o.hold.Milliseconds(), o.workers, o.idle, o.burstTimeout)
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
	w("\n--- N=%d jobs due in the same second, %d replica(s): %q, http action to the sink (hold %s), workers %s\n",
		p.n, p.replicas, p.expr, p.hold, workers)
	w("    started %s UTC, load average %s before, %s after; loaded in %s, all replicas ready with N armed %s after the first start\n",
		p.started.Format("15:04:05"), p.loadBefore, p.loadAfter, p.loadTime.Round(time.Millisecond), p.armTime.Round(time.Millisecond))
	if p.err != nil {
		w("    ERROR: %v\n", p.err)
	}
	if len(p.bursts) > 0 {
		w("    %-5s %-8s %8s %8s %5s %14s %10s %10s %10s %9s %8s  %s\n",
			"burst", "slot", "expected", "ran", "dup", "missed(never)", "late p50", "p99", "max", "cmd/fire", "fires/w", "load average at window end")
	}
	for i, bu := range p.bursts {
		total, _ := perFire(bu.cmds, bu.windowFires)
		w("    %-5d %-8s %8d %8d %5d %14s %10s %10s %10s %9.2f %8d  %s\n",
			i+1, bu.slot.Format("15:04:05"), bu.expected, bu.ran, bu.duplicates,
			fmt.Sprintf("%d (%d)", bu.missed, bu.never),
			fmtLate(bu.lateness.pct(50)), fmtLate(bu.lateness.pct(99)), fmtLate(bu.lateness.pct(100)), total, bu.windowFires, bu.load)
	}
	for i, bu := range p.bursts {
		_, by := perFire(bu.cmds, bu.windowFires)
		parts := make([]string, len(by))
		for j, r := range by {
			parts[j] = fmt.Sprintf("%s %.2f", r.name, r.rate)
		}
		w("    burst %d: window %s (%d commands, %d fires); commands per fire: %s\n", i+1,
			bu.windowTo.Sub(bu.windowFrom).Round(100*time.Millisecond), sumCounts(bu.cmds), bu.windowFires, strings.Join(parts, ", "))
		var inst []string
		for _, id := range slices.Sorted(maps.Keys(bu.byInstance)) {
			inst = append(inst, fmt.Sprintf("%s %d", id, bu.byInstance[id]))
		}
		w("    burst %d: first runs by replica: %s; start lateness p90 %s; duplicated jobs %d\n", i+1,
			strings.Join(inst, ", "), fmtLate(bu.lateness.pct(90)), bu.dupJobs)
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
	return map[string]any{
		"idle_commands_per_min_per_replica": idle,
		"n":                                 p.n, "replicas": p.replicas, "burst": i + 1, "slot": bu.slot.Format(time.RFC3339),
		"expr": p.expr, "action_ms": p.hold.Milliseconds(), "workers": p.workers,
		"expected": bu.expected, "ran": bu.ran, "duplicates": bu.duplicates, "missed": bu.missed, "never": bu.never,
		"late_p50_ms": ms(bu.lateness.pct(50)), "late_p90_ms": ms(bu.lateness.pct(90)),
		"late_p99_ms": ms(bu.lateness.pct(99)), "late_max_ms": ms(bu.lateness.pct(100)),
		"window_s": math.Round(bu.windowTo.Sub(bu.windowFrom).Seconds()*10) / 10, "window_fires": bu.windowFires,
		"commands": bu.cmds, "commands_per_fire": math.Round(total*100) / 100, "by_replica": bu.byInstance,
		"load": bu.load, "unexpected": p.unexpected, "earlier": p.earlier,
	}
}

// plotFireLateness draws start lateness p50 and p99 against N, one colour
// per replica count: each burst as a point, a line through the median of
// the bursts at each N. Both axes are log scale; lateness is in seconds
// (below 1 ms drawn at 1 ms) and covers the fires that ran by the burst's
// deadline, so a point with many missed fires is drawn optimistic.
func plotFireLateness(path, title string, points []latPoint) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "N jobs due in the same second (log scale)"
	p.Y.Label.Text = "request at the sink − slot (s, log; fires run by the burst deadline)"
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.Legend.Left = true
	colors := []color.Color{
		color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
		color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
		color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
		color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	}
	byR := map[int][]latPoint{}
	for _, pt := range points {
		byR[pt.replicas] = append(byR[pt.replicas], pt)
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	xlo, xhi := math.Inf(1), math.Inf(-1)
	for ci, r := range slices.Sorted(maps.Keys(byR)) {
		pts := byR[r]
		slices.SortFunc(pts, func(a, b latPoint) int { return a.n - b.n })
		for _, q := range []struct {
			pct    float64
			dashed bool
		}{{50, false}, {99, true}} {
			var line, scatter plotter.XYs
			for _, pt := range pts {
				var vals []float64
				for _, v := range pt.lateMS(q.pct) {
					if math.IsNaN(v) {
						continue
					}
					y := math.Log10(max(v, 1) / 1000)
					vals = append(vals, y)
					scatter = append(scatter, plotter.XY{X: math.Log10(float64(pt.n)), Y: y})
					lo, hi = min(lo, y), max(hi, y)
				}
				if len(vals) > 0 {
					slices.Sort(vals)
					line = append(line, plotter.XY{X: math.Log10(float64(pt.n)), Y: vals[(len(vals)-1)/2]})
				}
				xlo, xhi = min(xlo, math.Log10(float64(pt.n))), max(xhi, math.Log10(float64(pt.n)))
			}
			if len(line) == 0 {
				continue
			}
			c := colors[ci%len(colors)]
			ln, err := plotter.NewLine(line)
			if err != nil {
				return err
			}
			ln.Color, ln.Width = c, vg.Points(1.6)
			if q.dashed {
				ln.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
			}
			sc, err := plotter.NewScatter(scatter)
			if err != nil {
				return err
			}
			sc.Color = c
			sc.Shape = draw.CircleGlyph{}
			if q.dashed {
				sc.Shape = draw.TriangleGlyph{}
			}
			sc.Radius = vg.Points(2.5)
			p.Add(ln, sc)
			p.Legend.Add(fmt.Sprintf("%d replica(s), p%g (points: bursts; line: their lower median)", r, q.pct), ln, sc)
		}
	}
	if math.IsInf(lo, 1) {
		lo, hi = -1, 2
		xlo, xhi = 2, 4
	}
	p.Y.Min, p.Y.Max = math.Floor(lo), math.Ceil(hi)+0.6 // head room for the legend
	p.Y.Tick.Marker = logMSTicks(p.Y.Min, math.Ceil(hi))
	p.X.Min, p.X.Max = math.Floor(xlo)-0.1, math.Ceil(xhi)+0.1
	if p.X.Max-xhi < 0.1 {
		p.X.Max = xhi + 0.2
	}
	p.X.Tick.Marker = logMSTicks(math.Floor(xlo), math.Ceil(xhi))
	return p.Save(10*vg.Inch, 5.5*vg.Inch, path)
}

// latPoint is what the lateness plot needs of one (N, replicas) point: the
// p50 and p99 start lateness of each burst, in milliseconds (NaN: none ran).
type latPoint struct {
	n, replicas int
	p50, p99    []float64
}

func (p latPoint) lateMS(pct float64) []float64 {
	if pct == 50 {
		return p.p50
	}
	return p.p99
}

// latPoints returns the plot's points of a run.
func (rep fireReport) latPoints() []latPoint {
	var out []latPoint
	for _, pt := range rep.points {
		if len(pt.bursts) == 0 {
			continue
		}
		lp := latPoint{n: pt.n, replicas: pt.replicas}
		for _, bu := range pt.bursts {
			lp.p50 = append(lp.p50, bu.lateness.pct(50))
			lp.p99 = append(lp.p99, bu.lateness.pct(99))
		}
		out = append(out, lp)
	}
	return out
}

// plotTitle is the lateness plot's title.
func plotTitle(day string, cpus int, label string) string {
	t := fmt.Sprintf("cronswap: start lateness of N fires due in the same second (%s, %d CPUs, shared)", day, cpus)
	if label != "" {
		t += " [" + label + "]"
	}
	return t
}

// latPointsFromResults reads the "fire-burst {json}" lines of the last run
// in a results file (runs start with "=== cronswap fire benchmark") that
// has bursts without an action hold, and returns its points and the day of
// its first slot.
func latPointsFromResults(text string) ([]latPoint, string, error) {
	runs := strings.Split(text, "=== cronswap fire benchmark")
	for i := len(runs) - 1; i >= 0; i-- {
		type key struct{ n, r int }
		byKey := map[key]*latPoint{}
		var order []key
		day := ""
		for _, line := range strings.Split(runs[i], "\n") {
			js, ok := strings.CutPrefix(line, "fire-burst ")
			if !ok {
				continue
			}
			var b struct {
				N        int      `json:"n"`
				Replicas int      `json:"replicas"`
				ActionMS int64    `json:"action_ms"`
				Slot     string   `json:"slot"`
				P50      *float64 `json:"late_p50_ms"`
				P99      *float64 `json:"late_p99_ms"`
			}
			if err := json.Unmarshal([]byte(js), &b); err != nil {
				return nil, "", fmt.Errorf("fire-burst line: %w", err)
			}
			if b.ActionMS != 0 {
				continue
			}
			k := key{b.N, b.Replicas}
			if byKey[k] == nil {
				byKey[k] = &latPoint{n: b.N, replicas: b.Replicas}
				order = append(order, k)
			}
			v := func(p *float64) float64 {
				if p == nil {
					return math.NaN()
				}
				return *p
			}
			byKey[k].p50 = append(byKey[k].p50, v(b.P50))
			byKey[k].p99 = append(byKey[k].p99, v(b.P99))
			if day == "" && len(b.Slot) >= 10 {
				day = b.Slot[:10]
			}
		}
		if len(order) > 0 {
			out := make([]latPoint, len(order))
			for j, k := range order {
				out[j] = *byKey[k]
			}
			return out, day, nil
		}
	}
	return nil, "", errors.New("no fire-burst lines without an action hold")
}
