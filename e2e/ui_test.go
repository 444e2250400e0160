package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/internal/members"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/internal/testmongo"
	"github.com/cronswap/cronswap/internal/triggers"
)

// Environment of the browser tests (docs/testing.md).
const (
	// envChromium points the browser tests at a Chromium other than /usr/bin/chromium.
	envChromium = "CRONSWAP_CHROMIUM"
	// envUIScreens names a directory TestStatusPageInBrowser copies its screenshots into.
	envUIScreens = "CRONSWAP_UI_SCREENSHOTS"
	// envUI100k, when "0", skips TestStatusPage100k.
	envUI100k = "CRONSWAP_UI_100K"
	// envUIBenchOut names a file TestStatusPage100k appends its measurements to; it also makes
	// the test measure a daemon built without the race detector.
	envUIBenchOut = "CRONSWAP_UI_BENCH_OUT"
	// envUIRuns is how many times TestStatusPage100k measures (default 3).
	envUIRuns = "CRONSWAP_UI_RUNS"
)

// uiTools is what the browser tests need: node, a Chromium, and the npm
// packages under scripts/node_modules.
type uiTools struct {
	node, chromium, root string
}

// needUITools finds node, Chromium and playwright-core. When one is missing
// the test is skipped, except in CI (CI=true), where it fails: there
// scripts/test.sh installs them, so a missing one is a broken setup.
func needUITools(t *testing.T) uiTools {
	t.Helper()
	missing := func(format string, args ...any) {
		t.Helper()
		msg := fmt.Sprintf(format, args...) + " (scripts/test.sh installs it)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	root, err := testmongo.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("node not found on PATH")
	}
	chrome := os.Getenv(envChromium)
	if chrome == "" {
		chrome = "/usr/bin/chromium"
	}
	if st, err := os.Stat(chrome); err != nil || st.Mode()&0o111 == 0 {
		missing("chromium not found at %s", chrome)
	}
	if _, err := os.Stat(filepath.Join(root, "scripts", "node_modules", "playwright-core", "package.json")); err != nil {
		missing("playwright-core not installed under scripts/node_modules")
	}
	return uiTools{node: node, chromium: chrome, root: root}
}

// runUIScript runs `node scripts/ui-test/<script>` with the extra
// environment, within timeout. It logs the script's stderr (its progress
// and failures) and returns its stdout; the test fails when the script
// exits non-zero.
func (u uiTools) runUIScript(t *testing.T, script string, timeout time.Duration, extraEnv ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, u.node, filepath.Join(u.root, "scripts", "ui-test", script))
	cmd.Dir = u.root
	cmd.Env = append(os.Environ(), envChromium+"="+u.chromium)
	cmd.Env = append(cmd.Env, extraEnv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	t.Logf("node %s (%.1f s):\n%s", script, time.Since(start).Seconds(), strings.TrimRight(stderr.String(), "\n"))
	if ctx.Err() != nil {
		t.Fatalf("node %s did not finish within %s", script, timeout)
	}
	if err != nil {
		t.Fatalf("node %s: %v\nstdout:\n%s", script, err, stdout.String())
	}
	return stdout.String()
}

// lastJSONLine decodes the last line of out (a script's result) into v.
func lastJSONLine(t *testing.T, out string, v any) {
	t.Helper()
	var last string
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			last = l
		}
	}
	if err := json.Unmarshal([]byte(last), v); err != nil {
		t.Fatalf("script result %q: %v", last, err)
	}
}

// uiJobsYAML is the jobs: section of the browser tests: one action that
// succeeds at once.
const uiJobsYAML = `
  ui_ok:
    exec: ["sh", "-c", "true"]
`

// uiSeedIDs are the jobs the browser test seeds (the ids browser.mjs expects).
var uiSeedIDs = []string{"seed-every-5s", "seed-billing", "seed-cleanup", "seed-broken", "seed-paused"}

