package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/internal/testmongo"
)

// readmeRecipes returns the mongosh one-liners of the README's "The first live edit" section, in order: the
// --eval of its shell block, then each statement of the list after it.
func readmeRecipes(t *testing.T) []string {
	t.Helper()
	root, err := testmongo.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## The first live edit\n")
	if !ok {
		t.Fatal(`README.md has no section "## The first live edit"`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var shell, list []string
	blocks := regexp.MustCompile("(?s)```(sh|js)\n(.*?)```").FindAllStringSubmatch(section, -1)
	for _, b := range blocks {
		switch b[1] {
		case "sh":
			for _, m := range regexp.MustCompile(`--eval \\?\s*'(db\.[^']*)'`).FindAllStringSubmatch(b[2], -1) {
				shell = append(shell, m[1])
			}
		case "js":
			for _, line := range strings.Split(b[2], "\n") {
				if line = strings.TrimSpace(line); strings.HasPrefix(line, "db.") {
					list = append(list, line)
				}
			}
		}
	}
	if len(shell) != 1 || len(list) < 5 {
		t.Fatalf("README's first live edit: found %d mongosh --eval and %d listed statements, want 1 and at least 5:\n%q\n%q",
			len(shell), len(list), shell, list)
	}
	return append(shell, list...)
}

// mongoshMayFail runs one --eval against db like mongosh, and returns its output and error (a refused write
// makes mongosh exit 1).
func mongoshMayFail(t *testing.T, uri, db, eval string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, mongoshPath(t), dbURI(uri, db), "--quiet", "--norc", "--eval", eval)
	cmd.Env = append(os.Environ(), "MONGOSH_SKIP_NODE_VERSION_CHECK=1")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// scheduleViews is each job's "cron_expr enabled zone" as the database holds it, as the daemon's /api/schedules
// shows it (a job with an error, or armed unlike enabled, shows so) and as `cronswap schedules list -o json` does.
func scheduleViews(t *testing.T, d *daemon, cfg string, db *mongo.Database) (database, api, cli map[string]string) {
	t.Helper()
	view := func(expr string, enabled bool, zone string) string {
		if zone == "" {
			zone = "UTC" // the config's default
		}
		return fmt.Sprintf("%q enabled=%v %s", expr, enabled, zone)
	}
	database = map[string]string{}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cur, err := db.Collection("schedules").Find(ctx, bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	var docs []struct {
		ID       string `bson:"_id"`
		CronExpr string `bson:"cron_expr"`
		Enabled  *bool  `bson:"enabled"`
		Timezone string `bson:"timezone"`
	}
	if err := cur.All(ctx, &docs); err != nil {
		t.Fatal(err)
	}
	for _, doc := range docs {
		database[doc.ID] = view(doc.CronExpr, doc.Enabled == nil || *doc.Enabled, doc.Timezone)
	}
	api = map[string]string{}
	for id, s := range d.schedules() {
		v := view(s.CronExpr, s.Enabled, s.Timezone)
		if s.LastError != "" || s.Armed != s.Enabled {
			v += fmt.Sprintf(" (armed=%v, error %q)", s.Armed, s.LastError)
		}
		api[id] = v
	}
	var list []struct {
		ID       string `json:"id"`
		CronExpr string `json:"cron_expr"`
		Enabled  bool   `json:"enabled"`
		Timezone string `json:"timezone"`
		Error    string `json:"error"`
	}
	if err := json.Unmarshal([]byte(cliOK(t, cfg, "schedules", "list", "-o", "json")), &list); err != nil {
		t.Fatalf("schedules list -o json: %v", err)
	}
	cli = map[string]string{}
	for _, s := range list {
		v := view(s.CronExpr, s.Enabled, s.Timezone)
		if s.Error != "" {
			v += fmt.Sprintf(" (error %q)", s.Error)
		}
		cli[s.ID] = v
	}
	return database, api, cli
}

// waitViewsAgree waits until the daemon's view equals the database's, then checks the CLI's against both; it
// returns the database's view.
func waitViewsAgree(t *testing.T, d *daemon, cfg string, db *mongo.Database, when string) map[string]string {
	t.Helper()
	var database, api, cli map[string]string
	deadline := time.Now().Add(30 * time.Second)
	for {
		database, api, cli = scheduleViews(t, d, cfg, db)
		if equalMaps(database, api) {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: the daemon's /api/schedules never matched the database within 30s:\ndatabase %v\ndaemon   %v\ncli      %v",
				when, database, api, cli)
			return database
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !equalMaps(database, cli) {
		t.Errorf("%s: `schedules list` disagrees with the database:\ndatabase %v\ncli      %v", when, database, cli)
	}
	return database
}

// TestReadmeRecipesTwice runs the README's own recipes as a new user who runs each of them twice in a row (and
// retries the insert with another time), against the daemon under the test server: the refused second insert
// must leave no trace, so the daemon's /api/schedules, `cronswap schedules list -o json` and the database agree,
// and the edit history has exactly the inserts that happened. Then `cronswap blackouts add` of the same id twice
// (verbatim, and with another window): refused, and the daemon must not log the refused window as in force.
func TestReadmeRecipesTwice(t *testing.T) {
	uri, db := setup(t)
	cfg := writeConfig(t, daemonConfig{URI: uri, Database: db.Name()})
	cliOK(t, cfg, "init")
	// the example schedules, as scripts/run-local.sh adds them
	mongosh(t, uri, db.Name(), `for (const s of [
  { _id: "daily_report", cron_expr: "0 9 * * *" },
  { _id: "heartbeat", cron_expr: "*/10 * * * * *", args: { greeting: "hello" } },
  { _id: "warm_cache", cron_expr: "*/15 * * * *", enabled: false },
]) { db.schedules.updateOne({ _id: s._id }, { $setOnInsert: { ...s, updated_at: new Date() } }, { upsert: true }); }`)
	d := startDaemon(t, cfg)
	d.waitReady()

	recipes := readmeRecipes(t)
	deleteAt := slices.IndexFunc(recipes, func(r string) bool { return strings.Contains(r, "deleteOne") })
	if deleteAt < 0 {
		t.Fatalf("no deleteOne among the README's recipes %q", recipes)
	}
	var inserted []string
	run := func(recipes []string) {
		for _, r := range recipes {
			attempts := []string{r, r}
			if strings.Contains(r, "insertOne") {
				retimed := regexp.MustCompile(`cron_expr: "0 2 `).ReplaceAllString(r, `cron_expr: "0 3 `)
				if retimed == r {
					t.Fatalf("the README's insert %q no longer sets cron_expr \"0 2 …\": update this test", r)
				}
				attempts = append(attempts, retimed)
				inserted = append(inserted, regexp.MustCompile(`_id: "([^"]+)"`).FindStringSubmatch(r)[1])
			}
			for i, a := range attempts {
				out, err := mongoshMayFail(t, uri, db.Name(), a)
				t.Logf("recipe %q (attempt %d): %v %s", a, i+1, err, strings.TrimSpace(out))
				switch {
				case i == 0 && err != nil:
					t.Fatalf("the README's recipe %q failed on its first run: %v\n%s", a, err, out)
				case strings.Contains(a, "insertOne") && i > 0 && !strings.Contains(out, "E11000"):
					t.Fatalf("inserting %q again: want E11000 duplicate key, got %v\n%s", a, err, out)
				}
			}
		}
	}
	run(recipes[:deleteAt])
	before := waitViewsAgree(t, d, cfg, db, "before the README's delete")
	for _, id := range inserted {
		if _, ok := before[id]; !ok {
			t.Fatalf("%s is not in the database after its insert: %v", id, before)
		}
	}
	run(recipes[deleteAt:])
	waitViewsAgree(t, d, cfg, db, "after all the README's recipes")

	// The history: the edits of one job are recorded in order, so once an edit of daily_report made after all
	// the recipes is recorded, every entry of the inserted jobs is.
	mongosh(t, uri, db.Name(), `db.schedules.updateOne({ _id: "daily_report" }, { $set: { cron_expr: "5 9 * * *", updated_by: "sentinel", updated_at: new Date() } })`)
	waitFor(t, 30*time.Second, "the sentinel edit in the history", func() bool {
		h := historyOf(t, db, "daily_report")
		return len(h) > 0 && strings.HasSuffix(h[len(h)-1], "by sentinel")
	})
	for _, id := range inserted {
		var ops []string
		for _, e := range historyOf(t, db, id) {
			op, _, _ := strings.Cut(e, " ")
			ops = append(ops, op)
		}
		if want := []string{"insert", "delete"}; !slices.Equal(ops, want) {
			t.Errorf("history of %s: %q, want %q (one insert, the refused ones are no edits)", id, historyOf(t, db, id), want)
		}
	}

	// blackouts add of the same id twice, then with another window
	from, to := time.Now().Add(24*time.Hour).UTC(), time.Now().Add(48*time.Hour).UTC()
	add := []string{"blackouts", "add", "freeze", "--from", from.Format(time.RFC3339), "--to", to.Format(time.RFC3339), "--reason", "year-end freeze"}
	cliOK(t, cfg, add...)
	for _, again := range [][]string{add, {"blackouts", "add", "freeze", "--from", from.Add(time.Hour).Format(time.RFC3339),
		"--to", to.Add(time.Hour).Format(time.RFC3339), "--reason", "second try"}} {
		if out, errOut, code := cli(t, cfg, again...); code != 1 {
			t.Fatalf("cronswap %q again: exit %d, want 1 (the id exists)\n%s%s", again, code, out, errOut)
		}
	}
	// windows are applied in event order: once a window added after them is in force, the refused ones were read
	cliOK(t, cfg, "blackouts", "add", "sentinel", "--from", from.Format(time.RFC3339), "--to", to.Format(time.RFC3339), "--reason", "sentinel")
	d.waitLog("sentinel window in force", func(l logLine) bool {
		return l.str("msg") == "blackout window in force" && l.str("blackout_id") == "sentinel"
	})
	var inForce []string
	for _, l := range d.linesMatching(func(l logLine) bool {
		return l.str("msg") == "blackout window in force" && l.str("blackout_id") == "freeze"
	}) {
		inForce = append(inForce, l.str("reason"))
	}
	if !slices.Equal(inForce, []string{"year-end freeze"}) {
		t.Errorf("the daemon logged window freeze in force with reasons %q, want only the one added (%q)", inForce, "year-end freeze")
	}
	var listed []struct {
		ID     string `json:"id"`
		Reason string `json:"reason"`
	}
	if err := json.Unmarshal([]byte(cliOK(t, cfg, "blackouts", "list", "-o", "json")), &listed); err != nil {
		t.Fatal(err)
	}
	if len(listed) != 2 || listed[0].ID != "freeze" || listed[0].Reason != "year-end freeze" {
		t.Errorf("blackouts list: %+v, want freeze (year-end freeze) and sentinel", listed)
	}
}

// linesMatching returns the daemon's log records that match, in order.
func (d *daemon) linesMatching(match func(logLine) bool) []logLine {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []logLine
	for _, l := range d.lines {
		if match(l) {
			out = append(out, l)
		}
	}
	return out
}
