package metrics

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
)

// DashboardQueries returns every PromQL query of the Grafana dashboard at
// path (deploy/grafana/cronswap.json), for the tests that check it: its
// panels' targets (nested rows too) and its template variables' queries
// (label_values(QUERY, label) as QUERY).
func DashboardQueries(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read dashboard: %w", err)
	}
	var dash any
	if err := json.Unmarshal(data, &dash); err != nil {
		return nil, fmt.Errorf("dashboard %s: %w", path, err)
	}
	var out []string
	var walk func(v any, key string)
	walk = func(v any, key string) {
		switch v := v.(type) {
		case map[string]any:
			for k, c := range v {
				walk(c, k)
			}
		case []any:
			for _, c := range v {
				walk(c, key)
			}
		case string:
			switch {
			case key == "expr":
				out = append(out, v)
			case key == "definition" && strings.HasPrefix(v, "label_values("):
				inner := strings.TrimSuffix(strings.TrimPrefix(v, "label_values("), ")")
				if i := strings.LastIndex(inner, ","); i > 0 {
					inner = inner[:i]
				}
				out = append(out, inner)
			}
		}
	}
	walk(dash, "")
	slices.Sort(out)
	return out, nil
}
