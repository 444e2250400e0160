package metrics

import (
	"fmt"
	"io"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Flatten parses the Prometheus text format (what Handler serves) and
// returns every sample as "name,label=value,…" → value, labels in the order
// the exposition gives them; a histogram as "name…,count" and "name…,sum".
// Tests and the benchmark read /metrics through it; a body that does not
// parse is an error.
func Flatten(r io.Reader) (map[string]float64, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse Prometheus text: %w", err)
	}
	out := map[string]float64{}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			key := name
			for _, l := range m.GetLabel() {
				key += "," + l.GetName() + "=" + l.GetValue()
			}
			switch {
			case m.Counter != nil:
				out[key] = m.Counter.GetValue()
			case m.Gauge != nil:
				out[key] = m.Gauge.GetValue()
			case m.Histogram != nil:
				out[key+",count"] = float64(m.Histogram.GetSampleCount())
				out[key+",sum"] = m.Histogram.GetSampleSum()
			}
		}
	}
	return out, nil
}
