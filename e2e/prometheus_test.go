package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cronswap/cronswap/internal/metrics"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/internal/testmongo"
	"github.com/cronswap/cronswap/internal/tracing/tracingtest"
)

// The shipped alert rules (deploy/prometheus/alerts.yaml) evaluated by a
// real Prometheus — Debian's prometheus package, which scripts/test.sh
// installs like chromium — scraping daemons on loopback every second, and
// routed by Debian's prometheus-alertmanager to a webhook in the test.

// scrapeEvery is the test Prometheus's scrape and evaluation interval.
const scrapeEvery = time.Second

// lookTool finds a program the test needs, or fails saying how to get it.
func lookTool(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found: install Debian's %s (scripts/test.sh does: apt-get install %s)", name, pkg, pkg)
	}
	return p
}

// freeAddr returns a loopback address with a port free at the time of the
// call.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// lockedBuffer collects a process's output.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startTool runs a program in its own process group until the test ends,
// then kills it; its output is logged when the test failed.
func startTool(t *testing.T, bin string, args ...string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		if t.Failed() {
			t.Logf("%s output:\n%s", filepath.Base(bin), out.String())
		}
	})
}

// waitHTTPOK waits until GET u answers 200.
func waitHTTPOK(t *testing.T, u, what string) {
	t.Helper()
	waitFor(t, 60*time.Second, what, func() bool {
		resp, err := http.Get(u)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// promServer is a running Prometheus.
type promServer struct {
	t   *testing.T
	url string
}

// startPrometheus runs Prometheus with the shipped rules, scraping targets
// as job cronswap, sending its alerts to alertmanager (host:port) unless
// it is empty.
func startPrometheus(t *testing.T, targets []string, alertmanager string) *promServer {
	t.Helper()
	bin := lookTool(t, "prometheus", "prometheus")
	root, err := testmongo.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	quoted := make([]string, len(targets))
	for i, target := range targets {
		quoted[i] = strconv.Quote(target)
	}
	alerting := ""
	if alertmanager != "" {
		alerting = fmt.Sprintf("alerting:\n  alertmanagers:\n    - static_configs:\n        - targets: [%q]\n", alertmanager)
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: %[1]s
  scrape_timeout: %[1]s
  evaluation_interval: %[1]s
rule_files:
  - %[2]q
%[3]sscrape_configs:
  - job_name: cronswap
    static_configs:
      - targets: [%[4]s]
`, scrapeEvery, filepath.Join(root, "deploy", "prometheus", "alerts.yaml"), alerting, strings.Join(quoted, ", "))
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "prometheus.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	startTool(t, bin, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--enable-feature=exemplar-storage")
	p := &promServer{t: t, url: "http://" + addr}
	waitHTTPOK(t, p.url+"/-/ready", "Prometheus ready")
	return p
}

// api GETs a Prometheus API path and decodes its data field into v.
func (p *promServer) api(path string, v any) error {
	resp, err := http.Get(p.url + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var env struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return fmt.Errorf("GET %s: %w in %s", path, err, body)
	}
	if env.Status != "success" {
		return fmt.Errorf("GET %s: %s", path, env.Error)
	}
	return json.Unmarshal(env.Data, v)
}

// promSample is one element of an instant vector.
type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

func (s promSample) float() float64 {
	str, _ := s.Value[1].(string)
	f, _ := strconv.ParseFloat(str, 64)
	return f
}

// query evaluates expr now; an invalid query is an error.
func (p *promServer) query(expr string) ([]promSample, error) {
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := p.api("/api/v1/query?query="+url.QueryEscape(expr), &data); err != nil {
		return nil, err
	}
	var out []promSample
	if data.ResultType == "vector" {
		if err := json.Unmarshal(data.Result, &out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// value returns the single value expr evaluates to, if it has exactly one.
func (p *promServer) value(expr string) (float64, bool) {
	p.t.Helper()
	s, err := p.query(expr)
	if err != nil {
		p.t.Fatal(err)
	}
	if len(s) != 1 {
		return 0, false
	}
	return s[0].float(), true
}

// promAlert is an alert as /api/v1/alerts lists it: pending or firing.
type promAlert struct {
	Labels map[string]string `json:"labels"`
	State  string            `json:"state"`
}

func (p *promServer) alerts() []promAlert {
	p.t.Helper()
	var data struct {
		Alerts []promAlert `json:"alerts"`
	}
	if err := p.api("/api/v1/alerts", &data); err != nil {
		p.t.Fatal(err)
	}
	return data.Alerts
}

// promRule is an alerting rule as /api/v1/rules lists it.
type promRule struct {
	Name      string  `json:"name"`
	Duration  float64 `json:"duration"` // its for:, in seconds
	Health    string  `json:"health"`
	LastError string  `json:"lastError"`
}

func (p *promServer) rules() []promRule {
	p.t.Helper()
	var data struct {
		Groups []struct {
			Rules []promRule `json:"rules"`
		} `json:"groups"`
	}
	if err := p.api("/api/v1/rules?type=alert", &data); err != nil {
		p.t.Fatal(err)
	}
	var out []promRule
	for _, g := range data.Groups {
		out = append(out, g.Rules...)
	}
	return out
}

func (p *promServer) rule(name string) promRule {
	p.t.Helper()
	for _, r := range p.rules() {
		if r.Name == name {
			return r
		}
	}
	p.t.Fatalf("no alerting rule %s loaded from alerts.yaml", name)
	return promRule{}
}

// webhookSink records the alerts Alertmanager posts to it.
type webhookSink struct {
	*httptest.Server
	mu     sync.Mutex
	alerts []promAlert // state is the notification's status: firing or resolved
}

func newWebhookSink(t *testing.T) *webhookSink {
	w := &webhookSink{}
	w.Server = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		var msg struct {
			Alerts []struct {
				Status string            `json:"status"`
				Labels map[string]string `json:"labels"`
			} `json:"alerts"`
		}
		if err := json.NewDecoder(r.Body).Decode(&msg); err != nil {
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		w.mu.Lock()
		for _, a := range msg.Alerts {
			w.alerts = append(w.alerts, promAlert{Labels: a.Labels, State: a.Status})
		}
		w.mu.Unlock()
	}))
	t.Cleanup(w.Close)
	return w
}

func (w *webhookSink) received(name string, labels map[string]string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, a := range w.alerts {
		if a.Labels["alertname"] == name && a.State == "firing" && hasLabels(a.Labels, labels) {
			return true
		}
	}
	return false
}

func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// startAlertmanager runs Alertmanager routing every alert to webhook at
// once, and returns its host:port.
func startAlertmanager(t *testing.T, webhook string) string {
	t.Helper()
	bin := lookTool(t, "prometheus-alertmanager", "prometheus-alertmanager")
	dir := t.TempDir()
	cfg := fmt.Sprintf(`route:
  receiver: hook
  group_by: [alertname]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: hook
    webhook_configs:
      - url: %q
`, webhook)
	cfgPath := filepath.Join(dir, "alertmanager.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	startTool(t, bin, "--config.file="+cfgPath, "--storage.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--cluster.listen-address=")
	waitHTTPOK(t, "http://"+addr+"/-/ready", "Alertmanager ready")
	return addr
}

// alertState returns the state (pending, firing) of the alert name whose
// labels include labels, or "inactive".
func (p *promServer) alertState(name string, labels map[string]string) string {
	p.t.Helper()
	for _, a := range p.alerts() {
		if a.Labels["alertname"] == name && hasLabels(a.Labels, labels) {
			return a.State
		}
	}
	return "inactive"
}

// Every replica down across several slots of an every-5-seconds job, as
// in TestMissedSlotsWhileNoReplicaRuns: the replica restarted on its
// address (a StatefulSet pod keeps its name, and the shipped scrape job
// its instance label) records the gap, and the shipped CronswapMissedSlots
// alert turns firing within its for: (plus a scrape and an evaluation)
// and reaches Alertmanager's webhook. It relies on the replica exporting
// the reason's series at 0 from its start: a series that appears with its
// first count has nothing for increase() to increase from.
func TestPrometheusFiresTheMissedSlotsAlert(t *testing.T) {
	uri, db := setup(t)
	ledger := filepath.Join(t.TempDir(), "ledger")
	insert(t, db, sched("tick", "*/5 * * * * *"))
	cfg := writeConfig(t, daemonConfig{URI: uri, Database: db.Name(), InstanceID: "r1", Jobs: ledgerJobs(ledger), Listen: freeAddr(t)})
	d := startDaemon(t, cfg)
	d.waitReady()
	hook := newWebhookSink(t)
	p := startPrometheus(t, []string{d.addr}, startAlertmanager(t, hook.URL))
	waitFor(t, 30*time.Second, "Prometheus to have scraped the replica", func() bool {
		v, ok := p.value(`up{job="cronswap"}`)
		return ok && v == 1
	})

	decided := killAfterRun(t, db, "tick", d)
	waitFor(t, 60*time.Second, "three slots of downtime", func() bool { return time.Now().After(decided.Add(16 * time.Second)) })
	d = startDaemon(t, cfg)
	d.waitReady()
	m := checkGap(t, db, decided, 5*time.Second, 3)
	waitFor(t, 30*time.Second, "the gap counted on /metrics", func() bool {
		return d.scrapeMetrics()["cronswap_missed_slots_total,reason="+record.MissedNoReplica] == float64(m.Count)
	})
	counted := time.Now()

	rule := p.rule("CronswapMissedSlots")
	within := time.Duration(rule.Duration*float64(time.Second)) + 3*scrapeEvery + 3*scrapeEvery + 5*time.Second
	labels := map[string]string{"reason": record.MissedNoReplica}
	waitFor(t, within, fmt.Sprintf("CronswapMissedSlots firing within its for: (%gs) after the count", rule.Duration), func() bool {
		return p.alertState("CronswapMissedSlots", labels) == "firing"
	})
	t.Logf("%d missed slots counted; alert firing %s later (for: %gs)", m.Count, time.Since(counted).Round(100*time.Millisecond), rule.Duration)
	waitFor(t, 30*time.Second, "the alert at Alertmanager's webhook", func() bool {
		return hook.received("CronswapMissedSlots", labels)
	})
}

// Two healthy replicas running an every-second job: once both see each
// other, every shipped alert stays inactive (neither pending nor firing)
// on a real Prometheus evaluating them every second, every rule evaluates
// without error, and every query of the shipped dashboard is valid PromQL
// that Prometheus answers.
func TestPrometheusHealthyRunKeepsEveryAlertInactive(t *testing.T) {
	uri, db := setup(t)
	ledger := filepath.Join(t.TempDir(), "ledger")
	insert(t, db, sched("tick", "* * * * * *"))
	var ds []*daemon
	var targets []string
	for i := range 2 {
		d := startDaemon(t, writeConfig(t, daemonConfig{URI: uri, Database: db.Name(), InstanceID: fmt.Sprintf("r%d", i+1),
			Jobs: ledgerJobs(ledger), Listen: freeAddr(t)}))
		ds = append(ds, d)
		targets = append(targets, d.addr)
	}
	for _, d := range ds {
		d.waitReady()
	}
	p := startPrometheus(t, targets, "")
	waitFor(t, 60*time.Second, "both replicas up, streaming and seeing each other in Prometheus", func() bool {
		up, _ := p.value(`count(up{job="cronswap"} == 1)`)
		live, _ := p.value(`min(cronswap_members_live{job="cronswap"})`)
		streaming, _ := p.value(`sum(cronswap_watch_state{job="cronswap",state="streaming"})`)
		runs, _ := p.value(`sum(cronswap_runs_total{job="cronswap",status="succeeded"})`)
		return up == 2 && live == 2 && streaming == 2 && runs > 0
	})
	// What was pending while the replicas started clears at the next
	// evaluations.
	waitFor(t, 30*time.Second, "no alert pending or firing", func() bool { return len(p.alerts()) == 0 })
	until := time.Now().Add(30 * time.Second)
	for time.Now().Before(until) {
		if a := p.alerts(); len(a) != 0 {
			t.Fatalf("alerts during a healthy run: %+v", a)
		}
		time.Sleep(scrapeEvery)
	}
	rules := p.rules()
	if len(rules) == 0 {
		t.Fatal("no alerting rule loaded")
	}
	for _, r := range rules {
		if r.Health != "ok" {
			t.Errorf("rule %s: health %q, %s", r.Name, r.Health, r.LastError)
		}
	}

	root, err := testmongo.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	exprs, err := metrics.DashboardQueries(filepath.Join(root, "deploy", "grafana", "cronswap.json"))
	if err != nil {
		t.Fatal(err)
	}
	grafana := strings.NewReplacer(`$instance`, `.*`, `$__rate_interval`, `1m`)
	for _, e := range exprs {
		if _, err := p.query(grafana.Replace(e)); err != nil {
			t.Errorf("dashboard query does not evaluate: %v", err)
		}
	}
	if v, ok := p.value(`histogram_quantile(0.99, sum by (le) (rate(cronswap_fire_lateness_seconds_bucket{category="none"}[1m])))`); !ok || v <= 0 {
		t.Errorf("no start lateness of the every-second job in Prometheus (%v, %v)", v, ok)
	}
}

// A traced daemon's fire lateness carries its trace as an exemplar, which
// Prometheus (exemplar storage on) keeps when it scrapes in OpenMetrics:
// the exemplar's trace_id names a trace the OTLP receiver got, and that
// trace's root is the fire.
func TestPrometheusKeepsLatenessExemplars(t *testing.T) {
	uri, db := setup(t)
	rcv, endpoint := tracingtest.HTTP(t)
	insert(t, db, sched("heartbeat", "* * * * * *"))
	d := startDaemonEnv(t, binary, writeConfig(t, daemonConfig{URI: uri, Database: db.Name(), Listen: freeAddr(t)}), "info",
		"OTEL_EXPORTER_OTLP_ENDPOINT="+endpoint, "OTEL_BSP_SCHEDULE_DELAY=100")
	d.waitReady()
	p := startPrometheus(t, []string{d.addr}, "")
	var traceID string
	waitFor(t, 60*time.Second, "an exemplar of the lateness histogram in Prometheus", func() bool {
		var data []struct {
			Exemplars []struct {
				Labels map[string]string `json:"labels"`
			} `json:"exemplars"`
		}
		now := time.Now()
		q := fmt.Sprintf("/api/v1/query_exemplars?query=%s&start=%d&end=%d",
			url.QueryEscape(`cronswap_fire_lateness_seconds_bucket{job="cronswap"}`), now.Add(-time.Minute).Unix(), now.Unix()+1)
		if err := p.api(q, &data); err != nil {
			t.Fatal(err)
		}
		for _, series := range data {
			for _, e := range series.Exemplars {
				if id := e.Labels[metrics.ExemplarTraceID]; id != "" {
					traceID = id
					return true
				}
			}
		}
		return false
	})
	waitFor(t, 30*time.Second, "the exemplar's trace at the receiver", func() bool {
		for _, s := range rcv.Spans() {
			if s.TraceID == traceID && s.Name == "cronswap.fire" && s.Attributes["job_id"] == "heartbeat" {
				return true
			}
		}
		return false
	})
}
