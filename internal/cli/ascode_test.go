package cli_test

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/admin"
	"github.com/cronswap/cronswap/internal/cli"
)

// file writes text to a file of the test's and returns its path.
func (e *env) file(name, text string) string {
	e.t.Helper()
	p := filepath.Join(e.t.TempDir(), name)
	writeFile(e.t, p, text)
	return p
}

// insert stores documents directly, as mongosh would.
func (e *env) insert(docs ...bson.D) {
	e.t.Helper()
	for _, d := range docs {
		if _, err := e.db.Collection("schedules").InsertOne(ctx(e.t), d); err != nil {
			e.t.Fatal(err)
		}
	}
}

// rawDoc is the stored document of id, nil when there is none.
func (e *env) rawDoc(id string) bson.Raw {
	e.t.Helper()
	raw, err := e.db.Collection("schedules").FindOne(ctx(e.t), bson.D{{Key: "_id", Value: id}}).Raw()
	if err != nil {
		return nil
	}
	return raw
}

// planJSON is the answer of plan -o json.
type planJSON struct {
	Changes []struct {
		Op     string `json:"op"`
		ID     string `json:"id"`
		Line   int    `json:"line"`
		Fields []struct {
			Field  string          `json:"field"`
			Before json.RawMessage `json:"before"`
			After  json.RawMessage `json:"after"`
		} `json:"fields"`
		NextRuns *struct {
			Zone   string `json:"zone"`
			Before []struct {
				At, Mark string
			} `json:"before"`
			After []struct {
				At, Mark string
			} `json:"after"`
		} `json:"next_runs"`
	} `json:"changes"`
	Summary map[string]int `json:"summary"`
}

func (e *env) plan(wantCode int, args ...string) planJSON {
	e.t.Helper()
	r := e.run(append([]string{"plan", "-o", "json"}, args...)...)
	if r.code != wantCode {
		e.t.Fatalf("plan %q: exit %d, want %d: %v", args, r.code, wantCode, r)
	}
	var p planJSON
	if err := json.Unmarshal([]byte(r.stdout), &p); err != nil {
		e.t.Fatalf("plan %q: %v in %s", args, err, r.stdout)
	}
	return p
}

// The round trip: what export writes, plan finds unchanged, and apply
// writes nothing — including documents with types YAML has no word for,
// fields the format does not hold, and the ways of writing a default.
func TestExportApplyRoundTripIsNoChange(t *testing.T) {
	e := newEnv(t)
	when := time.Date(2027, 3, 1, 10, 0, 0, 0, time.UTC)
	e.insert(
		bson.D{{Key: "_id", Value: "daily_report"}, {Key: "cron_expr", Value: "0 9 * * 1-5"}, {Key: "timezone", Value: "Europe/Berlin"},
			{Key: "args", Value: bson.D{{Key: "region", Value: "eu"}, {Key: "n", Value: int64(5)}, {Key: "since", Value: when},
				{Key: "ratio", Value: 0.5}, {Key: "tags", Value: bson.A{"a", "b"}}, {Key: "code", Value: "007"}}},
			{Key: "owner", Value: "team-x"}, {Key: "updated_at", Value: when}},
		bson.D{{Key: "_id", Value: "every"}, {Key: "cron_expr", Value: "*/30 * * * * *"}, {Key: "enabled", Value: true},
			{Key: "dst", Value: "shift"}, {Key: "timezone", Value: nil}, {Key: "job", Value: "ping"}, {Key: "category", Value: "ops"}},
		bson.D{{Key: "_id", Value: "paused"}, {Key: "cron_expr", Value: "@daily"}, {Key: "enabled", Value: false}, {Key: "dst", Value: "plain"}},
		bson.D{{Key: "_id", Value: "bounded"}, {Key: "cron_expr", Value: "0 * * * *"}, {Key: "start_at", Value: when},
			{Key: "end_at", Value: when.AddDate(0, 1, 0)}, {Key: "paused_until", Value: when.Add(time.Hour)},
			{Key: "max_runs", Value: int32(10)}, {Key: "exclude", Value: bson.A{"us-holidays", "uk-holidays"}}},
	)
	before := map[string]bson.Raw{}
	for _, id := range []string{"daily_report", "every", "paused", "bounded"} {
		before[id] = e.rawDoc(id)
	}
	for _, format := range []string{"yaml", "json"} {
		t.Run(format, func(t *testing.T) {
			exported := e.ok("export", "-o", format)
			file := e.file("schedules."+format, exported.stdout)
			p := e.plan(cli.ExitOK, "-f", file, "--prune")
			if len(p.Changes) != 0 || p.Summary["unchanged"] != 4 {
				t.Fatalf("plan of the export: %+v\nfile:\n%s", p, exported.stdout)
			}
			text := e.ok("plan", "-f", file)
			if !strings.Contains(text.stdout, "no change") {
				t.Fatalf("plan text: %s", text.stdout)
			}
			r := e.ok("apply", "-f", file, "--by", "ci", "--prune")
			if !strings.Contains(r.stdout, "0 created, 0 updated, 0 deleted, 0 adopted, 4 unchanged") {
				t.Fatalf("apply: %v", r)
			}
			for id, raw := range before {
				if got := e.rawDoc(id); !bytesEqual(got, raw) {
					t.Fatalf("%s changed by the round trip:\n%s\nwas\n%s", id, got, raw)
				}
			}
		})
	}
}

