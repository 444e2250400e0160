package schedfile

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strconv"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.yaml.in/yaml/v3"

	"github.com/cronswap/cronswap/schedule"
)

// Formats a Writer writes.
const (
	FormatYAML = "yaml"
	FormatJSON = "json"
)

// Writer writes schedules documents as a file, one entry at a time.
type Writer struct {
	w      *bufio.Writer
	format string
	n      int
	// doc holds one YAML document at a time: yaml.v3's Encoder keeps
	// memory for every document of a stream (2 KB each), so each document
	// gets an encoder of its own and the separators are written here.
	doc bytes.Buffer
}

// NewWriter returns a writer of format (FormatYAML or FormatJSON) to w.
func NewWriter(w io.Writer, format string) (*Writer, error) {
	fw := &Writer{w: bufio.NewWriterSize(w, 64<<10), format: format}
	switch format {
	case FormatYAML, FormatJSON:
	default:
		return nil, fmt.Errorf("format %q: want %s or %s", format, FormatYAML, FormatJSON)
	}
	return fw, nil
}

// Exported returns the entry a stored document exports as: the document's
// Fields in the order of Fields, leaving out an optional field that is
// null (null is the same as absent there) and every field Fields does
// not name. A value the daemons would refuse is kept as it is, so that the
// file shows what the database holds.
func Exported(doc bson.Raw) bson.D {
	out := bson.D{}
	for _, f := range Fields() {
		v, err := doc.LookupErr(f)
		if err != nil {
			continue
		}
		if v.Type == bson.TypeNull && f != schedule.FieldEnabled {
			continue
		}
		out = append(out, bson.E{Key: f, Value: v})
	}
	return out
}

// Write writes the entry of the stored document doc (see Exported).
func (w *Writer) Write(doc bson.Raw) error {
	e := Exported(doc)
	if w.format == FormatJSON {
		js, err := bson.MarshalExtJSON(e, false, false)
		if err != nil {
			return fmt.Errorf("schedule %v: %w", doc.Lookup(schedule.FieldID), err)
		}
		sep := ",\n  "
		if w.n == 0 {
			sep = "[\n  "
		}
		w.n++
		if _, err := w.w.WriteString(sep); err != nil {
			return err
		}
		_, err = w.w.Write(js)
		return err
	}
	node := &yaml.Node{Kind: yaml.MappingNode}
	for _, f := range e {
		v, err := yamlValue(f.Value.(bson.RawValue))
		if err != nil {
			return fmt.Errorf("schedule %v: field %s: %w", doc.Lookup(schedule.FieldID), f.Key, err)
		}
		if f.Key == schedule.FieldCronExpr && v.Kind == yaml.ScalarNode && v.Tag == "!!str" {
			v.Style = yaml.DoubleQuotedStyle // reads the same whatever the expression holds (*, @, #)
		}
		node.Content = append(node.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: f.Key}, v)
	}
	w.doc.Reset()
	enc := yaml.NewEncoder(&w.doc)
	enc.SetIndent(2)
	if err := enc.Encode(node); err != nil {
		return fmt.Errorf("schedule %v: %w", doc.Lookup(schedule.FieldID), err)
	}
	if err := enc.Close(); err != nil {
		return err
	}
	if w.n > 0 {
		if _, err := w.w.WriteString("---\n"); err != nil {
			return err
		}
	}
	w.n++
	_, err := w.w.Write(w.doc.Bytes())
	return err
}

// Close ends the file (a JSON array's closing bracket; "[]" when empty)
// and flushes it.
func (w *Writer) Close() error {
	if w.format == FormatJSON {
		end := "\n]\n"
		if w.n == 0 {
			end = "[]\n"
		}
		if _, err := w.w.WriteString(end); err != nil {
			return err
		}
	}
	return w.w.Flush()
}

// yamlValue is v as a YAML node: strings, booleans and numbers as
// themselves; documents, arrays and every other type as their relaxed
// extended JSON (a date {"$date": …}), which Reader reads back to the same
// value.
func yamlValue(v bson.RawValue) (*yaml.Node, error) {
	scalar := func(tag, value string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: value} }
	switch v.Type {
	case bson.TypeString:
		return scalar("!!str", v.StringValue()), nil
	case bson.TypeBoolean:
		return scalar("!!bool", strconv.FormatBool(v.Boolean())), nil
	case bson.TypeInt32:
		return scalar("!!int", strconv.FormatInt(int64(v.Int32()), 10)), nil
	case bson.TypeInt64:
		return scalar("!!int", strconv.FormatInt(v.Int64(), 10)), nil
	}
	js, err := bson.MarshalExtJSON(bson.D{{Key: "v", Value: v}}, false, false)
	if err != nil {
		return nil, err
	}
	var n yaml.Node
	if err := yaml.Unmarshal(js, &n); err != nil {
		return nil, err
	}
	val := n.Content[0].Content[1]
	plain(val)
	return val, nil
}

// plain drops the flow style and quotes JSON gave the nodes: block
// mappings and lists, strings quoted only where YAML needs it.
func plain(n *yaml.Node) {
	n.Style = 0
	for _, c := range n.Content {
		plain(c)
	}
}
