package history

import (
	"bytes"
	"encoding/binary"
	"hash/maphash"
	"iter"
	"sync"
	"sync/atomic"
	"unsafe"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/opentable"
	"github.com/cronswap/cronswap/schedule"
)

// docShards is the number of independently locked parts of a docStore: a
// listing (Documents) holds one part's lock at a time, for about 1/256 of
// the documents, so the watcher's goroutine never waits for a whole one.
const docShards = 256

// docStore is the recorder's copy of the schedules collection: each
// document as the events left it (the before-image of its next edit), by
// its key (schedule.DecodeID of its _id: the job id, or the RefusedKey of
// an _id that is not one). It is the daemon's one copy of the documents:
// the state file is written from it too (Recorder.Documents). Writes come
// from the watcher's goroutine; Documents may run on another.
//
// A document is kept compact, in one allocation with its key (storedDoc):
// its field names and types are kept once per store, as its shape (see
// shapes), and the document only as its values; get and all give back the
// very bytes put was given. A shard's documents are in a hash table of
// their own (opentable.Table): the key is read back from the stored bytes.
type docStore struct {
	hash   func(key string) uint64
	shards [docShards]docShard

	// shapes are the shapes of the stored documents, by index (see
	// storedDoc); a list is never changed once stored (a new shape stores a
	// longer copy), so a reader loads it without a lock.
	shapes atomic.Pointer[[]string]

	// enc guards the encoder's buffers and the shapes' index; put and
	// load hold it, then a shard's lock.
	enc       sync.Mutex
	shapeOf   map[string]uint16
	lastShape uint16 // the shape shapeIndex found last, tried first
	shapeBuf  []byte
	valuesBuf []byte
	dataBuf   []byte
}

type docShard struct {
	mu sync.Mutex
	t  opentable.Table[storedDoc] // a document's key is in its bytes (storedDoc.Key)
}

// storedDoc is one document and the full read that last listed it: n
// bytes at p (data), which are its shape's index (uvarint), its key
// (uvarint length, bytes), then either its values as its shape orders
// them (compactDoc) or, when the shape is wholeDoc, the document as given.
// A pointer and a length rather than a string: 16 bytes, not 24, in every
// slot of the shards' tables.
type storedDoc struct {
	p    *byte
	n    uint32
	read uint32
}

// newStoredDoc copies data into a storedDoc listed by full read read.
func newStoredDoc(data []byte, read uint32) storedDoc {
	s := string(data)
	return storedDoc{p: unsafe.StringData(s), n: uint32(len(s)), read: read}
}

// data is what s holds (it never changes).
func (s storedDoc) data() string { return unsafe.String(s.p, s.n) }

// parts are s's shape, key, and values or whole document.
func (s storedDoc) parts() (shape uint16, key, rest string) {
	data := s.data()
	i, w := uvarintString(data)
	n, kw := uvarintString(data[w:])
	key = data[w+kw : w+kw+int(n)]
	return uint16(i), key, data[w+kw+int(n):]
}

// Key is s's key (opentable.Keyed).
func (s storedDoc) Key() string {
	_, key, _ := s.parts()
	return key
}

// wholeDoc is the shape of a document stored as given: one that compactDoc
// cannot rebuild byte for byte, or whose shape did not fit in maxShapes.
const wholeDoc = maxShapes

// maxShapes bounds the shapes of a store: a fleet has a handful; a
// document of a new shape beyond it is stored whole.
const maxShapes = 1024

// keyType stands in a shape for the string type of a top-level _id whose
// value is the key: the value is not stored twice. No BSON type is 0xF0.
const keyType = 0xF0

func newDocStore() *docStore {
	seed := maphash.MakeSeed()
	d := &docStore{
		hash:    func(key string) uint64 { return maphash.String(seed, key) },
		shapeOf: map[string]uint16{},
	}
	d.shapes.Store(new([]string))
	return d
}

func (d *docStore) shard(h uint64) *docShard { return &d.shards[h%docShards] }

// get returns the document under key, nil when there is none.
func (d *docStore) get(key string) bson.Raw {
	h := d.hash(key)
	sh := d.shard(h)
	sh.mu.Lock()
	s, ok := sh.t.Get(h, key)
	sh.mu.Unlock()
	if !ok {
		return nil
	}
	return d.rebuild(nil, s)
}

