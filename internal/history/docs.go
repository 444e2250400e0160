package history

import (
	"iter"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"

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
// the state file is written from it too (Recorder.Documents). Documents
// are kept as strings, one allocation each. Writes come from the
// watcher's goroutine; Documents may run on another.
type docStore struct {
	shards [docShards]docShard
}

type docShard struct {
	mu sync.Mutex
	m  map[string]storedDoc
}

// storedDoc is one document and the full read that last listed it.
type storedDoc struct {
	doc  string
	read uint32
}

func (d *docStore) shard(key string) *docShard {
	const offset32, prime32 = 2166136261, 16777619
	h := uint32(offset32)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= prime32
	}
	return &d.shards[h%docShards]
}

func newDocStore() *docStore {
	d := &docStore{}
	for i := range d.shards {
		d.shards[i].m = map[string]storedDoc{}
	}
	return d
}

// get returns the document under key, nil when there is none.
func (d *docStore) get(key string) bson.Raw {
	sh := d.shard(key)
	sh.mu.Lock()
	s, ok := sh.m[key]
	sh.mu.Unlock()
	if !ok {
		return nil
	}
	return bson.Raw(s.doc)
}

// put stores doc (copied) under key, listed by full read read.
func (d *docStore) put(key string, doc bson.Raw, read uint32) {
	s := storedDoc{doc: string(doc), read: read}
	sh := d.shard(key)
	sh.mu.Lock()
	sh.m[key] = s
	sh.mu.Unlock()
}

// mark records that full read read listed the document under key, as it
// is stored (an unchanged document is not copied again); false when it is
// not stored, or stored with other bytes.
func (d *docStore) mark(key string, doc bson.Raw, read uint32) bool {
	sh := d.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	s, ok := sh.m[key]
	if !ok || s.doc != string(doc) {
		return false
	}
	s.read = read
	sh.m[key] = s
	return true
}

func (d *docStore) remove(key string) {
	sh := d.shard(key)
	sh.mu.Lock()
	delete(sh.m, key)
	sh.mu.Unlock()
}

// sweep removes the documents full read read did not list.
func (d *docStore) sweep(read uint32) {
	for i := range d.shards {
		sh := &d.shards[i]
		sh.mu.Lock()
		for k, s := range sh.m {
			if s.read != read {
				delete(sh.m, k)
			}
		}
		sh.mu.Unlock()
	}
}

// jobIDs returns the keys that are job ids (not RefusedKeys).
func (d *docStore) jobIDs() []string {
	var ids []string
	for i := range d.shards {
		sh := &d.shards[i]
		sh.mu.Lock()
		for k := range sh.m {
			if _, refused := schedule.RefusedID(k); !refused {
				ids = append(ids, k)
			}
		}
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
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// all lists every document, one shard at a time: each shard's documents
// are taken under its lock (references: a stored string never changes),
// then yielded from a buffer reused from one document to the next.
func (d *docStore) all() iter.Seq[bson.Raw] {
	return func(yield func(bson.Raw) bool) {
		var docs []string
		var buf []byte
		for i := range d.shards {
			sh := &d.shards[i]
			docs = docs[:0]
			sh.mu.Lock()
			for _, s := range sh.m {
				docs = append(docs, s.doc)
			}
			sh.mu.Unlock()
			for _, s := range docs {
				buf = append(buf[:0], s...)
				if !yield(bson.Raw(buf)) {
					return
				}
			}
		}
	}
}
