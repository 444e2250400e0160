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

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// latPoint is what the lateness plot needs of one (N, replicas) point: the
// p50 and p99 start lateness of each burst, in milliseconds (NaN: none ran).
type latPoint struct {
	n, replicas int
	p50, p99    []float64
}

// latSeries is one labelled set of points of the plot ("before", "after").
type latSeries struct {
	label  string
	points []latPoint
	// dashed draws the series' lines dashed and its points as triangles
	// (the "before" figures); otherwise solid lines and circles.
	dashed bool
}

// plotTargets are the fire path's p99 start-lateness targets per N (ms),
// drawn as crosses.
var plotTargets = map[int]float64{1000: 250, 10000: 1000, 100000: 10000}

// plotFireLateness draws the p99 start lateness against N: one colour per
// replica count, one line style per series (solid, or dashed when the
// series says so), each burst as a point and a line through the lower median of
// the bursts at each N. The series are drawn side by side (shifted a little
// along N) so that their points at the same N do not cover each other. Both
// axes are log scale; lateness is in seconds (below 1 ms drawn at 1 ms) and
// covers the fires that ran by the burst's deadline, so a point with many
// missed fires is drawn optimistic.
func plotFireLateness(path, title string, series []latSeries) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "N jobs due in the same second (log scale)"
	p.Y.Label.Text = "p99 request at the sink − slot (s, log; fires run by the burst deadline)"
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.Legend.Left = true
	colors := []color.Color{
		color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
		color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
		color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
		color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	}
	replicaSet := map[int]bool{}
	for _, s := range series {
		for _, pt := range s.points {
			replicaSet[pt.replicas] = true
		}
	}
	replicas := slices.Sorted(maps.Keys(replicaSet))
	entries := 0 // legend entries, for the head room
	lo, hi := math.Inf(1), math.Inf(-1)
	xlo, xhi := math.Inf(1), math.Inf(-1)
	const shift = 0.03 // decades between the series at the same N
	for si, s := range series {
		dx := (float64(si) - float64(len(series)-1)/2) * shift
		byR := map[int][]latPoint{}
		for _, pt := range s.points {
			byR[pt.replicas] = append(byR[pt.replicas], pt)
		}
		for ci, r := range replicas {
			pts := byR[r]
			if len(pts) == 0 {
				continue
			}
			slices.SortFunc(pts, func(a, b latPoint) int { return a.n - b.n })
			var line, scatter plotter.XYs
			for _, pt := range pts {
				x := math.Log10(float64(pt.n))
				var vals []float64
				for _, v := range pt.p99 {
					if math.IsNaN(v) {
						continue
					}
					y := math.Log10(max(v, 1) / 1000)
					vals = append(vals, y)
					scatter = append(scatter, plotter.XY{X: x + dx, Y: y})
					lo, hi = min(lo, y), max(hi, y)
				}
				if len(vals) > 0 {
					slices.Sort(vals)
					line = append(line, plotter.XY{X: x + dx, Y: vals[(len(vals)-1)/2]})
				}
				xlo, xhi = min(xlo, x), max(xhi, x)
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
			if s.dashed {
				ln.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
			}
			sc, err := plotter.NewScatter(scatter)
			if err != nil {
				return err
			}
			sc.Color = c
			sc.Shape = draw.CircleGlyph{}
			if s.dashed {
				sc.Shape = draw.TriangleGlyph{}
			}
			sc.Radius = vg.Points(2.5)
			p.Add(ln, sc)
			name := fmt.Sprintf("%d replica(s)", r)
			if s.label != "" {
				name = s.label + ", " + name
			}
			p.Legend.Add(name+" (points: bursts; line: their lower median)", ln, sc)
			entries++
		}
	}
	if math.IsInf(lo, 1) {
		lo, hi = -1, 2
		xlo, xhi = 2, 4
	}
	var targets plotter.XYs
	for n, ms := range plotTargets {
		x := math.Log10(float64(n))
		if x >= xlo-1e-9 && x <= xhi+1e-9 {
			y := math.Log10(ms / 1000)
			targets = append(targets, plotter.XY{X: x, Y: y})
			lo, hi = min(lo, y), max(hi, y)
		}
	}
	if len(targets) > 0 {
		sc, err := plotter.NewScatter(targets)
		if err != nil {
			return err
		}
		sc.Color = color.Gray{Y: 0x60}
		sc.Shape = draw.CrossGlyph{}
		sc.Radius = vg.Points(5)
		p.Add(sc)
		p.Legend.Add("target p99", sc)
		entries++
	}
	p.Y.Min, p.Y.Max = math.Floor(lo), math.Ceil(hi)+0.25*float64(entries) // head room for the legend
	p.Y.Tick.Marker = logMSTicks(p.Y.Min, math.Ceil(hi))
	p.X.Min, p.X.Max = math.Floor(xlo)-0.1, math.Ceil(xhi)+0.1
	if p.X.Max-xhi < 0.1 {
		p.X.Max = xhi + 0.2
	}
	p.X.Tick.Marker = logMSTicks(math.Floor(xlo), math.Ceil(xhi))
	return p.Save(10*vg.Inch, 5.5*vg.Inch, path)
}