// put stores doc (copied) under key, listed by full read read.
func (d *docStore) put(key string, doc bson.Raw, read uint32) {
	h := d.hash(key)
	sh := d.shard(h)
	d.enc.Lock()
	defer d.enc.Unlock()
	s := newStoredDoc(d.encode(key, doc), read)
	sh.mu.Lock()
	sh.t.Set(h, key, s, d.hash)
	sh.mu.Unlock()
}

// reserve sizes the tables of the shards that hold no document for about
// n documents in all, so that a first full read of that many does not
// grow them step by step: each step rehashes a shard's documents, reading
// every key back from its bytes (at a million documents, about a second
// of CPU). A shard's table then holds its mean share of n at 60 % of its
// slots, and 1.4 times that before it grows.
func (d *docStore) reserve(n int) {
	if n <= 0 {
		return
	}
	per := n/docShards + 1
	for i := range d.shards {
		sh := &d.shards[i]
		sh.mu.Lock()
		if sh.t.Unused() && sh.t.Slots() < per {
			sh.t.Resize(per, d.hash)
		}
		sh.mu.Unlock()
	}
}

// load stores doc under key as a full read read listed it: an unchanged
// document is only marked listed (compared as rebuilt, not taken apart
// again), not copied again. same reports that case: the store held
// exactly doc for key.
func (d *docStore) load(key string, doc bson.Raw, read uint32) (same bool) {
	h := d.hash(key)
	sh := d.shard(h)
	d.enc.Lock()
	defer d.enc.Unlock()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if i := sh.t.Find(h, key); i >= 0 {
		s := sh.t.At(i)
		d.valuesBuf = d.rebuild(d.valuesBuf[:0], *s)
		if bytes.Equal(d.valuesBuf, doc) {
			s.read = read
			return true
		}
		*s = newStoredDoc(d.encode(key, doc), read)
		return false
	}
	sh.t.Set(h, key, newStoredDoc(d.encode(key, doc), read), d.hash)
	return false
}

func (d *docStore) remove(key string) {
	h := d.hash(key)
	sh := d.shard(h)
	sh.mu.Lock()
	sh.t.Remove(h, key, d.hash)
	sh.mu.Unlock()
}

// sweep removes the documents full read read did not list.
func (d *docStore) sweep(read uint32) {
	for i := range d.shards {
		sh := &d.shards[i]
		sh.mu.Lock()
		sh.t.Sweep(func(s storedDoc) bool { return s.read != read }, d.hash)
		sh.mu.Unlock()
	}
}

// jobIDs returns the keys that are job ids (not RefusedKeys). Each shares
// the memory of its stored document.
func (d *docStore) jobIDs() []string {
	ids := make([]string, 0, d.len())
	add := func(s storedDoc) {
		k := s.Key()
		if _, refused := schedule.RefusedID(k); !refused {
			ids = append(ids, k)
		}
	}
	for i := range d.shards {
		sh := &d.shards[i]
		sh.mu.Lock()
		sh.t.Each(add)
		sh.mu.Unlock()
	}
	return ids
}

// len counts the documents.
func (d *docStore) len() int {
	n := 0
	for i := range d.shards {
		sh := &d.shards[i]
		sh.mu.Lock()
		n += sh.t.Len()
		sh.mu.Unlock()
	}
	return n
}

// all lists every document, one shard at a time: each shard's documents
// are taken under its lock (references: a stored string never changes),
// then rebuilt, one after the other, in a buffer reused from one document
// to the next.
func (d *docStore) all() iter.Seq[bson.Raw] {
	return func(yield func(bson.Raw) bool) {
		var docs []storedDoc
		var buf []byte
		for i := range d.shards {
			sh := &d.shards[i]
			docs = docs[:0]
			sh.mu.Lock()
			sh.t.Each(func(s storedDoc) { docs = append(docs, s) })
			sh.mu.Unlock()
			for _, s := range docs {
				buf = d.rebuild(buf[:0], s)
				if !yield(bson.Raw(buf)) {
					return
				}
			}
		}
	}
}

