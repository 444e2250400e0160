package history

import (
	"bytes"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/schedule"
)

// storeDocs are documents of every BSON type, nested, with and without a
// string _id, and malformed ones, each with its docStore key.
func storeDocs(t testing.TB) map[string]bson.Raw {
	t.Helper()
	m := func(d bson.D) bson.Raw {
		raw, err := bson.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	oid := bson.NewObjectIDFromTimestamp(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC))
	dec, err := bson.ParseDecimal128("12.50")
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	docs := map[string]bson.Raw{
		"scale": m(bson.D{{Key: "_id", Value: "scale"}, {Key: "cron_expr", Value: "5 3 1 1 *"}, {Key: "job", Value: "noop"},
			{Key: "args", Value: bson.D{{Key: "customer", Value: "c0000005"}, {Key: "digest", Value: "daily"}}},
			{Key: "updated_at", Value: at}, {Key: "timezone", Value: "Europe/Berlin"}}),
		"every-type": m(bson.D{
			{Key: "_id", Value: "every-type"}, {Key: "double", Value: 1.5}, {Key: "string", Value: "a\x00b"}, {Key: "empty", Value: ""},
			{Key: "doc", Value: bson.D{{Key: "x", Value: bson.D{{Key: "y", Value: int32(1)}}}, {Key: "e", Value: bson.D{}}}},
			{Key: "array", Value: bson.A{"a", int64(2), bson.D{{Key: "z", Value: true}}}},
			{Key: "binary", Value: bson.Binary{Subtype: 4, Data: []byte("0123456789abcdef")}},
			{Key: "undefined", Value: bson.Undefined{}}, {Key: "oid", Value: oid}, {Key: "bool", Value: false},
			{Key: "date", Value: bson.NewDateTimeFromTime(at)}, {Key: "null", Value: nil},
			{Key: "regex", Value: bson.Regex{Pattern: "^a.*", Options: "i"}},
			{Key: "dbpointer", Value: bson.DBPointer{DB: "db.coll", Pointer: oid}},
			{Key: "js", Value: bson.JavaScript("f()")}, {Key: "symbol", Value: bson.Symbol("sym")},
			{Key: "scope", Value: bson.CodeWithScope{Code: "g()", Scope: bson.D{{Key: "v", Value: int32(3)}}}},
			{Key: "int32", Value: int32(-7)}, {Key: "timestamp", Value: bson.Timestamp{T: 5, I: 6}}, {Key: "int64", Value: int64(1) << 40},
			{Key: "decimal", Value: dec}, {Key: "min", Value: bson.MinKey{}}, {Key: "max", Value: bson.MaxKey{}},
		}),
		"id-later":  m(bson.D{{Key: "job", Value: "noop"}, {Key: "_id", Value: "id-later"}}),
		"nested-id": m(bson.D{{Key: "_id", Value: "nested-id"}, {Key: "args", Value: bson.D{{Key: "_id", Value: "nested-id"}}}}),
		"other-id":  m(bson.D{{Key: "_id", Value: "not-the-key"}}),
		"empty":     m(bson.D{}),
		"id-only":   m(bson.D{{Key: "_id", Value: "id-only"}}),
	}
	refused, _ := schedule.DecodeID(bson.RawValue{Type: bson.TypeObjectID, Value: oid[:]})
	docs[refused] = m(bson.D{{Key: "_id", Value: oid}, {Key: "cron_expr", Value: "* * * * *"}})
	// Malformed: a string whose length is one short, a document whose
	// length is wrong, one cut short, an unknown type, a nested document
	// without its end.
	good := docs["scale"]
	short := bytes.Clone(good)
	short[4+1+4]-- // the _id string's length ("_id" is 3 bytes + NUL)
	docs["bad-string"] = short
	wrongLen := bytes.Clone(good)
	wrongLen[0]++
	docs["bad-length"] = append(wrongLen, 0)
	docs["cut"] = bytes.Clone(good[:len(good)-3])
	unknown := m(bson.D{{Key: "_id", Value: "u"}, {Key: "x", Value: int32(1)}})
	unknown[len(unknown)-1-4-2-1] = 0x42 // the type of x (then "x", NUL, int32, the end)
	docs["unknown-type"] = unknown
	docs["tiny"] = bson.Raw{5, 0, 0}
	return docs
}

