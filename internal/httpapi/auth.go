package httpapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"
)

// EnvToken names the environment variable holding the listener's token.
// Its holder is an operator, named EnvToken in what they write.
const EnvToken = "CRONSWAP_HTTP_TOKEN"

// Role is what a token lets its holder do.
type Role string

// Roles of a token.
const (
	// RoleViewer reads: every GET, what the page always did.
	RoleViewer Role = "viewer"
	// RoleOperator reads and carries out the page's actions (the POST
	// endpoints), when the listener has a write connection.
	RoleOperator Role = "operator"
)

// Credential is one named token with its role.
type Credential struct {
	// Name names the holder in what they write (updated_by,
	// requested_by, resumed_by).
	Name string
	Role Role
	// hash is the SHA-256 of the token.
	hash [32]byte
}

// NewCredential returns the credential of token for name in role.
func NewCredential(name string, role Role, token string) Credential {
	return Credential{Name: name, Role: role, hash: sha256.Sum256([]byte(token))}
}

// tokensFileEntry is one entry of a tokens file.
type tokensFileEntry struct {
	Name   string `yaml:"name"`
	Role   Role   `yaml:"role"`
	SHA256 string `yaml:"sha256"`
}

// LoadTokens reads a tokens file (config http.tokens_file): a YAML list of
// {name, role, sha256}, the SHA-256 of each token in hex (`printf %s
// "$TOKEN" | sha256sum`), so that the file holds no secret. Names and
// tokens must be unique, roles viewer or operator.
func LoadTokens(path string) ([]Credential, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokens file: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var entries []tokensFileEntry
	if err := dec.Decode(&entries); err != nil {
		return nil, fmt.Errorf("tokens file %s: %w (want a list of {name, role, sha256})", path, err)
	}
	out := make([]Credential, 0, len(entries))
	names := map[string]bool{}
	hashes := map[[32]byte]string{}
	for i, e := range entries {
		where := fmt.Sprintf("tokens file %s: entry %d", path, i+1)
		if e.Name = strings.TrimSpace(e.Name); e.Name == "" || len(e.Name) > 256 {
			return nil, fmt.Errorf("%s: name must be 1 to 256 bytes", where)
		}
		if names[e.Name] {
			return nil, fmt.Errorf("%s: name %q given twice", where, e.Name)
		}
		names[e.Name] = true
		if e.Role != RoleViewer && e.Role != RoleOperator {
			return nil, fmt.Errorf("%s (%s): role %q, want %s or %s", where, e.Name, e.Role, RoleViewer, RoleOperator)
		}
		sum, err := hex.DecodeString(strings.TrimSpace(e.SHA256))
		if err != nil || len(sum) != sha256.Size {
			return nil, fmt.Errorf("%s (%s): sha256 must be 64 hex digits, the SHA-256 of the token (printf %%s \"$TOKEN\" | sha256sum)", where, e.Name)
		}
		c := Credential{Name: e.Name, Role: e.Role}
		copy(c.hash[:], sum)
		if other, dup := hashes[c.hash]; dup {
			return nil, fmt.Errorf("%s (%s): the same token as %q", where, e.Name, other)
		}
		hashes[c.hash] = e.Name
		out = append(out, c)
	}
	return out, nil
}

// identity is who made a request, as the listener's credentials tell.
type identity struct {
	// Name and Role are the matching credential's; both empty when the
	// listener has no credentials (open, read-only).
	Name string
	Role Role
}

type identityKey struct{}

// identityOf returns the identity authenticate put on r.
func identityOf(r *http.Request) identity {
	id, _ := r.Context().Value(identityKey{}).(identity)
	return id
}

// authenticate wraps next so that, when there are credentials, every path
// but /healthz and /readyz needs one of them, as "Authorization: Bearer
// <token>" or as the password of HTTP basic auth (any user name; either
// scheme name in any case); others get 401 with a Basic challenge. The
// request's context carries the matching credential's name and role.
// Without credentials the listener is open, and read-only.
func authenticate(creds []Credential, next http.Handler) http.Handler {
	if len(creds) == 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isOpenPath(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		c, ok := matchCredential(r, creds)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Basic realm="cronswap"`)
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "authorization required (a token of " + EnvToken + " or of the tokens file)"})
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), identityKey{}, identity{Name: c.Name, Role: c.Role})))
	})
}

// credentials are the listener's: the env token (an operator named
// EnvToken) and the tokens file's.
func credentials(o Options) []Credential {
	out := append([]Credential(nil), o.Tokens...)
	if o.Token != "" {
		out = append(out, NewCredential(EnvToken, RoleOperator, o.Token))
	}
	return out
}

// isOpenPath reports whether p answers without the token (the probes).
func isOpenPath(p string) bool { return p == "/healthz" || p == "/readyz" }

// matchCredential returns the credential whose token the request's bearer
// token or basic password is. Every credential is compared (in constant
// time, of SHA-256 digests, so lengths do not leak either), so the time
// taken does not tell which one matched.
func matchCredential(r *http.Request, creds []Credential) (Credential, bool) {
	got, ok := credential(r.Header.Get("Authorization"))
	if !ok {
		return Credential{}, false
	}
	h := sha256.Sum256([]byte(got))
	var match Credential
	found := 0
	for _, c := range creds {
		if subtle.ConstantTimeCompare(h[:], c.hash[:]) == 1 {
			match, found = c, 1
		}
	}
	return match, found == 1
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
