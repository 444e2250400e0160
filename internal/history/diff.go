package history

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/schedule"
)

// notChanges are the fields Diff leaves out: the key, and the metadata of
// the edit itself (its time is Entry.At, its author Entry.UpdatedBy, its
// message Entry.UpdateMessage).
var notChanges = map[string]bool{
	schedule.FieldID:            true,
	schedule.FieldUpdatedAt:     true,
	schedule.FieldUpdatedBy:     true,
	schedule.FieldUpdateMessage: true,
}

// Diff returns the fields that differ between two versions of a schedules
// document (nil: the document did not exist), in document order: before's
// fields first, then those only after has. A field that is an embedded
// document on both sides is compared field by field, under dotted paths;
// any other field is compared whole, type included (int32 5 and int64 5
// differ), so arrays are one change. _id, updated_at, updated_by and
// update_message are not changes (see Entry.At, Entry.UpdatedBy and
// Entry.UpdateMessage).
func Diff(before, after bson.Raw) []Change {
	var out []Change
	diffDocs(&out, "", before, after, true)
	return out
}

func diffDocs(out *[]Change, prefix string, before, after bson.Raw, top bool) {
	bs, _ := before.Elements()
	as, _ := after.Elements()
	afterByKey := make(map[string]bson.RawValue, len(as))
	for _, e := range as {
		afterByKey[e.Key()] = e.Value()
	}
	seen := make(map[string]bool, len(bs))
	for _, e := range bs {
		k := e.Key()
		seen[k] = true
		if top && notChanges[k] {
			continue
		}
		diffValues(out, prefix+k, e.Value(), afterByKey[k])
	}
	for _, e := range as {
		k := e.Key()
		if seen[k] || (top && notChanges[k]) {
			continue
		}
		diffValues(out, prefix+k, bson.RawValue{}, e.Value())
	}
}

func diffValues(out *[]Change, path string, b, a bson.RawValue) {
	if b.Type == bson.TypeEmbeddedDocument && a.Type == bson.TypeEmbeddedDocument {
		diffDocs(out, path+".", b.Document(), a.Document(), false)
		return
	}
	if b.Type == a.Type && bytes.Equal(b.Value, a.Value) {
		return
	}
	*out = append(*out, Change{Field: path, Before: b, After: a})
}

// ApplyUpdate returns doc with an update event's updateDescription applied:
// updatedFields set (dotted paths into embedded documents and array
// elements), removedFields removed, truncatedArrays truncated. doc nil is
// an empty document.
func ApplyUpdate(doc, desc bson.Raw) (bson.Raw, error) {
	root := bson.D{}
	if doc != nil {
		root = toTree(bson.RawValue{Type: bson.TypeEmbeddedDocument, Value: doc}).(bson.D)
	}
	if v, err := desc.LookupErr("updatedFields"); err == nil {
		fields, ok := v.DocumentOK()
		if !ok {
			return nil, fmt.Errorf("updateDescription.updatedFields is a %s, not a document", v.Type)
		}
		els, err := fields.Elements()
		if err != nil {
			return nil, fmt.Errorf("updateDescription.updatedFields: %w", err)
		}
		for _, e := range els {
			root = setPath(root, strings.Split(e.Key(), "."), toTree(e.Value())).(bson.D)
		}
	}
	if v, err := desc.LookupErr("removedFields"); err == nil {
		vals, _ := v.Array().Values()
		for _, p := range vals {
			if s, ok := p.StringValueOK(); ok {
				root = removePath(root, strings.Split(s, ".")).(bson.D)
			}
		}
	}
	if v, err := desc.LookupErr("truncatedArrays"); err == nil {
		vals, _ := v.Array().Values()
		for _, t := range vals {
			td, ok := t.DocumentOK()
			if !ok {
				continue
			}
			field, _ := td.Lookup("field").StringValueOK()
			size, ok := td.Lookup("newSize").AsInt64OK()
			if field != "" && ok {
				root = truncatePath(root, strings.Split(field, "."), int(size)).(bson.D)
			}
		}
	}
	out, err := bson.Marshal(root)
	if err != nil {
		return nil, fmt.Errorf("apply updateDescription: %w", err)
	}
	return out, nil
}

