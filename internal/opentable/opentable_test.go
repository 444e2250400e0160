package opentable

import (
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"slices"
	"testing"
)

type entry struct {
	k string
	v int
}

func (e entry) Key() string { return e.k }

func hasher() func(string) uint64 {
	seed := maphash.MakeSeed()
	return func(k string) uint64 { return maphash.String(seed, k) }
}

// check compares t with want: the same entries, found by key, listed
// once each, and the table within its bounds of fill.
func check(t *testing.T, tab *Table[entry], want map[string]int, hash func(string) uint64, step string) {
	t.Helper()
	if tab.Len() != len(want) {
		t.Fatalf("%s: %d entries, want %d", step, tab.Len(), len(want))
	}
	for k, v := range want {
		e, ok := tab.Get(hash(k), k)
		if !ok || e.v != v {
			t.Fatalf("%s: Get(%s) = %+v, %v; want %d", step, k, e, ok, v)
		}
	}
	var keys []string
	tab.Each(func(e entry) { keys = append(keys, e.k) })
	if len(keys) != len(want) {
		t.Fatalf("%s: Each listed %d entries, want %d", step, len(keys), len(want))
	}
	slices.Sort(keys)
	if len(slices.Compact(keys)) != len(want) {
		t.Fatalf("%s: Each listed an entry twice", step)
	}
	if tab.Len() > 0 && (tab.used+tab.dead)*maxLoadDen > tab.Slots()*maxLoadNum {
		t.Fatalf("%s: %d entries and %d removed in %d slots: over %d/%d full", step, tab.used, tab.dead, tab.Slots(), maxLoadNum, maxLoadDen)
	}
}

// A table answers as a map does through growth, removals, changes in
// place, sweeps and resizes: random operations on both, compared after
// each round.
func TestTableAgreesWithAMap(t *testing.T) {
	hash := hasher()
	var tab Table[entry]
	want := map[string]int{}
	rng := rand.New(rand.NewPCG(3, 4))
	for round := range 30 {
		for range 3_000 {
			k := fmt.Sprintf("k%d", rng.IntN(10_000))
			h := hash(k)
			switch op := rng.IntN(10); {
			case op < 5:
				v := rng.Int()
				tab.Set(h, k, entry{k, v}, hash)
				want[k] = v
			case op < 8:
				tab.Remove(h, k, hash)
				delete(want, k)
			default:
				i := tab.Find(h, k)
				if _, ok := want[k]; ok != (i >= 0) {
					t.Fatalf("round %d: Find(%s) = %d, stored %v", round, k, i, ok)
				}
				if i >= 0 {
					tab.At(i).v++
					want[k]++
				}
			}
		}
		check(t, &tab, want, hash, fmt.Sprintf("round %d", round))
		switch round % 10 {
		case 4:
			tab.Sweep(func(e entry) bool { return e.v%3 == 0 }, hash)
			for k, v := range want {
				if v%3 == 0 {
					delete(want, k)
				}
			}
			check(t, &tab, want, hash, fmt.Sprintf("round %d, swept", round))
		case 9:
			tab.Resize(tab.Len()+5_000, hash)
			check(t, &tab, want, hash, fmt.Sprintf("round %d, resized", round))
		}
	}
	for k := range want {
		tab.Remove(hash(k), k, hash)
	}
	check(t, &tab, map[string]int{}, hash, "all removed")
	if tab.Slots() != 0 {
		t.Errorf("%d slots left with no entry, want none", tab.Slots())
	}
}

// A table made room for with Resize takes that many entries without
// growing again, and a zero table holds nothing.
func TestTableResizeMakesRoom(t *testing.T) {
	hash := hasher()
	var tab Table[entry]
	if !tab.Unused() || tab.Len() != 0 || tab.Find(hash("x"), "x") != -1 {
		t.Fatal("the zero table is not empty")
	}
	const n = 5_000
	tab.Resize(n, hash)
	slots := tab.Slots()
	if !tab.Unused() || slots < n {
		t.Fatalf("resized for %d: %d slots, unused %v", n, slots, tab.Unused())
	}
	for i := range n {
		k := fmt.Sprint(i)
		tab.Set(hash(k), k, entry{k, i}, hash)
	}
	if tab.Slots() != slots {
		t.Errorf("%d entries in a table resized for them grew it from %d to %d slots", n, slots, tab.Slots())
	}
	if tab.Unused() {
		t.Error("a table holding entries says it is unused")
	}
}

// A Sharded index answers as a map does: entries set, changed in place
// through Ref, removed, listed; Reserve makes room in the tables that
// never held an entry only.
func TestShardedAgreesWithAMap(t *testing.T) {
	s := NewSharded[entry]()
	s.Reserve(4_000)
	slots := 0
	for i := range s.tables {
		slots += s.tables[i].Slots()
	}
	if slots < 4_000 {
		t.Fatalf("reserved for 4,000: %d slots", slots)
	}
	want := map[string]int{}
	rng := rand.New(rand.NewPCG(5, 6))
	for range 20_000 {
		k := fmt.Sprintf("k%d", rng.IntN(5_000))
		switch rng.IntN(3) {
		case 0:
			s.Set(entry{k, 1})
			want[k] = 1
		case 1:
			if e := s.Ref(k); e != nil {
				e.v += 2
			}
			if _, ok := want[k]; ok {
				want[k] += 2
			}
		case 2:
			s.Remove(k)
			delete(want, k)
		}
	}
	if s.Len() != len(want) {
		t.Fatalf("%d entries, want %d", s.Len(), len(want))
	}
	for k, v := range want {
		if e, ok := s.Get(k); !ok || e.v != v {
			t.Fatalf("Get(%s) = %+v, %v; want %d", k, e, ok, v)
		}
	}
	n := 0
	s.Each(func(e entry) {
		n++
		if want[e.k] != e.v {
			t.Fatalf("Each gave %+v, want %d", e, want[e.k])
		}
	})
	if n != len(want) {
		t.Fatalf("Each listed %d entries, want %d", n, len(want))
	}
	if s.Ref("absent") != nil {
		t.Fatal("Ref of a key never stored is not nil")
	}
	before := s.tables[0].Slots()
	s.Reserve(10_000_000)
	if !s.tables[0].Unused() && s.tables[0].Slots() != before {
		t.Fatal("Reserve resized a table that holds entries")
	}
}
