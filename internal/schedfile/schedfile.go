// Package schedfile is the file format of schedules as code (`cronswap
// export`, `plan`, `apply`): a YAML stream of one document per job, each a
// mapping with the field names of the schedules collection, or the same
// entries as a JSON array. It reads a file entry by entry with bounded
// memory — each entry at most MaxEntryBytes of text, YAML aliases refused
// — and writes one. It knows the format only; whether an entry is a valid
// schedule is the daemons' check (admin.Rules), which the command line runs
// on the documents this package builds.
package schedfile

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.yaml.in/yaml/v3"

	"github.com/cronswap/cronswap/internal/lifetime"
	"github.com/cronswap/cronswap/schedule"
)

// Fields returns the fields of a schedules document the format holds, in
// the order export writes them: the job id and every field a user sets.
// updated_at, updated_by and the fields of apply itself are not among them;
// fields the format does not know are left alone on the documents.
func Fields() []string {
	return []string{schedule.FieldID, schedule.FieldCronExpr, schedule.FieldTimezone, schedule.FieldDST,
		schedule.FieldEnabled, schedule.FieldJob, schedule.FieldCategory, schedule.FieldArgs,
		lifetime.FieldStartAt, lifetime.FieldEndAt, lifetime.FieldPausedUntil, lifetime.FieldMaxRuns, schedule.FieldExclude}
}

// IsField reports whether name is one of Fields.
func IsField(name string) bool { return slices.Contains(Fields(), name) }

// Limits of a file.
const (
	// DefaultMaxFileBytes is the largest file read unless the caller
	// raises it (`--max-file-size`): about 600,000 schedules of a
	// hundred bytes each.
	DefaultMaxFileBytes = 64 << 20
	// MaxEntryBytes bounds the text of one entry, comments included: a
	// schedules document is at most schedule.MaxDocumentBytes of BSON, so
	// an entry sixteen times that is not a schedule, and it is refused
	// before it is parsed whole.
	MaxEntryBytes = 16 * schedule.MaxDocumentBytes
)

// Entry is one job of a file.
type Entry struct {
	// ID is the job id, "" when the entry has none that is a job id.
	ID string
	// Line is the line of the entry's first field (1-based).
	Line int
	// Doc is the document the entry stands for: its fields in the file's
	// order, with BSON values (a YAML integer is an int32, or an int64
	// when it does not fit; args as relaxed extended JSON, so
	// {"$date": …} is a date). Nil when Problems made it unreadable.
	Doc bson.Raw
	// Problems are what the format refuses in the entry: a field the
	// format does not know, a key given twice, an alias, an entry that is
	// not a mapping. The daemons' rules are checked on Doc, apart.
	Problems []*Problem
	// lines holds the line of each top-level field.
	lines map[string]int
}

// FieldLine returns the line of the entry's field name, or the entry's
// line when it has no such field.
func (e Entry) FieldLine(name string) int {
	if l, ok := e.lines[name]; ok {
		return l
	}
	return e.Line
}

// Problem is one thing wrong in a file, at a line.
type Problem struct {
	// Line is the 1-based line; 0 when the problem concerns no line.
	Line int
	// ID is the job the problem concerns, "" when unknown.
	ID string
	// Msg says what is wrong.
	Msg string
	// Err is the error the problem wraps (ErrTooLarge), if any.
	Err error
}

// Unwrap returns p.Err.
func (p *Problem) Unwrap() error { return p.Err }

func (p *Problem) Error() string {
	var b strings.Builder
	if p.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", p.Line)
	}
	if p.ID != "" {
		fmt.Fprintf(&b, "%s: ", p.ID)
	}
	b.WriteString(p.Msg)
	return b.String()
}

// ErrTooLarge is wrapped when a file or one of its entries is over its
// limit.
var ErrTooLarge = errors.New("too large")

// Reader reads the entries of a file one at a time.
type Reader struct {
	src  *limitReader
	buf  *bufio.Reader
	yaml *yaml.Decoder
	json *jsonArray
	done bool
	// lastLine is the line of the last entry returned.
	lastLine int
}

