package opentable

import "hash/maphash"

// shards is how many Tables a Sharded divides its entries into.
const shards = 256

// Sharded is an index of entries by key over 256 Tables and a hash of its
// own (maphash, seeded per index): growing one table rehashes a few
// thousand entries of a million, never all of them at once. Like Table
// it is not safe for concurrent use, but for concurrent reads (Get, Ref,
// Len, Each) while nothing writes.
type Sharded[E Keyed] struct {
	hash   func(key string) uint64
	tables [shards]Table[E]
}

// NewSharded returns an empty index.
func NewSharded[E Keyed]() *Sharded[E] {
	seed := maphash.MakeSeed()
	return &Sharded[E]{hash: func(key string) uint64 { return maphash.String(seed, key) }}
}

func (s *Sharded[E]) table(h uint64) *Table[E] { return &s.tables[h%shards] }

// Get returns the entry under key.
func (s *Sharded[E]) Get(key string) (E, bool) {
	h := s.hash(key)
	return s.table(h).Get(h, key)
}

// Ref returns the entry under key, to change in place (its key must stay
// the same), nil when there is none; it is valid until the next Set or
// Remove.
func (s *Sharded[E]) Ref(key string) *E {
	h := s.hash(key)
	t := s.table(h)
	if i := t.Find(h, key); i >= 0 {
		return t.At(i)
	}
	return nil
}

// Set stores e under its key, in place of the entry stored under it if
// there is one.
func (s *Sharded[E]) Set(e E) {
	key := e.Key()
	h := s.hash(key)
	s.table(h).Set(h, key, e, s.hash)
}

// Remove removes the entry under key, if stored.
func (s *Sharded[E]) Remove(key string) {
	h := s.hash(key)
	s.table(h).Remove(h, key, s.hash)
}

// Len is the number of entries.
func (s *Sharded[E]) Len() int {
	n := 0
	for i := range s.tables {
		n += s.tables[i].Len()
	}
	return n
}

// Each calls yield with every entry, in no particular order.
func (s *Sharded[E]) Each(yield func(E)) {
	for i := range s.tables {
		s.tables[i].Each(yield)
	}
}

// Reserve makes room for about n entries in the tables that never held
// one, each its mean share, so that a first load of that many does not
// grow them step by step.
func (s *Sharded[E]) Reserve(n int) {
	per := n/shards + 1
	for i := range s.tables {
		if t := &s.tables[i]; t.Unused() && t.Slots() < per {
			t.Resize(per, s.hash)
		}
	}
}
