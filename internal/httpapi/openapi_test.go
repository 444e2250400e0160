package httpapi_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/cronswap/cronswap/internal/httpapi"
)

// The document parses, is OpenAPI 3.1, gives every parameter an example
// (seed-every-5s for {id}), and describes exactly the routes the mux
// serves, both ways (pprof, off by default, is left out of both).
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	var doc struct {
		OpenAPI string                                           `json:"openapi"`
		Paths   map[string]map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(httpapi.OpenAPI(), &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1.") {
		t.Errorf("openapi %q, want 3.1.x", doc.OpenAPI)
	}
	var documented []string
	for path, ops := range doc.Paths {
		for method, op := range ops {
			documented = append(documented, strings.ToUpper(method)+" "+path)
			var params []struct {
				Name    string          `json:"name"`
				In      string          `json:"in"`
				Example json.RawMessage `json:"example"`
			}
			if raw, ok := op["parameters"]; ok {
				if err := json.Unmarshal(raw, &params); err != nil {
					t.Fatal(err)
				}
			}
			for _, p := range params {
				if p.Example == nil {
					t.Errorf("%s %s: parameter %s has no example", method, path, p.Name)
				}
				if p.In == "path" && p.Name == "id" && string(p.Example) != `"seed-every-5s"` {
					t.Errorf("%s %s: {id} example %s", method, path, p.Example)
				}
			}
		}
	}
	var served []string
	for _, p := range httpapi.Routes(httpapi.Options{Metrics: http.NotFoundHandler()}) {
		// "GET /{$}" (exactly /) is the path "/" of the document.
		served = append(served, strings.TrimSuffix(p, "{$}"))
	}
	slices.Sort(documented)
	slices.Sort(served)
	for _, r := range served {
		if !slices.Contains(documented, r) {
			t.Errorf("route %q is served but not in openapi.json", r)
		}
	}
	for _, r := range documented {
		if !slices.Contains(served, r) {
			t.Errorf("openapi.json describes %q, which is not served", r)
		}
	}
}

// /api/openapi.json serves the embedded document.
func TestOpenAPIServed(t *testing.T) {
	f := newFixture(t, nil)
	r := f.get(t, "/api/openapi.json")
	if r.code != http.StatusOK || !strings.HasPrefix(r.ctype, "application/json") || r.body != string(httpapi.OpenAPI()) {
		t.Errorf("openapi.json = %d %q (%d bytes)", r.code, r.ctype, len(r.body))
	}
}
