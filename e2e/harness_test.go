// Package e2e runs the cronswap binary against a MongoDB-wire server (the
// project's test server, or CRONSWAP_MONGO_URI) and drives it the way an
// operator does: mongosh one-liners, signals, HTTP.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/internal/httpapi"
	"github.com/cronswap/cronswap/internal/testmongo"
	"github.com/cronswap/cronswap/schedule"
)

// binary is the cronswap binary built once for the whole test run.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "cronswap-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "cronswap")
	root, err := testmongo.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	build := exec.Command("go", "build", "-race", "-o", binary, ".")
	build.Dir = root
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building cronswap:", err)
		os.Exit(1)
	}
	testmongo.Main(m, nil)
	os.RemoveAll(dir)
}

// logLine is one JSON log record of the daemon.
type logLine map[string]any

func (l logLine) str(k string) string { s, _ := l[k].(string); return s }

// daemon is a running cronswap process.
type daemon struct {
	t       *testing.T
	cmd     *exec.Cmd
	addr    string
	cfgPath string

	mu    sync.Mutex
	lines []logLine
	raw   bytes.Buffer
	done  chan struct{}
	exit  error
}

// daemonConfig is what a test varies in the config file.
type daemonConfig struct {
	URI        string
	Database   string
	InstanceID string
	// Extra is appended to the generated YAML (top-level keys).
	Extra string
	// Watch is appended to the watch: section (indented keys, e.g. "  mode: poll\n").
	Watch string
	// Jobs is the YAML of the jobs: section; default has the example actions.
	Jobs string
	// HTTP is appended to the http: section (indented keys, e.g.
	// "  tokens_file: /x\n").
	HTTP string
	// Listen is the HTTP listen address; default 127.0.0.1:0 (any free
	// port).
	Listen string
}

const defaultJobs = `
  daily_report:
    exec: ["sh", "-c", "true"]
  heartbeat:
    exec: ["sh", "-c", "true"]
  warm_cache:
    exec: ["sh", "-c", "true"]
  other:
    exec: ["sh", "-c", "true"]
`

func writeConfig(t *testing.T, c daemonConfig) string {
	t.Helper()
	if c.InstanceID == "" {
		c.InstanceID = "e2e-1"
	}
	if c.Jobs == "" {
		c.Jobs = defaultJobs
	}
	if c.Listen == "" {
		c.Listen = "127.0.0.1:0"
	}
	yaml := fmt.Sprintf(`mongo:
  uri: %q
  database: %q
instance_id: %q
http:
  listen: %s
%swatch:
  backoff_min: 50ms
  backoff_max: 1s
%sshutdown:
  grace: 20s
%s
jobs:%s`, c.URI, c.Database, c.InstanceID, c.Listen, c.HTTP, c.Watch, c.Extra, c.Jobs)
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// startDaemon runs `cronswap run` with the config and waits until it
// reports its HTTP address. It is killed when the test ends.
func startDaemon(t *testing.T, cfgPath string) *daemon {
	t.Helper()
	return startDaemonBinary(t, binary, cfgPath, "debug")
}

// startDaemonBinary is startDaemon with another build of the daemon (bin)
// and log level (level; startDaemon's is debug).
func startDaemonBinary(t *testing.T, bin, cfgPath, level string) *daemon {
	t.Helper()
	return startDaemonEnv(t, bin, cfgPath, level)
}

// startDaemonEnv is startDaemonBinary with variables (NAME=value) added
// to the daemon's environment.
func startDaemonEnv(t *testing.T, bin, cfgPath, level string, env ...string) *daemon {
	t.Helper()
	d := &daemon{t: t, cfgPath: cfgPath, done: make(chan struct{})}
	d.cmd = exec.Command(bin, "run", "--config", cfgPath, "--log-format", "json", "--log-level", level)
	d.cmd.Env = append(append(os.Environ(), "CRONSWAP_MONGO_URI=", "CRONSWAP_CONFIG=", "CRONSWAP_INSTANCE_ID="), env...)
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stderr, err := d.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go d.readLogs(stderr)
	t.Cleanup(func() {
		_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
		<-d.done
		if t.Failed() {
			t.Logf("daemon log (%s):\n%s", cfgPath, d.rawLog())
		}
	})
	l := d.waitLog("daemon started", func(l logLine) bool { return l.str("msg") == "cronswap started" })
	d.addr = l.str("http_listen")
	return d
}

func (d *daemon) readLogs(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l logLine
		line := sc.Bytes()
		d.mu.Lock()
		d.raw.Write(line)
		d.raw.WriteByte('\n')
		if json.Unmarshal(line, &l) == nil {
			d.lines = append(d.lines, l)
		}
		d.mu.Unlock()
	}
	d.exit = d.cmd.Wait()
	close(d.done)
}

func (d *daemon) rawLog() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.raw.String()
}

// findLog returns the first log record matching, if any.
func (d *daemon) findLog(match func(logLine) bool) (logLine, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, l := range d.lines {
		if match(l) {
			return l, true
		}
	}
	return nil, false
}