func bytesEqual(a, b bson.Raw) bool { return string(a) == string(b) }

// The lifetime fields and exclude are fields of the format: export writes
// them, and plan and apply carry an edit of each.
func TestPlanAndApplyCarryLifetimeAndExclude(t *testing.T) {
	e := newEnv(t)
	v1 := e.file("v1.yaml", `_id: bounded
cron_expr: "0 9 * * *"
end_at: 2030-01-01T00:00:00Z
max_runs: 5
exclude: [us-holidays]
`)
	e.ok("apply", "-f", v1, "--by", "ci")
	exported := e.ok("export").stdout
	for _, want := range []string{"end_at:", "max_runs: 5", "exclude:", "- us-holidays"} {
		if !strings.Contains(exported, want) {
			t.Errorf("export lacks %q:\n%s", want, exported)
		}
	}
	v2 := e.file("v2.yaml", `_id: bounded
cron_expr: "0 9 * * *"
start_at: 2029-01-01T00:00:00Z
end_at: 2031-01-01T00:00:00Z
paused_until: 2029-06-01T00:00:00Z
exclude: [us-holidays, uk-holidays]
`)
	p := e.plan(cli.ExitChangesPending, "-f", v2)
	if len(p.Changes) != 1 {
		t.Fatalf("plan: %+v, want one change", p)
	}
	var fields []string
	for _, f := range p.Changes[0].Fields {
		fields = append(fields, f.Field)
	}
	if got, want := strings.Join(fields, ","), "start_at,end_at,paused_until,max_runs,exclude"; got != want {
		t.Errorf("plan changes fields %s, want %s", got, want)
	}
	e.ok("apply", "-f", v2, "--by", "ci")
	doc := e.rawDoc("bounded")
	if end, ok := doc.Lookup("end_at").TimeOK(); !ok || !end.Equal(time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("end_at after apply: %v", doc.Lookup("end_at"))
	}
	if _, err := doc.LookupErr("max_runs"); err == nil {
		t.Errorf("max_runs left in place though the file omits it: %s", doc)
	}
	if n := len(e.plan(cli.ExitOK, "-f", v2).Changes); n != 0 {
		t.Errorf("plan after apply: %d changes, want none", n)
	}
}

