package main

import (
	"bytes"
	"context"
	"math"
	"sort"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Histograms the bench reads from the daemon's /metrics.
const (
	metricEventApply  = "cronswap_event_apply_seconds"
	metricEditToArmed = "cronswap_edit_to_armed_seconds"
)

// histogram is a Prometheus histogram: cumulative counts per upper bound.
type histogram struct {
	present bool // the daemon exports it
	count   uint64
	sum     float64
	bounds  []float64 // ascending, +Inf excluded
	cum     []uint64
}

// metricsDelta holds the histograms' observations made between two scrapes.
type metricsDelta struct {
	eventApply, editToArmed histogram
}

func scrapeMetrics(ctx context.Context, d *daemon) (metricsDelta, error) {
	body, err := d.get(ctx, "/metrics")
	if err != nil {
		return metricsDelta{}, err
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return metricsDelta{}, err
	}
	return metricsDelta{eventApply: histOf(fams[metricEventApply]), editToArmed: histOf(fams[metricEditToArmed])}, nil
}

func histOf(f *dto.MetricFamily) histogram {
	if f == nil || f.GetType() != dto.MetricType_HISTOGRAM || len(f.GetMetric()) == 0 {
		return histogram{}
	}
	h := f.GetMetric()[0].GetHistogram()
	out := histogram{present: true, count: h.GetSampleCount(), sum: h.GetSampleSum()}
	for _, b := range h.GetBucket() {
		if math.IsInf(b.GetUpperBound(), 1) {
			continue
		}
		out.bounds = append(out.bounds, b.GetUpperBound())
		out.cum = append(out.cum, b.GetCumulativeCount())
	}
	return out
}

func (m metricsDelta) minus(o metricsDelta) metricsDelta {
	return metricsDelta{eventApply: m.eventApply.minus(o.eventApply), editToArmed: m.editToArmed.minus(o.editToArmed)}
}

func (h histogram) minus(o histogram) histogram {
	if !h.present || !o.present || len(h.cum) != len(o.cum) {
		return h
	}
	out := histogram{present: true, count: h.count - o.count, sum: h.sum - o.sum, bounds: h.bounds, cum: make([]uint64, len(h.cum))}
	for i := range h.cum {
		out.cum[i] = h.cum[i] - o.cum[i]
	}
	return out
}

// quantile estimates the q-quantile like PromQL's histogram_quantile: linear
// interpolation inside the bucket that holds it. It returns NaN without
// observations and +Inf when the quantile lies above the last bound.
func (h histogram) quantile(q float64) float64 {
	if h.count == 0 {
		return math.NaN()
	}
	rank := q * float64(h.count)
	i := sort.Search(len(h.cum), func(i int) bool { return float64(h.cum[i]) >= rank })
	if i == len(h.cum) {
		return math.Inf(1)
	}
	lo, below := 0.0, uint64(0)
	if i > 0 {
		lo, below = h.bounds[i-1], h.cum[i-1]
	}
	in := h.cum[i] - below
	if in == 0 {
		return h.bounds[i]
	}
	return lo + (h.bounds[i]-lo)*(rank-float64(below))/float64(in)
}

// shareAtMost returns the exact fraction of observations ≤ bound when bound is
// one of the bucket bounds, else NaN.
func (h histogram) shareAtMost(bound float64) float64 {
	if h.count == 0 {
		return math.NaN()
	}
	for i, b := range h.bounds {
		if b == bound {
			return float64(h.cum[i]) / float64(h.count)
		}
	}
	return math.NaN()
}
