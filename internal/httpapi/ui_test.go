package httpapi

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The status page is mounted at /ui/ and / redirects a browser there.
func TestStatusPageMount(t *testing.T) {
	h := New(Options{})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != http.StatusFound || rec.Header().Get("Location") != "/ui/" {
		t.Errorf("GET / = %d Location %q, want 302 /ui/", rec.Code, rec.Header().Get("Location"))
	}
	for path, ct := range map[string]string{"/ui/": "text/html", "/ui/app.js": "text/javascript", "/ui/style.css": "text/css"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != http.StatusOK || !strings.HasPrefix(rec.Header().Get("Content-Type"), ct) {
			t.Errorf("GET %s = %d %q, want 200 %s", path, rec.Code, rec.Header().Get("Content-Type"), ct)
		}
	}
}
