package httpapi_test

import (
	"encoding/base64"
	"net/http"
	"testing"

	"github.com/cronswap/cronswap/internal/httpapi"
)

func authGet(t *testing.T, f *fixture, path string, set func(*http.Request)) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, f.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if set != nil {
		set(req)
	}
	res, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	return res
}

// With a token every path but the probes needs it, as a bearer token or a
// basic-auth password; without, 401 with a Basic challenge.
func TestTokenAuth(t *testing.T) {
	f := newFixture(t, func(o *httpapi.Options) { o.Token = "s3cret" })
	f.ready.Store(true)
	for _, p := range []string{"/healthz", "/readyz"} {
		if res := authGet(t, f, p, nil); res.StatusCode != http.StatusOK {
			t.Errorf("%s without token = %d, want 200", p, res.StatusCode)
		}
	}
	for _, p := range []string{"/api/status", "/api/schedules", "/api/overview", "/api/schedule-rows", "/api/openapi.json", "/nope"} {
		res := authGet(t, f, p, nil)
		if res.StatusCode != http.StatusUnauthorized || res.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s without token = %d %q, want 401 with a challenge", p, res.StatusCode, res.Header.Get("WWW-Authenticate"))
		}
	}
	cases := map[string]struct {
		set  func(*http.Request)
		want int
	}{
		"bearer":       {func(r *http.Request) { r.Header.Set("Authorization", "Bearer s3cret") }, http.StatusOK},
		"basic":        {func(r *http.Request) { r.SetBasicAuth("anyone", "s3cret") }, http.StatusOK},
		"wrong bearer": {func(r *http.Request) { r.Header.Set("Authorization", "Bearer s3cre") }, http.StatusUnauthorized},
		"wrong basic":  {func(r *http.Request) { r.SetBasicAuth("s3cret", "nope") }, http.StatusUnauthorized},
	}
	for name, c := range cases {
		if res := authGet(t, f, "/api/status", c.set); res.StatusCode != c.want {
			t.Errorf("%s: %d, want %d", name, res.StatusCode, c.want)
		}
	}
}

// The authentication scheme is case-insensitive (RFC 9110 section 11.1):
// "bearer", "BEARER", "basic" are the same schemes as "Bearer" and
// "Basic"; one or more spaces may follow the scheme. A scheme only
// starting with a known one, or a known one with no credentials, is
// refused.
func TestTokenAuthSchemeCaseInsensitive(t *testing.T) {
	f := newFixture(t, func(o *httpapi.Options) { o.Token = "s3cret" })
	basic := base64.StdEncoding.EncodeToString([]byte("anyone:s3cret"))
	cases := map[string]int{
		"Bearer s3cret":      http.StatusOK,
		"bearer s3cret":      http.StatusOK,
		"BEARER s3cret":      http.StatusOK,
		"bEaReR s3cret":      http.StatusOK,
		"Bearer   s3cret":    http.StatusOK,
		"Basic " + basic:     http.StatusOK,
		"basic " + basic:     http.StatusOK,
		"BASIC " + basic:     http.StatusOK,
		"basic  " + basic:    http.StatusOK,
		"bearer s3cre":       http.StatusUnauthorized,
		"bearers3cret":       http.StatusUnauthorized,
		"Bearerx s3cret":     http.StatusUnauthorized,
		"bearer":             http.StatusUnauthorized,
		"bearer ":            http.StatusUnauthorized,
		"s3cret":             http.StatusUnauthorized,
		"Token s3cret":       http.StatusUnauthorized,
		"basic s3cret":       http.StatusUnauthorized,
		"Basic " + basic[1:]: http.StatusUnauthorized,
	}
	for header, want := range cases {
		res := authGet(t, f, "/api/status", func(r *http.Request) { r.Header.Set("Authorization", header) })
		if res.StatusCode != want {
			t.Errorf("Authorization: %q = %d, want %d", header, res.StatusCode, want)
		}
	}
}

// Without a token the listener stays open.
func TestNoTokenOpen(t *testing.T) {
	f := newFixture(t, nil)
	if res := authGet(t, f, "/api/status", nil); res.StatusCode != http.StatusOK {
		t.Errorf("/api/status = %d", res.StatusCode)
	}
}
