package metrics

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.yaml.in/yaml/v3"
)

// The shipped alert rules and dashboard query only metrics this package
// exports (and Prometheus's own up): a renamed metric fails here, not
// silently in production. Their PromQL syntax is checked by promtool
// (scripts/test.sh) and by a real Prometheus (e2e/prometheus_test.go).

// exported returns every sample name a daemon's /metrics can carry: each
// metric exercised once, histograms with their _bucket, _sum and _count.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	m := New()
	if err := m.RegisterGauges(Sources{Armed: func() int { return 0 }, Known: func() int { return 0 }, Rejected: func() int { return 0 },
		TokenSavedAt: time.Now, ClaimLatency: func() time.Duration { return 0 },
		WatchState: func() string { return WatchStreaming }, LiveMembers: func() int { return 1 },
		HeartbeatAge: func() time.Duration { return 0 }}); err != nil {
		t.Fatal(err)
	}
	m.Preset(Known{Categories: []string{"c"}, MissedReasons: []string{"r"}, NotRunReasons: []string{"r"}, SkipReasons: []string{"r"},
		NotificationSinks: []string{"s"}, FullReloadReasons: []string{"r"}})
	now := time.Now()
	m.CountChangeEvent("update")
	m.CountFullReload("startup")
	m.CountResyncDrift(1)
	m.CountReconnect()
	m.CountRun("j", "succeeded")
	m.CountLockAcquisition("acquired")
	m.CountOwnerTakeover()
	m.CountTrigger("succeeded")
	m.ObserveEditToArmed(now, now)
	m.ObserveEventApply(time.Millisecond)
	m.ObserveClaimBatch(1, time.Millisecond)
	families, err := m.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{"up": true}
	for _, f := range families {
		out[f.GetName()] = true
		if f.GetType() == dto.MetricType_HISTOGRAM {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				out[f.GetName()+s] = true
			}
		}
	}
	return out
}

func checkQueries(t *testing.T, what string, exprs []string) {
	t.Helper()
	if len(exprs) == 0 {
		t.Fatalf("%s: no query found", what)
	}
	names := exported(t)
	for _, e := range exprs {
		used := metricNames(e)
		if len(used) == 0 {
			t.Errorf("%s: query names no metric: %s", what, e)
		}
		for _, n := range used {
			if !names[n] {
				t.Errorf("%s: query names %s, which the daemon does not export: %s", what, n, e)
			}
		}
	}
}

func TestAlertRulesNameExportedMetrics(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "prometheus", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	var exprs []string
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, r.Expr)
		}
	}
	checkQueries(t, "alerts.yaml", exprs)
}

func TestDashboardQueriesNameExportedMetrics(t *testing.T) {
	exprs, err := DashboardQueries(filepath.Join("..", "..", "deploy", "grafana", "cronswap.json"))
	if err != nil {
		t.Fatal(err)
	}
	checkQueries(t, "cronswap.json", exprs)
}

// metricNames returns the metric names a PromQL expression selects: the
// identifiers that are neither functions nor keywords, outside label
// matchers, ranges, strings and the label lists of by, without, on,
// ignoring, group_left and group_right.
func metricNames(expr string) []string {
	var out []string
	labelLists := []string{"by", "without", "on", "ignoring", "group_left", "group_right"}
	operators := []string{"and", "or", "unless", "bool", "offset", "atan2"}
	isIdent := func(c byte, first bool) bool {
		return c == '_' || c == ':' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (!first && c >= '0' && c <= '9')
	}
	skipSpace := func(i int) int {
		for i < len(expr) && strings.ContainsRune(" \t\n\r", rune(expr[i])) {
			i++
		}
		return i
	}
	// skipGroup skips from an opening bracket at i past its closing one,
	// over quoted strings.
	skipGroup := func(i int, open, close byte) int {
		depth := 0
		for ; i < len(expr); i++ {
			switch c := expr[i]; {
			case c == '"' || c == '\'' || c == '`':
				j := strings.IndexByte(expr[i+1:], c)
				if j < 0 {
					return len(expr)
				}
				i += j + 1
			case c == open:
				depth++
			case c == close:
				depth--
				if depth == 0 {
					return i + 1
				}
			}
		}
		return i
	}
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '{':
			i = skipGroup(i, '{', '}')
		case c == '[':
			i = skipGroup(i, '[', ']')
		case c == '"' || c == '\'' || c == '`':
			i = skipGroup(i, c, 0) // to the end: an unbalanced quote
			if j := strings.IndexByte(expr[i:], c); j >= 0 {
				i += j + 1
			}
		case c >= '0' && c <= '9' || c == '.':
			for i < len(expr) && (isIdent(expr[i], false) || expr[i] == '.' || expr[i] == '+' && (expr[i-1] == 'e' || expr[i-1] == 'E')) {
				i++
			}
		case isIdent(c, true):
			j := i
			for j < len(expr) && isIdent(expr[j], false) {
				j++
			}
			word := expr[i:j]
			next := skipSpace(j)
			switch {
			case slices.Contains(labelLists, word):
				if next < len(expr) && expr[next] == '(' {
					j = skipGroup(next, '(', ')')
				}
			case slices.Contains(operators, word):
			case next < len(expr) && expr[next] == '(':
				// a function or an aggregation
			case followedByWord(expr[next:], "by", "without"):
				// an aggregation: sum by (l) (...)
			default:
				if !slices.Contains(out, word) {
					out = append(out, word)
				}
			}
			i = j
		default:
			i++
		}
	}
	return out
}

// followedByWord reports whether s starts with one of words as a whole
// word.
func followedByWord(s string, words ...string) bool {
	for _, w := range words {
		if rest, ok := strings.CutPrefix(s, w); ok && (rest == "" || strings.ContainsRune(" \t\n(", rune(rest[0]))) {
			return true
		}
	}
	return false
}

func TestMetricNames(t *testing.T) {
	for expr, want := range map[string][]string{
		`sum by (reason) (increase(cronswap_missed_slots_total{reason!="a b"}[1h])) > 0`:            {"cronswap_missed_slots_total"},
		`histogram_quantile(0.99, sum by (category, le) (rate(x_bucket[$__rate_interval]))) > 1e3`:  {"x_bucket"},
		`min(a) < count(up{job="cronswap"} == 1) or on (instance) b unless ignoring(x) c offset 5m`: {"a", "up", "b", "c"},
		`sum(up{job="cronswap"}) == 0 or absent(up{job="cronswap"})`:                                {"up"},
		`x{l=~"$instance"} / y`: {"x", "y"},
	} {
		if got := metricNames(expr); !slices.Equal(got, want) {
			t.Errorf("metricNames(%s) = %v, want %v", expr, got, want)
		}
	}
}
