package actions

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cronswap/cronswap/internal/testtls"
)

// Bad input is refused: what the file alone shows by Validate (every
// command), what only the daemon's machine can tell by Start (cronswap
// run), each with the setting and what to do, never a secret's value.
func TestActionSettingsRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := testtls.NewCA(t, "ca")
	client := ca.Client("client")
	other := ca.Client("other")
	notPEM := filepath.Join(dir, "not.pem")
	empty := filepath.Join(dir, "empty")
	unreadable := filepath.Join(dir, "unreadable")
	if err := os.WriteFile(notPEM, []byte("hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A directory where a file should be: unreadable as a file, also to
	// root (which reads a file of mode 0).
	if err := os.Mkdir(unreadable, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(empty, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const u = "https://billing.internal/close-day"
	h := func(s HTTPSettings) Definition {
		if s.URL == "" {
			s.URL = u
		}
		return Definition{HTTP: &s}
	}
	ex := func(s ExecSettings) Definition { return Definition{Exec: []string{"true"}, ExecSettings: s} }
	env := map[string]string{"SET": "value-1234", "NEWLINE": "a\nb"}
	for _, c := range []struct {
		name  string
		def   Definition
		start bool // refused by Start only (the machine), not by Validate
		want  []string
	}{
		{"header name with a colon", h(HTTPSettings{Headers: map[string]string{"X-Api:Key": "v"}}), false, []string{"http.headers", `"X-Api:Key" is not a header name`, "no colon"}},
		{"header name with a newline", h(HTTPSettings{Headers: map[string]string{"X-Api\nKey": "v"}}), false, []string{"is not a header name"}},
		{"header value with a newline", h(HTTPSettings{Headers: map[string]string{"X-Api-Key": "v\r\nX-Evil: 1"}}), false, []string{"http.headers.X-Api-Key", "control character", "line breaks"}},
		{"the daemon's header", h(HTTPSettings{Headers: map[string]string{"Idempotency-Key": "mine"}}), false, []string{"http.headers.Idempotency-Key", "the daemon sets it"}},
		{"the daemon's prefix", h(HTTPSettings{Headers: map[string]string{"x-cronswap-fence": "1"}}), false, []string{"the daemon sets it"}},
		{"a header the client sets", h(HTTPSettings{Headers: map[string]string{"Host": "evil"}}), false, []string{"http.headers.Host", "not configurable"}},
		{"a header twice", h(HTTPSettings{Headers: map[string]string{"X-A": "1", "x-a": "2"}}), false, []string{"same header"}},
		{"Authorization and bearer", h(HTTPSettings{Headers: map[string]string{"Authorization": "x"}, Bearer: &SecretSource{Env: "SET"}}), false, []string{"keep one"}},
		{"a broken reference", h(HTTPSettings{Headers: map[string]string{"X-A": "Bearer ${TOKEN"}}), false, []string{"does not start a ${NAME} reference"}},
		{"bearer and basic", h(HTTPSettings{Bearer: &SecretSource{Env: "SET"}, BasicAuth: &BasicAuth{Password: SecretSource{Env: "SET"}}}), false, []string{"give one"}},
		{"a source of neither", h(HTTPSettings{Bearer: &SecretSource{}}), false, []string{"http.bearer", "give env"}},
		{"a source of both", h(HTTPSettings{Bearer: &SecretSource{Env: "SET", File: "/x"}}), false, []string{"not both"}},
		{"env written as a reference", h(HTTPSettings{Bearer: &SecretSource{Env: "${SET}"}}), false, []string{"not a variable name"}},
		{"credentials in the url", h(HTTPSettings{URL: "https://user:hunter2@h/"}), false, []string{"holds credentials", "basic_auth"}},
		{"tls to an http url", h(HTTPSettings{URL: "http://h/", TLS: &TLSSettings{CAFile: ca.CertFile}}), false, []string{"http.tls", "not https"}},
		{"a certificate without its key", h(HTTPSettings{TLS: &TLSSettings{CertFile: client.CertFile}}), false, []string{"cert_file without key_file"}},
		{"an unknown body", h(HTTPSettings{Body: "schedule"}), false, []string{"http.body", "fire", "args"}},
		{"a bad status", h(HTTPSettings{SuccessStatus: []string{"200-299", "600"}}), false, []string{"http.success_status[1]", "100 to 599"}},
		{"exec settings on http", Definition{HTTP: &HTTPSettings{URL: u}, ExecSettings: ExecSettings{Dir: "/tmp"}}, false, []string{"dir: exec settings", "http"}},
		{"an env name", ex(ExecSettings{Env: map[string]string{"A-B": "1"}}), false, []string{"env", "not a variable name"}},
		{"the daemon's variable", ex(ExecSettings{Env: map[string]string{"CRONSWAP_FENCE": "1"}}), false, []string{"env.CRONSWAP_FENCE", "the daemon's"}},
		{"the daemon's secret by reference", ex(ExecSettings{Env: map[string]string{"T": "${CRONSWAP_HTTP_TOKEN}"}}), false, []string{"env.T", "never reach a program"}},
		{"a negative grace", ex(ExecSettings{KillGrace: -1}), false, []string{"kill_grace"}},

		{"an unset header variable", h(HTTPSettings{Headers: map[string]string{"X-A": "${UNSET_ONE}"}}), true, []string{"http.headers", "environment variable UNSET_ONE not set"}},
		{"a variable that breaks the header", h(HTTPSettings{Headers: map[string]string{"X-A": "${NEWLINE}"}}), true, []string{"http.headers.X-A", "control character"}},
		{"an unset bearer variable", h(HTTPSettings{Bearer: &SecretSource{Env: "UNSET_TWO"}}), true, []string{"http.bearer", "UNSET_TWO not set"}},
		{"a missing secret file", h(HTTPSettings{Bearer: &SecretSource{File: filepath.Join(dir, "nope")}}), true, []string{"http.bearer", "no such file"}},
		{"an empty secret file", h(HTTPSettings{BasicAuth: &BasicAuth{Username: "u", Password: SecretSource{File: empty}}}), true, []string{"http.basic_auth.password", "is empty"}},
		{"an unreadable secret file", h(HTTPSettings{Bearer: &SecretSource{File: unreadable}}), true, []string{"http.bearer", "is a directory"}},
		{"an unreadable CA file", h(HTTPSettings{TLS: &TLSSettings{CAFile: unreadable}}), true, []string{"http.tls.ca_file", "is a directory"}},
		{"a missing CA file", h(HTTPSettings{TLS: &TLSSettings{CAFile: filepath.Join(dir, "ca.pem")}}), true, []string{"http.tls.ca_file", "no such file"}},
		{"a CA file without a certificate", h(HTTPSettings{TLS: &TLSSettings{CAFile: notPEM}}), true, []string{"http.tls.ca_file", "no PEM certificate"}},
		{"a missing cert file", h(HTTPSettings{TLS: &TLSSettings{CertFile: filepath.Join(dir, "c.pem"), KeyFile: client.KeyFile}}), true, []string{"http.tls.cert_file", "no such file"}},
		{"a key that does not match", h(HTTPSettings{TLS: &TLSSettings{CertFile: client.CertFile, KeyFile: other.KeyFile}}), true, []string{"http.tls.cert_file", "private key does not match public key"}},
		{"an unset env variable", ex(ExecSettings{Env: map[string]string{"T": "${UNSET_THREE}"}}), true, []string{"env.T", "UNSET_THREE not set"}},
		{"a missing dir", ex(ExecSettings{Dir: filepath.Join(dir, "nope")}), true, []string{"dir", "no such file"}},
		{"a dir that is a file", ex(ExecSettings{Dir: notPEM}), true, []string{"not a directory"}},
	} {
		verr := c.def.Validate()
		if c.start {
			if verr != nil {
				t.Errorf("%s: refused by Validate (%v), want only by Start", c.name, verr)
				continue
			}
			_, verr = startOne(t, c.def, env)
		}
		if verr == nil {
			t.Errorf("%s: accepted", c.name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(verr.Error(), w) {
				t.Errorf("%s: error %q does not say %q", c.name, verr, w)
			}
		}
		if strings.Contains(verr.Error(), "value-1234") || strings.Contains(verr.Error(), "hunter2") {
			t.Errorf("%s: error %q shows a secret", c.name, verr)
		}
	}
	_, err := startOne(t, h(HTTPSettings{Bearer: &SecretSource{Env: "SET"}, Headers: map[string]string{"X-Api-Key": "${SET}"},
		TLS: &TLSSettings{CAFile: ca.CertFile, CertFile: client.CertFile, KeyFile: client.KeyFile}}), env)
	if err != nil {
		t.Errorf("valid settings refused: %v", err)
	}
}

// The variables a configuration names are known before any run:
// Start's Redactor masks them from the first fire on, and a program that
// inherits the environment does not get them.
func TestStartKnowsEverySecretTheConfigurationNames(t *testing.T) {
	t.Parallel()
	env := map[string]string{"A_TOKEN": "a-token-value", "HOOK": "hook-token-value", "PW": "password-value", "USER_NAME": "user-name-value"}
	reg, err := Start(map[string]Definition{
		"a": {HTTP: &HTTPSettings{URL: "https://h/", Headers: map[string]string{"X-A": "${A_TOKEN}"}}},
		"b": {HTTP: &HTTPSettings{URL: "https://h/", BasicAuth: &BasicAuth{Username: "${USER_NAME}", Password: SecretSource{Env: "PW"}}}},
		"c": {Exec: []string{"true"}},
	}, Host{LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }, SecretEnv: []string{"HOOK"}, Secrets: []string{"daemon-token"}})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := reg.Lookup("c")
	a := c.Handler.(*ExecAction)
	for _, k := range []string{"A_TOKEN", "HOOK", "PW", "USER_NAME"} {
		if !strings.Contains(strings.Join(a.Withheld, " "), k) {
			t.Errorf("%s is not withheld from programs: %v", k, a.Withheld)
		}
	}
	got := a.Secrets.Redact("a-token-value hook-token-value password-value daemon-token")
	if got != "[redacted] [redacted] [redacted] [redacted]" {
		t.Errorf("Redact = %q", got)
	}
}