// Create, update field by field, delete with --prune (only what apply
// manages), unknown fields kept, omitted schedule fields removed, and
// every write carrying updated_by and the message.
func TestPlanAndApplyCreateUpdatePrune(t *testing.T) {
	e := newEnv(t)
	v1 := e.file("v1.yaml", `_id: daily_report
cron_expr: "0 9 * * *"
timezone: Europe/Berlin
category: reports
args: {region: eu}
---
_id: cleanup
cron_expr: "@hourly"
`)
	p := e.plan(cli.ExitChangesPending, "-f", v1)
	if p.Summary["create"] != 2 || len(p.Changes) != 2 || p.Changes[0].Op != "create" || p.Changes[0].Line != 1 || p.Changes[1].Line != 7 {
		t.Fatalf("plan v1: %+v", p)
	}
	if nr := p.Changes[0].NextRuns; nr == nil || nr.Zone != "Europe/Berlin" || len(nr.After) != 3 || !strings.HasSuffix(nr.After[0].At, "T09:00:00+01:00") && !strings.HasSuffix(nr.After[0].At, "T09:00:00+02:00") {
		t.Fatalf("next runs of the new job: %+v", p.Changes[0].NextRuns)
	}
	if e.count("schedules") != 0 {
		t.Fatal("plan wrote")
	}
	e.ok("apply", "-f", v1, "--by", "alice", "-m", "add the report jobs")
	d := e.rawSchedule("daily_report")
	if d["managed_by"] != admin.ManagedByApply || d["updated_by"] != "alice" || d["update_message"] != "add the report jobs" || d["updated_at"] == nil {
		t.Fatalf("created document %v", d)
	}
	// By hand: a job apply must never delete, and a field of someone's own.
	e.insert(bson.D{{Key: "_id", Value: "by_hand"}, {Key: "cron_expr", Value: "@daily"}})
	if _, err := e.db.Collection("schedules").UpdateOne(ctx(t), bson.D{{Key: "_id", Value: "daily_report"}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "owner", Value: "team-x"}}}}); err != nil {
		t.Fatal(err)
	}

	v2 := e.file("v2.yaml", `_id: daily_report
cron_expr: "0 8 * * *"
timezone: Europe/Berlin
args: {region: eu}
`)
	p = e.plan(cli.ExitChangesPending, "-f", v2, "--prune")
	if len(p.Changes) != 2 || p.Changes[0].Op != "update" || p.Changes[1].Op != "delete" || p.Changes[1].ID != "cleanup" {
		t.Fatalf("plan v2: %+v", p)
	}
	fields := p.Changes[0].Fields
	if len(fields) != 2 || fields[0].Field != "cron_expr" || string(fields[0].Before) != `"0 9 * * *"` || string(fields[0].After) != `"0 8 * * *"` ||
		fields[1].Field != "category" || string(fields[1].Before) != `"reports"` || fields[1].After != nil {
		t.Fatalf("update fields: %+v", fields)
	}
	if nr := p.Changes[0].NextRuns; nr == nil || len(nr.Before) != 3 || len(nr.After) != 3 || !strings.Contains(nr.After[0].At, "T08:00:00") {
		t.Fatalf("next runs before and after: %+v", nr)
	}
	if p.Summary["unmanaged_not_in_file"] != 1 {
		t.Fatalf("summary %v: by_hand is not in the file and not managed", p.Summary)
	}
	text := e.run("plan", "-f", v2, "--prune")
	for _, want := range []string{`~ update daily_report (line 1)`, `cron_expr: "0 9 * * *" → "0 8 * * *"`, `category: "reports" → (absent)`,
		"next runs in Europe/Berlin:", "before: ", "after:  ", "- delete cleanup (managed, not in the file)", "1 to update, 1 to delete"} {
		if !strings.Contains(text.stdout, want) {
			t.Fatalf("plan text lacks %q:\n%s", want, text.stdout)
		}
	}
	// Without --prune the managed job is only mentioned.
	if p := e.plan(cli.ExitChangesPending, "-f", v2); len(p.Changes) != 1 || p.Summary["managed_not_in_file"] != 1 {
		t.Fatalf("plan v2 without --prune: %+v", p)
	}

	e.ok("apply", "-f", v2, "--prune", "--by", "bob")
	d = e.rawSchedule("daily_report")
	if d["cron_expr"] != "0 8 * * *" || d["category"] != nil || d["owner"] != "team-x" || d["updated_by"] != "bob" || d["update_message"] != nil {
		t.Fatalf("updated document %v", d)
	}
	if e.rawSchedule("cleanup") != nil || e.rawSchedule("by_hand") == nil {
		t.Fatal("prune deleted the wrong documents")
	}
	e.plan(cli.ExitOK, "-f", v2, "--prune")
}

