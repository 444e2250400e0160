package httpapi_test

import (
	"encoding/json"
	"net/http"
	"reflect"
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

// Each schema of a Go type the API encodes has a property for every JSON
// field of the type (those of embedded structs too) and no other: a field
// added to the type, or dropped, fails here until openapi.json follows.
func TestOpenAPISchemasMatchTheGoTypes(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]json.RawMessage `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(httpapi.OpenAPI(), &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	for name, v := range map[string]any{
		"FailurePause": httpapi.FailurePause{}, "Schedule": httpapi.Schedule{}, "LastRun": httpapi.LastRun{},
		"Row": httpapi.Row{}, "Rows": httpapi.Rows{}, "Overview": httpapi.Overview{}, "NextRun": httpapi.NextRun{},
		"Lock": httpapi.Lock{}, "Detail": httpapi.Detail{}, "Status": httpapi.Status{}, "Session": httpapi.Session{},
		"Preview": httpapi.Preview{}, "Retime": httpapi.Retime{}, "RunNowAnswer": httpapi.RunNowAnswer{},
		"EnabledAnswer": httpapi.EnabledAnswer{}, "ResumeAnswer": httpapi.ResumeAnswer{},
		"RetimeAnswer": httpapi.RetimeAnswer{}, "Reload": httpapi.Reload{},
	} {
		schema, ok := doc.Components.Schemas[name]
		if !ok {
			t.Errorf("openapi.json has no schema %s", name)
			continue
		}
		fields := jsonFields(reflect.TypeOf(v))
		for _, f := range fields {
			if _, ok := schema.Properties[f]; !ok {
				t.Errorf("schema %s lacks property %q, a field of httpapi.%s", name, f, name)
			}
		}
		for p := range schema.Properties {
			if !slices.Contains(fields, p) {
				t.Errorf("schema %s has property %q, which httpapi.%s does not encode", name, p, name)
			}
		}
	}
}

// jsonFields returns the names encoding/json gives the fields of struct
// type typ, those of its embedded structs included.
func jsonFields(typ reflect.Type) []string {
	var out []string
	for i := range typ.NumField() {
		f := typ.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if f.Anonymous && tag == "" && ft.Kind() == reflect.Struct {
			out = append(out, jsonFields(ft)...)
			continue
		}
		if tag == "" {
			tag = f.Name
		}
		out = append(out, tag)
	}
	return out
}