func TestDocStoreRoundTrip(t *testing.T) {
	d := newDocStore()
	want := storeDocs(t)
	for key, doc := range want {
		d.put(key, doc, 1)
	}
	for key, doc := range want {
		if got := d.get(key); !bytes.Equal(got, doc) {
			t.Errorf("get(%q) = %x, want %x", key, got, doc)
		}
	}
	var got []string
	for doc := range d.all() {
		got = append(got, string(doc))
	}
	var all []string
	for _, doc := range want {
		all = append(all, string(doc))
	}
	slices.Sort(got)
	slices.Sort(all)
	if !slices.Equal(got, all) {
		t.Errorf("all() lists %d documents, not the %d stored", len(got), len(all))
	}
	// The well-formed documents are stored without their field names; the
	// malformed ones whole.
	for key, compact := range map[string]bool{"scale": true, "every-type": true, "empty": true, "other-id": true,
		"bad-string": false, "bad-length": false, "cut": false, "unknown-type": false, "tiny": false} {
		sh := d.shard(d.hash(key))
		s, ok := sh.t.Get(d.hash(key), key)
		if !ok {
			t.Fatalf("%q not stored", key)
		}
		if shape, _, _ := s.parts(); (shape != wholeDoc) != compact {
			t.Errorf("%q: stored compact %v, want %v", key, shape != wholeDoc, compact)
		}
		if compact && s.n >= uint32(len(key)+2+len(want[key])) && key != "empty" {
			t.Errorf("%q: stored in %d bytes, the document is %d", key, s.n, len(want[key]))
		}
	}
	if s, _ := d.shard(d.hash("scale")).t.Get(d.hash("scale"), "scale"); s.n > 60 {
		t.Errorf("the scale document (%d bytes) is stored in %d bytes, want at most 60", len(want["scale"]), s.n)
	}
}

func TestDocStoreLoadAndSweep(t *testing.T) {
	d := newDocStore()
	docs := storeDocs(t)
	for key, doc := range docs {
		d.load(key, doc, 1)
	}
	// A second read lists all but "scale", one of them changed.
	changed, err := bson.Marshal(bson.D{{Key: "_id", Value: "id-only"}, {Key: "enabled", Value: false}})
	if err != nil {
		t.Fatal(err)
	}
	for key, doc := range docs {
		switch key {
		case "scale":
			continue
		case "id-only":
			doc = changed
		}
		d.load(key, doc, 2)
	}
	d.sweep(2)
	if got := d.get("scale"); got != nil {
		t.Errorf("scale not swept: %x", got)
	}
	if got := d.get("id-only"); !bytes.Equal(got, changed) {
		t.Errorf("id-only = %s, want %s", bson.Raw(got), bson.Raw(changed))
	}
	if got := d.get("every-type"); !bytes.Equal(got, docs["every-type"]) {
		t.Errorf("every-type changed by a re-read: %s", bson.Raw(got))
	}
	if n := d.len(); n != len(docs)-1 {
		t.Errorf("len = %d, want %d", n, len(docs)-1)
	}
	ids := d.jobIDs()
	if slices.ContainsFunc(ids, func(id string) bool { _, refused := schedule.RefusedID(id); return refused }) {
		t.Errorf("jobIDs lists a refused key: %q", ids)
	}
	if len(ids) != len(docs)-2 {
		t.Errorf("jobIDs = %q: %d ids, want %d", ids, len(ids), len(docs)-2)
	}
}

