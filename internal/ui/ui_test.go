package ui

import (
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func get(t *testing.T, h http.Handler, path string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec
}

func TestEveryFileServedWithItsType(t *testing.T) {
	h := Handler()
	want := map[string]string{".html": "text/html", ".css": "text/css", ".js": "text/javascript", ".svg": "image/svg+xml"}
	n := 0
	err := fs.WalkDir(static, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		n++
		name := strings.TrimPrefix(p, "static")
		rec := get(t, h, name)
		ext := name[strings.LastIndex(name, "."):]
		if rec.Code != http.StatusOK || !strings.HasPrefix(rec.Header().Get("Content-Type"), want[ext]) {
			t.Errorf("GET %s: %d %q, want 200 %s", name, rec.Code, rec.Header().Get("Content-Type"), want[ext])
		}
		if rec.Header().Get("Cache-Control") != "no-cache" || rec.Header().Get("ETag") == "" {
			t.Errorf("GET %s: Cache-Control %q ETag %q", name, rec.Header().Get("Cache-Control"), rec.Header().Get("ETag"))
		}
		return nil
	})
	if err != nil || n < 5 {
		t.Fatalf("walked %d files: %v", n, err)
	}
}

func TestRootIsIndexAndUnknownIs404(t *testing.T) {
	h := Handler()
	if rec := get(t, h, "/"); rec.Code != 200 || !strings.Contains(rec.Body.String(), `data-testid="live-status"`) {
		t.Errorf("GET /: %d", rec.Code)
	}
	for _, p := range []string{"/nope.js", "/static/app.js", "/../ui.go", "/ui.go"} {
		if rec := get(t, h, p); rec.Code != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", p, rec.Code)
		}
	}
}

func TestIndexReferencesOnlyEmbeddedFiles(t *testing.T) {
	h := Handler()
	body := get(t, h, "/").Body.String()
	refs := regexp.MustCompile(`(?:src|href)="([^"#][^"]*)"`).FindAllStringSubmatch(body, -1)
	if len(refs) < 3 {
		t.Fatalf("index references %d files", len(refs))
	}
	for _, m := range refs {
		ref := m[1]
		if strings.HasPrefix(ref, "../api/") {
			continue // the API, not a file of the page
		}
		if strings.Contains(ref, "//") || strings.HasPrefix(ref, "/") {
			t.Errorf("index refers to %q outside the page", ref)
			continue
		}
		if rec := get(t, h, "/"+ref); rec.Code != 200 {
			t.Errorf("index refers to %q: %d", ref, rec.Code)
		}
	}
}
