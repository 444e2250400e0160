package history

import (
	"unsafe"

	"github.com/cronswap/cronswap/internal/opentable"
)

// liveSet is the jobs a replica believes have a live sighting (see
// Sightings.live), each with the pass of Sightings.present that last
// found it in a full read. It keeps a job in 17 bytes a slot (its id as a
// pointer and a length, the pass, a tag byte) where a Go map of strings
// to passes took about 56 B a job at a million: an id a full read lists
// takes the place of the one stored (renew), so that the set shares the
// bytes of the recorder's copy of the documents, as the ids a full read
// hands over do, and a copy read from the server is let go. Owned by one
// goroutine (Sightings.Run): no lock.
type liveSet struct {
	*opentable.Sharded[liveEntry]
}

// liveEntry is one job of a liveSet: its id (n bytes at p) and a pass.
type liveEntry struct {
	p    *byte
	n    uint32
	pass uint32
}

func newLiveEntry(id string, pass uint32) liveEntry {
	return liveEntry{p: unsafe.StringData(id), n: uint32(len(id)), pass: pass}
}

// Key is e's job id (opentable.Keyed).
func (e liveEntry) Key() string { return unsafe.String(e.p, e.n) }

func newLiveSet() liveSet { return liveSet{opentable.NewSharded[liveEntry]()} }

// loaded reports whether the set was read (the zero liveSet was not).
func (l liveSet) loaded() bool { return l.Sharded != nil }

// set stores id with pass, in place of the entry for id if there is one
// (id's bytes are kept: they must not change).
func (l liveSet) set(id string, pass uint32) { l.Set(newLiveEntry(id, pass)) }

// renew gives the entry for id pass, and id's bytes in place of those it
// kept; false when id is not in the set.
func (l liveSet) renew(id string, pass uint32) bool {
	e := l.Ref(id)
	if e == nil {
		return false
	}
	*e = newLiveEntry(id, pass)
	return true
}

// notIn returns the ids whose entry's pass is not pass.
func (l liveSet) notIn(pass uint32) []string {
	var ids []string
	l.Each(func(e liveEntry) {
		if e.pass != pass {
			ids = append(ids, e.Key())
		}
	})
	return ids
}