// A document edited with mongosh between a saved plan and its apply is a
// conflict: left alone, reported, exit 3; the plan's other changes are
// written. --force overwrites it.
func TestApplySavedPlanReportsConflictWithMongoshEdit(t *testing.T) {
	e := newEnv(t)
	e.ok("apply", "-f", e.file("v1.yaml", "_id: a\ncron_expr: '0 9 * * *'\n---\n_id: b\ncron_expr: '0 10 * * *'\n---\n_id: gone\ncron_expr: '@daily'\n"), "--by", "ci")
	planPath := filepath.Join(t.TempDir(), "changes.plan")
	v2 := e.file("v2.yaml", "_id: a\ncron_expr: '0 7 * * *'\n---\n_id: b\ncron_expr: '0 11 * * *'\n")
	e.plan(cli.ExitChangesPending, "-f", v2, "--prune", "--out", planPath)

	// Between the plan and its apply, someone retimes a and edits gone.
	if out, err := mongosh(t, e.uri, e.db.Name(), `db.schedules.updateOne({_id: "a"}, {$set: {cron_expr: "0 6 * * *", updated_at: new Date()}});
db.schedules.updateOne({_id: "gone"}, {$set: {timezone: "Asia/Seoul", updated_at: new Date()}})`); err != nil {
		t.Fatalf("mongosh: %v\n%s", err, out)
	}
	r := e.run("apply", "--plan", planPath, "--by", "ci", "-o", "json")
	if r.code != cli.ExitChangesPending {
		t.Fatalf("apply of a stale plan: %v", r)
	}
	var res struct {
		Results []struct{ Op, ID, Result, Error string } `json:"results"`
		Summary map[string]int                           `json:"summary"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatalf("%v in %s", err, r.stdout)
	}
	got := map[string]string{}
	for _, x := range res.Results {
		got[x.ID] = x.Op + " " + x.Result
	}
	if got["a"] != "update conflict" || got["b"] != "update applied" || got["gone"] != "delete conflict" || res.Summary["conflicts"] != 2 {
		t.Fatalf("results %v, summary %v", got, res.Summary)
	}
	if a := e.rawSchedule("a"); a["cron_expr"] != "0 6 * * *" {
		t.Fatalf("the mongosh edit was overwritten: %v", a)
	}
	if e.rawSchedule("gone") == nil || e.rawSchedule("b")["cron_expr"] != "0 11 * * *" {
		t.Fatal("the plan's other changes")
	}
	// --force writes the saved plan anyway.
	e.ok("apply", "--plan", planPath, "--by", "ci", "--force")
	if a := e.rawSchedule("a"); a["cron_expr"] != "0 7 * * *" || e.rawSchedule("gone") != nil {
		t.Fatalf("--force: a %v, gone %v", a, e.rawSchedule("gone"))
	}
}

// Without a saved plan, apply plans each batch itself and writes on that
// state: a document deleted or created meanwhile is a conflict too
// (the bulk write's condition, checked here through the store).
func TestApplyChangesConditionalOnPlannedState(t *testing.T) {
	e := newEnv(t)
	store := admin.NewStore(e.db)
	e.insert(bson.D{{Key: "_id", Value: "x"}, {Key: "cron_expr", Value: "@daily"}},
		bson.D{{Key: "_id", Value: "y"}, {Key: "cron_expr", Value: "@daily"}})
	want := func(id, expr string) bson.Raw {
		raw, _ := bson.Marshal(bson.D{{Key: "_id", Value: id}, {Key: "cron_expr", Value: expr}})
		return raw
	}
	changes := []admin.Change{
		admin.PlanChange("x", 1, e.rawDoc("x"), want("x", "@hourly"), false),
		admin.PlanChange("y", 2, e.rawDoc("y"), want("y", "@hourly"), false),
		admin.PlanChange("z", 3, nil, want("z", "@hourly"), false),
	}
	// Meanwhile: x deleted, z created by someone else; y untouched.
	if _, err := e.db.Collection("schedules").DeleteOne(ctx(t), bson.D{{Key: "_id", Value: "x"}}); err != nil {
		t.Fatal(err)
	}
	e.insert(bson.D{{Key: "_id", Value: "z"}, {Key: "cron_expr", Value: "@weekly"}})
	out, err := store.ApplyChanges(ctx(t), changes, admin.WriteMeta{Author: admin.Author{By: "ci"}})
	if err != nil {
		t.Fatal(err)
	}
	if out[0].Result != admin.Conflict || out[1].Result != admin.Applied || out[2].Result != admin.Conflict {
		t.Fatalf("outcomes %+v", out)
	}
	if e.rawDoc("x") != nil || e.rawSchedule("z")["cron_expr"] != "@weekly" || e.rawSchedule("y")["cron_expr"] != "@hourly" {
		t.Fatal("documents after the apply")
	}
}

// One bad entry among 1,000 good ones: nothing is written, and the bad
// one is named with its line; every problem of the file is listed.
func TestApplyOneBadAmongThousandWritesNothing(t *testing.T) {
	e := newEnv(t)
	var b strings.Builder
	badLine := 0
	line := 1
	for i := range 1001 {
		if i > 0 {
			b.WriteString("---\n")
			line++
		}
		expr := fmt.Sprintf("%d 9 * * *", i%60)
		if i == 700 {
			expr = "0 25 * * *"
			badLine = line + 1
		}
		fmt.Fprintf(&b, "_id: job_%04d\ncron_expr: %q\n", i, expr)
		line += 2
	}
	file := e.file("big.yaml", b.String())
	r := e.run("apply", "-f", file, "--by", "ci")
	if r.code != cli.ExitUserError || !strings.Contains(r.stderr, "refused, nothing written: 1 problem") {
		t.Fatalf("apply: %v", r)
	}
	if want := fmt.Sprintf("line %d: schedule \"job_0700\": field cron_expr:", badLine); !strings.Contains(r.stderr, want) {
		t.Fatalf("stderr lacks %q:\n%s", want, r.stderr)
	}
	if n := e.count("schedules"); n != 0 {
		t.Fatalf("%d documents written", n)
	}
}

func TestPlanRefusesBadFiles(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		name, text string
		extra      []string
		wants      []string
	}{
		{"unknown fields", "_id: a\ncron_expr: '@daily'\ncron: x\n---\n_id: b\ncron_expr: '@daily'\nupdated_by: me\n", nil,
			[]string{`line 3: a: unknown field "cron"`, `line 7: b: unknown field "updated_by"`, "2 problem(s)"}},
		{"duplicate ids", "_id: a\ncron_expr: '@daily'\n---\n_id: b\ncron_expr: '@daily'\n---\n_id: a\ncron_expr: '@hourly'\n", nil,
			[]string{"line 7: a: _id given twice (first at line 1)"}},
		{"empty file", "", nil, []string{"holds no schedule"}},
		{"only comments", "# nothing yet\n---\n", nil, []string{"holds no schedule"}},
		{"types and zones", "_id: a\ncron_expr: 800\n---\n_id: b\ncron_expr: '@daily'\ntimezone: Mars/Base\n---\n_id: c\ncron_expr: '@daily'\ndst: plian\n" +
			"---\n_id: d\ncron_expr: '@daily'\nenabled: yes\n", nil,
			[]string{`line 2: schedule "a": field cron_expr: must be a string`, `line 6: schedule "b": field timezone: unknown time zone "Mars/Base"`,
				`line 10: schedule "c": field dst`, `line 14: schedule "d": field enabled: must be a boolean`, "4 problem(s)"}},
		{"alias bomb", "_id: a\ncron_expr: &x '@daily'\nargs: {a: [*x, *x], b: [*x, *x]}\n", nil, []string{"aliases are not accepted"}},
		{"over the size limit", "_id: a\ncron_expr: '@daily'\n", []string{"--max-file-size", "10B"}, []string{"more than the limit of 10 (raise it with --max-file-size)"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			file := e.file("s.yaml", c.text)
			for _, cmd := range []string{"plan", "apply"} {
				args := append([]string{cmd, "-f", file, "--by", "ci"}, c.extra...)
				if cmd == "plan" {
					args = append([]string{cmd, "-f", file}, c.extra...)
				}
				r := e.run(args...)
				if r.code != cli.ExitUserError {
					t.Fatalf("%s: exit %d: %v", cmd, r.code, r)
				}
				for _, w := range c.wants {
					if !strings.Contains(r.stderr, w) {
						t.Fatalf("%s: stderr lacks %q:\n%s", cmd, w, r.stderr)
					}
				}
			}
			if e.count("schedules") != 0 {
				t.Fatal("written")
			}
		})
	}
	// The same file over stdin, over the limit, is refused while it is read.
	r := e.runIn("_id: a\ncron_expr: '@daily'\n", "plan", "-f", "-", "--max-file-size", "10B")
	if r.code != cli.ExitUserError || !strings.Contains(r.stderr, "more than the limit of 10") {
		t.Fatalf("stdin over the limit: %v", r)
	}
	// Given the daemons' config, an action it lacks is refused, or a
	// warning with --allow-unknown-actions.
	writeFile(t, e.cfg, fmt.Sprintf("mongo:\n  uri: %q\n  database: %q\njobs:\n  report:\n    exec: [\"true\"]\n", e.uri, e.db.Name()))
	file := e.file("s.yaml", "_id: a\ncron_expr: '@daily'\njob: reprot\n---\n_id: b\ncron_expr: '@daily'\njob: report\n")
	r = e.run("apply", "-f", file, "--by", "ci")
	if r.code != cli.ExitUserError || !strings.Contains(r.stderr, `line 3: schedule "a": `) || !strings.Contains(r.stderr, "--allow-unknown-actions") ||
		strings.Contains(r.stderr, `"b"`) || e.count("schedules") != 0 {
		t.Fatalf("unknown action: %v", r)
	}
	r = e.run("apply", "-f", file, "--by", "ci", "--allow-unknown-actions")
	if r.code != cli.ExitOK || !strings.Contains(r.stderr, "line 3: warning:") || e.rawSchedule("a") == nil {
		t.Fatalf("--allow-unknown-actions: %v", r)
	}
}

// Adoption: an unchanged job created by hand is left alone (the round
// trip writes nothing) unless --adopt marks it managed, after which
// --prune can delete it.
func TestAdoptThenPrune(t *testing.T) {
	e := newEnv(t)
	e.insert(bson.D{{Key: "_id", Value: "old"}, {Key: "cron_expr", Value: "@daily"}},
		bson.D{{Key: "_id", Value: "keep"}, {Key: "cron_expr", Value: "@hourly"}})
	file := e.file("all.yaml", e.ok("export").stdout)
	if p := e.plan(cli.ExitChangesPending, "-f", file, "--adopt"); p.Summary["adopt"] != 2 {
		t.Fatalf("plan --adopt: %+v", p)
	}
	e.ok("apply", "-f", file, "--adopt", "--by", "ci")
	if !admin.IsManaged(e.rawDoc("old")) {
		t.Fatal("not adopted")
	}
	e.ok("apply", "-f", e.file("keep.yaml", "_id: keep\ncron_expr: '@hourly'\n"), "--prune", "--by", "ci")
	if e.rawDoc("old") != nil || e.rawDoc("keep") == nil {
		t.Fatal("prune after adoption")
	}
}

// plan shows the daylight-saving shifts of a retimed job's next runs.
func TestPlanMarksDaylightSavingShifts(t *testing.T) {
	e := newEnv(t)
	e.insert(bson.D{{Key: "_id", Value: "night"}, {Key: "cron_expr", Value: "0 1 * * *"}, {Key: "timezone", Value: "Europe/Berlin"}})
	// 02:30 does not exist in Berlin on 2027-03-28.
	file := e.file("s.yaml", "_id: night\ncron_expr: '30 2 * * *'\ntimezone: Europe/Berlin\n")
	p := e.plan(cli.ExitChangesPending, "-f", file, "--from", "2027-03-26T12:00:00Z")
	marks := []string{}
	for _, f := range p.Changes[0].NextRuns.After {
		marks = append(marks, f.Mark)
	}
	if !strings.Contains(strings.Join(marks, ","), "shifted") {
		t.Fatalf("no shifted run among %+v", p.Changes[0].NextRuns.After)
	}
	if at := p.Changes[0].NextRuns.Before[0].At; at != "2027-03-27T01:00:00+01:00" {
		t.Fatalf("first run before the change %s", at)
	}
	text := e.run("plan", "-f", file, "--from", "2027-03-26T12:00:00Z")
	if !strings.Contains(text.stdout, "2027-03-28T03:00:00+02:00 (shifted: 02:30 does not exist") {
		t.Fatalf("plan text: %s", text.stdout)
	}
}

// TestPlanShowsHashedAndDayRuleTimes: plan reads the dialect as the
// daemons do: a new job's "H H * * *" lists the concrete times its id
// hashes to (daily_report's are 15:14, docs/time.md), and "0 9 ? * FRI#3"
// the third Fridays.
func TestPlanShowsHashedAndDayRuleTimes(t *testing.T) {
	e := newEnv(t)
	file := e.file("s.yaml", "_id: daily_report\ncron_expr: 'H H * * *'\n---\n_id: payroll\ncron_expr: '0 9 ? * FRI#3'\n")
	p := e.plan(cli.ExitChangesPending, "-f", file, "--from", "2027-01-01T00:00:00Z")
	want := map[string][]string{
		"daily_report": {"2027-01-01T15:14:00Z", "2027-01-02T15:14:00Z", "2027-01-03T15:14:00Z"},
		"payroll":      {"2027-01-15T09:00:00Z", "2027-02-19T09:00:00Z", "2027-03-19T09:00:00Z"},
	}
	if len(p.Changes) != 2 {
		t.Fatalf("plan: %+v", p)
	}
	for _, c := range p.Changes {
		var got []string
		for _, f := range c.NextRuns.After {
			got = append(got, f.At)
		}
		if fmt.Sprint(got) != fmt.Sprint(want[c.ID]) {
			t.Errorf("%s: next runs %v, want %v", c.ID, got, want[c.ID])
		}
	}
}

// exportIDs runs export with args in both formats and returns the job ids
// written, in the order written; the two formats must agree, and the
// count on stderr must be the number of entries.
func (e *env) exportIDs(args ...string) []string {
	e.t.Helper()
	r := e.ok(append([]string{"export", "-o", "json"}, args...)...)
	var entries []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &entries); err != nil {
		e.t.Fatalf("export %q -o json: %v in %q", args, err, r.stdout)
	}
	ids := []string{}
	for _, en := range entries {
		id, ok := en["_id"].(string)
		if !ok {
			e.t.Fatalf("export %q: entry without a string _id: %v", args, en)
		}
		ids = append(ids, id)
	}
	if want := fmt.Sprintf("exported %d schedules\n", len(ids)); !strings.Contains(r.stderr, want) {
		e.t.Fatalf("export %q -o json: stderr lacks %q: %v", args, want, r)
	}
	y := e.ok(append([]string{"export", "-o", "yaml"}, args...)...)
	yamlIDs := []string{}
	for _, line := range strings.Split(y.stdout, "\n") {
		if id, ok := strings.CutPrefix(line, "_id: "); ok {
			yamlIDs = append(yamlIDs, strings.Trim(id, `"'`))
		}
	}
	if fmt.Sprint(yamlIDs) != fmt.Sprint(ids) {
		e.t.Fatalf("export %q: yaml holds %q, json %q\n%s", args, yamlIDs, ids, y.stdout)
	}
	return ids
}

