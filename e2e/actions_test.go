package e2e

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/internal/testtls"
)

// hit is one request the receiver saw.
type hit struct {
	path, key, fence, attempt, runID, slot string
}

// echoReceiver is an HTTPS server on loopback with its own CA that answers
// every request by echoing its credentials (as a careless service would),
// failing the first attempt of each slot with 500.
type echoReceiver struct {
	*httptest.Server
	ca   *testtls.CA
	mu   sync.Mutex
	hits []hit
}

func newEchoReceiver(t *testing.T) *echoReceiver {
	rc := &echoReceiver{ca: testtls.NewCA(t, "receiver")}
	rc.Server = testtls.NewServer(t, rc.ca, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		h := hit{path: r.URL.Path, key: r.Header.Get("Idempotency-Key"), fence: r.Header.Get("X-Cronswap-Fence"),
			attempt: r.Header.Get("X-Cronswap-Attempt"), runID: r.Header.Get("X-Cronswap-Run-Id"), slot: r.Header.Get("X-Cronswap-Scheduled-At")}
		rc.mu.Lock()
		rc.hits = append(rc.hits, h)
		rc.mu.Unlock()
		user, pass, _ := r.BasicAuth()
		echo, _ := json.Marshal(map[string]string{"authorization": r.Header.Get("Authorization"), "api_key": r.Header.Get("X-Api-Key"),
			"user": user, "password": pass})
		if h.attempt == "1" {
			w.WriteHeader(http.StatusInternalServerError)
		}
		fmt.Fprintf(w, "attempt %s of %s saw %s", h.attempt, h.slot, echo)
	}))
	return rc
}

func (rc *echoReceiver) seen(path string) []hit {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []hit
	for _, h := range rc.hits {
		if h.path == path {
			out = append(out, h)
		}
	}
	return out
}

func randomSecret(t *testing.T, name string) string {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return name + "-" + hex.EncodeToString(b)
}

