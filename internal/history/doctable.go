package history

// docTable is the documents of one docShard: an open-addressing hash table
// (linear probing) of storedDocs with a tag byte a slot, sized to the
// documents rather than to a power of two. A Go map of them would cost 24
// bytes a slot and be between 44 % and 88 % full (about 35 B a job at
// 100,000 jobs, 56 at 1,000,000); this one costs 17 bytes a slot and is
// kept between 60 % and 85 % full.
//
// A slot's tag is 0 (empty), 1 (a removed document: probing goes on past
// it) or the top byte of its key's hash (at least 2), so that a probe reads
// a stored document only when the tags match. The keys are not kept: a
// document's key is in its bytes, and its hash is computed again when the
// table is resized.
type docTable struct {
	tags  []uint8
	slots []storedDoc
	used  int // documents
	dead  int // slots tagged removed
}

const (
	tagEmpty = 0
	tagDead  = 1
)

// The table grows (or drops its removed slots) when more than
// maxLoadNum/maxLoadDen of its slots are taken, to fitLoadDen/fitLoadNum
// slots a document.
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

// home is the first slot a key with hash h is looked for in (the low
// bits of h chose the shard).
func (t *docTable) home(h uint64) int {
	return int(uint64(uint32(h>>8)) * uint64(len(t.slots)) >> 32)
}

// find returns the slot of key (hash h), -1 when it is not stored.
func (t *docTable) find(h uint64, key string) int {
	if len(t.slots) == 0 {
		return -1
	}
	tag := tagOf(h)
	for i, n := t.home(h), 0; n < len(t.slots); n++ {
		switch t.tags[i] {
		case tagEmpty:
			return -1
		case tag:
			if t.slots[i].key() == key {
				return i
			}
		}
		if i++; i == len(t.slots) {
			i = 0
		}
	}
	return -1
}

// get returns the document under key (hash h).
func (t *docTable) get(h uint64, key string) (storedDoc, bool) {
	if i := t.find(h, key); i >= 0 {
		return t.slots[i], true
	}
	return storedDoc{}, false
}

// set stores s under key (hash h), in place of the document stored under
// it if there is one; hash hashes the keys when the table is resized.
func (t *docTable) set(h uint64, key string, s storedDoc, hash func(string) uint64) {
	if i := t.find(h, key); i >= 0 {
		t.slots[i] = s
		return
	}
	if (t.used+t.dead+1)*maxLoadDen > len(t.slots)*maxLoadNum {
		t.resize(t.used+1, hash)
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

// remove removes the document under key (hash h), if stored.
func (t *docTable) remove(h uint64, key string, hash func(string) uint64) {
	if i := t.find(h, key); i >= 0 {
		t.drop(i)
		if t.dead*4 > len(t.slots) {
			t.resize(t.used, hash)
		}
	}
}

// drop empties slot i, leaving it tagged removed.
func (t *docTable) drop(i int) {
	t.tags[i], t.slots[i] = tagDead, storedDoc{}
	t.used--
	t.dead++
}

// sweep removes the documents that full read read did not list; the table
// is then resized to the documents left.
func (t *docTable) sweep(read uint32, hash func(string) uint64) {
	removed := false
	for i := range t.slots {
		if t.tags[i] >= 2 && t.slots[i].read != read {
			t.drop(i)
			removed = true
		}
	}
	if removed {
		t.resize(t.used, hash)
	}
}

// docs yields every stored document.
func (t *docTable) docs(yield func(storedDoc)) {
	for i := range t.slots {
		if t.tags[i] >= 2 {
			yield(t.slots[i])
		}
	}
}

// resize moves the documents to a table of fitLoadDen/fitLoadNum slots for
// each of n documents (at least minSlots; none when n is 0).
func (t *docTable) resize(n int, hash func(string) uint64) {
	old, oldTags := t.slots, t.tags
	size := 0
	if n > 0 {
		size = max(minSlots, (n*fitLoadDen+fitLoadNum-1)/fitLoadNum)
	}
	t.slots, t.tags, t.used, t.dead = nil, nil, 0, 0
	if size > 0 {
		t.slots, t.tags = make([]storedDoc, size), make([]uint8, size)
	}
	for i, s := range old {
		if oldTags[i] < 2 {
			continue
		}
		h := hash(s.key())
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