// TestExportSelectsByCategoryAndIDPrefix: --category selects the documents
// of exactly that category, --id-prefix the ids starting with exactly
// that text (case and regular-expression characters taken literally,
// anchored at the start), both together the documents both select; each
// export holds exactly those, in _id order, whatever order they were
// inserted in.
func TestExportSelectsByCategoryAndIDPrefix(t *testing.T) {
	e := newEnv(t)
	job := func(id, category string) bson.D {
		d := bson.D{{Key: "_id", Value: id}, {Key: "cron_expr", Value: "@daily"}}
		if category != "" {
			d = append(d, bson.E{Key: "category", Value: category})
		}
		return d
	}
	e.insert(
		job("x-team.a/report", "billing"), // the prefix, not at the start
		job("team.a/report", "billing"),
		job("ops_rotate", "ops"),
		job("teamXa/report", "billing"), // matches only if "." were a wildcard
		job("team.a/cleanup", "ops"),
		job("Team.a/sync", "billing"),   // another case
		job("eu_invoice", "billing-eu"), // a category starting with billing
		job("team.a/archive", ""),
		job("team.a", "billing"), // the prefix less its slash
	)
	for _, c := range []struct {
		args []string
		want []string
	}{
		{nil, []string{"Team.a/sync", "eu_invoice", "ops_rotate", "team.a", "team.a/archive", "team.a/cleanup", "team.a/report", "teamXa/report", "x-team.a/report"}},
		{[]string{"--category", "billing"}, []string{"Team.a/sync", "team.a", "team.a/report", "teamXa/report", "x-team.a/report"}},
		{[]string{"--category", "ops"}, []string{"ops_rotate", "team.a/cleanup"}},
		{[]string{"--id-prefix", "team.a/"}, []string{"team.a/archive", "team.a/cleanup", "team.a/report"}},
		{[]string{"--id-prefix", "team.a/", "--category", "billing"}, []string{"team.a/report"}},
		{[]string{"--category", "ops", "--id-prefix", "team.a/"}, []string{"team.a/cleanup"}},
		{[]string{"--category", "ops", "--id-prefix", "Team"}, []string{}},
		{[]string{"--category", "billing-e"}, []string{}},
		{[]string{"--id-prefix", "team.a/report/"}, []string{}},
	} {
		if got := e.exportIDs(c.args...); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("export %q: %q, want %q", c.args, got, c.want)
		}
	}
	// A selected export is a file plan reads as the documents it holds.
	file := e.file("billing.yaml", e.ok("export", "--category", "billing", "--id-prefix", "team.a/").stdout)
	if p := e.plan(cli.ExitOK, "-f", file); len(p.Changes) != 0 || p.Summary["unchanged"] != 1 {
		t.Fatalf("plan of the selected export: %+v", p)
	}
}

