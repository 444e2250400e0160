package actions

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/cronswap/cronswap/internal/secret"
)

// HTTPSettings configure an http action: the URL the fire is sent to, the
// method (default POST), and how the request is made and its answer
// judged. The URL must be absolute, with scheme http or https and a host,
// and without credentials (BasicAuth holds them); the method one of
// HTTPMethods.
type HTTPSettings struct {
	URL    string `yaml:"url"`
	Method string `yaml:"method"`
	// Headers are sent with every request. A value may name the daemon's
	// variables as ${NAME} (package secret's rule), read at every fire;
	// such a header is a secret: never shown, dropped on a redirect to
	// another host. The daemon's own headers (runFields) cannot be set.
	Headers map[string]string `yaml:"headers"`
	// Bearer sends Authorization: Bearer <token>, the token read at every
	// fire.
	Bearer *SecretSource `yaml:"bearer"`
	// BasicAuth sends Authorization: Basic for the username (${NAME}
	// allowed) and the password, read at every fire.
	BasicAuth *BasicAuth `yaml:"basic_auth"`
	// TLS configures the https connection: the CA, a client certificate,
	// the server name.
	TLS *TLSSettings `yaml:"tls"`
	// Body is BodyFire (the default: the fire as JSON) or BodyArgs (the
	// schedule's args alone, {} when it has none).
	Body string `yaml:"body"`
	// SuccessStatus lists the answer statuses that are a success, each a
	// status (204), a range (200-299) or a class (2xx); empty: 2xx.
	SuccessStatus []string `yaml:"success_status"`
	// FollowRedirects false makes a 3xx answer the answer (judged by
	// SuccessStatus); absent or true, redirects are followed (at most
	// MaxRedirects).
	FollowRedirects *bool `yaml:"follow_redirects"`
}

// The bodies an http action may send (HTTPSettings.Body).
const (
	BodyFire = "fire"
	BodyArgs = "args"
)

// MaxRedirects is how many redirects an http action follows.
const MaxRedirects = 10

// SecretSource says where a secret is read, at every fire, so that a
// secret rotated in place (a Kubernetes Secret mounted as a file) is used
// without a restart: exactly one of an environment variable of the daemon
// (Env) or a file (File, its content trimmed of surrounding white space).
type SecretSource struct {
	Env  string `yaml:"env"`
	File string `yaml:"file"`
}

// MaxSecretFileBytes bounds a secret file.
const MaxSecretFileBytes = 64 << 10

// BasicAuth is HTTP basic authentication's user name and password.
type BasicAuth struct {
	Username string       `yaml:"username"`
	Password SecretSource `yaml:"password"`
}

// urlExample is shown with every refusal of an http action's url.
const urlExample = `(e.g. url: "https://hooks.example.com/cron/report")`

// checkURL refuses an http action's url unless it is an absolute http or
// https URL with a host and without credentials.
func checkURL(raw string) error {
	if strings.TrimSpace(raw) == "" {
		return fmt.Errorf("http.url is empty: give an absolute http or https URL %s", urlExample)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("http.url %q is not a URL: %w %s", raw, err, urlExample)
	}
	switch {
	case !strings.EqualFold(u.Scheme, "http") && !strings.EqualFold(u.Scheme, "https"):
		return fmt.Errorf("http.url %q: the scheme must be http or https, not %q %s", u.Redacted(), u.Scheme, urlExample)
	case u.Opaque != "" || u.Hostname() == "":
		return fmt.Errorf("http.url %q has no host %s", u.Redacted(), urlExample)
	case u.User != nil:
		return fmt.Errorf("http.url %q holds credentials: give them as http.basic_auth (the password from the environment or a file), not in the URL", u.Redacted())
	}
	return nil
}

// HTTPMethods are the methods an http action may use; the body goes with
// each, as JSON.
var HTTPMethods = []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodGet}

// checkMethod refuses an http action's method unless it is empty (POST) or
// one of HTTPMethods.
func checkMethod(m string) error {
	switch {
	case m == "" || slices.Contains(HTTPMethods, m):
		return nil
	case slices.Contains(HTTPMethods, strings.ToUpper(m)):
		return fmt.Errorf("http.method %q: methods are upper case, write %q", m, strings.ToUpper(m))
	default:
		return fmt.Errorf("http.method %q: want one of %s, or leave it out for POST", m, strings.Join(HTTPMethods, ", "))
	}
}

// transportHeaders are set by the HTTP client itself from the request;
// configuring them is refused.
var transportHeaders = []string{"Host", "Content-Length", "Transfer-Encoding", "Connection", "Te", "Trailer", "Upgrade", "Keep-Alive", "Proxy-Connection"}