// seedUIJobs inserts the browser tests' jobs: seed-every-5s runs every
// 5 s (category reports), seed-billing daily in Europe/Berlin (billing),
// seed-cleanup weekly in America/New_York (cleanup), seed-broken
// (reports), which browser.mjs breaks with a bad edit, and seed-paused
// (cleanup, enabled: false), a job all the same.
func seedUIJobs(t *testing.T, db *mongo.Database) {
	t.Helper()
	doc := func(id, expr, tz, category string) bson.D {
		d := bson.D{{Key: "_id", Value: id}, {Key: "cron_expr", Value: expr}, {Key: "job", Value: "ui_ok"},
			{Key: "category", Value: category}, {Key: "updated_at", Value: time.Now()}}
		if tz != "" {
			d = append(d, bson.E{Key: "timezone", Value: tz})
		}
		return d
	}
	insert(t, db,
		doc("seed-every-5s", "*/5 * * * * *", "", "reports"),
		doc("seed-billing", "0 0 6 * * *", "Europe/Berlin", "billing"),
		doc("seed-cleanup", "0 15 3 * * 0", "America/New_York", "cleanup"),
		doc("seed-broken", "0 0 12 * * *", "", "reports"),
		append(doc("seed-paused", "0 0 1 * * *", "", "cleanup"), bson.E{Key: "enabled", Value: false}),
	)
}

// succeededAfter reports whether job has a succeeded run of a slot after t0.
func succeededAfter(t *testing.T, db *mongo.Database, job string, t0 time.Time) bool {
	t.Helper()
	return len(allRuns(t, db, bson.D{{Key: "job_id", Value: job}, {Key: "status", Value: record.StatusSucceeded},
		{Key: "scheduled_at", Value: bson.D{{Key: "$gt", Value: t0}}}})) > 0
}

// TestStatusPageInBrowser drives the status page in headless Chromium
// (scripts/ui-test/browser.mjs) against a daemon that has really missed
// slots and really run: the seeded every-5-seconds job runs, every
// daemon is killed, two of its slots pass with none running, and the
// restarted daemon records them missed and runs the next slot; a second
// replica then joins, so that the jobs' ownership is split. The script
// then checks the page's first paint (loading, never "offline"), that it
// loads cleanly, that each member's owned jobs equal `cronswap members
// list`'s, that it lists the jobs, shows a mongosh edit within 2 s and a
// bad edit's error on its row, filters by category, shows a `cronswap
// run-now` as the job's last run, and shows the run and the missed slot
// on the job page; it takes the screenshots that CRONSWAP_UI_SCREENSHOTS
// asks to keep.
func TestStatusPageInBrowser(t *testing.T) {
	u := needUITools(t)
	uri, db := setup(t)
	seedUIJobs(t, db)
	cfg := writeConfig(t, daemonConfig{URI: uri, Database: db.Name(), InstanceID: "ui-1", Jobs: uiJobsYAML})
	d := startDaemon(t, cfg)
	d.waitReady()

	// A real miss: down across two slots of seed-every-5s.
	decided := killAfterRun(t, db, "seed-every-5s", d)
	waitFor(t, 60*time.Second, "two slots of downtime", func() bool { return time.Now().After(decided.Add(11 * time.Second)) })
	d = startDaemon(t, cfg)
	d.waitReady()
	waitFor(t, 60*time.Second, "the missed slots on record", func() bool { return len(missedRecords(t, db, "seed-every-5s")) > 0 })
	waitFor(t, 60*time.Second, "a run after the restart", func() bool {
		return succeededAfter(t, db, "seed-every-5s", decided.Add(10*time.Second))
	})

	// A second replica: ui-1 owns some of the jobs, not all.
	live := []members.Member{{ID: "ui-1"}, {ID: "ui-2"}}
	if owned := members.OwnedCounts(uiSeedIDs, live)["ui-1"]; owned == 0 || owned == len(uiSeedIDs) {
		t.Fatalf("ui-1 would own %d of the %d seeded jobs: pick instance ids that split them", owned, len(uiSeedIDs))
	}
	d2 := startDaemon(t, writeConfig(t, daemonConfig{URI: uri, Database: db.Name(), InstanceID: "ui-2", Jobs: uiJobsYAML}))
	d2.waitReady()
	waitFor(t, 60*time.Second, "both replicas live in ui-1's overview", func() bool {
		var ov struct {
			Members []struct{} `json:"members"`
		}
		return d.get("/api/overview", &ov) == http.StatusOK && len(ov.Members) == 2
	})

	screens := t.TempDir()
	resFile := filepath.Join(t.TempDir(), "result.json")
	u.runUIScript(t, "browser.mjs", 3*time.Minute,
		"CRONSWAP_UI_URL=http://"+d.addr,
		"CRONSWAP_UI_MONGO_URI="+dbURI(uri, db.Name()),
		"CRONSWAP_UI_MONGOSH="+mongoshPath(t),
		"CRONSWAP_UI_INSTANCE=ui-1",
		"CRONSWAP_UI_CLI="+binary,
		"CRONSWAP_UI_CONFIG="+cfg,
		"CRONSWAP_UI_JOBS="+strings.Join(uiSeedIDs, ","),
		"CRONSWAP_UI_SCREENS="+screens,
		"CRONSWAP_UI_RESULT="+resFile,
	)
	var res struct {
		Chromium    string  `json:"chromium"`
		EditToPage  float64 `json:"edit_to_page_ms"`
		PageProblem int     `json:"problems"`
	}
	data, err := os.ReadFile(resFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &res); err != nil {
		t.Fatal(err)
	}
	t.Logf("chromium %s: mongosh edit on the page after %.0f ms", res.Chromium, res.EditToPage)
	if dir := os.Getenv(envUIScreens); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"ui-overview.png", "ui-job.png"} {
			copyFile(t, filepath.Join(screens, f), filepath.Join(dir, f))
		}
		t.Logf("screenshots copied to %s", dir)
	}
}