// waitLog waits for a log record matching.
func (d *daemon) waitLog(what string, match func(logLine) bool) logLine {
	d.t.Helper()
	var found logLine
	waitFor(d.t, 30*time.Second, what, func() bool {
		l, ok := d.findLog(match)
		found = l
		select {
		case <-d.done:
			if !ok {
				d.t.Fatalf("daemon exited (%v) before %s; log:\n%s", d.exit, what, d.rawLog())
			}
		default:
		}
		return ok
	})
	return found
}

// signal sends sig and, for SIGKILL, waits for the process to be gone.
func (d *daemon) signal(sig syscall.Signal) {
	d.t.Helper()
	if err := d.cmd.Process.Signal(sig); err != nil {
		d.t.Fatal(err)
	}
	if sig == syscall.SIGKILL {
		<-d.done
	}
}

// wait waits for the process to exit and returns its exit error.
func (d *daemon) wait(timeout time.Duration) error {
	d.t.Helper()
	select {
	case <-d.done:
		return d.exit
	case <-time.After(timeout):
		d.t.Fatalf("daemon did not exit within %s; log:\n%s", timeout, d.rawLog())
		return nil
	}
}

func (d *daemon) url(path string) string { return "http://" + d.addr + path }

// get fetches path and decodes the JSON answer into v; it returns the status.
func (d *daemon) get(path string, v any) int {
	d.t.Helper()
	resp, err := http.Get(d.url(path))
	if err != nil {
		d.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if v != nil && resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(body, v); err != nil {
			d.t.Fatalf("GET %s: %v in %s", path, err, body)
		}
	}
	return resp.StatusCode
}

func (d *daemon) waitReady() {
	d.t.Helper()
	waitFor(d.t, 30*time.Second, "readyz 200", func() bool { return d.get("/readyz", nil) == http.StatusOK })
}

// apiSchedule is an element of /api/schedules, decoded with the API's own type.
type apiSchedule = httpapi.Schedule

func (d *daemon) schedules() map[string]apiSchedule {
	d.t.Helper()
	var list []apiSchedule
	if code := d.get("/api/schedules", &list); code != http.StatusOK {
		d.t.Fatalf("/api/schedules answered %d", code)
	}
	out := map[string]apiSchedule{}
	for _, s := range list {
		// A refused document whose _id is not a job id is listed under
		// its rendering: keep it apart from the job of that id.
		key := s.ID
		if s.InvalidID {
			key = schedule.RefusedKey(s.ID)
		}
		out[key] = s
	}
	return out
}

// armedExprs maps armed (enabled, valid) job ids to their expressions.
func (d *daemon) armedExprs() map[string]string {
	out := map[string]string{}
	for id, s := range d.schedules() {
		if s.Armed {
			out[id] = s.CronExpr
		}
	}
	return out
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// mongoshPath finds the mongosh the project installs (npm ci --prefix scripts).
func mongoshPath(t *testing.T) string {
	t.Helper()
	root, err := testmongo.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(root, "scripts", "node_modules", ".bin", "mongosh")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	if p, err := exec.LookPath("mongosh"); err == nil {
		return p
	}
	t.Fatalf("mongosh not found: run `npm ci --prefix scripts` (the README's test command does)")
	return ""
}

// mongosh runs one --eval against db, as an operator would.
func mongosh(t *testing.T, uri, db, eval string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, mongoshPath(t), dbURI(uri, db), "--quiet", "--norc", "--eval", eval)
	cmd.Env = append(os.Environ(), "MONGOSH_SKIP_NODE_VERSION_CHECK=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("mongosh --eval %s: %v\n%s", eval, err, out)
	}
	return string(out)
}

// dbURI puts the database name into a connection string's path.
func dbURI(uri, db string) string {
	base, query, _ := strings.Cut(uri, "?")
	scheme, rest, _ := strings.Cut(base, "://")
	host, _, _ := strings.Cut(rest, "/")
	out := scheme + "://" + host + "/" + db
	if query != "" {
		out += "?" + query
	}
	return out
}

// setup gives a test its own database and a client on it.
func setup(t *testing.T) (uri string, db *mongo.Database) {
	t.Helper()
	client := testmongo.Client(t)
	db = testmongo.NewDatabase(t, client)
	return testmongo.Shared(t).URI, db
}

func insert(t *testing.T, db *mongo.Database, docs ...bson.D) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, d := range docs {
		if _, err := db.Collection("schedules").InsertOne(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
}

func sched(id, expr string) bson.D {
	return bson.D{{Key: "_id", Value: id}, {Key: "cron_expr", Value: expr}, {Key: "updated_at", Value: time.Now()}}
}

// collectionExprs maps each valid, enabled document of the collection to
// its expression — what the daemon must have armed.
func collectionExprs(t *testing.T, db *mongo.Database) map[string]string {
	t.Helper()
	out := map[string]string{}
	for id, st := range collectionState(t, db) {
		if st.Enabled {
			out[id] = st.Expr
		}
	}
	return out
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