// TestExportRefusesBadValuesFirst: an unknown format, an empty --category
// or --id-prefix given explicitly, and an argument are user errors found
// before the server is asked for (exit 1, not 2, with the server down),
// with nothing on stdout.
func TestExportRefusesBadValuesFirst(t *testing.T) {
	uri := "mongodb://" + closedPort(t) + "/?directConnection=true"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-o", "xml"}, `--output "xml": want yaml or json`},
		{[]string{"--output", "YAML"}, `--output "YAML": want yaml or json`},
		{[]string{"--id-prefix", ""}, "--id-prefix is empty"},
		{[]string{"--id-prefix="}, "--id-prefix is empty"},
		{[]string{"--category", ""}, "--category is empty"},
		{[]string{"--category", "billing", "--id-prefix", ""}, "--id-prefix is empty"},
		{[]string{"billing"}, "export takes no argument"},
	} {
		r := run(t, append(append([]string{"export"}, c.args...), "--mongo-uri", uri, "--timeout", "300ms")...)
		if r.code != cli.ExitUserError || !strings.Contains(r.stderr, c.want) || r.stdout != "" {
			t.Errorf("export %q: want exit 1 with %q: %v", c.args, c.want, r)
		}
	}
	// The same flags with a value ask the server (exit 2: it is down).
	r := run(t, "export", "--category", "billing", "--id-prefix", "team.a/", "-o", "json", "--mongo-uri", uri, "--timeout", "300ms")
	if r.code != cli.ExitUnreachable {
		t.Errorf("export with values: %v", r)
	}
}

