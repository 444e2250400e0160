package httpapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strings"
)

// EnvToken names the environment variable holding the listener's token.
const EnvToken = "CRONSWAP_HTTP_TOKEN"

// RequireToken wraps next so that every path but /healthz and /readyz
// needs token, as "Authorization: Bearer <token>" or as the password of
// HTTP basic auth (any user name; either scheme name in any case); others
// get 401 with a Basic challenge.
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
	got, ok := credential(r.Header.Get("Authorization"))
	if !ok {
		return false
	}
	h := sha256.Sum256([]byte(got))
	return subtle.ConstantTimeCompare(h[:], want[:]) == 1
}

// credential returns the secret of an Authorization header value: the
// token of the Bearer scheme or the password of the Basic scheme (any user
// name). The scheme is case-insensitive and may be followed by several
// spaces (RFC 9110 section 11.1 and 11.4); ok is false for any other
// scheme, missing credentials or a Basic value that does not decode.
func credential(header string) (secret string, ok bool) {
	scheme, rest, found := strings.Cut(header, " ")
	rest = strings.TrimLeft(rest, " ")
	if !found || rest == "" {
		return "", false
	}
	switch {
	case strings.EqualFold(scheme, "Bearer"):
		return rest, true
	case strings.EqualFold(scheme, "Basic"):
		raw, err := base64.StdEncoding.DecodeString(rest)
		if err != nil {
			return "", false
		}
		_, pw, ok := strings.Cut(string(raw), ":")
		return pw, ok
	}
	return "", false
}