// checkHeaders refuses a header name that is not a token (RFC 9110: no
// colon, white space or control character), a name given twice, one the
// daemon or the HTTP client sets, an Authorization header next to bearer
// or basic_auth, and a value with a line break or control character, or a
// "${" that starts no reference.
func checkHeaders(h map[string]string, auth bool) error {
	seen := map[string]string{}
	for _, k := range slices.Sorted(maps.Keys(h)) {
		c := http.CanonicalHeaderKey(k)
		switch {
		case !isToken(k):
			return fmt.Errorf("http.headers: %q is not a header name: letters, digits and !#$%%&'*+-.^_`|~ only (no colon, white space or line break), e.g. X-Api-Key", k)
		case seen[c] != "":
			return fmt.Errorf("http.headers: %q and %q are the same header", seen[c], k)
		case daemonHeader(c):
			return fmt.Errorf("http.headers.%s: the daemon sets it on every request (Idempotency-Key, User-Agent and %s*)", k, XHeaderPrefix)
		case slices.Contains(transportHeaders, c):
			return fmt.Errorf("http.headers.%s: set by the HTTP client from the request, not configurable", k)
		case c == "Authorization" && auth:
			return fmt.Errorf("http.headers.%s: given twice, by the header and by bearer or basic_auth: keep one", k)
		}
		seen[c] = k
		if err := checkHeaderValue(h[k]); err != nil {
			return fmt.Errorf("http.headers.%s: %w", k, err)
		}
		if err := secret.CheckSyntax(h[k]); err != nil {
			return fmt.Errorf("http.headers.%s: %w", k, err)
		}
	}
	return nil
}

// isToken reports whether s is an RFC 9110 token, the syntax of a header
// name.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// checkHeaderValue refuses a header value with a control character other
// than a tab (a line break would end the header and start another).
func checkHeaderValue(v string) error {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return fmt.Errorf("the value holds a control character (%q at byte %d): line breaks would end the header", c, i)
		}
	}
	return nil
}

// check refuses a source that does not name exactly one of an environment
// variable and a file.
func (s SecretSource) check() error {
	switch {
	case s.Env != "" && s.File != "":
		return errors.New("give env or file, not both")
	case s.Env == "" && s.File == "":
		return errors.New(`give env (a variable of the daemon's environment) or file (e.g. {file: /var/run/secrets/billing/token})`)
	case s.Env != "" && !envName.MatchString(s.Env):
		return fmt.Errorf("env %q is not a variable name (write the name, not ${NAME})", s.Env)
	case s.Env != "" && daemonVariable(s.Env):
		return fmt.Errorf("env %s: %s variables are the daemon's own", s.Env, EnvPrefix)
	}
	return nil
}

// String names the source without its value: "env NAME" or "file PATH".
func (s SecretSource) String() string {
	if s.Env != "" {
		return "env " + s.Env
	}
	return "file " + s.File
}

