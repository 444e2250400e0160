package testmongo_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/testmongo"
)

// wholeDoc fails with what is wrong with a document read while
// TestReadsDuringWritesAreWhole's writer runs: every round sets v and w to
// one value, so a document whose v and w differ was read half updated.
func wholeDoc(raw bson.Raw) error {
	v, okV := raw.Lookup("v").AsInt64OK()
	w, okW := raw.Lookup("w").AsInt64OK()
	if !okV || !okW || v != w {
		return fmt.Errorf("document %s read half updated: v %v, w %v", raw.Lookup("_id"), raw.Lookup("v"), raw.Lookup("w"))
	}
	return nil
}

// Reads (finds with their getMores, findAndModify) racing updates that
// change the same documents, with a change stream open: every read
// succeeds and returns whole documents. The test server used to answer a
// query with the stored documents themselves, which an update changes in
// place, and netty encoded the reply after the handler returned, with no
// lock held: an update adding a field while a reply was encoded threw
// ConcurrentModificationException, and the encoder closed the connection
// ("incomplete read of message header: ... EOF" in the driver), or it
// threw in the reader's own thread ("Unknown error: null").
func TestReadsDuringWritesAreWhole(t *testing.T) {
	client := testmongo.Client(t)
	db := testmongo.NewDatabase(t, client)
	coll := db.Collection("triggers")
	const docs, rounds, readers = 300, 40, 3
	seed := make([]any, docs)
	for i := range seed {
		seed[i] = bson.D{{Key: "_id", Value: int64(i)}, {Key: "v", Value: int64(0)}, {Key: "w", Value: int64(0)}}
	}
	if _, err := coll.InsertMany(ctx(t, 30*time.Second), seed); err != nil {
		t.Fatal(err)
	}
	cs, err := coll.Watch(ctx(t, 10*time.Second), mongo.Pipeline{})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close(ctx(t, 10*time.Second))

	done := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []error
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if len(failures) < 10 {
			failures = append(failures, err)
		}
	}
	stopped := func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	}

	// The change stream's reader: events of every round.
	wg.Add(1)
	go func() {
		defer wg.Done()
		c := ctx(t, 2*time.Minute)
		for !stopped() {
			if !cs.TryNext(c) && cs.Err() != nil {
				fail(fmt.Errorf("change stream: %w", cs.Err()))
				return
			}
		}
	}()
	// Finds of the whole collection: a first batch of 101, then getMores.
	reads := make([]int, readers)
	for r := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := ctx(t, 2*time.Minute)
			for !stopped() {
				cur, err := coll.Find(c, bson.D{})
				if err != nil {
					fail(fmt.Errorf("find: %w", err))
					return
				}
				n := 0
				for cur.Next(c) {
					n++
					if err := wholeDoc(cur.Current); err != nil {
						fail(err)
					}
				}
				if err := cur.Err(); err != nil {
					fail(fmt.Errorf("find, after %d documents: %w", n, err))
					return
				}
				if n != docs {
					fail(fmt.Errorf("find returned %d documents, want %d", n, docs))
				}
				reads[r]++
			}
		}()
	}
	// findAndModify returning the document it changed.
	wg.Add(1)
	go func() {
		defer wg.Done()
		c := ctx(t, 2*time.Minute)
		for i := 0; !stopped(); i++ {
			var got bson.Raw
			err := coll.FindOneAndUpdate(c, bson.D{{Key: "_id", Value: int64(i % docs)}},
				bson.D{{Key: "$inc", Value: bson.D{{Key: "touched", Value: 1}}}},
				options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&got)
			if err != nil {
				fail(fmt.Errorf("findAndModify: %w", err))
				return
			}
			if err := wholeDoc(got); err != nil {
				fail(err)
			}
		}
	}()

	// The writer: each round sets v and w and adds a field to every
	// document (a new key changes a document's structure).
	var writeErr error
	c := ctx(t, 2*time.Minute)
	for n := 1; n <= rounds && writeErr == nil; n++ {
		_, writeErr = coll.UpdateMany(c, bson.D{},
			bson.D{{Key: "$set", Value: bson.D{{Key: "v", Value: int64(n)}, {Key: "w", Value: int64(n)}, {Key: fmt.Sprintf("f%d", n), Value: n}}}})
	}
	close(done)
	wg.Wait()
	if writeErr != nil {
		t.Fatalf("updateMany: %v", writeErr)
	}
	for _, err := range failures {
		t.Error(err)
	}
	t.Logf("%d rounds of updates to %d documents; whole-collection finds per reader: %v", rounds, docs, reads)
}
