package main

import (
	"bytes"
	"context"
	"fmt"
	"math"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The claim metrics of the batched fire path (internal/metrics). A daemon
// that does not export them yet is skipped quietly.
const (
	metricClaimBatchSize    = "cronswap_claim_batch_size"
	metricClaimBatchSeconds = "cronswap_claim_batch_seconds"
	metricOwnerTakeovers    = "cronswap_owner_takeovers_total"
)

// claimMetrics is one scrape of a daemon's claim metrics (or the
// difference of two).
type claimMetrics struct {
	size, seconds histogram
	takeovers     float64
	hasTakeovers  bool
}

// present reports whether the daemon exports any of the claim metrics.
func (m claimMetrics) present() bool { return m.size.present || m.seconds.present || m.hasTakeovers }

// scrapeClaims reads the claim metrics from d's /metrics.
func scrapeClaims(ctx context.Context, d *daemon) (claimMetrics, error) {
	body, err := d.get(ctx, "/metrics")
	if err != nil {
		return claimMetrics{}, err
	}
	return parseClaims(body)
}

// parseClaims reads the claim metrics from a Prometheus text exposition.
func parseClaims(body []byte) (claimMetrics, error) {
	tp := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := tp.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return claimMetrics{}, err
	}
	m := claimMetrics{size: histOf(fams[metricClaimBatchSize]), seconds: histOf(fams[metricClaimBatchSeconds])}
	if f := fams[metricOwnerTakeovers]; f != nil && f.GetType() == dto.MetricType_COUNTER {
		m.hasTakeovers = true
		for _, c := range f.GetMetric() {
			m.takeovers += c.GetCounter().GetValue()
		}
	}
	return m, nil
}

// minus is m − o (the observations between two scrapes).
func (m claimMetrics) minus(o claimMetrics) claimMetrics {
	return claimMetrics{size: m.size.minus(o.size), seconds: m.seconds.minus(o.seconds),
		takeovers: m.takeovers - o.takeovers, hasTakeovers: m.hasTakeovers}
}

// text is one line of what the claims did, e.g. "claim batches 12, fires
// per batch mean 833 / p50 ≈ 900 / p99 ≈ 1000; batch latency p50 ≈ 40 ms /
// p99 ≈ 120 ms; owner takeovers 0".
func (m claimMetrics) text() string {
	s := ""
	if h := m.size; h.present {
		s += fmt.Sprintf("claim batches %d", h.count)
		if h.count > 0 {
			s += fmt.Sprintf(", fires per batch mean %.1f / p50 ≈ %s / p99 ≈ %s", h.sum/float64(h.count), fmtNum(h.quantile(.5)), fmtNum(h.quantile(.99)))
		}
	}
	if h := m.seconds; h.present && h.count > 0 {
		if s != "" {
			s += "; "
		}
		s += fmt.Sprintf("batch latency mean %s / p50 ≈ %s / p99 ≈ %s", fmtLate(h.sum/float64(h.count)*1000),
			fmtBucketMS(h.quantile(.5)), fmtBucketMS(h.quantile(.99)))
	}
	if m.hasTakeovers {
		if s != "" {
			s += "; "
		}
		s += fmt.Sprintf("owner takeovers %.0f", m.takeovers)
	}
	return s
}

// json is the machine-readable form (nil fields: not exported).
func (m claimMetrics) json() map[string]any {
	out := map[string]any{}
	r := func(v float64, d float64) any {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil
		}
		return math.Round(v*d) / d
	}
	if h := m.size; h.present {
		out["batches"] = h.count
		if h.count > 0 {
			out["size_mean"] = r(h.sum/float64(h.count), 10)
			out["size_p50"] = r(h.quantile(.5), 10)
			out["size_p99"] = r(h.quantile(.99), 10)
		}
	}
	if h := m.seconds; h.present && h.count > 0 {
		out["seconds_mean_ms"] = r(h.sum/float64(h.count)*1000, 10)
		out["seconds_p50_ms"] = r(h.quantile(.5)*1000, 10)
		out["seconds_p99_ms"] = r(h.quantile(.99)*1000, 10)
	}
	if m.hasTakeovers {
		out["owner_takeovers"] = m.takeovers
	}
	return out
}

// fmtNum formats a histogram estimate ("> last bucket" above it).
func fmtNum(v float64) string {
	switch {
	case math.IsNaN(v):
		return "n/a"
	case math.IsInf(v, 1):
		return "> last bucket"
	}
	return fmt.Sprintf("%.0f", v)
}

// fmtBucketMS formats a histogram estimate in seconds as a lateness.
func fmtBucketMS(v float64) string {
	if math.IsInf(v, 1) {
		return "> last bucket"
	}
	return fmtLate(v * 1000)
}
