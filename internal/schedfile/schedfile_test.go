package schedfile_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/schedfile"
)

// readAll reads every entry of text; the error is the one that ended the
// file, if any.
func readAll(t *testing.T, text string, max int64) ([]schedfile.Entry, error) {
	t.Helper()
	r := schedfile.NewReader(strings.NewReader(text), max)
	var out []schedfile.Entry
	for {
		e, err := r.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, e)
	}
}

func problems(e schedfile.Entry) string {
	var s []string
	for _, p := range e.Problems {
		s = append(s, p.Error())
	}
	return strings.Join(s, "; ")
}

func TestReaderEntriesAndLines(t *testing.T) {
	text := `# reviewed in git
_id: daily_report
cron_expr: "0 9 * * *"
timezone: Europe/Berlin
args:
  region: eu
  n: 5
  big: 5000000000
  ratio: 1.0
  when: 2027-03-01T10:00:00Z
---
---
_id: nightly
enabled: false
cron_expr: '@daily'
`
	entries, err := readAll(t, text, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 {
		t.Fatalf("%d entries, want 2 (an empty document is skipped)", len(entries))
	}
	a, b := entries[0], entries[1]
	if a.ID != "daily_report" || a.Line != 2 || a.FieldLine("timezone") != 4 || a.FieldLine("args") != 5 || len(a.Problems) > 0 {
		t.Fatalf("first entry: id %q line %d timezone at %d args at %d problems %s", a.ID, a.Line, a.FieldLine("timezone"), a.FieldLine("args"), problems(a))
	}
	if b.ID != "nightly" || b.Line != 13 || b.FieldLine("cron_expr") != 15 {
		t.Fatalf("second entry: id %q line %d cron_expr at %d", b.ID, b.Line, b.FieldLine("cron_expr"))
	}
	args := a.Doc.Lookup("args").Document()
	for field, typ := range map[string]bson.Type{"region": bson.TypeString, "n": bson.TypeInt32, "big": bson.TypeInt64,
		"ratio": bson.TypeDouble, "when": bson.TypeDateTime} {
		if got := args.Lookup(field).Type; got != typ {
			t.Errorf("args.%s is %s, want %s", field, got, typ)
		}
	}
	// The document keeps the file's order of fields.
	keys := []string{}
	elems, _ := b.Doc.Elements()
	for _, e := range elems {
		keys = append(keys, e.Key())
	}
	if strings.Join(keys, ",") != "_id,enabled,cron_expr" {
		t.Fatalf("fields %v", keys)
	}
}

func TestReaderRefusesWhatTheFormatDoesNotKnow(t *testing.T) {
	for _, c := range []struct {
		name, text, want string
	}{
		{"unknown field", "_id: a\ncron_expr: '@daily'\ncron: '@hourly'\n", `line 3: unknown field "cron"`},
		{"updated_by is not the file's", "_id: a\ncron_expr: '@daily'\nupdated_by: alice\n", `line 3: unknown field "updated_by"`},
		{"field twice", "_id: a\ncron_expr: '@daily'\ncron_expr: '@hourly'\n", "line 3: field cron_expr given twice (first at line 2)"},
		{"args key twice", "_id: a\ncron_expr: '@daily'\nargs:\n  x: 1\n  x: 2\n", "line 5: key x given twice (first at line 4)"},
		{"no _id", "cron_expr: '@daily'\n", "line 1: no _id"},
		{"not a mapping", "- _id: a\n", "line 1: an entry must be a mapping"},
		{"alias", "_id: a\ncron_expr: &e '@daily'\nargs: {x: *e}\n", "line 3: YAML alias *e: aliases are not accepted"},
		{"integer too large", "_id: a\ncron_expr: '@daily'\nargs: {x: 99999999999999999999}\n", "line 3: field args: 99999999999999999999 is too large for an integer"},
	} {
		t.Run(c.name, func(t *testing.T) {
			entries, err := readAll(t, c.text, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(entries) != 1 || !strings.Contains(problems(entries[0]), c.want) {
				t.Fatalf("want a problem %q, got %d entries: %v", c.want, len(entries), problems(entries[0]))
			}
			if entries[0].Doc != nil {
				t.Fatalf("an entry with a problem has a document")
			}
		})
	}
}

func TestReaderEndsOnSyntaxErrorAndLimits(t *testing.T) {
	_, err := readAll(t, "_id: a\ncron_expr: \"0 9 * * *\n", 0)
	var p *schedfile.Problem
	if !errors.As(err, &p) || !strings.Contains(err.Error(), "not a readable file") {
		t.Fatalf("unclosed quote: %v", err)
	}
	big := "_id: a\ncron_expr: '@daily'\n---\n" + strings.Repeat("# padding\n", 400)
	if _, err := readAll(t, big, 1000); !errors.Is(err, schedfile.ErrTooLarge) || !strings.Contains(fmt.Sprint(err), "larger than 1000 bytes") {
		t.Fatalf("a file over the limit: %v", err)
	}
	huge := "_id: a\ncron_expr: '@daily'\nargs:\n  x: \"" + strings.Repeat("y", schedfile.MaxEntryBytes+64<<10) + "\"\n"
	if _, err := readAll(t, huge, 0); !errors.Is(err, schedfile.ErrTooLarge) || !strings.Contains(fmt.Sprint(err), "the first entry is larger than") {
		t.Fatalf("an entry over its limit: %v", err)
	}
}

// An alias bomb (each level ten aliases of the one before) is refused
// without being expanded: the reader allocates a few megabytes at most,
// where expanding it would take gigabytes.
func TestReaderRefusesAnAliasBombInBoundedMemory(t *testing.T) {
	var b strings.Builder
	b.WriteString("_id: bomb\ncron_expr: '@daily'\nargs:\n  a0: &a0 [\"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\"]\n")
	for i := 1; i <= 9; i++ {
		fmt.Fprintf(&b, "  a%d: &a%d [", i, i)
		for j := 0; j < 10; j++ {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "*a%d", i-1)
		}
		b.WriteString("]\n")
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	entries, err := readAll(t, b.String(), 0)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || !strings.Contains(problems(entries[0]), "aliases are not accepted") {
		t.Fatalf("alias bomb not refused: %v", problems(entries[0]))
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
		t.Fatalf("reading the alias bomb allocated %d bytes", alloc)
	}
}

func TestReaderJSONArrayLines(t *testing.T) {
	text := "[\n  {\"_id\": \"a\", \"cron_expr\": \"@daily\"},\n\n  {\"_id\": \"b\",\n   \"cron_expr\": \"@hourly\",\n   \"bogus\": 1}\n]\n"
	entries, err := readAll(t, text, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 || entries[0].Line != 2 || entries[1].Line != 4 {
		t.Fatalf("entries %+v", entries)
	}
	if got := problems(entries[1]); !strings.Contains(got, `line 6: unknown field "bogus"`) {
		t.Fatalf("problem %q", got)
	}
	if _, err := readAll(t, "[{\"_id\": \"a\", \"cron_expr\": \"@daily\"},\n {\"_id\": \"b\" \"cron_expr\": 1}]", 0); !strings.Contains(fmt.Sprint(err), "line 2: not a readable file: not JSON") {
		t.Fatalf("broken JSON: %v", err)
	}
	if _, err := readAll(t, "[{\"_id\": \"a\", \"cron_expr\": \"@daily\"}", 0); !strings.Contains(fmt.Sprint(err), "not closed") {
		t.Fatalf("unclosed array: %v", err)
	}
}

// What export writes, the reader reads back to the same values: the
// file's round trip changes nothing.
func TestWriterRoundTrip(t *testing.T) {
	when := time.Date(2027, 3, 1, 10, 0, 0, 0, time.UTC)
	docs := []bson.D{
		{{Key: "_id", Value: "a"}, {Key: "cron_expr", Value: "*/5 * * * *"}, {Key: "timezone", Value: "Asia/Seoul"},
			{Key: "updated_at", Value: when}, {Key: "owner", Value: "team-x"}, {Key: "dst", Value: "plain"},
			{Key: "args", Value: bson.D{{Key: "n", Value: int64(5)}, {Key: "s", Value: "123"}, {Key: "t", Value: "true"},
				{Key: "f", Value: 1.0}, {Key: "when", Value: when}, {Key: "list", Value: bson.A{"x", int32(2)}},
				{Key: "nested", Value: bson.D{{Key: "k", Value: "# not a comment"}}}}}},
		{{Key: "_id", Value: "b"}, {Key: "cron_expr", Value: "@every 30s"}, {Key: "enabled", Value: false}, {Key: "job", Value: "ping"},
			{Key: "category", Value: "ops"}, {Key: "timezone", Value: nil}},
	}
	for _, format := range []string{schedfile.FormatYAML, schedfile.FormatJSON} {
		t.Run(format, func(t *testing.T) {
			var buf bytes.Buffer
			w, err := schedfile.NewWriter(&buf, format)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range docs {
				raw, _ := bson.Marshal(d)
				if err := w.Write(raw); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			entries, err := readAll(t, buf.String(), 0)
			if err != nil || len(entries) != 2 {
				t.Fatalf("read back %d entries: %v\n%s", len(entries), err, buf.String())
			}
			for i, d := range docs {
				raw, _ := bson.Marshal(d)
				want, _ := bson.MarshalExtJSON(schedfile.Exported(raw), false, false)
				got, _ := bson.MarshalExtJSON(entries[i].Doc, false, false)
				if len(entries[i].Problems) > 0 || string(got) != string(want) {
					t.Fatalf("entry %d read back as\n%s\nwant\n%s\nproblems %s\nfile:\n%s", i, got, want, problems(entries[i]), buf.String())
				}
			}
			if strings.Contains(buf.String(), "owner") || strings.Contains(buf.String(), "updated_at") {
				t.Fatalf("export wrote a field the format does not hold:\n%s", buf.String())
			}
		})
	}
}

// heapInUse is the heap in use after a collection.
func heapInUse() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// Writing and reading a stream keep no memory per entry: what export
// writes and apply reads may be a million schedules. (yaml.v3's Encoder
// keeps about 2 KB per document of a stream, so the writer encodes each
// document on its own.)
func TestStreamsKeepNoMemoryPerEntry(t *testing.T) {
	const n = 20000
	pr, pw := io.Pipe()
	go func() {
		w, err := schedfile.NewWriter(pw, schedfile.FormatYAML)
		if err != nil {
			pw.CloseWithError(err)
			return
		}
		var base uint64
		for i := range n {
			if i == 1000 {
				base = heapInUse()
			}
			raw, _ := bson.Marshal(bson.D{{Key: "_id", Value: fmt.Sprintf("job_%07d", i)}, {Key: "cron_expr", Value: "0 9 * * *"},
				{Key: "args", Value: bson.D{{Key: "n", Value: int32(i)}}}})
			if err := w.Write(raw); err != nil {
				pw.CloseWithError(err)
				return
			}
		}
		if grown := int64(heapInUse()) - int64(base); grown > 8<<20 {
			pw.CloseWithError(fmt.Errorf("the writer's heap grew by %d bytes over %d entries", grown, n-1000))
			return
		}
		pw.CloseWithError(w.Close())
	}()
	r := schedfile.NewReader(pr, 0)
	var base uint64
	for i := 0; ; i++ {
		if i == 1000 {
			base = heapInUse()
		}
		_, err := r.Next()
		if err == io.EOF {
			if i != n {
				t.Fatalf("read %d entries", i)
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if grown := int64(heapInUse()) - int64(base); grown > 8<<20 {
		t.Fatalf("the reader's heap grew by %d bytes over %d entries", grown, n-1000)
	}
}