// toTree turns a value into something setPath can walk: documents become
// bson.D and arrays bson.A (recursively); every other value stays a
// bson.RawValue, so types and bytes survive re-encoding unchanged.
func toTree(v bson.RawValue) any {
	switch v.Type {
	case bson.TypeEmbeddedDocument:
		els, _ := v.Document().Elements()
		d := make(bson.D, 0, len(els))
		for _, e := range els {
			d = append(d, bson.E{Key: e.Key(), Value: toTree(e.Value())})
		}
		return d
	case bson.TypeArray:
		vals, _ := v.Array().Values()
		a := make(bson.A, 0, len(vals))
		for _, e := range vals {
			a = append(a, toTree(e))
		}
		return a
	}
	return v
}

// setPath sets path in node (a bson.D or bson.A) to v and returns the
// node. Missing documents on the way are created; a numeric segment into
// an array sets that element, padding with nulls as the server does.
func setPath(node any, path []string, v any) any {
	key, rest := path[0], path[1:]
	child := func(old any) any {
		if len(rest) == 0 {
			return v
		}
		switch old.(type) {
		case bson.D, bson.A:
			return setPath(old, rest, v)
		}
		return setPath(bson.D{}, rest, v)
	}
	switch n := node.(type) {
	case bson.D:
		for i := range n {
			if n[i].Key == key {
				n[i].Value = child(n[i].Value)
				return n
			}
		}
		return append(n, bson.E{Key: key, Value: child(nil)})
	case bson.A:
		i, err := strconv.Atoi(key)
		if err != nil || i < 0 {
			return n
		}
		for len(n) <= i {
			n = append(n, bson.RawValue{Type: bson.TypeNull})
		}
		n[i] = child(n[i])
		return n
	}
	return node
}

// removePath removes path from node (an array element becomes null, as
// $unset does) and returns the node.
func removePath(node any, path []string) any {
	key, rest := path[0], path[1:]
	switch n := node.(type) {
	case bson.D:
		for i := range n {
			if n[i].Key != key {
				continue
			}
			if len(rest) == 0 {
				return append(n[:i:i], n[i+1:]...)
			}
			n[i].Value = removePath(n[i].Value, rest)
			return n
		}
	case bson.A:
		i, err := strconv.Atoi(key)
		if err != nil || i < 0 || i >= len(n) {
			return n
		}
		if len(rest) == 0 {
			n[i] = bson.RawValue{Type: bson.TypeNull}
		} else {
			n[i] = removePath(n[i], rest)
		}
		return n
	}
	return node
}

// truncatePath cuts the array at path to size elements.
func truncatePath(node any, path []string, size int) any {
	if len(path) == 0 {
		if a, ok := node.(bson.A); ok && size >= 0 && size < len(a) {
			return a[:size]
		}
		return node
	}
	key, rest := path[0], path[1:]
	switch n := node.(type) {
	case bson.D:
		for i := range n {
			if n[i].Key == key {
				n[i].Value = truncatePath(n[i].Value, rest, size)
			}
		}
	case bson.A:
		if i, err := strconv.Atoi(key); err == nil && i >= 0 && i < len(n) {
			n[i] = truncatePath(n[i], rest, size)
		}
	}
	return node
}

// Revert returns the document before a change, given the document after
// it (nil: an empty document) and the change's Changes as Diff lists
// them: every field's Before is put back, and a field without one (it did
// not exist before) is removed.
func Revert(after bson.Raw, changes []Change) (bson.Raw, error) {
	set, removed := bson.D{}, bson.A{}
	for _, c := range changes {
		if c.Before.IsZero() {
			removed = append(removed, c.Field)
		} else {
			set = append(set, bson.E{Key: c.Field, Value: c.Before})
		}
	}
	desc, err := bson.Marshal(bson.D{{Key: "updatedFields", Value: set}, {Key: "removedFields", Value: removed}})
	if err != nil {
		return nil, fmt.Errorf("revert a change: %w", err)
	}
	return ApplyUpdate(after, desc)
}