// copyFile copies src to dst.
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestOpenAPIContract checks the live daemon against its OpenAPI document
// (scripts/ui-test/contract.mjs): the served document is valid 3.1 and the
// repository's file; every documented operation, called with its
// examples, answers as documented; bad parameters answer 400 and an
// unknown job 404 with the error schema; the page's actions (this daemon
// has a write connection, and its token is an operator's) answer their
// example bodies and refuse an unknown job, a form's body and another
// origin as documented; the event stream says hello; and, since this
// daemon has an HTTP token, nothing but /healthz and /readyz answers
// without it. The seeded jobs have run, so run fields and lock
// state are filled in.
func TestOpenAPIContract(t *testing.T) {
	u := needUITools(t)
	const token = "contract-test-token"
	t.Setenv("CRONSWAP_HTTP_TOKEN", token)
	uri, db := setup(t)
	seedUIJobs(t, db)
	// A write connection, so that the page's actions answer as documented.
	d := startDaemon(t, writeConfig(t, daemonConfig{URI: uri, Database: db.Name(), InstanceID: "api-1", Jobs: uiJobsYAML,
		HTTP: fmt.Sprintf("  write_mongo_uri: %q\n", withAppName(dbURI(uri, db.Name()), "cronswap-page-contract"))}))
	d.waitReady()
	start := time.Now()
	waitFor(t, 30*time.Second, "a run of seed-every-5s", func() bool { return succeededAfter(t, db, "seed-every-5s", start.Add(-5*time.Second)) })
	seedOperations(t, db, "seed-every-5s")
	out := u.runUIScript(t, "contract.mjs", 2*time.Minute,
		"CRONSWAP_UI_URL=http://"+d.addr,
		"CRONSWAP_UI_TOKEN="+token,
	)
	t.Logf("contract: %s", strings.TrimSpace(out))
}

