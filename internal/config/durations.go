package config

import (
	"fmt"
	"reflect"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Durations are read by yaml as Go's time.ParseDuration reads them: "30s",
// "10m", "0s". yaml refuses a bare number for a time.Duration, and a bare 0
// is what operators write (and the docs and errors say "0 for the
// default"). So, before a document is decoded, bareDurations walks its node
// tree beside the Go type it decodes into and, where that type holds a
// time.Duration, turns a bare 0 into "0s" and refuses any other bare number,
// naming the key. One walk covers every duration field of every section
// (watch, lock, jobs.<name>, jobs.<name>.retry, notify, ...), and the fields
// stay plain time.Durations everywhere else.

var durationType = reflect.TypeFor[time.Duration]()

// document is what decode hands yaml's strict decoder for each document
// of the file.
type document struct{ cfg *Config }

// UnmarshalYAML takes yaml's decode function, which decodes this
// document's node tree with the decoder it is called from, unknown keys
// refused; nodeRef gets the tree itself (yaml hands an Unmarshaler its own
// node, not a copy), so bareDurations rewrites what the second call
// decodes.
func (d *document) UnmarshalYAML(decode func(any) error) error {
	var root nodeRef
	if err := decode(&root); err != nil {
		return err
	}
	w := durationWalk{seen: map[aliasVisit]bool{}}
	if err := w.walk(root.node, reflect.TypeFor[Config](), ""); err != nil {
		return err
	}
	return decode(d.cfg)
}

// nodeRef keeps the node it is decoded from.
type nodeRef struct{ node *yaml.Node }

func (r *nodeRef) UnmarshalYAML(n *yaml.Node) error {
	r.node = n
	return nil
}

// durationWalk walks a node tree beside the Go type it decodes into.
type durationWalk struct {
	// seen holds the aliased nodes walked already as a type: each is
	// walked once, which bounds the walk of a file with many aliases and
	// ends one whose anchor holds an alias of itself (yaml refuses it).
	seen map[aliasVisit]bool
}

type aliasVisit struct {
	node *yaml.Node
	t    reflect.Type
}

// walk checks n, the YAML of key (dotted, "" for the top) decoding into a
// value of type t. A node that does not fit t is left for yaml to refuse.
func (w durationWalk) walk(n *yaml.Node, t reflect.Type, key string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yaml.AliasNode {
		v := aliasVisit{n.Alias, t}
		if n.Alias == nil || w.seen[v] {
			return nil
		}
		w.seen[v] = true
		n = n.Alias
	}
	if t == durationType {
		return bareDuration(n, key)
	}
	switch {
	case n.Kind == yaml.MappingNode && (t.Kind() == reflect.Struct || t.Kind() == reflect.Map):
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.ShortTag() == "!!merge" { // <<: *base, or a list of them
				if err := w.merge(v, t, key); err != nil {
					return err
				}
				continue
			}
			var vt reflect.Type
			ok := true
			if t.Kind() == reflect.Struct {
				vt, ok = fieldType(t, k.Value)
			} else {
				vt = t.Elem()
			}
			if !ok {
				continue // an unknown key: yaml refuses it
			}
			if err := w.walk(v, vt, join(key, k.Value)); err != nil {
				return err
			}
		}
	case n.Kind == yaml.SequenceNode && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array):
		for i, item := range n.Content {
			if err := w.walk(item, t.Elem(), fmt.Sprintf("%s[%d]", key, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// merge walks the value of a merge key (<<) of a mapping of type t: one
// mapping or a list of them, merged into it.
func (w durationWalk) merge(v *yaml.Node, t reflect.Type, key string) error {
	if v.Kind != yaml.SequenceNode {
		return w.walk(v, t, key)
	}
	for _, m := range v.Content {
		if err := w.walk(m, t, key); err != nil {
			return err
		}
	}
	return nil
}

// bareDuration makes n, the YAML of duration key, a duration: a bare 0
// (0, 0.0, -0, 0x0, ...) becomes "0s", what 0 means for every duration;
// any other bare number is refused, as yaml would, but naming the key and
// the unit to add.
func bareDuration(n *yaml.Node, key string) error {
	if n.Kind != yaml.ScalarNode {
		return nil
	}
	if tag := n.ShortTag(); tag != "!!int" && tag != "!!float" {
		return nil
	}
	var f float64
	if err := n.Decode(&f); err != nil {
		return nil // yaml refuses it as it is
	}
	if f == 0 {
		n.Tag, n.Value, n.Style = "!!str", "0s", 0
		return nil
	}
	fix := n.Value + "s"
	if _, err := time.ParseDuration(fix); err != nil {
		fix = "a number with a unit, e.g. 30s, 5m or 1h"
	}
	return fmt.Errorf("line %d: %s: %s has no unit; write %s", n.Line, key, n.Value, fix)
}

// fieldType returns the type of the field of struct t that the YAML key
// name sets, as yaml maps keys to fields: the yaml tag's name, else the
// field's name in lower case, and the fields of ",inline" structs as t's
// own.
func fieldType(t reflect.Type, name string) (reflect.Type, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() && !f.Anonymous {
			continue
		}
		tag, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if tag == "-" {
			continue
		}
		if inline(opts) {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				if t, ok := fieldType(ft, name); ok {
					return t, true
				}
			}
			continue
		}
		if tag == "" {
			tag = strings.ToLower(f.Name)
		}
		if tag == name {
			return f.Type, true
		}
	}
	return nil, false
}

func inline(opts string) bool {
	for o := range strings.SplitSeq(opts, ",") {
		if o == "inline" {
			return true
		}
	}
	return false
}

// join is key.name, or name at the top.
func join(key, name string) string {
	if key == "" {
		return name
	}
	return key + "." + name
}