// tmpWatcher is stdin that, each time it is read, notes the entries of
// dir (the command's $TMPDIR) while the command copies it.
type tmpWatcher struct {
	r    io.Reader
	dir  string
	seen []string
}

func (w *tmpWatcher) Read(p []byte) (int, error) {
	entries, _ := os.ReadDir(w.dir)
	for _, e := range entries {
		w.seen = append(w.seen, e.Name())
	}
	return w.r.Read(p)
}

// Schedules given on stdin are copied to a temporary file that has no
// name on disk (a CLI killed meanwhile leaves nothing), and both reads of
// it — the plan and the apply — see the whole of it.
func TestApplyFromStdinLeavesNoFile(t *testing.T) {
	e := newEnv(t)
	e.ok("init")
	dir := t.TempDir()
	t.Setenv("TMPDIR", dir)
	in := &tmpWatcher{dir: dir, r: strings.NewReader("_id: a\ncron_expr: '@daily'\n---\n_id: b\ncron_expr: '@hourly'\n")}
	r := e.runFrom(in, "apply", "-f", "-", "--by", "ci")
	if r.code != cli.ExitOK || e.count("schedules") != 2 {
		t.Fatalf("apply -f -: %v, %d schedules", r, e.count("schedules"))
	}
	if len(in.seen) != 0 {
		t.Fatalf("files in $TMPDIR while stdin was copied: %v, want none", in.seen)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("files left in $TMPDIR: %v", entries)
	}
}

