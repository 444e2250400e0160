// Package opentable is an open-addressing hash table (linear probing) of
// entries that carry their own keys, sized to its entries rather than to a
// power of two: for the daemon's per-job indexes, a million entries each,
// where a Go map's slots cost the key beside the value and its fill swings
// between 44 % and 88 % with the count.
package opentable

// Table is an open-addressing hash table of entries E with a tag byte a
// slot, kept between 60 % and 85 % full: a slot costs the entry and a
// byte. The caller hashes the keys (the same function in every call, for
// the table's life) and may use the low 8 bits of a hash to choose among
// several tables: a table uses the bits above them.
//
// A slot's tag is 0 (empty), 1 (a removed entry: probing goes on past it)
// or the top byte of its key's hash (at least 2), so that a probe reads an
// entry only when the tags match. The keys are not kept beside the
// entries: an entry gives its key (Keyed), and its hash is computed again
// when the table is resized. The zero Table is empty and ready to use; a
// Table is not safe for concurrent use, but for concurrent reads (Find,
// Get, At, Each) while nothing writes.
type Table[E Keyed] struct {
	tags  []uint8
	slots []E
	used  int // entries
	dead  int // slots tagged removed
}

// Keyed is an entry of a Table: it gives back its key, which must not
// change while the entry is stored.
type Keyed interface{ Key() string }

const (
	tagEmpty = 0
	tagDead  = 1
)

// The table grows (or drops its removed slots) when more than
// maxLoadNum/maxLoadDen of its slots are taken, to fitLoadDen/fitLoadNum
// slots an entry.
const (
	maxLoadNum, maxLoadDen = 17, 20
	fitLoadNum, fitLoadDen = 3, 5
	minSlots               = 8
)

func tagOf(h uint64) uint8 {
	t := uint8(h >> 56)
	if t < 2 {
		t += 2
	}
	return t
}

// home is the first slot a key with hash h is looked for in (bits 8 to
// 39 of h: the low ones may have chosen the table).
func (t *Table[E]) home(h uint64) int {
	return int(uint64(uint32(h>>8)) * uint64(len(t.slots)) >> 32)
}

// Find returns the slot of key (hash h), -1 when it is not stored.
func (t *Table[E]) Find(h uint64, key string) int {
	if len(t.slots) == 0 {
		return -1
	}
	tag := tagOf(h)
	for i, n := t.home(h), 0; n < len(t.slots); n++ {
		switch t.tags[i] {
		case tagEmpty:
			return -1
		case tag:
			if t.slots[i].Key() == key {
				return i
			}
		}
		if i++; i == len(t.slots) {
			i = 0
		}
	}
	return -1
}

// Get returns the entry under key (hash h).
func (t *Table[E]) Get(h uint64, key string) (E, bool) {
	if i := t.Find(h, key); i >= 0 {
		return t.slots[i], true
	}
	var none E
	return none, false
}

// At is the entry in slot i (from Find), to change in place; its key must
// stay the same.
func (t *Table[E]) At(i int) *E { return &t.slots[i] }

// Set stores s under key (hash h; s's key), in place of the entry stored
// under it if there is one; hash hashes the keys when the table is
// resized.
func (t *Table[E]) Set(h uint64, key string, s E, hash func(string) uint64) {
	if i := t.Find(h, key); i >= 0 {
		t.slots[i] = s
		return
	}
	if (t.used+t.dead+1)*maxLoadDen > len(t.slots)*maxLoadNum {
		t.Resize(t.used+1, hash)
	}
	i := t.home(h)
	for t.tags[i] != tagEmpty && t.tags[i] != tagDead {
		if i++; i == len(t.slots) {
			i = 0
		}
	}
	if t.tags[i] == tagDead {
		t.dead--
	}
	t.tags[i], t.slots[i] = tagOf(h), s
	t.used++
}

// Remove removes the entry under key (hash h), if stored; the table is
// resized when a quarter of its slots are removed entries.
func (t *Table[E]) Remove(h uint64, key string, hash func(string) uint64) {
	if i := t.Find(h, key); i >= 0 {
		t.drop(i)
		if t.dead*4 > len(t.slots) {
			t.Resize(t.used, hash)
		}
	}
}

// drop empties slot i, leaving it tagged removed.
func (t *Table[E]) drop(i int) {
	var none E
	t.tags[i], t.slots[i] = tagDead, none
	t.used--
	t.dead++
}

// Sweep removes the entries stale reports true of; the table is then
// resized to the entries left.
func (t *Table[E]) Sweep(stale func(E) bool, hash func(string) uint64) {
	removed := false
	for i := range t.slots {
		if t.tags[i] >= 2 && stale(t.slots[i]) {
			t.drop(i)
			removed = true
		}
	}
	if removed {
		t.Resize(t.used, hash)
	}
}

// Each calls yield with every entry, in no particular order.
func (t *Table[E]) Each(yield func(E)) {
	for i := range t.slots {
		if t.tags[i] >= 2 {
			yield(t.slots[i])
		}
	}
}

// Len is the number of entries.
func (t *Table[E]) Len() int { return t.used }

// Unused reports whether the table never held an entry since it was last
// resized: no entry, no removed one.
func (t *Table[E]) Unused() bool { return t.used == 0 && t.dead == 0 }

// Slots is the number of slots.
func (t *Table[E]) Slots() int { return len(t.slots) }

// Resize moves the entries to a table of fitLoadDen/fitLoadNum slots for
// each of n entries (at least minSlots; none when n is 0): n at least
// Len, to make room for n entries at once.
func (t *Table[E]) Resize(n int, hash func(string) uint64) {
	old, oldTags := t.slots, t.tags
	size := 0
	if n > 0 {
		size = max(minSlots, (n*fitLoadDen+fitLoadNum-1)/fitLoadNum)
	}
	t.slots, t.tags, t.used, t.dead = nil, nil, 0, 0
	if size > 0 {
		t.slots, t.tags = make([]E, size), make([]uint8, size)
	}
	for i, s := range old {
		if oldTags[i] < 2 {
			continue
		}
		h := hash(s.Key())
		j := t.home(h)
		for t.tags[j] != tagEmpty {
			if j++; j == len(t.slots) {
				j = 0
			}
		}
		t.tags[j], t.slots[j] = tagOf(h), s
		t.used++
	}
}
