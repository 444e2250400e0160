package config

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// Every key of an action decodes from the file: an http action's
// headers, authorization, TLS, body, success statuses and redirects, and
// an exec action's env, dir, kill_grace and inherit_env as keys of the
// action itself.
func TestActionKeysDecode(t *testing.T) {
	cfg, err := Parse(`
notify:
  webhooks: [{name: ops, url: "https://hooks.example.com/${HOOK_PATH}", headers: {Authorization: "Bearer ${OPS_TOKEN}"}}]
jobs:
  close_day:
    http:
      url: https://billing.internal/close-day
      headers: {X-Api-Key: "${BILLING_KEY}", X-Team: billing}
      bearer: {file: /var/run/secrets/billing/token}
      tls: {ca_file: /etc/cronswap/billing-ca.pem, cert_file: /etc/cronswap/client.pem, key_file: /etc/cronswap/client-key.pem, server_name: billing.internal}
      body: args
      success_status: [2xx, 304]
      follow_redirects: false
  local:
    http: {url: "https://127.0.0.1:8443/", basic_auth: {username: cron, password: {env: LOCAL_PW}}, tls: {insecure_skip_verify: true}}
  report:
    exec: [/usr/local/bin/report, --daily]
    env: {REPORT_TOKEN: "${REPORT_TOKEN}", LANG: C.UTF-8}
    dir: /var/lib/report
    kill_grace: 30s
    inherit_env: false
`)
	if err != nil {
		t.Fatal(err)
	}
	h := cfg.Jobs["close_day"].HTTP
	if h.Headers["X-Api-Key"] != "${BILLING_KEY}" || h.Bearer.File != "/var/run/secrets/billing/token" || h.TLS.ServerName != "billing.internal" ||
		h.Body != "args" || !slices.Equal(h.SuccessStatus, []string{"2xx", "304"}) || h.FollowRedirects == nil || *h.FollowRedirects {
		t.Errorf("close_day: %+v", h)
	}
	if l := cfg.Jobs["local"].HTTP; l.BasicAuth.Password.Env != "LOCAL_PW" || !l.TLS.InsecureSkipVerify {
		t.Errorf("local: %+v", l)
	}
	r := cfg.Jobs["report"]
	if r.Env["REPORT_TOKEN"] != "${REPORT_TOKEN}" || r.Dir != "/var/lib/report" || r.KillGrace != 30*time.Second || r.InheritEnv == nil || *r.InheritEnv {
		t.Errorf("report: %+v", r.ExecSettings)
	}
	if got := cfg.NotifyEnvRefs(); !slices.Equal(got, []string{"HOOK_PATH", "OPS_TOKEN"}) {
		t.Errorf("NotifyEnvRefs = %q", got)
	}
}

func TestActionRulesOfTheConfiguration(t *testing.T) {
	for _, c := range []struct {
		name, yaml string
		want       []string // nil: accepted
	}{
		{"kill_grace of a third of the default lease", "jobs: {a: {exec: [x], kill_grace: 200s}}", nil},
		{"kill_grace over a third of the default lease", "jobs: {a: {exec: [x], kill_grace: 201s}}",
			[]string{"jobs.a: kill_grace 3m21s", "at most a third of lock.ttl (10m0s, so at most 3m20s)"}},
		{"kill_grace over a third of lock.ttl", "lock: {ttl: 30s}\njobs: {a: {exec: [x], kill_grace: 11s}}", []string{"kill_grace 11s", "at most 10s"}},
		{"insecure_skip_verify to loopback", `jobs: {a: {http: {url: "https://127.0.0.1:8443/", tls: {insecure_skip_verify: true}}}}`, nil},
		{"insecure_skip_verify to localhost", `jobs: {a: {http: {url: "https://localhost/", tls: {insecure_skip_verify: true}}}}`, nil},
		{"insecure_skip_verify to ::1", `jobs: {a: {http: {url: "https://[::1]:8443/", tls: {insecure_skip_verify: true}}}}`, nil},
		{"insecure_skip_verify elsewhere", `jobs: {a: {http: {url: "https://billing.internal/", tls: {insecure_skip_verify: true}}}}`,
			[]string{"jobs.a: http.tls.insecure_skip_verify", "loopback", `"billing.internal"`, "ca_file"}},
		{"a header name with a colon", `jobs: {a: {http: {url: "https://h/", headers: {"X-Api:Key": v}}}}`, []string{"jobs.a: http.headers", "not a header name"}},
		{"an unknown key", `jobs: {a: {http: {url: "https://h/", header: {X: v}}}}`, []string{"field header not found"}},
		{"env on an http action", `jobs: {a: {http: {url: "https://h/"}, env: {A: b}}}`, []string{"jobs.a: env: exec settings"}},
	} {
		_, err := Parse(c.yaml)
		if c.want == nil {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: accepted", c.name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", c.name, err, w)
			}
		}
	}
}

func TestURIPassword(t *testing.T) {
	for in, want := range map[string]string{
		"mongodb://127.0.0.1:27017/":                 "",
		"mongodb://alice@host/":                      "",
		"mongodb://alice:s3cr3t@host:27017/db":       "s3cr3t",
		"mongodb://alice:p@ss/w?rd@host/db?tls=true": "p@ss/w?rd",
		"mongodb+srv://u:p4ss@cluster0.example.net/": "p4ss",
	} {
		if got := URIPassword(in); got != want {
			t.Errorf("URIPassword(%q) = %q, want %q", in, got, want)
		}
		if want != "" && strings.Contains(RedactURI(in), want) {
			t.Errorf("RedactURI(%q) shows %q", in, want)
		}
	}
}
