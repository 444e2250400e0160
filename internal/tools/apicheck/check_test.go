package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

const fixture = "testdata/mod"

func reportsByDir(t *testing.T) map[string]Report {
	t.Helper()
	reports, err := CheckModule(fixture)
	if err != nil {
		t.Fatal(err)
	}
	byDir := make(map[string]Report, len(reports))
	for _, r := range reports {
		byDir[r.Dir] = r
	}
	return byDir
}

// TestCountsExportedNamesAndMethodsOfExportedTypes checks what counts:
// top-level exported names and the exported methods of exported types
// (generic ones included), not struct fields, interface methods, methods of
// unexported types, unexported methods, or anything in a _test.go file.
func TestCountsExportedNamesAndMethodsOfExportedTypes(t *testing.T) {
	r, ok := reportsByDir(t)["counted"]
	if !ok {
		t.Fatal("package counted not checked")
	}
	want := []string{"Box", "Box.Put", "Doer", "High", "Kind", "Low", "New", "Reader", "Value", "Value.Get", "Value.Set"}
	if !slices.Equal(r.Names, want) || r.Count != len(want) {
		t.Errorf("names = %v (count %d), want %v", r.Names, r.Count, want)
	}
	if r.ImportPath != "example.com/fixture/counted" || r.Budget != DefaultBudget {
		t.Errorf("import path %q budget %d", r.ImportPath, r.Budget)
	}
	if len(r.Problems) != 0 {
		t.Errorf("problems in a documented package: %v", r.Problems)
	}
}

// TestSkipsWhatIsNotPublicAPI: internal packages, e2e, examples, main
// packages and nested modules are not checked.
func TestSkipsWhatIsNotPublicAPI(t *testing.T) {
	var dirs []string
	for dir := range reportsByDir(t) {
		dirs = append(dirs, dir)
	}
	slices.Sort(dirs)
	want := []string{"counted", "daemon", "docless", "over", "undocumented"}
	if !slices.Equal(dirs, want) {
		t.Errorf("checked %v, want %v", dirs, want)
	}
}

func TestReportsMissingDocComments(t *testing.T) {
	byDir := reportsByDir(t)
	u := byDir["undocumented"]
	problems := strings.Join(u.Problems, "\n")
	for _, want := range []string{"package has no doc comment", "const Bare", "func Naked", "func T.Method", "var A", "var B"} {
		if !strings.Contains(problems, want) {
			t.Errorf("no problem naming %q in:\n%s", want, problems)
		}
	}
	for _, fine := range []string{"Documented", "type T "} {
		if strings.Contains(problems, fine) {
			t.Errorf("%q reported although documented:\n%s", fine, problems)
		}
	}
	if d := byDir["docless"]; len(d.Problems) != 1 || !strings.Contains(d.Problems[0], "package has no doc comment") {
		t.Errorf("docless problems = %v, want only the package's doc", d.Problems)
	}
}

// TestBudgets: 61 names fail the default budget of 60; the embedding
// package's budget is 40, and 41 names (a type and 40 methods) fail it.
func TestBudgets(t *testing.T) {
	byDir := reportsByDir(t)
	over := byDir["over"]
	if over.Count != 61 || over.Budget != 60 || len(over.Problems) != 1 || !strings.Contains(over.Problems[0], "over the budget of 60") {
		t.Errorf("over: count %d budget %d problems %v", over.Count, over.Budget, over.Problems)
	}
	d := byDir["daemon"]
	if d.Count != 41 || d.Budget != EmbeddingBudget || len(d.Problems) != 1 || !strings.Contains(d.Problems[0], "over the budget of 40") {
		t.Errorf("daemon: count %d budget %d problems %v", d.Count, d.Budget, d.Problems)
	}
}

func TestRunPrintsCountsAndFails(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(fixture, &out, &errOut); code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	if !strings.Contains(out.String(), "example.com/fixture/counted") || !strings.Contains(out.String(), " 11 exported names (budget 60)") {
		t.Errorf("counts not printed:\n%s", out.String())
	}
	if !strings.Contains(errOut.String(), "example.com/fixture/over: 61 exported names") {
		t.Errorf("violations not printed:\n%s", errOut.String())
	}
	if code := run(fixture+"/nested", &out, &errOut); code != 1 {
		t.Errorf("nested module: exit code %d, want 1 (inner is undocumented)", code)
	}
	if code := run("testdata/missing", &out, &errOut); code != 2 {
		t.Errorf("missing module: exit code %d, want 2", code)
	}
}