// encode returns the data of a storedDoc of doc under key (in d's buffer,
// valid until the next call; d.enc held).
func (d *docStore) encode(key string, doc bson.Raw) []byte {
	var head [2 * binary.MaxVarintLen64]byte
	kh := binary.AppendUvarint(head[:0], uint64(len(key)))
	c, ok := compactDoc(d.shapeBuf[:0], append(append(d.valuesBuf[:0], kh...), key...), doc, key)
	index := uint16(wholeDoc)
	if ok {
		index, ok = d.shapeIndex(c.shape)
	}
	// The shape's index goes first, then the key and the values (c.values
	// starts with the key), or the key and the whole document.
	buf := binary.AppendUvarint(d.dataBuf[:0], uint64(index))
	if ok {
		buf = append(buf, c.values...)
	} else {
		buf = append(append(append(buf, kh...), key...), doc...)
	}
	d.shapeBuf, d.valuesBuf, d.dataBuf = c.shape[:0], c.values[:0], buf
	return buf
}

// shapeIndex returns the index of shape, adding it if there is room.
func (d *docStore) shapeIndex(shape []byte) (uint16, bool) {
	old := *d.shapes.Load()
	if int(d.lastShape) < len(old) && old[d.lastShape] == string(shape) {
		return d.lastShape, true
	}
	if i, ok := d.shapeOf[string(shape)]; ok {
		d.lastShape = i
		return i, true
	}
	if len(old) >= maxShapes {
		return wholeDoc, false
	}
	i := uint16(len(old))
	s := string(shape)
	list := append(old[:len(old):len(old)], s)
	d.shapes.Store(&list)
	d.shapeOf[s] = i
	d.lastShape = i
	return i, true
}

// rebuild appends the document s holds to dst.
func (d *docStore) rebuild(dst []byte, s storedDoc) []byte {
	shape, key, rest := s.parts()
	if shape == wholeDoc {
		return append(dst, rest...)
	}
	r := rebuilder{shape: (*d.shapes.Load())[shape], values: rest, key: key}
	return r.doc(dst)
}

// compacted is a document taken apart: its shape and its values.
type compacted struct{ shape, values []byte }

// compactDoc appends doc's shape to shape and its values to values, the
// way rebuilder puts them back together; ok is false when doc is not one
// it can rebuild byte for byte (not well-formed BSON), and doc is then
// stored whole.
//
// A shape lists the elements, in order: the type byte, the name and its
// NUL; an embedded document's elements follow its entry, then a 0 byte
// (the end of a document, as in BSON). The values are, in the same order:
// a string (also JavaScript code and symbol) as its length (uvarint) and
// bytes, without its int32 length and NUL; nothing for an embedded
// document (its elements follow) or for a top-level string _id equal to
// the key (keyType); the bytes of a type of fixed size; the length
// (uvarint) and bytes of any other value (arrays, binary, regular
// expressions…).
func compactDoc(shape, values []byte, doc bson.Raw, key string) (compacted, bool) {
	c := compacted{shape: shape, values: values}
	ok := c.doc(doc, key, true)
	return c, ok
}

func (c *compacted) doc(doc []byte, key string, top bool) bool {
	if len(doc) < 5 || int(int32(binary.LittleEndian.Uint32(doc))) != len(doc) || doc[len(doc)-1] != 0 {
		return false
	}
	body := doc[4 : len(doc)-1]
	for len(body) > 0 {
		t := body[0]
		end := bytes.IndexByte(body, 0)
		if end < 1 {
			return false // no NUL after the name, or no type
		}
		name := body[1:end]
		val := body[end+1:]
		size := valueSize(t, val)
		if size < 0 {
			return false
		}
		val, body = val[:size], val[size:]
		switch {
		case t == byte(bson.TypeString) && top && string(name) == "_id" && stringValue(val) && string(val[4:size-1]) == key:
			c.shape = append(append(append(c.shape, keyType), name...), 0)
		case t == byte(bson.TypeString) || t == byte(bson.TypeJavaScript) || t == byte(bson.TypeSymbol):
			if !stringValue(val) {
				return false
			}
			c.shape = append(append(append(c.shape, t), name...), 0)
			c.values = binary.AppendUvarint(c.values, uint64(size-5))
			c.values = append(c.values, val[4:size-1]...)
		case t == byte(bson.TypeEmbeddedDocument):
			c.shape = append(append(append(c.shape, t), name...), 0)
			if !c.doc(val, key, false) {
				return false
			}
		case fixedSize(t) >= 0:
			c.shape = append(append(append(c.shape, t), name...), 0)
			c.values = append(c.values, val...)
		default:
			c.shape = append(append(append(c.shape, t), name...), 0)
			c.values = binary.AppendUvarint(c.values, uint64(size))
			c.values = append(c.values, val...)
		}
	}
	c.shape = append(c.shape, 0)
	return true
}