// NewReader returns a reader of the file r, which may be at most maxBytes
// long (DefaultMaxFileBytes when maxBytes is 0 or less). A file whose
// first character (after white space) is '[' is read as a JSON array of
// entries; any other as a YAML stream of one document per entry.
func NewReader(r io.Reader, maxBytes int64) *Reader {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxFileBytes
	}
	src := &limitReader{r: r, max: maxBytes, entryMax: MaxEntryBytes}
	return &Reader{src: src, buf: bufio.NewReaderSize(src, 4096)}
}

// Next returns the next entry, or io.EOF after the last one. A non-nil
// error other than io.EOF (the file is not YAML or JSON, or it is over a
// limit) ends the file: it is a *Problem, and Next returns io.EOF after it.
// An entry's own problems are in Entry.Problems; reading goes on after them.
func (r *Reader) Next() (Entry, error) {
	if r.done {
		return Entry{}, io.EOF
	}
	if r.yaml == nil && r.json == nil {
		if isJSON, err := startsWithBracket(r.buf); err != nil {
			return r.fail(0, err)
		} else if isJSON {
			r.json = newJSONArray(r.buf)
		} else {
			r.yaml = yaml.NewDecoder(r.buf)
		}
	}
	for {
		r.src.markEntry()
		var node yaml.Node
		var line int
		if r.json != nil {
			raw, start, err := r.json.next()
			if err == io.EOF {
				r.done = true
				return Entry{}, io.EOF
			}
			if err != nil {
				return r.fail(start, err)
			}
			if err := yaml.Unmarshal(raw, &node); err != nil {
				return r.fail(start, err)
			}
			line = start - 1 // the element's own line 1 is the file's line start
		} else {
			err := r.yaml.Decode(&node)
			if err == io.EOF {
				r.done = true
				return Entry{}, io.EOF
			}
			if err != nil {
				return r.fail(0, err)
			}
		}
		if node.Kind == yaml.DocumentNode && len(node.Content) == 1 {
			body := node.Content[0]
			if body.Kind == yaml.ScalarNode && body.Tag == "!!null" && body.Value == "" {
				continue // an empty document: "---" with nothing after it
			}
			e := readEntry(body, line)
			r.lastLine = e.Line
			return e, nil
		}
		if node.Kind == 0 {
			continue
		}
		e := readEntry(&node, line)
		r.lastLine = e.Line
		return e, nil
	}
}

// fail ends the file with the problem err at line (0: the line is in
// err's text, or unknown).
func (r *Reader) fail(line int, err error) (Entry, error) {
	r.done = true
	switch {
	case r.src.fileOver:
		return Entry{}, &Problem{Line: line, Err: ErrTooLarge,
			Msg: fmt.Sprintf("the file is larger than %d bytes: %v (raise the limit with --max-file-size)", r.src.max, ErrTooLarge)}
	case r.src.entryOver:
		which := "the first entry"
		if r.lastLine > 0 {
			which = fmt.Sprintf("the entry after the one at line %d", r.lastLine)
		}
		return Entry{}, &Problem{Line: line, Err: ErrTooLarge, Msg: fmt.Sprintf("%s is larger than %d bytes: %v (one schedule is at most %d bytes of BSON)",
			which, r.src.entryMax, ErrTooLarge, schedule.MaxDocumentBytes)}
	}
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	return Entry{}, &Problem{Line: line, Msg: "not a readable file: " + msg}
}

// startsWithBracket reports whether the first character after white space
// (and a byte-order mark) is '['.
func startsWithBracket(b *bufio.Reader) (bool, error) {
	for i := 1; ; i++ {
		p, err := b.Peek(i)
		if len(p) < i {
			if err == io.EOF {
				return false, nil
			}
			return false, err
		}
		c := p[i-1]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
		case i <= 3 && bytes.HasPrefix([]byte("\xef\xbb\xbf"), p):
		default:
			return c == '[', nil
		}
	}
}

