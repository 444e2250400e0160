package actions

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cronswap/cronswap/internal/secret"
	"github.com/cronswap/cronswap/internal/testtls"
	"github.com/cronswap/cronswap/jobs"
)

// seen is one request as an HTTPS test server saw it.
type seen struct {
	Header http.Header
	Body   []byte
	// ClientCN is the client certificate's common name ("" without one).
	ClientCN string
}

// tlsReceiver is an HTTPS test server on loopback with a certificate of
// its own CA (and, with clientCA, requiring a client certificate signed
// by it) that records each request and answers with answer(r).
type tlsReceiver struct {
	*httptest.Server
	CA   *testtls.CA
	mu   sync.Mutex
	reqs []seen
}

func newTLSReceiver(t *testing.T, clientCA *testtls.CA, answer func(w http.ResponseWriter, r *http.Request)) *tlsReceiver {
	t.Helper()
	rc := &tlsReceiver{CA: testtls.NewCA(t, "receiver")}
	rc.Server = testtls.NewServer(t, rc.CA, clientCA, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s := seen{Header: r.Header.Clone(), Body: b}
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			s.ClientCN = r.TLS.PeerCertificates[0].Subject.CommonName
		}
		rc.mu.Lock()
		rc.reqs = append(rc.reqs, s)
		rc.mu.Unlock()
		if answer != nil {
			answer(w, r)
		}
	}))
	return rc
}

// last returns the last request seen.
func (rc *tlsReceiver) last(t *testing.T) seen {
	t.Helper()
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.reqs) == 0 {
		t.Fatal("the receiver saw no request")
	}
	return rc.reqs[len(rc.reqs)-1]
}