// latPoints returns the plot's points of a run.
func (rep fireReport) latPoints() []latPoint {
	var out []latPoint
	for _, pt := range rep.points {
		if len(pt.bursts) == 0 || pt.hold != 0 {
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
func plotTitle(day string, cpus int, labels ...string) string {
	t := fmt.Sprintf("cronswap: p99 start lateness of N fires due in the same second (%s, %d CPUs, shared)", day, cpus)
	var ls []string
	for _, l := range labels {
		if l != "" {
			ls = append(ls, l)
		}
	}
	if len(ls) > 0 {
		t += " [" + strings.Join(ls, " vs ") + "]"
	}
	return t
}

// resultRun is one run of a results file: its label (the "[label]" of its
// header line, "" without) and the points of its bursts without an action
// hold, in the order they first appear.
type resultRun struct {
	label  string
	day    string // of its first slot
	points []latPoint
}

// fireRunHeader starts each run in bench-fire-results.txt.
const fireRunHeader = "=== cronswap fire benchmark"

// parseFireRuns reads the runs of a results file.
func parseFireRuns(text string) ([]resultRun, error) {
	var runs []resultRun
	for _, chunk := range strings.Split(text, fireRunHeader)[1:] {
		head, _, _ := strings.Cut(chunk, "\n")
		run := resultRun{}
		if i := strings.LastIndex(head, " ["); i >= 0 && strings.HasSuffix(head, "]") {
			run.label = head[i+2 : len(head)-1]
		}
		type key struct{ n, r int }
		byKey := map[key]*latPoint{}
		var order []key
		for _, line := range strings.Split(chunk, "\n") {
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
				return nil, fmt.Errorf("fire-burst line: %w", err)
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
			if run.day == "" && len(b.Slot) >= 10 {
				run.day = b.Slot[:10]
			}
		}
		for _, k := range order {
			run.points = append(run.points, *byKey[k])
		}
		runs = append(runs, run)
	}
	return runs, nil
}

// latestPoints merges the runs labelled label: for each (N, replicas) the
// bursts of the latest such run that has that point (a point re-run
// replaces the earlier one; points of different runs add up). The day is
// that of the latest run used.
func latestPoints(runs []resultRun, label string) ([]latPoint, string) {
	type key struct{ n, r int }
	seen := map[key]bool{}
	var out []latPoint
	day := ""
	for i := len(runs) - 1; i >= 0; i-- {
		if runs[i].label != label {
			continue
		}
		for _, pt := range runs[i].points {
			k := key{pt.n, pt.replicas}
			if seen[k] {
				continue
			}
			seen[k] = true
			out = append(out, pt)
			if day == "" {
				day = runs[i].day
			}
		}
	}
	slices.SortStableFunc(out, func(a, b latPoint) int {
		if a.replicas != b.replicas {
			return a.replicas - b.replicas
		}
		return a.n - b.n
	})
	return out, day
}

// latPointsFromResults returns the points of the last run in a results
// file that has bursts without an action hold, and the day of its first
// slot.
func latPointsFromResults(text string) ([]latPoint, string, error) {
	runs, err := parseFireRuns(text)
	if err != nil {
		return nil, "", err
	}
	for i := len(runs) - 1; i >= 0; i-- {
		if len(runs[i].points) > 0 {
			return runs[i].points, runs[i].day, nil
		}
	}
	return nil, "", errors.New("no fire-burst lines without an action hold")
}

// plotSeriesFromResults builds the plot's series from a results file: the
// runs labelled label (merged by latestPoints; label "" = the last run with
// points), then, unless compare is "" or equal to label, those labelled
// compare, drawn dashed and first (to the left at each N).
func plotSeriesFromResults(text, label, compare string) ([]latSeries, string, error) {
	runs, err := parseFireRuns(text)
	if err != nil {
		return nil, "", err
	}
	var (
		main []latPoint
		day  string
	)
	if label == "" {
		if main, day, err = latPointsFromResults(text); err != nil {
			return nil, "", err
		}
	} else if main, day = latestPoints(runs, label); len(main) == 0 {
		return nil, "", fmt.Errorf("no run labelled %q with fire-burst lines without an action hold", label)
	}
	var series []latSeries
	if compare != "" && compare != label {
		if cmp, _ := latestPoints(runs, compare); len(cmp) > 0 {
			series = append(series, latSeries{label: compare, points: cmp, dashed: true})
		}
	}
	return append(series, latSeries{label: label, points: main}), day, nil
}