// readEntry turns one document's body into an Entry; lineOffset is added
// to the node's lines (a JSON element parsed on its own).
func readEntry(n *yaml.Node, lineOffset int) Entry {
	e := Entry{Line: n.Line + lineOffset, lines: map[string]int{}}
	add := func(line int, format string, a ...any) {
		e.Problems = append(e.Problems, &Problem{Line: line + lineOffset, Msg: fmt.Sprintf(format, a...)})
	}
	// Aliases anywhere are refused before anything is expanded.
	walk(n, func(c *yaml.Node) {
		if c.Kind == yaml.AliasNode {
			add(c.Line, "YAML alias *%s: aliases are not accepted in a schedules file (write the value out)", c.Value)
		}
	})
	if n.Kind != yaml.MappingNode {
		add(n.Line, "an entry must be a mapping of fields (_id, cron_expr, …), not %s", kindName(n))
		return e
	}
	if len(e.Problems) > 0 {
		e.setID(n)
		return e
	}
	doc := bson.D{}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		key := k.Value
		line := k.Line + lineOffset
		if k.Kind != yaml.ScalarNode {
			add(k.Line, "a field name must be a plain word, not %s", kindName(k))
			continue
		}
		if first, dup := seen[key]; dup {
			add(k.Line, "field %s given twice (first at line %d)", key, first)
			continue
		}
		seen[key] = line
		if !IsField(key) {
			add(k.Line, "unknown field %q (a schedule has %s)", key, strings.Join(Fields(), ", "))
			continue
		}
		e.lines[key] = line
		if err := dupKeys(v, lineOffset); err != nil {
			e.Problems = append(e.Problems, err)
			continue
		}
		val, err := bsonValue(v)
		if err != nil {
			add(v.Line, "field %s: %v", key, err)
			continue
		}
		doc = append(doc, bson.E{Key: key, Value: val})
	}
	if _, ok := e.lines[schedule.FieldID]; !ok {
		add(n.Line, "no _id: every entry names its job (_id: daily_report)")
	}
	e.setID(n)
	if len(e.Problems) > 0 {
		return e
	}
	raw, err := bson.Marshal(doc)
	if err != nil {
		e.Problems = append(e.Problems, &Problem{Line: e.Line, Msg: fmt.Sprintf("not a document: %v", err)})
		return e
	}
	e.Doc = raw
	return e
}

// bsonValue is the BSON value of a field: a scalar as YAML reads it (a
// string, an int32 or an int64 when it does not fit, a double, a bool,
// null, a date); a mapping or a list as relaxed extended JSON, so that
// {"$date": …} is a date again.
func bsonValue(n *yaml.Node) (any, error) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!str" {
		return n.Value, nil // the common case, without YAML's decoding
	}
	if n.Kind == yaml.ScalarNode {
		var v any
		if err := n.Decode(&v); err != nil {
			return nil, fmt.Errorf("%q: %v", n.Value, err)
		}
		switch x := v.(type) {
		case int:
			if x >= math.MinInt32 && x <= math.MaxInt32 {
				return int32(x), nil
			}
			return int64(x), nil
		case uint64:
			return nil, fmt.Errorf("%s is too large for an integer", n.Value)
		case float64:
			if n.Tag == "!!int" || integerText(n.Value) {
				return nil, fmt.Errorf("%s is too large for an integer", n.Value)
			}
		}
		return v, nil
	}
	var js bytes.Buffer
	js.WriteString(`{"v":`)
	if err := writeJSON(&js, n); err != nil {
		return nil, err
	}
	js.WriteByte('}')
	var doc bson.Raw
	if err := bson.UnmarshalExtJSON(js.Bytes(), false, &doc); err != nil {
		return nil, fmt.Errorf("not a value: %v", err)
	}
	return doc.Lookup("v"), nil
}

// setID sets e.ID from n's _id when it is a job id.
func (e *Entry) setID(n *yaml.Node) {
	if n.Kind != yaml.MappingNode {
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Value == schedule.FieldID && v.Kind == yaml.ScalarNode && v.Tag == "!!str" {
			if id, err := schedule.DecodeID(bson.RawValue{Type: bson.TypeString, Value: bsoncoreString(v.Value)}); err == nil {
				e.ID = id
			}
			return
		}
	}
}

// bsoncoreString is the BSON encoding of a string value.
func bsoncoreString(s string) []byte {
	b := make([]byte, 4, 4+len(s)+1)
	n := uint32(len(s) + 1)
	b[0], b[1], b[2], b[3] = byte(n), byte(n>>8), byte(n>>16), byte(n>>24)
	b = append(b, s...)
	return append(b, 0)
}

