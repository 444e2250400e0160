package httpapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
)

// EnvToken names the environment variable holding the listener's token.
const EnvToken = "CRONSWAP_HTTP_TOKEN"

// RequireToken wraps next so that every path but /healthz and /readyz
// needs token, as "Authorization: Bearer <token>" or as the password of
// HTTP basic auth (any user name); others get 401 with a Basic challenge.
// An empty token returns next unchanged.
func RequireToken(token string, next http.Handler) http.Handler {
	if token == "" {
		return next
	}
	want := sha256.Sum256([]byte(token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isOpenPath(r.URL.Path) || tokenMatches(r, want) {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("WWW-Authenticate", `Basic realm="cronswap"`)
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "authorization required (" + EnvToken + " is set)"})
	})
}

// isOpenPath reports whether p answers without the token (the probes).
func isOpenPath(p string) bool { return p == "/healthz" || p == "/readyz" }

// tokenMatches compares the request's bearer token or basic password
// with want (a SHA-256, so that the compare is constant-time whatever the
// lengths).
func tokenMatches(r *http.Request, want [32]byte) bool {
	var got string
	if v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		got = v
	} else if _, pw, ok := r.BasicAuth(); ok {
		got = pw
	} else {
		return false
	}
	h := sha256.Sum256([]byte(got))
	return subtle.ConstantTimeCompare(h[:], want[:]) == 1
}