// seedOperations gives job id one operation of each kind in its
// timeline, as mongosh would write them: a run-now request, a backfill
// request of one slot (refused by the daemons: from before the job's first
// sighting) and a resume after failures, each naming who.
func seedOperations(t *testing.T, db *mongo.Database, id string) {
	t.Helper()
	now := time.Now().UTC()
	slot := now.Add(-time.Hour).Truncate(time.Minute)
	if _, err := db.Collection(triggers.CollectionName).InsertMany(testCtx(t), []any{
		bson.D{{Key: "job_id", Value: id}, {Key: "requested_at", Value: now}, {Key: "requested_by", Value: "contract"}},
		bson.D{{Key: "_id", Value: triggers.BackfillIDPrefix + record.RunID(id, slot)}, {Key: "job_id", Value: id},
			{Key: "slot", Value: slot}, {Key: "requested_at", Value: now}, {Key: "requested_by", Value: "contract"}},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Collection(record.PausesCollection).InsertOne(testCtx(t), bson.D{{Key: "_id", Value: id},
		{Key: "state", Value: record.PauseStateResumed}, {Key: "paused_at", Value: now.Add(-time.Minute)},
		{Key: "resumed_at", Value: now}, {Key: "resumed_by", Value: "contract"}, {Key: "updated_at", Value: now}}); err != nil {
		t.Fatal(err)
	}
}

// seedBulk inserts n schedules bulk-000000 … in batches with insertMany:
// yearly expressions (1 January, the minute and hour varying) so none
// fires during the test, ten categories, the one action of uiJobsYAML.
func seedBulk(t *testing.T, db *mongo.Database, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const batch = 5000
	now := time.Now()
	coll := db.Collection("schedules")
	for i := 0; i < n; i += batch {
		docs := make([]any, 0, batch)
		for j := i; j < i+batch && j < n; j++ {
			docs = append(docs, bson.D{{Key: "_id", Value: fmt.Sprintf("bulk-%06d", j)},
				{Key: "cron_expr", Value: fmt.Sprintf("0 %d %d 1 1 *", j%60, (j/60)%24)},
				{Key: "job", Value: "ui_ok"}, {Key: "category", Value: fmt.Sprintf("cat-%d", j%10)},
				{Key: "updated_at", Value: now}})
		}
		if _, err := coll.InsertMany(ctx, docs); err != nil {
			t.Fatalf("insertMany at %d: %v", i, err)
		}
	}
}

// buildPlain builds the daemon without the race detector, for timings
// that are the daemon's and not the detector's.
func buildPlain(t *testing.T, root string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "cronswap")
	cmd := exec.Command("go", "build", "-o", out, ".")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	return out
}

// TestStatusPage100k opens the schedules view of a daemon holding 100,000
// jobs (scripts/ui-test/render100k.mjs) and logs its first render, page
// flip and search times; it asserts what the view shows (a page of rows,
// the total, the second page, the search's ten matches), never a time.
// It runs on a test server of its own, so the 100,000 documents and their
// oplog do not stay in the shared one. CRONSWAP_UI_100K=0 skips it;
// CRONSWAP_UI_BENCH_OUT=<file> measures a daemon built without the race
// detector and appends the numbers to that file (docs/BENCHMARKS.md).
func TestStatusPage100k(t *testing.T) {
	if os.Getenv(envUI100k) == "0" {
		t.Skip(envUI100k + "=0")
	}
	u := needUITools(t)
	const n = 100000
	srv, err := testmongo.Start(context.Background(), testmongo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !srv.External() {
		t.Cleanup(func() { _ = srv.Stop() })
	}
	client := testmongo.ClientFor(t, srv.URI)
	db := testmongo.NewDatabase(t, client)
	start := time.Now()
	seedBulk(t, db, n)
	seeded := time.Since(start)

	benchOut := os.Getenv(envUIBenchOut)
	bin, build := binary, "race"
	if benchOut != "" {
		bin, build = buildPlain(t, u.root), "plain"
	}
	cfg := writeConfig(t, daemonConfig{URI: srv.URI, Database: db.Name(), InstanceID: "big-1", Jobs: uiJobsYAML})
	// Info: at debug the daemon logs a line per job armed.
	d := startDaemonBinary(t, bin, cfg, "info")
	d.waitReady()
	waitFor(t, 2*time.Minute, "100,000 schedules armed", func() bool {
		var st struct {
			Armed int `json:"schedules_armed"`
		}
		return d.get("/api/status", &st) == http.StatusOK && st.Armed == n
	})
	armed := time.Since(start) - seeded
	runs := os.Getenv(envUIRuns)
	if runs == "" {
		runs = "3"
	}
	out := u.runUIScript(t, "render100k.mjs", 10*time.Minute,
		"CRONSWAP_UI_URL=http://"+d.addr,
		fmt.Sprintf("CRONSWAP_UI_TOTAL=%d", n),
		"CRONSWAP_UI_SEARCH=bulk-04217", "CRONSWAP_UI_SEARCH_TOTAL=10",
		"CRONSWAP_UI_RUNS="+runs,
	)
	var res struct {
		Median struct {
			FirstRender float64 `json:"first_render_ms"`
			PageFlip    float64 `json:"page_flip_ms"`
			Search      float64 `json:"search_ms"`
			Bytes       float64 `json:"first_render_bytes"`
		} `json:"median"`
	}
	lastJSONLine(t, out, &res)
	t.Logf("%d jobs (seeded in %.1f s, armed %.1f s later), %s build: median of %s runs: first render %.0f ms (%.0f kB), page flip %.0f ms, search %.0f ms",
		n, seeded.Seconds(), armed.Seconds(), build, runs, res.Median.FirstRender, res.Median.Bytes/1024, res.Median.PageFlip, res.Median.Search)
	if benchOut != "" {
		f, err := os.OpenFile(benchOut, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		load, _ := os.ReadFile("/proc/loadavg")
		fmt.Fprintf(f, "%s build=%s loadavg=%q %s\n", time.Now().UTC().Format(time.RFC3339), build,
			strings.TrimSpace(string(load)), strings.TrimSpace(out))
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStatusPageActionsInBrowser drives the page's actions in headless
// Chromium (scripts/ui-test/actions.mjs) against two daemons on one
// database with the same tokens file (an operator, a viewer): ui-ops with
// a write connection, ui-ro without. The operator runs a job now and sees
// the run in its timeline, disables and enables it, and retimes it
// through the form with the preview, after which the engine's next_run
// follows; the viewer sees no action and its POST is refused; a
// cross-origin form post with the operator's credentials is refused; and
// ui-ro offers the operator no action.
func TestStatusPageActionsInBrowser(t *testing.T) {
	u := needUITools(t)
	uri, db := setup(t)
	seedUIJobs(t, db)
	sum := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	const opToken, viewerToken = "operator-token-e2e", "viewer-token-e2e"
	tokens := filepath.Join(t.TempDir(), "tokens.yaml")
	if err := os.WriteFile(tokens, []byte(fmt.Sprintf("- name: alice\n  role: operator\n  sha256: %s\n- name: grafana\n  role: viewer\n  sha256: %s\n",
		sum(opToken), sum(viewerToken))), 0o600); err != nil {
		t.Fatal(err)
	}
	// The test server has no users: the write connection is the same
	// server under an application name of its own.
	writeURI := withAppName(dbURI(uri, db.Name()), "cronswap-page-e2e")
	ops := startDaemon(t, writeConfig(t, daemonConfig{URI: uri, Database: db.Name(), InstanceID: "ui-ops", Jobs: uiJobsYAML,
		HTTP: fmt.Sprintf("  tokens_file: %q\n  write_mongo_uri: %q\n", tokens, writeURI)}))
	ro := startDaemon(t, writeConfig(t, daemonConfig{URI: uri, Database: db.Name(), InstanceID: "ui-ro", Jobs: uiJobsYAML,
		HTTP: fmt.Sprintf("  tokens_file: %q\n", tokens)}))
	ops.waitReady()
	ro.waitReady()
	screens := t.TempDir()
	u.runUIScript(t, "actions.mjs", 4*time.Minute,
		"CRONSWAP_UI_URL=http://"+ops.addr,
		"CRONSWAP_UI_RO_URL=http://"+ro.addr,
		"CRONSWAP_UI_OPERATOR=alice:"+opToken,
		"CRONSWAP_UI_VIEWER=grafana:"+viewerToken,
		"CRONSWAP_UI_MONGO_URI="+dbURI(uri, db.Name()),
		"CRONSWAP_UI_MONGOSH="+mongoshPath(t),
		"CRONSWAP_UI_JOB=seed-cleanup",
		"CRONSWAP_UI_SCREENS="+screens,
	)
	if dir := os.Getenv(envUIScreens); dir != "" {
		copyFile(t, filepath.Join(screens, "ui-actions.png"), filepath.Join(dir, "ui-actions.png"))
	}
}

// withAppName adds an appName option to a connection string: a
// connection of its own to the same server (the page's write connection
// in the tests; the test server has no users to give it other
// credentials).
func withAppName(uri, name string) string {
	sep := "?"
	if strings.Contains(uri, "?") {
		sep = "&"
	}
	return uri + sep + "appName=" + name
}