// dupKeys refuses a key given twice in any mapping inside n.
func dupKeys(n *yaml.Node, lineOffset int) *Problem {
	var p *Problem
	walk(n, func(c *yaml.Node) {
		if p != nil || c.Kind != yaml.MappingNode {
			return
		}
		seen := map[string]int{}
		for i := 0; i+1 < len(c.Content); i += 2 {
			k := c.Content[i]
			if first, dup := seen[k.Value]; dup {
				p = &Problem{Line: k.Line + lineOffset, Msg: fmt.Sprintf("key %s given twice (first at line %d)", k.Value, first+lineOffset)}
				return
			}
			seen[k.Value] = k.Line
		}
	})
	return p
}

func walk(n *yaml.Node, fn func(*yaml.Node)) {
	fn(n)
	for _, c := range n.Content {
		walk(c, fn)
	}
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	case yaml.AliasNode:
		return "an alias"
	case yaml.ScalarNode:
		return fmt.Sprintf("the value %q", n.Value)
	}
	return "empty"
}

// writeJSON writes n as JSON, the input of relaxed extended JSON: a YAML
// timestamp becomes {"$date": …}, an integer stays an integer (int32 when
// it fits), a float a float.
func writeJSON(b *bytes.Buffer, n *yaml.Node) error {
	switch n.Kind {
	case yaml.MappingNode:
		b.WriteByte('{')
		for i := 0; i+1 < len(n.Content); i += 2 {
			if i > 0 {
				b.WriteByte(',')
			}
			k := n.Content[i]
			if k.Kind != yaml.ScalarNode {
				return fmt.Errorf("line %d: a key must be a plain value, not %s", k.Line, kindName(k))
			}
			kj, _ := json.Marshal(k.Value)
			b.Write(kj)
			b.WriteByte(':')
			if err := writeJSON(b, n.Content[i+1]); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	case yaml.SequenceNode:
		b.WriteByte('[')
		for i, c := range n.Content {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := writeJSON(b, c); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case yaml.ScalarNode:
		var v any
		if err := n.Decode(&v); err != nil {
			return fmt.Errorf("%q: %v", n.Value, err)
		}
		switch x := v.(type) {
		case time.Time:
			v = map[string]string{"$date": x.UTC().Format(time.RFC3339Nano)}
		case uint64:
			return fmt.Errorf("%s is too large for an integer", n.Value)
		case float64:
			if n.Tag == "!!int" || (n.Tag == "!!float" && integerText(n.Value)) {
				return fmt.Errorf("%s is too large for an integer", n.Value)
			}
			// Canonical form, so that a whole float (1.0) stays a double
			// and NaN or infinity can be said at all.
			v = map[string]string{"$numberDouble": doubleText(x)}
		}
		js, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("%q: %v", n.Value, err)
		}
		b.Write(js)
	default:
		return fmt.Errorf("line %d: %s is not a value", n.Line, kindName(n))
	}
	return nil
}

// limitReader counts what it reads: the whole file is bounded by max, and
// what is read since the last markEntry by entryMax.
type limitReader struct {
	r         io.Reader
	max       int64
	entryMax  int64
	read      int64
	mark      int64
	fileOver  bool
	entryOver bool
}

// markEntry starts the count of the next entry's bytes. The parsers read
// ahead (a few KiB), so an entry may exceed entryMax by that much.
func (l *limitReader) markEntry() { l.mark = l.read }

func (l *limitReader) Read(p []byte) (int, error) {
	if l.read > l.max {
		l.fileOver = true
		return 0, ErrTooLarge
	}
	if l.read-l.mark > l.entryMax {
		l.entryOver = true
		return 0, ErrTooLarge
	}
	n, err := l.r.Read(p)
	l.read += int64(n)
	if l.read > l.max {
		l.fileOver = true
		return n, ErrTooLarge
	}
	return n, err
}

// doubleText is x as extended JSON's $numberDouble writes it.
func doubleText(x float64) string {
	switch {
	case math.IsNaN(x):
		return "NaN"
	case math.IsInf(x, 1):
		return "Infinity"
	case math.IsInf(x, -1):
		return "-Infinity"
	}
	return strconv.FormatFloat(x, 'g', -1, 64)
}

// integerText reports whether a number is written as an integer (digits,
// a sign), which YAML reads as a float only when it is too large.
func integerText(v string) bool {
	v = strings.TrimLeft(v, "+-")
	return v != "" && strings.Trim(v, "0123456789_") == ""
}
