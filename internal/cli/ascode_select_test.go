package cli_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/cli"
)

// snapshot is every stored schedule, by id.
func (e *env) snapshot() map[string]string {
	e.t.Helper()
	cur, err := e.db.Collection("schedules").Find(ctx(e.t), bson.D{})
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]string{}
	for cur.Next(ctx(e.t)) {
		out[cur.Current.Lookup("_id").StringValue()] = cur.Current.String()
	}
	if err := cur.Err(); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// tempFile writes text to a file of the test's and returns its path.
func tempFile(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	writeFile(t, p, text)
	return p
}

// readFile is the text of a file.
func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// ids are the sorted keys of a snapshot.
func ids(snap map[string]string) []string {
	out := make([]string, 0, len(snap))
	for id := range snap {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// planOps are a plan's changes as "op id", in the plan's order.
func planOps(p planJSON) []string {
	out := []string{}
	for _, c := range p.Changes {
		out = append(out, c.Op+" "+c.ID)
	}
	return out
}

// selectionFixture stores, all managed (written by apply), two billing
// jobs, one of them under team.a/, an ops job under team.a/ and one
// without a category; and, created otherwise (not managed), a billing job.
func selectionFixture(e *env) {
	e.t.Helper()
	e.ok("apply", "--by", "ci", "-f", e.file("all.yaml", `_id: invoice
cron_expr: "0 6 * * *"
category: billing
---
_id: team.a/dunning
cron_expr: "0 7 * * *"
category: billing
---
_id: team.a/rotate
cron_expr: "0 3 * * *"
category: ops
---
_id: heartbeat
cron_expr: "@hourly"
`))
	e.insert(bson.D{{Key: "_id", Value: "legacy_invoice"}, {Key: "cron_expr", Value: "@daily"}, {Key: "category", Value: "billing"}})
}

// TestFilteredExportAppliedBackWithPrune: a file exported with --category
// (or --id-prefix), planned and applied back with the same selection and
// --prune, compares and prunes only the selected schedules: unchanged as
// exported, and, with an entry removed, that entry alone deleted — the
// other categories' managed schedules untouched. Without the selection
// the same file would delete them, which the plan shows.
func TestFilteredExportAppliedBackWithPrune(t *testing.T) {
	e := newEnv(t)
	selectionFixture(e)
	before := e.snapshot()

	billing := e.file("billing.yaml", e.ok("export", "--category", "billing").stdout)
	p := e.plan(cli.ExitOK, "-f", billing, "--prune", "--category", "billing")
	if len(p.Changes) != 0 || p.Summary["unchanged"] != 3 || p.Summary["managed_not_in_file"] != 0 || p.Summary["unmanaged_not_in_file"] != 0 {
		t.Fatalf("plan of the billing export with --category billing: %+v", p)
	}
	text := e.ok("plan", "-f", billing, "--prune", "--category", "billing").stdout
	if !strings.Contains(text, `only the schedules selected by --category "billing" were compared`) {
		t.Fatalf("plan text lacks the selection: %s", text)
	}
	r := e.ok("apply", "-f", billing, "--prune", "--category", "billing", "--by", "ci")
	if !strings.Contains(r.stdout, "0 created, 0 updated, 0 deleted, 0 adopted, 3 unchanged") {
		t.Fatalf("apply of the billing export: %v", r)
	}
	if got := e.snapshot(); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Fatalf("a filtered export applied back with --prune changed the schedules:\n%v\nwas\n%v", got, before)
	}
	// The hazard the selection removes: the same file without it prunes
	// every other managed schedule.
	p = e.plan(cli.ExitChangesPending, "-f", billing, "--prune")
	if got, want := planOps(p), []string{"delete heartbeat", "delete team.a/rotate"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("plan without the selection: %q, want %q", got, want)
	}

	// An entry removed from the selected file: prune deletes it, and only
	// it (the unmanaged billing job stays, counted).
	trimmed := e.file("billing-trimmed.yaml", strings.Replace(e.ok("export", "--category", "billing").stdout,
		"---\n_id: team.a/dunning\ncron_expr: \"0 7 * * *\"\ncategory: billing\n", "", 1))
	if strings.Contains(readFile(t, trimmed), "dunning") {
		t.Fatalf("the test's edit of the export did not apply:\n%s", readFile(t, trimmed))
	}
	p = e.plan(cli.ExitChangesPending, "-f", trimmed, "--prune", "--category", "billing")
	if got, want := planOps(p), []string{"delete team.a/dunning"}; fmt.Sprint(got) != fmt.Sprint(want) ||
		p.Summary["delete"] != 1 || p.Summary["unchanged"] != 2 || p.Summary["unmanaged_not_in_file"] != 0 {
		t.Fatalf("plan of the trimmed billing file: %q %v, want %q", got, p.Summary, want)
	}
	e.ok("apply", "-f", trimmed, "--prune", "--category", "billing", "--by", "ci")
	after := e.snapshot()
	delete(before, "team.a/dunning")
	if fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("prune within --category billing: %q, want %q", ids(after), ids(before))
	}

	// --id-prefix: the same within the ids it selects, whatever their
	// category.
	teamA := e.file("team-a.yaml", e.ok("export", "--id-prefix", "team.a/").stdout)
	if p := e.plan(cli.ExitOK, "-f", teamA, "--prune", "--id-prefix", "team.a/"); len(p.Changes) != 0 || p.Summary["unchanged"] != 1 {
		t.Fatalf("plan of the team.a/ export: %+v", p)
	}
	empty := e.file("team-a-new.yaml", "_id: team.a/report\ncron_expr: '0 8 * * *'\ncategory: billing\n")
	p = e.plan(cli.ExitChangesPending, "-f", empty, "--prune", "--id-prefix", "team.a/")
	if got, want := planOps(p), []string{"create team.a/report", "delete team.a/rotate"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("plan with --id-prefix team.a/: %q, want %q", got, want)
	}
	e.ok("apply", "-f", empty, "--prune", "--id-prefix", "team.a/", "--by", "ci")
	if got, want := ids(e.snapshot()), []string{"heartbeat", "invoice", "legacy_invoice", "team.a/report"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after the apply with --id-prefix team.a/: %q, want %q", got, want)
	}
	// Both flags: what both select.
	both := e.file("both.yaml", "_id: team.a/report\ncron_expr: '0 8 * * *'\ncategory: billing\n")
	if p := e.plan(cli.ExitOK, "-f", both, "--prune", "--id-prefix", "team.a/", "--category", "billing"); len(p.Changes) != 0 {
		t.Fatalf("plan with both flags: %+v", p)
	}
}