// stringValue reports whether val (a whole string value: int32 length,
// bytes, NUL) is well-formed.
func stringValue(val []byte) bool {
	return len(val) >= 5 && int(int32(binary.LittleEndian.Uint32(val))) == len(val)-4 && val[len(val)-1] == 0
}

// fixedSize is the size of a value of type t if all have one, else -1.
func fixedSize(t byte) int {
	switch bson.Type(t) {
	case bson.TypeDouble, bson.TypeDateTime, bson.TypeTimestamp, bson.TypeInt64:
		return 8
	case bson.TypeObjectID:
		return 12
	case bson.TypeBoolean:
		return 1
	case bson.TypeInt32:
		return 4
	case bson.TypeDecimal128:
		return 16
	case bson.TypeUndefined, bson.TypeNull, bson.TypeMinKey, bson.TypeMaxKey:
		return 0
	}
	return -1
}

// valueSize is the size of the value of type t at the start of b, -1 when
// t is no type or b is too short for it.
func valueSize(t byte, b []byte) int {
	if n := fixedSize(t); n >= 0 {
		if n > len(b) {
			return -1
		}
		return n
	}
	prefixed := func(extra int) int {
		if len(b) < 4 {
			return -1
		}
		n := int(int32(binary.LittleEndian.Uint32(b))) + extra
		if n < 4 || n > len(b) {
			return -1
		}
		return n
	}
	switch bson.Type(t) {
	case bson.TypeString, bson.TypeJavaScript, bson.TypeSymbol:
		return prefixed(4)
	case bson.TypeEmbeddedDocument, bson.TypeArray, bson.TypeCodeWithScope:
		return prefixed(0)
	case bson.TypeBinary:
		return prefixed(5)
	case bson.TypeDBPointer:
		n := prefixed(4)
		if n < 0 || n+12 > len(b) {
			return -1
		}
		return n + 12
	case bson.TypeRegex:
		n := 0
		for range 2 {
			for n < len(b) && b[n] != 0 {
				n++
			}
			if n == len(b) {
				return -1
			}
			n++
		}
		return n
	}
	return -1
}

// rebuilder puts a document taken apart by compactDoc back together.
type rebuilder struct {
	shape, values, key string
}

func (r *rebuilder) doc(dst []byte) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	for {
		t := r.shape[0]
		if t == 0 {
			r.shape = r.shape[1:]
			break
		}
		end := 1
		for r.shape[end] != 0 {
			end++
		}
		name := r.shape[1:end]
		r.shape = r.shape[end+1:]
		bt := t
		if t == keyType {
			bt = byte(bson.TypeString)
		}
		dst = append(append(append(dst, bt), name...), 0)
		switch {
		case t == keyType:
			dst = binary.LittleEndian.AppendUint32(dst, uint32(len(r.key)+1))
			dst = append(append(dst, r.key...), 0)
		case t == byte(bson.TypeString) || t == byte(bson.TypeJavaScript) || t == byte(bson.TypeSymbol):
			n, w := uvarintString(r.values)
			dst = binary.LittleEndian.AppendUint32(dst, uint32(n+1))
			dst = append(append(dst, r.values[w:w+int(n)]...), 0)
			r.values = r.values[w+int(n):]
		case t == byte(bson.TypeEmbeddedDocument):
			dst = r.doc(dst)
		case fixedSize(t) >= 0:
			n := fixedSize(t)
			dst = append(dst, r.values[:n]...)
			r.values = r.values[n:]
		default:
			n, w := uvarintString(r.values)
			dst = append(dst, r.values[w:w+int(n)]...)
			r.values = r.values[w+int(n):]
		}
	}
	dst = append(dst, 0)
	binary.LittleEndian.PutUint32(dst[start:], uint32(len(dst)-start))
	return dst
}

// uvarintString is binary.Uvarint of the start of s: the value and the
// bytes it takes.
func uvarintString(s string) (uint64, int) {
	var x uint64
	for i := 0; i < len(s) && i < binary.MaxVarintLen64; i++ {
		b := s[i]
		if b < 0x80 {
			return x | uint64(b)<<(7*i), i + 1
		}
		x |= uint64(b&0x7f) << (7 * i)
	}
	return 0, 0
}