// A store that reserved room for n documents loads n without growing a
// shard's table, and keeps every one; a reservation does nothing to a
// shard that holds documents.
func TestDocStoreReserve(t *testing.T) {
	const n = 100_000
	d := newDocStore()
	d.reserve(n)
	sizes := make([]int, docShards)
	for i := range d.shards {
		sizes[i] = d.shards[i].t.Slots()
		if sizes[i] == 0 {
			t.Fatalf("shard %d has no room after a reservation of %d", i, n)
		}
	}
	doc := func(i int) (string, bson.Raw) {
		key := fmt.Sprintf("job-%06d", i)
		raw, err := bson.Marshal(bson.D{{Key: "_id", Value: key}, {Key: "cron_expr", Value: "0 9 * * *"}})
		if err != nil {
			t.Fatal(err)
		}
		return key, raw
	}
	for i := range n {
		key, raw := doc(i)
		d.load(key, raw, 1)
	}
	for i := range d.shards {
		if got := d.shards[i].t.Slots(); got != sizes[i] {
			t.Errorf("shard %d grew from %d to %d slots while the %d reserved for were loaded", i, sizes[i], got, n)
		}
	}
	if got := d.len(); got != n {
		t.Fatalf("len = %d, want %d", got, n)
	}
	for _, i := range []int{0, n / 2, n - 1} {
		key, raw := doc(i)
		if got := d.get(key); !bytes.Equal(got, raw) {
			t.Errorf("%s = %s, want %s", key, bson.Raw(got), raw)
		}
	}
	// Held documents are never moved by a later reservation.
	d.reserve(10 * n)
	for i := range d.shards {
		if got := d.shards[i].t.Slots(); got != sizes[i] {
			t.Errorf("shard %d resized by a reservation while it holds documents: %d → %d slots", i, sizes[i], got)
		}
	}
}