// TestSelectionRefusesEntriesOutsideIt: with a selection, an entry it does
// not select — by its category or its id in the file, or by the category
// stored for its id (the file would move a schedule into the selection) —
// is refused before anything is written, by plan and apply alike: exit 1,
// the id and its line named, nothing written even of the file's
// selected entries; a saved plan (--out) is not written either.
func TestSelectionRefusesEntriesOutsideIt(t *testing.T) {
	e := newEnv(t)
	selectionFixture(e)
	before := e.snapshot()
	for _, c := range []struct {
		name  string
		flags []string
		file  string
		want  []string
	}{
		{"another category in the file", []string{"--category", "billing"}, `_id: invoice
cron_expr: "0 5 * * *"
category: billing
---
_id: team.a/rotate
cron_expr: "0 3 * * *"
category: ops
`, []string{`line 5: team.a/rotate: not selected by --category "billing" (category "ops" in the file)`,
			"refused, nothing written: 1 problem(s)"}},
		{"no category in the file", []string{"--category", "billing"}, `_id: invoice
cron_expr: "0 5 * * *"
category: billing
---
_id: brand_new
cron_expr: "0 3 * * *"
`, []string{`line 5: brand_new: not selected by --category "billing" (no category in the file)`}},
		{"an id without the prefix", []string{"--id-prefix", "team.a/"}, `_id: team.a/dunning
cron_expr: "0 5 * * *"
category: billing
---
_id: invoice
cron_expr: "0 6 * * *"
category: billing
`, []string{`line 5: invoice: not selected by --id-prefix "team.a/"`}},
		{"a category stored outside", []string{"--category", "billing"}, `_id: invoice
cron_expr: "0 5 * * *"
category: billing
---
_id: heartbeat
cron_expr: "@hourly"
category: billing
`, []string{`line 5: heartbeat: not selected by --category "billing" as stored (no category)`,
			"refused, nothing written: 1 schedule(s)"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			file := e.file("outside.yaml", c.file)
			for _, cmd := range [][]string{
				{"plan", "-o", "json", "--out", e.file("saved.plan", "")},
				{"plan"},
				{"apply", "--by", "ci", "--adopt"},
			} {
				args := slices.Concat(cmd, []string{"-f", file, "--prune"}, c.flags)
				r := e.run(args...)
				if r.code != cli.ExitUserError || r.stdout != "" {
					t.Errorf("%q: want exit 1 with nothing on stdout: %v", args, r)
				}
				for _, w := range c.want {
					if !strings.Contains(r.stderr, w) {
						t.Errorf("%q: stderr lacks %q: %v", args, w, r)
					}
				}
				if got := e.snapshot(); fmt.Sprint(got) != fmt.Sprint(before) {
					t.Fatalf("%q wrote: %v\nwas %v", args, got, before)
				}
			}
		})
	}
}