// plan --from takes the times explain, backfill and blackouts take:
// RFC 3339, now, and a signed offset from now; anything else is refused
// before the file is read.
func TestPlanFromTakesRelativeTimes(t *testing.T) {
	e := newEnv(t)
	file := e.file("s.yaml", "_id: hourly\ncron_expr: '0 * * * *'\n")
	// The first run after from: the next whole hour (UTC, the config's
	// zone). The hour may turn while plan runs: either side is right.
	firstAfter := func(from time.Time) string { return from.UTC().Truncate(time.Hour).Add(time.Hour).Format(time.RFC3339) }
	for _, c := range []struct {
		from   string
		offset time.Duration
	}{
		{"now", 0},
		{"-2h", -2 * time.Hour},
		{"+7d", 7 * 24 * time.Hour},
		{"-90m", -90 * time.Minute},
	} {
		before := time.Now()
		p := e.plan(cli.ExitChangesPending, "-f", file, "--from", c.from)
		after := time.Now()
		if len(p.Changes) != 1 || len(p.Changes[0].NextRuns.After) == 0 {
			t.Fatalf("--from %s: %+v", c.from, p)
		}
		got := p.Changes[0].NextRuns.After[0].At
		if got != firstAfter(before.Add(c.offset)) && got != firstAfter(after.Add(c.offset)) {
			t.Errorf("--from %s: first run %s, want %s", c.from, got, firstAfter(before.Add(c.offset)))
		}
	}
	p := e.plan(cli.ExitChangesPending, "-f", file, "--from", "2027-03-26T12:30:00Z")
	if got := p.Changes[0].NextRuns.After[0].At; got != "2027-03-26T13:00:00Z" {
		t.Errorf("--from 2027-03-26T12:30:00Z: first run %s", got)
	}
	for _, bad := range []string{"yesterday", "2h", "2027-03-26"} {
		r := e.run("plan", "-f", filepath.Join(t.TempDir(), "absent.yaml"), "--from", bad)
		if r.code != cli.ExitUserError || !strings.Contains(r.stderr, "--from: ") || !strings.Contains(r.stderr, "RFC 3339") && !strings.Contains(r.stderr, "needs a sign") {
			t.Errorf("--from %s: %v, want exit 1 naming --from and what it takes", bad, r)
		}
	}
}