// A key whose hash another key has is stored, found, replaced and removed
// like any other.
func TestDocStoreHashClash(t *testing.T) {
	d := newDocStore()
	d.hash = func(key string) uint64 { return uint64(len(key) % 2) }
	doc := func(id string, v int) bson.Raw {
		raw, err := bson.Marshal(bson.D{{Key: "_id", Value: id}, {Key: "v", Value: int32(v)}})
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	keys := []string{"a", "bb", "c", "dd", "e", "ff"}
	for i, k := range keys {
		d.put(k, doc(k, i), 1)
	}
	for i, k := range keys {
		d.load(k, doc(k, i+10), 2)
	}
	for i, k := range keys {
		if got := d.get(k); !bytes.Equal(got, doc(k, i+10)) {
			t.Errorf("get(%q) = %s, want v %d", k, got, i+10)
		}
	}
	d.remove("a")  // the one in m
	d.remove("dd") // one further along the probe
	if d.get("a") != nil || d.get("dd") != nil {
		t.Error("a removed document is still found")
	}
	if got := d.get("c"); !bytes.Equal(got, doc("c", 12)) {
		t.Errorf("get(c) after removing a = %s", got)
	}
	d.put("a", doc("a", 20), 2) // back, in the slot a removal left
	d.put("c", doc("c", 21), 3)
	d.sweep(3)
	if got := d.get("c"); !bytes.Equal(got, doc("c", 21)) || d.len() != 1 {
		t.Errorf("after the sweep: c = %s, %d documents; want c alone", got, d.len())
	}
	ids := d.jobIDs()
	if !slices.Equal(ids, []string{"c"}) {
		t.Errorf("jobIDs = %q", ids)
	}
}

// Beyond maxShapes shapes, a document of a new shape is stored whole; the
// known shapes are still used.
func TestDocStoreShapeBound(t *testing.T) {
	d := newDocStore()
	docs := map[string]bson.Raw{}
	for i := range maxShapes + 5 {
		key := fmt.Sprintf("j%d", i)
		raw, err := bson.Marshal(bson.D{{Key: "_id", Value: key}, {Key: fmt.Sprintf("f%d", i), Value: "x"}})
		if err != nil {
			t.Fatal(err)
		}
		docs[key] = raw
		d.put(key, raw, 1)
	}
	if n := len(*d.shapes.Load()); n != maxShapes {
		t.Errorf("%d shapes, want %d", n, maxShapes)
	}
	whole := 0
	for key, doc := range docs {
		if got := d.get(key); !bytes.Equal(got, doc) {
			t.Errorf("get(%q) = %s, want %s", key, bson.Raw(got), doc)
		}
		s, _ := d.shard(d.hash(key)).t.Get(d.hash(key), key)
		if shape, _, _ := s.parts(); shape == wholeDoc {
			whole++
		}
	}
	if whole != 5 {
		t.Errorf("%d documents stored whole, want 5", whole)
	}
}

// Whatever the bytes, get gives back what put was given.
func FuzzDocStore(f *testing.F) {
	for key, doc := range storeDocs(f) {
		f.Add(key, []byte(doc))
	}
	f.Fuzz(func(t *testing.T, key string, doc []byte) {
		d := newDocStore()
		d.put(key, doc, 1)
		if got := d.get(key); !bytes.Equal(got, doc) {
			t.Fatalf("get = %x, want %x", got, doc)
		}
		d.load(key, doc, 2)
		d.sweep(2)
		for got := range d.all() {
			if !bytes.Equal(got, doc) {
				t.Fatalf("all = %x, want %x", got, doc)
			}
		}
		if d.len() != 1 {
			t.Fatalf("len = %d after a re-read", d.len())
		}
	})
}

// Random puts, loads, removes and full reads, checked against a map after
// each step, with the store's hash and with one that puts every key in 16
// shards at the start of their tables (long probes, many equal tags).
func TestDocStoreModel(t *testing.T) {
	seed := maphash.MakeSeed()
	for name, hash := range map[string]func(string) uint64{
		"maphash": nil,
		"weak":    func(k string) uint64 { return maphash.String(seed, k) % 16 },
	} {
		t.Run(name, func(t *testing.T) {
			d := newDocStore()
			if hash != nil {
				d.hash = hash
			}
			rng := rand.New(rand.NewPCG(1, 2))
			model := map[string]bson.Raw{}
			doc := func(key string) bson.Raw {
				raw, err := bson.Marshal(bson.D{{Key: "_id", Value: key}, {Key: "v", Value: rng.Int32N(4)}})
				if err != nil {
					t.Fatal(err)
				}
				return raw
			}
			read := uint32(1)
			for step := range 20_000 {
				key := fmt.Sprintf("job-%d", rng.IntN(3000))
				switch op := rng.IntN(100); {
				case op < 60:
					raw := doc(key)
					d.put(key, raw, read)
					model[key] = raw
				case op < 95:
					d.remove(key)
					delete(model, key)
				case op < 99:
					// A full read of the model but a tenth of it.
					read++
					listed := map[string]bson.Raw{}
					for k, v := range model {
						if rng.IntN(10) > 0 {
							if rng.IntN(4) == 0 {
								v = doc(k)
							}
							d.load(k, v, read)
							listed[k] = v
						}
					}
					d.sweep(read)
					model = listed
				default:
					for k, want := range model {
						if got := d.get(k); !bytes.Equal(got, want) {
							t.Fatalf("step %d: get(%q) = %s, want %s", step, k, bson.Raw(got), want)
						}
					}
					n := 0
					for range d.all() {
						n++
					}
					if d.len() != len(model) || n != len(model) || len(d.jobIDs()) != len(model) {
						t.Fatalf("step %d: len %d, all %d, jobIDs %d; want %d", step, d.len(), n, len(d.jobIDs()), len(model))
					}
				}
				if got := d.get(key); !bytes.Equal(got, model[key]) {
					t.Fatalf("step %d: get(%q) = %s, want %s", step, key, bson.Raw(got), model[key])
				}
			}
		})
	}
}