// TestSelectionFlagsRefusedFirst: an empty --category or --id-prefix
// given to plan or apply is refused before the server is asked for (it
// would widen the prune to every schedule), and apply --plan takes
// neither (the saved plan says what it writes).
func TestSelectionFlagsRefusedFirst(t *testing.T) {
	uri := "mongodb://" + closedPort(t) + "/?directConnection=true"
	file := tempFile(t, "s.yaml", "_id: a\ncron_expr: '@daily'\n")
	for _, cmd := range []string{"plan", "apply"} {
		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{"--category", ""}, "--category is empty: give a value, or leave the flag out to compare and prune every schedule"},
			{[]string{"--id-prefix="}, "--id-prefix is empty"},
			{[]string{"--category", "billing", "--id-prefix", ""}, "--id-prefix is empty"},
		} {
			r := run(t, slices.Concat([]string{cmd, "-f", file, "--prune"}, c.args, []string{"--mongo-uri", uri, "--timeout", "300ms"})...)
			if r.code != cli.ExitUserError || !strings.Contains(r.stderr, c.want) {
				t.Errorf("%s %q: want exit 1 with %q: %v", cmd, c.args, c.want, r)
			}
		}
	}
	for _, flag := range []string{"--category", "--id-prefix"} {
		r := run(t, "apply", "--plan", file, flag, "billing", "--by", "ci", "--mongo-uri", uri, "--timeout", "300ms")
		if want := "--plan and " + flag; r.code != cli.ExitUserError || !strings.Contains(r.stderr, want) {
			t.Errorf("apply --plan with %s: want exit 1 with %q: %v", flag, want, r)
		}
	}
}

// TestSavedPlanOfASelection: a plan saved with a selection holds only the
// selection's changes and records it; applied, it deletes only those.
func TestSavedPlanOfASelection(t *testing.T) {
	e := newEnv(t)
	selectionFixture(e)
	planPath := tempFile(t, "billing.plan", "")
	file := e.file("invoice.yaml", "_id: invoice\ncron_expr: '0 6 * * *'\ncategory: billing\n")
	e.plan(cli.ExitChangesPending, "-f", file, "--prune", "--category", "billing", "--out", planPath)
	header, _, _ := strings.Cut(readFile(t, planPath), "\n")
	if !strings.Contains(header, `"category":"billing"`) {
		t.Fatalf("saved plan header: %s", header)
	}
	e.ok("apply", "--plan", planPath, "--by", "ci")
	if got, want := ids(e.snapshot()), []string{"heartbeat", "invoice", "legacy_invoice", "team.a/rotate"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after the saved plan of --category billing: %q, want %q", got, want)
	}
}
