package schedule

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestDialectRefusalsAsDocumented: every row of the refusal table of
// docs/time.md is the refusal ParseExprWith gives (up to the "(…)" the
// table shortens).
func TestDialectRefusalsAsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/time.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(doc), "### Refusals")
	if !ok {
		t.Fatal("docs/time.md has no Refusals section")
	}
	table, _, _ = strings.Cut(table, "\n### ")
	rows := 0
	for _, line := range strings.Split(table, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) != 4 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		written, want := strings.TrimSpace(cells[1]), strings.TrimSpace(cells[2])
		id := "job"
		if strings.HasSuffix(written, "without a job id") {
			id, written = "", strings.TrimSpace(strings.TrimSuffix(written, "without a job id"))
		}
		expr := strings.Trim(written, "`")
		want = strings.Trim(want, "`")
		want, _, _ = strings.Cut(want, "(…)")
		_, err := ParseExprWith(expr, time.UTC, ParseOptions{JobID: id})
		if err == nil || !strings.Contains(err.Error(), strings.TrimSpace(want)) {
			t.Errorf("%q: refused with %v; docs/time.md says %q", expr, err, want)
		}
		rows++
	}
	if rows < 8 {
		t.Fatalf("read %d rows of the refusal table", rows)
	}
}
