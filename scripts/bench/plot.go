package main

import (
	"fmt"
	"image/color"
	"math"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// plotMinMS is where the log axis starts; smaller (or negative) latencies are
// drawn there.
const plotMinMS = 0.1

// plotCDF draws the cumulative distributions of edit-to-armed latency (each
// mode) and of the floor on a log time axis.
func plotCDF(path string, rep report) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("cronswap edit-to-armed latency, N=%d schedules (%s, %d CPUs, shared)",
		rep.opts.n, rep.finished.Format("2006-01-02"), rep.env.cpus)
	p.X.Label.Text = fmt.Sprintf("write acknowledged → armed (ms, log scale; values below %g ms drawn at %g)", plotMinMS, plotMinMS)
	p.Y.Label.Text = "fraction of edits"
	// Head room above 1 for the legend, which would otherwise cover the
	// change stream curves.
	p.Y.Min, p.Y.Max = 0, 1.3
	p.Y.Tick.Marker = plot.ConstantTicks([]plot.Tick{{Value: 0, Label: "0"}, {Value: .25, Label: "0.25"},
		{Value: .5, Label: "0.5"}, {Value: .75, Label: "0.75"}, {Value: .9, Label: "0.9"}, {Value: .99, Label: ""},
		{Value: 1, Label: "1"}})
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.Legend.Left = true

	type line struct {
		s      series
		label  string
		color  color.Color
		dashed bool
	}
	var lines []line
	for _, r := range rep.results {
		armed, _, fl, _ := r.latencies()
		switch r.mode {
		case modeChangeStream:
			lines = append(lines,
				line{armed, "change stream: daemon", color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, false},
				line{fl, "change stream: floor (bare driver Watch)", color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, true})
		case modePoll:
			lines = append(lines, line{armed, fmt.Sprintf("poll every %s: daemon", rep.opts.pollInterval),
				color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}, false})
		}
	}
	top := 1.0
	for _, l := range lines {
		if len(l.s.ms) == 0 {
			continue
		}
		top = max(top, l.s.pct(100))
		pts := make(plotter.XYs, len(l.s.ms))
		for i, v := range l.s.ms {
			pts[i].X = math.Log10(max(v, plotMinMS))
			pts[i].Y = float64(i+1) / float64(len(l.s.ms))
		}
		ln, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		ln.StepStyle = plotter.PostStep
		ln.Color = l.color
		ln.Width = vg.Points(1.6)
		if l.dashed {
			ln.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		}
		p.Add(ln)
		p.Legend.Add(fmt.Sprintf("%s (n=%d, p50 %s ms, p99 %s ms)", l.label, len(l.s.ms), fmtMS(l.s.pct(50)), fmtMS(l.s.pct(99))), ln)
	}
	// The x axis is linear in log10(ms) with ticks labelled in ms: gonum's
	// LogScale places a centred axis label by the arithmetic mean of the
	// range, which pads the plot on the right.
	p.X.Min, p.X.Max = math.Log10(plotMinMS), math.Ceil(math.Log10(top))
	p.X.Tick.Marker = logMSTicks(p.X.Min, p.X.Max)
	return p.Save(10*vg.Inch, 5.5*vg.Inch, path)
}

// logMSTicks labels decades from lo to hi (log10 of ms) and marks 2…9 of each
// decade as minor ticks.
func logMSTicks(lo, hi float64) plot.ConstantTicks {
	var ticks []plot.Tick
	for e := math.Floor(lo); e <= hi; e++ {
		ticks = append(ticks, plot.Tick{Value: e, Label: strconv.FormatFloat(math.Pow(10, e), 'f', -1, 64)})
		for m := 2.0; m < 10 && e < hi; m++ {
			ticks = append(ticks, plot.Tick{Value: e + math.Log10(m)})
		}
	}
	return plot.ConstantTicks(ticks)
}