// The daemon's http actions against an HTTPS service with its own CA: a
// bearer token from the environment and a header with ${NAME}, basic auth
// with the password from a file. The service fails each slot's first
// attempt: both attempts carry the slot's run id as Idempotency-Key, the
// attempt and fence headers are the record's, and the next slot has its
// own key; the answers are on the records and shown by runs get. The
// service echoes every credential, and an exec action prints its secret:
// no secret appears in the daemon's log (also a goroutine dump, what a
// panic prints), the database, any /api/* answer, the page, runs
// list/get, explain, schedules list/get; and the program's environment
// holds neither the listener token, nor the Mongo URI, nor the variables
// the configuration reads secrets from.
func TestActionsSecretsNeverShown(t *testing.T) {
	uri, db := setup(t)
	rc := newEchoReceiver(t)
	hooks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.Copy(io.Discard, r.Body) }))
	t.Cleanup(hooks.Close)
	secrets := map[string]string{
		"CRONSWAP_HTTP_TOKEN": randomSecret(t, "listener"),
		"BILLING_TOKEN":       randomSecret(t, "billing"),
		"API_KEY":             randomSecret(t, "apikey"),
		"REPORT_SECRET":       randomSecret(t, "report"),
		"HOOK_TOKEN":          randomSecret(t, "hook"),
	}
	password := randomSecret(t, "password")
	pwFile := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(pwFile, []byte(password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	leaks := []string{password, base64.StdEncoding.EncodeToString([]byte("cron:" + password))}
	for _, v := range secrets {
		leaks = append(leaks, v)
	}
	jobs := fmt.Sprintf(`
  billing:
    http:
      url: %[1]q
      headers: {X-Api-Key: "${API_KEY}", X-Team: billing}
      bearer: {env: BILLING_TOKEN}
      tls: {ca_file: %[2]q}
    retry: {attempts: 2, backoff: 1s}
  basic:
    http:
      url: %[3]q
      basic_auth: {username: cron, password: {file: %[4]q}}
      tls: {ca_file: %[2]q}
  leaky:
    exec: ["sh", "-c", "echo token=$REPORT_TOKEN $CRONSWAP_HTTP_TOKEN $BILLING_TOKEN; env | cut -d= -f1 | grep -E '^(CRONSWAP_|BILLING|API_KEY|REPORT|HOOK|PATH$)' | sort | tr '\\n' ' '; echo; echo token=$REPORT_TOKEN >&2; exit 1"]
    env: {REPORT_TOKEN: "${REPORT_SECRET}"}
`, rc.URL+"/billing", rc.ca.CertFile, rc.URL+"/basic", pwFile)
	extra := fmt.Sprintf("notify:\n  webhooks: [{name: ops, url: %q, headers: {Authorization: \"Bearer ${HOOK_TOKEN}\"}}]\n", hooks.URL)
	cfg := writeConfig(t, daemonConfig{URI: uri, Database: db.Name(), Extra: extra, Jobs: jobs})
	env := []string{"CRONSWAP_MONGO_URI=" + uri}
	for k, v := range secrets {
		env = append(env, k+"="+v)
	}
	d := startDaemonEnv(t, binary, cfg, "debug", env...)
	api := func(path string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, d.url(path), nil)
		req.Header.Set("Authorization", "Bearer "+secrets["CRONSWAP_HTTP_TOKEN"])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// The live events, read while the runs happen.
	var events strings.Builder
	evCtx, stopEvents := context.WithCancel(context.Background())
	evDone := make(chan struct{})
	go func() {
		defer close(evDone)
		req, _ := http.NewRequestWithContext(evCtx, http.MethodGet, d.url("/api/events"), nil)
		req.Header.Set("Authorization", "Bearer "+secrets["CRONSWAP_HTTP_TOKEN"])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			events.WriteString(sc.Text() + "\n")
		}
	}()

	insert(t, db, sched("billing", "*/5 * * * * *"), sched("basic", "*/5 * * * * *"), sched("leaky", "*/5 * * * * *"))
	// Two slots of billing, each with its two attempts, ended.
	var billing []record.RunDoc
	waitFor(t, 60*time.Second, "two slots of billing, each retried once and succeeded", func() bool {
		billing = allRuns(t, db, bson.D{{Key: "job_id", Value: "billing"}, {Key: "status", Value: record.StatusSucceeded}})
		return len(billing) >= 2 && len(allRuns(t, db, bson.D{{Key: "job_id", Value: "leaky"}, {Key: "status", Value: record.StatusFailed}})) >= 1 &&
			len(allRuns(t, db, bson.D{{Key: "job_id", Value: "basic"}, {Key: "status", Value: record.StatusSucceeded}})) >= 1
	})
	stopEvents()
	<-evDone

	hits := rc.seen("/billing")
	byRun := map[string][]hit{}
	for _, h := range hits {
		byRun[h.runID] = append(byRun[h.runID], h)
	}
	keys := map[string]bool{}
	for _, run := range billing[:2] {
		hs := byRun[run.ID]
		if len(hs) != 2 || len(run.Attempts) != 2 {
			t.Fatalf("run %s: requests %+v, attempts %+v: want two of each", run.ID, hs, run.Attempts)
		}
		for i, h := range hs {
			a := run.Attempts[i]
			if h.key != run.ID || h.attempt != strconv.Itoa(a.Attempt) || h.fence != strconv.FormatInt(a.Fence, 10) ||
				h.slot != run.ScheduledAt.UTC().Format(time.RFC3339) {
				t.Errorf("request %+v of attempt %+v of run %s: want the run id as the key, the attempt's number and fence (its CRONSWAP_FENCE)", h, a, run.ID)
			}
		}
		if a1 := run.Attempts[0]; a1.AnswerStatus != http.StatusInternalServerError || a1.Fence != record.FenceOf(run.ScheduledAt) {
			t.Errorf("run %s: first attempt %+v, want answered 500 at the slot's fence", run.ID, a1)
		}
		if run.AnswerStatus != http.StatusOK || !strings.HasPrefix(run.Answer, "attempt 2 of ") || !strings.Contains(run.Answer, `"authorization":"Bearer [redacted]"`) {
			t.Errorf("run %s: answer %d %q, want the second attempt's, its echoed token redacted", run.ID, run.AnswerStatus, run.Answer)
		}
		keys[hs[0].key] = true
	}
	if len(keys) != 2 {
		t.Errorf("two slots sent the keys %v, want one each", keys)
	}

	leaky := allRuns(t, db, bson.D{{Key: "job_id", Value: "leaky"}, {Key: "status", Value: record.StatusFailed}})[0]
	if !strings.HasPrefix(leaky.Stdout, "token=[redacted]") || leaky.Stderr != "token=[redacted]" {
		t.Errorf("leaky: stdout %q stderr %q", leaky.Stdout, leaky.Stderr)
	}
	names := strings.Fields(strings.SplitN(leaky.Stdout, "\n", 2)[1])
	for _, want := range []string{"CRONSWAP_RUN_ID", "CRONSWAP_FENCE", "PATH", "REPORT_TOKEN"} {
		if !contains(names, want) {
			t.Errorf("the program's environment %v lacks %s", names, want)
		}
	}
	for _, banned := range []string{"CRONSWAP_HTTP_TOKEN", "CRONSWAP_MONGO_URI", "BILLING_TOKEN", "API_KEY", "REPORT_SECRET", "HOOK_TOKEN"} {
		if contains(names, banned) {
			t.Errorf("the program's environment holds %s: %v", banned, names)
		}
	}

	// Every channel, read now that the runs happened.
	channels := map[string]string{"events": events.String()}
	for _, p := range []string{"/api/schedules", "/api/schedules/billing", "/api/schedules/billing/timeline?from=-10m",
		"/api/schedules/leaky/timeline?from=-10m", "/api/schedules/basic/timeline?from=-10m", "/api/schedules/billing/detail",
		"/api/schedules/leaky/detail", "/api/status", "/api/overview", "/api/schedule-rows", "/api/openapi.json", "/ui/",
		"/ui/job.js", "/metrics"} {
		code, body := api(p)
		if code != http.StatusOK {
			t.Errorf("GET %s: %d %s", p, code, body)
		}
		channels["GET "+p] = body
	}
	var tl struct {
		Entries []struct {
			Kind         string `json:"kind"`
			AnswerStatus int    `json:"answer_status"`
			Answer       string `json:"answer"`
		} `json:"entries"`
	}
	if err := json.Unmarshal([]byte(channels["GET /api/schedules/billing/timeline?from=-10m"]), &tl); err != nil {
		t.Fatal(err)
	}
	answered := 0
	for _, e := range tl.Entries {
		if e.Kind == "run" && e.AnswerStatus == http.StatusOK && strings.HasPrefix(e.Answer, "attempt 2 of") {
			answered++
		}
	}
	if answered < 2 {
		t.Errorf("the timeline shows %d answered runs: %+v", answered, tl.Entries)
	}
	runIDs := []string{billing[0].ID, leaky.ID}
	for _, r := range allRuns(t, db, bson.D{{Key: "job_id", Value: "basic"}}) {
		runIDs = append(runIDs, r.ID)
	}
	for _, id := range runIDs {
		channels["runs get "+id] = cliOK(t, cfg, "runs", "get", id)
		channels["runs get -o json "+id] = cliOK(t, cfg, "runs", "get", id, "-o", "json")
	}
	if out := channels["runs get "+billing[0].ID]; !strings.Contains(out, "ANSWER STATUS  200\n") || !strings.Contains(out, "ANSWER:\n  attempt 2 of") {
		t.Errorf("runs get of an http run:\n%s", out)
	}
	channels["runs list"] = cliOK(t, cfg, "runs", "list")
	channels["runs list -o json"] = cliOK(t, cfg, "runs", "list", "-o", "json")
	for _, job := range []string{"billing", "basic", "leaky"} {
		channels["explain "+job] = cliOK(t, cfg, "explain", job, "--from", "-10m")
		channels["explain -o json "+job] = cliOK(t, cfg, "explain", job, "--from", "-10m", "-o", "json")
		channels["schedules get "+job] = cliOK(t, cfg, "schedules", "get", job)
	}
	if out := channels["explain billing"]; !strings.Contains(out, "answered 200") {
		t.Errorf("explain billing does not say what was answered:\n%s", out)
	}
	channels["schedules list"] = cliOK(t, cfg, "schedules", "list")
	for _, coll := range []string{record.RunsCollection, "notifications", "schedule_history", "job_locks"} {
		cur, err := db.Collection(coll).Find(testCtx(t), bson.D{})
		if err != nil {
			t.Fatal(err)
		}
		var docs []bson.M
		if err := cur.All(testCtx(t), &docs); err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(docs)
		channels["collection "+coll] = string(b)
	}
	// A goroutine dump is what a panic prints: the daemon's stderr after
	// SIGQUIT is its whole log and every goroutine's stack.
	d.signal(syscall.SIGQUIT)
	_ = d.wait(30 * time.Second)
	channels["daemon stderr"] = d.rawLog()
	if !strings.Contains(channels["daemon stderr"], "goroutine ") {
		t.Errorf("no goroutine dump after SIGQUIT")
	}
	for name, text := range channels {
		for _, leak := range leaks {
			if strings.Contains(text, leak) {
				i := strings.Index(text, leak)
				t.Errorf("%s shows a secret: …%s…", name, text[max(0, i-80):min(len(text), i+len(leak)+20)])
			}
		}
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// `cronswap run` refuses bad action settings at start, before it
// connects, exiting 1 with a message naming the job and the setting.
func TestRunRefusesBadActionSettings(t *testing.T) {
	dir := t.TempDir()
	ca := testtls.NewCA(t, "ca")
	client, other := ca.Client("client"), ca.Client("other")
	// A directory where the file should be: unreadable as a file, also
	// to root (which reads a file of mode 0).
	unreadable := filepath.Join(dir, "unreadable.pem")
	if err := os.Mkdir(unreadable, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, job string
		want      []string
	}{
		{"an unset variable", `{http: {url: "https://127.0.0.1:1/", headers: {X-Api-Key: "${E2E_UNSET_VARIABLE}"}}}`,
			[]string{"jobs.hook: http.headers: environment variable E2E_UNSET_VARIABLE not set"}},
		{"a missing CA file", fmt.Sprintf(`{http: {url: "https://127.0.0.1:1/", tls: {ca_file: %q}}}`, filepath.Join(dir, "nope.pem")),
			[]string{"jobs.hook: http.tls.ca_file", "no such file or directory"}},
		{"an unreadable CA file", fmt.Sprintf(`{http: {url: "https://127.0.0.1:1/", tls: {ca_file: %q}}}`, unreadable),
			[]string{"jobs.hook: http.tls.ca_file", "is a directory"}},
		{"a key that does not match its certificate", fmt.Sprintf(`{http: {url: "https://127.0.0.1:1/", tls: {cert_file: %q, key_file: %q}}}`, client.CertFile, other.KeyFile),
			[]string{"jobs.hook: http.tls.cert_file", "private key does not match public key"}},
		{"insecure_skip_verify to another host", `{http: {url: "https://billing.example.com/", tls: {insecure_skip_verify: true}}}`,
			[]string{"jobs.hook: http.tls.insecure_skip_verify: only to a loopback host"}},
		{"a header name with a colon", `{http: {url: "https://127.0.0.1:1/", headers: {"X-Api:Key": v}}}`,
			[]string{"jobs.hook: http.headers: \"X-Api:Key\" is not a header name"}},
		{"a header name with a newline", `{http: {url: "https://127.0.0.1:1/", headers: {"X-Api\nKey": v}}}`,
			[]string{"jobs.hook: http.headers: \"X-Api\\nKey\" is not a header name"}},
	} {
		// Port 1: nothing answers there, and it is never asked.
		cfg := writeConfig(t, daemonConfig{URI: "mongodb://127.0.0.1:1/", Database: "x", Jobs: "\n  hook: " + c.job + "\n"})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := exec.CommandContext(ctx, binary, "run", "--config", cfg)
		cmd.Env = append(os.Environ(), "CRONSWAP_MONGO_URI=", "CRONSWAP_CONFIG=", "CRONSWAP_INSTANCE_ID=")
		out, err := cmd.CombinedOutput()
		cancel()
		if code := cmd.ProcessState.ExitCode(); err == nil || code != 1 {
			t.Errorf("%s: exit %d (%v), want 1:\n%s", c.name, code, err, out)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(string(out), w) {
				t.Errorf("%s: the output does not say %q:\n%s", c.name, w, out)
			}
		}
	}
}