// startOne builds the action d defines as the daemon does (Start), with
// the environment env, and returns it.
func startOne(t *testing.T, d Definition, env map[string]string) (jobs.Handler, error) {
	t.Helper()
	reg, err := Start(map[string]Definition{"job": d}, Host{LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if err != nil {
		return nil, err
	}
	a, _ := reg.Lookup("job")
	return a.Handler, nil
}

func mustStart(t *testing.T, d Definition, env map[string]string) *HTTPAction {
	t.Helper()
	h, err := startOne(t, d, env)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	return h.(*HTTPAction)
}

// writeSecret writes a secret file the way a Kubernetes Secret volume
// updates one: a new file renamed over the old, so a reader sees the old
// content or the new, never a mix.
func writeSecret(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// A bearer token from the environment and one from a file, over HTTPS to
// a server with its own CA (tls.ca_file); the file is rotated between two
// fires, and the second fire sends the new token without a restart.
func TestHTTPActionBearerFromEnvAndRotatedFile(t *testing.T) {
	t.Parallel()
	rc := newTLSReceiver(t, nil, nil)
	tls := &TLSSettings{CAFile: rc.CA.CertFile}
	fromEnv := mustStart(t, Definition{HTTP: &HTTPSettings{URL: rc.URL + "/close-day", TLS: tls, Bearer: &SecretSource{Env: "BILLING_TOKEN"}}},
		map[string]string{"BILLING_TOKEN": "env-token-1234"})
	if _, err := fromEnv.HandleOutput(context.Background(), testFire()); err != nil {
		t.Fatalf("bearer from env: %v", err)
	}
	if got := rc.last(t).Header.Get("Authorization"); got != "Bearer env-token-1234" {
		t.Fatalf("Authorization = %q, want the token from the environment", got)
	}

	file := filepath.Join(t.TempDir(), "token")
	writeSecret(t, file, "file-token-old\n")
	fromFile := mustStart(t, Definition{HTTP: &HTTPSettings{URL: rc.URL, TLS: tls, Bearer: &SecretSource{File: file}}}, nil)
	if _, err := fromFile.HandleOutput(context.Background(), testFire()); err != nil {
		t.Fatalf("bearer from file: %v", err)
	}
	if got := rc.last(t).Header.Get("Authorization"); got != "Bearer file-token-old" {
		t.Fatalf("Authorization = %q, want the file's token, trimmed", got)
	}
	writeSecret(t, file, "file-token-new")
	if _, err := fromFile.HandleOutput(context.Background(), testFire()); err != nil {
		t.Fatalf("bearer from the rotated file: %v", err)
	}
	if got := rc.last(t).Header.Get("Authorization"); got != "Bearer file-token-new" {
		t.Fatalf("after the rotation Authorization = %q, want the new token", got)
	}
	// Both tokens stay known secrets: an answer echoing the old one is
	// redacted too.
	for _, tok := range []string{"file-token-old", "file-token-new"} {
		if got := fromFile.Secrets.Redact("echo " + tok); strings.Contains(got, tok) {
			t.Errorf("%q is not redacted: %q", tok, got)
		}
	}
	if got := fromEnv.Secrets.Redact("echo env-token-1234"); strings.Contains(got, "env-token") {
		t.Errorf("the token from the environment is not redacted: %q", got)
	}
}

func TestHTTPActionBasicAuth(t *testing.T) {
	t.Parallel()
	rc := newTLSReceiver(t, nil, nil)
	file := filepath.Join(t.TempDir(), "password")
	writeSecret(t, file, "pa55-w0rd:with colon\n")
	a := mustStart(t, Definition{HTTP: &HTTPSettings{URL: rc.URL, TLS: &TLSSettings{CAFile: rc.CA.CertFile},
		BasicAuth: &BasicAuth{Username: "${BILLING_USER}", Password: SecretSource{File: file}}}},
		map[string]string{"BILLING_USER": "cron-billing"})
	if _, err := a.HandleOutput(context.Background(), testFire()); err != nil {
		t.Fatal(err)
	}
	r := &http.Request{Header: rc.last(t).Header}
	user, pass, ok := r.BasicAuth()
	if !ok || user != "cron-billing" || pass != "pa55-w0rd:with colon" {
		t.Fatalf("basic auth %q %q %v", user, pass, ok)
	}
}

// mTLS: a client certificate signed by the CA the server trusts is
// accepted; one signed by another CA, and none, are refused by the server.
func TestHTTPActionMutualTLS(t *testing.T) {
	t.Parallel()
	clients := testtls.NewCA(t, "clients")
	rc := newTLSReceiver(t, clients, nil)
	good := clients.Client("cron-client")
	a := mustStart(t, Definition{HTTP: &HTTPSettings{URL: rc.URL, TLS: &TLSSettings{CAFile: rc.CA.CertFile, CertFile: good.CertFile, KeyFile: good.KeyFile}}}, nil)
	out, err := a.HandleOutput(context.Background(), testFire())
	if err != nil || out.AnswerStatus != http.StatusOK {
		t.Fatalf("with the client certificate: %v %+v", err, out)
	}
	if cn := rc.last(t).ClientCN; cn != "cron-client" {
		t.Fatalf("the server saw client %q", cn)
	}

	wrong := testtls.NewCA(t, "elsewhere").Client("cron-client")
	for name, tls := range map[string]*TLSSettings{
		"a certificate of another CA": {CAFile: rc.CA.CertFile, CertFile: wrong.CertFile, KeyFile: wrong.KeyFile},
		"no certificate":              {CAFile: rc.CA.CertFile},
	} {
		a := mustStart(t, Definition{HTTP: &HTTPSettings{URL: rc.URL, TLS: tls}}, nil)
		out, err := a.HandleOutput(context.Background(), testFire())
		if err == nil || out.AnswerStatus != 0 {
			t.Errorf("%s: %v %+v, want the handshake refused", name, err, out)
		}
	}
	// Without tls.ca_file the server's own CA is unknown.
	plain := mustStart(t, Definition{HTTP: &HTTPSettings{URL: rc.URL}}, nil)
	if _, err := plain.HandleOutput(context.Background(), testFire()); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("without ca_file: %v, want an unknown authority", err)
	}
}

// The daemon's headers: the idempotency key is the run id (the same in
// every attempt of a slot, another for another slot), the attempt has its
// own header, the fence header is CRONSWAP_FENCE, and a configured header
// of another name goes too.
func TestHTTPActionDaemonHeaders(t *testing.T) {
	t.Parallel()
	rc := newTLSReceiver(t, nil, nil)
	a := mustStart(t, Definition{HTTP: &HTTPSettings{URL: rc.URL, TLS: &TLSSettings{CAFile: rc.CA.CertFile},
		Headers: map[string]string{"X-Api-Key": "${API_KEY}", "X-Team": "billing"}}}, map[string]string{"API_KEY": "k-123456"})
	f := testFire()
	var keys []string
	for attempt := 1; attempt <= 2; attempt++ {
		f.Attempt = attempt
		if _, err := a.HandleOutput(context.Background(), f); err != nil {
			t.Fatal(err)
		}
		h := rc.last(t).Header
		keys = append(keys, h.Get("Idempotency-Key"))
		env := map[string]string{}
		for _, kv := range Env(context.Background(), f) {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
		for header, variable := range map[string]string{
			"X-Cronswap-Job-Id": "CRONSWAP_JOB_ID", "X-Cronswap-Scheduled-At": "CRONSWAP_SCHEDULED_AT",
			"X-Cronswap-Run-Id": "CRONSWAP_RUN_ID", "X-Cronswap-Fence": "CRONSWAP_FENCE",
			"X-Cronswap-Attempt": "CRONSWAP_ATTEMPT", "X-Cronswap-Instance-Id": "CRONSWAP_INSTANCE_ID",
		} {
			if h.Get(header) == "" || h.Get(header) != env[variable] {
				t.Errorf("attempt %d: %s = %q, %s = %q: want equal, not empty", attempt, header, h.Get(header), variable, env[variable])
			}
		}
		if h.Get("X-Cronswap-Fence") != "42" || h.Get("X-Cronswap-Attempt") != fmt.Sprint(attempt) {
			t.Errorf("attempt %d: fence %q attempt %q", attempt, h.Get("X-Cronswap-Fence"), h.Get("X-Cronswap-Attempt"))
		}
		if ua := h.Get("User-Agent"); !strings.HasPrefix(ua, "cronswap/") {
			t.Errorf("User-Agent %q", ua)
		}
		if h.Get("X-Api-Key") != "k-123456" || h.Get("X-Team") != "billing" || h.Get("Content-Type") != "application/json" {
			t.Errorf("configured headers: %v", h)
		}
	}
	if keys[0] != f.RunID || keys[1] != keys[0] {
		t.Errorf("idempotency keys of two attempts %q, want both the run id %q", keys, f.RunID)
	}
	f.RunID, f.Slot, f.Attempt = "run-of-the-next-slot", f.Slot.Add(time.Hour), 0
	if _, err := a.HandleOutput(context.Background(), f); err != nil {
		t.Fatal(err)
	}
	h := rc.last(t).Header
	if h.Get("Idempotency-Key") != "run-of-the-next-slot" || h.Get("X-Cronswap-Attempt") != "" {
		t.Errorf("another slot: key %q attempt %q, want its own run id and no attempt (the action does not retry)",
			h.Get("Idempotency-Key"), h.Get("X-Cronswap-Attempt"))
	}
}

// The answer's status and the first bytes of its body are the run's
// output, on success and on failure, with every known secret redacted —
// also one across the cut — and the error holds no secret either.
func TestHTTPActionAnswerKeptAndRedacted(t *testing.T) {
	t.Parallel()
	const token = "tok-ABCDEFGHIJKLMNOP"
	const prefix = "answer of 24 bytes here:"
	status := http.StatusOK
	var mu sync.Mutex
	rc := newTLSReceiver(t, nil, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		code := status
		mu.Unlock()
		w.WriteHeader(code)
		if r.URL.Path == "/straddle" {
			// The token from byte len(prefix)+4 on, across the kept bytes' end.
			fmt.Fprint(w, prefix+r.Header.Get("X-Api-Key")+strings.Repeat("!", 5000))
			return
		}
		// Echo the request's secrets the ways receivers do: raw, and as JSON.
		b, _ := json.Marshal(map[string]string{"auth": r.Header.Get("Authorization"), "key": r.Header.Get("X-Api-Key")})
		fmt.Fprintf(w, "  seen %s %s\n%s", r.Header.Get("Authorization"), b, strings.Repeat("!", 5000))
	})
	settings := func(path string) Definition {
		return Definition{HTTP: &HTTPSettings{URL: rc.URL + path, TLS: &TLSSettings{CAFile: rc.CA.CertFile},
			Bearer: &SecretSource{Env: "TOKEN"}, Headers: map[string]string{"X-Api-Key": "key-${TOKEN}"}}}
	}
	env := map[string]string{"TOKEN": token}
	echo := mustStart(t, settings("/echo"), env)
	straddle := mustStart(t, settings("/straddle"), env)
	// The cut falls in the middle of the token: "key-tok-ABC|DEF...".
	straddle.AnswerBytes = len(prefix) + len("key-tok-ABC")
	for _, code := range []int{http.StatusOK, http.StatusServiceUnavailable} {
		mu.Lock()
		status = code
		mu.Unlock()
		for _, a := range []*HTTPAction{echo, straddle} {
			out, err := a.HandleOutput(context.Background(), testFire())
			if out.AnswerStatus != code {
				t.Errorf("status %d: answer status %d", code, out.AnswerStatus)
			}
			n := a.AnswerBytes
			if n == 0 {
				n = DefaultTailBytes
			}
			if len(out.Answer) > n || (a == echo && !strings.HasPrefix(out.Answer, "seen Bearer "+secret.Mask+` {"auth":"Bearer `+secret.Mask)) ||
				(a == straddle && !strings.HasPrefix(out.Answer, prefix+"key-[red")) {
				t.Errorf("status %d: answer %q (%d bytes, keep %d)", code, out.Answer, len(out.Answer), n)
			}
			text := out.Answer
			if err != nil {
				text += err.Error()
			}
			for _, leak := range []string{"tok-A", base64.StdEncoding.EncodeToString([]byte(token))[:8]} {
				if strings.Contains(text, leak) {
					t.Errorf("status %d: the output holds %q:\n%s", code, leak, text)
				}
			}
			if (err == nil) != (code == http.StatusOK) {
				t.Errorf("status %d: err %v", code, err)
			}
			if err != nil && !strings.Contains(err.Error(), "503") {
				t.Errorf("error %q does not name the status", err)
			}
		}
	}
}

func TestHTTPActionSuccessStatusBodyAndRedirects(t *testing.T) {
	t.Parallel()
	other := newTLSReceiver(t, nil, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusAccepted) })
	rc := newTLSReceiver(t, nil, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/moved":
			http.Redirect(w, r, "/here", http.StatusFound)
		case "/away":
			http.Redirect(w, r, other.URL+"/there", http.StatusTemporaryRedirect)
		case "/gone":
			w.WriteHeader(http.StatusGone)
		default:
			w.WriteHeader(http.StatusOK)
		}
	})
	// One CA file for both servers.
	caFile := filepath.Join(t.TempDir(), "cas.pem")
	a, _ := os.ReadFile(rc.CA.CertFile)
	b, _ := os.ReadFile(other.CA.CertFile)
	if err := os.WriteFile(caFile, append(a, b...), 0o600); err != nil {
		t.Fatal(err)
	}
	tls := &TLSSettings{CAFile: caFile}
	no := false
	env := map[string]string{"K": "secret-key-value"}
	for _, c := range []struct {
		name     string
		s        HTTPSettings
		status   int
		ok       bool
		bodyWant string
	}{
		{"a redirect followed", HTTPSettings{URL: rc.URL + "/moved"}, 200, true, ""},
		{"redirects off: the 302 is the answer", HTTPSettings{URL: rc.URL + "/moved", FollowRedirects: &no}, 302, false, ""},
		{"redirects off, 3xx a success", HTTPSettings{URL: rc.URL + "/moved", FollowRedirects: &no, SuccessStatus: []string{"2xx", "302"}}, 302, true, ""},
		{"410 a success by range", HTTPSettings{URL: rc.URL + "/gone", SuccessStatus: []string{"400-410"}}, 410, true, ""},
		{"200 not in the ranges", HTTPSettings{URL: rc.URL, SuccessStatus: []string{"204"}}, 200, false, ""},
		{"args alone as the body", HTTPSettings{URL: rc.URL, Body: BodyArgs}, 200, true, `{"region":"eu","n":3}`},
	} {
		c.s.TLS = tls
		act := mustStart(t, Definition{HTTP: &c.s}, env)
		out, err := act.HandleOutput(context.Background(), testFire())
		if out.AnswerStatus != c.status || (err == nil) != c.ok {
			t.Errorf("%s: status %d err %v, want %d ok=%v", c.name, out.AnswerStatus, err, c.status, c.ok)
		}
		if c.bodyWant != "" && string(rc.last(t).Body) != c.bodyWant {
			t.Errorf("%s: body %s, want %s", c.name, rc.last(t).Body, c.bodyWant)
		}
	}
	// A redirect to another host keeps the plain headers and drops those
	// that carry a secret (and the Authorization).
	act := mustStart(t, Definition{HTTP: &HTTPSettings{URL: rc.URL + "/away", TLS: tls, Bearer: &SecretSource{Env: "K"},
		Headers: map[string]string{"X-Key": "${K}", "X-Team": "billing"}}}, env)
	if out, err := act.HandleOutput(context.Background(), testFire()); err != nil || out.AnswerStatus != http.StatusAccepted {
		t.Fatalf("cross-host redirect: %v %+v", err, out)
	}
	h := other.last(t).Header
	if h.Get("X-Key") != "" || h.Get("Authorization") != "" || h.Get("X-Team") != "billing" || h.Get("Idempotency-Key") == "" {
		t.Errorf("the other host got %v", h)
	}
	if h := rc.last(t).Header; h.Get("X-Key") != "secret-key-value" || h.Get("Authorization") != "Bearer secret-key-value" {
		t.Errorf("the first host got %v", h)
	}
}