// read returns the secret, read now; its error names the source, never
// the value.
func (s SecretSource) read(lookup secret.Lookup) (string, error) {
	if s.Env != "" {
		v, ok := lookup(s.Env)
		if !ok {
			return "", &secret.UnsetError{Names: []string{s.Env}}
		}
		if v == "" {
			return "", fmt.Errorf("environment variable %s is empty", s.Env)
		}
		return v, nil
	}
	f, err := os.Open(s.File)
	if err != nil {
		return "", fmt.Errorf("secret file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxSecretFileBytes+1))
	switch {
	case err != nil:
		return "", fmt.Errorf("secret file %s: %w", s.File, err)
	case len(b) > MaxSecretFileBytes:
		return "", fmt.Errorf("secret file %s: more than %d bytes", s.File, MaxSecretFileBytes)
	}
	v := string(bytes.TrimSpace(b))
	if v == "" {
		return "", fmt.Errorf("secret file %s is empty", s.File)
	}
	return v, nil
}

// authorization returns the Authorization header of bearer or basic (at
// most one is set; "" when neither) and the secret values it is made of,
// read now.
func authorization(bearer *SecretSource, basic *BasicAuth, lookup secret.Lookup) (header string, values []string, err error) {
	switch {
	case bearer != nil:
		tok, err := bearer.read(lookup)
		if err != nil {
			return "", nil, fmt.Errorf("http.bearer: %w", err)
		}
		if err := checkHeaderValue(tok); err != nil {
			return "", nil, fmt.Errorf("http.bearer (%s): %w", bearer, err)
		}
		return "Bearer " + tok, []string{tok}, nil
	case basic != nil:
		x := secret.NewExpander(lookup)
		user := x.Expand(basic.Username)
		if err := x.Err(); err != nil {
			return "", nil, fmt.Errorf("http.basic_auth.username: %w", err)
		}
		pass, err := basic.Password.read(lookup)
		if err != nil {
			return "", nil, fmt.Errorf("http.basic_auth.password: %w", err)
		}
		if strings.Contains(user, ":") {
			return "", nil, errors.New("http.basic_auth.username holds a colon, which basic authentication cannot carry")
		}
		cred := base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
		return "Basic " + cred, append(x.Values(), pass, cred), nil
	}
	return "", nil, nil
}

// StatusRange is a range of answer statuses, both ends included.
type StatusRange struct{ Lo, Hi int }

// parseStatusRange parses "204", "200-299" or "2xx".
func parseStatusRange(s string) (StatusRange, error) {
	s = strings.TrimSpace(s)
	var r StatusRange
	var err error
	switch lo, hi, isRange := strings.Cut(s, "-"); {
	case len(s) == 3 && strings.HasSuffix(strings.ToLower(s), "xx"):
		var c int
		c, err = strconv.Atoi(s[:1])
		r = StatusRange{c * 100, c*100 + 99}
	case isRange:
		r.Lo, err = strconv.Atoi(strings.TrimSpace(lo))
		if err == nil {
			r.Hi, err = strconv.Atoi(strings.TrimSpace(hi))
		}
	default:
		r.Lo, err = strconv.Atoi(s)
		r.Hi = r.Lo
	}
	switch {
	case err != nil:
		return r, fmt.Errorf("%q: want a status (204), a range (200-299) or a class (2xx)", s)
	case r.Lo < 100 || r.Hi > 599 || r.Lo > r.Hi:
		return r, fmt.Errorf("%q: statuses are 100 to 599, a range low to high", s)
	}
	return r, nil
}

// action checks s and returns the http action it configures (without its
// client: FromDefinitions and Start give it one).
func (s *HTTPSettings) action() (*HTTPAction, error) {
	if err := checkURL(s.URL); err != nil {
		return nil, err
	}
	if err := checkMethod(s.Method); err != nil {
		return nil, err
	}
	if s.Bearer != nil && s.BasicAuth != nil {
		return nil, errors.New("http.bearer and http.basic_auth: give one")
	}
	if err := checkHeaders(s.Headers, s.Bearer != nil || s.BasicAuth != nil); err != nil {
		return nil, err
	}
	if s.Bearer != nil {
		if err := s.Bearer.check(); err != nil {
			return nil, fmt.Errorf("http.bearer: %w", err)
		}
	}
	if b := s.BasicAuth; b != nil {
		if err := b.Password.check(); err != nil {
			return nil, fmt.Errorf("http.basic_auth.password: %w", err)
		}
		if err := secret.CheckSyntax(b.Username); err != nil {
			return nil, fmt.Errorf("http.basic_auth.username: %w", err)
		}
		if err := checkHeaderValue(b.Username); err != nil {
			return nil, fmt.Errorf("http.basic_auth.username: %w", err)
		}
	}
	if err := s.TLS.check(s.URL); err != nil {
		return nil, err
	}
	switch s.Body {
	case "", BodyFire, BodyArgs:
	default:
		return nil, fmt.Errorf("http.body %q: want %s (the default: the fire as JSON) or %s (the schedule's args alone)", s.Body, BodyFire, BodyArgs)
	}
	var success []StatusRange
	for i, raw := range s.SuccessStatus {
		r, err := parseStatusRange(raw)
		if err != nil {
			return nil, fmt.Errorf("http.success_status[%d] %w", i, err)
		}
		success = append(success, r)
	}
	a := &HTTPAction{URL: s.URL, Method: s.Method, Headers: s.Headers, Bearer: s.Bearer, BasicAuth: s.BasicAuth,
		ArgsBody: s.Body == BodyArgs, Success: success, NoRedirects: s.FollowRedirects != nil && !*s.FollowRedirects}
	return a, nil
}

// envRefs lists the variables s names: ${NAME} in headers and the
// username, and the variables bearer and the password are read from.
func (s *HTTPSettings) envRefs() []string {
	var names []string
	for _, v := range s.Headers {
		names = append(names, secret.Refs(v)...)
	}
	if s.Bearer != nil && s.Bearer.Env != "" {
		names = append(names, s.Bearer.Env)
	}
	if b := s.BasicAuth; b != nil {
		names = append(names, secret.Refs(b.Username)...)
		if b.Password.Env != "" {
			names = append(names, b.Password.Env)
		}
	}
	return names
}
