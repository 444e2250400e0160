package testmongo_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/testmongo"
)

// seedCounted inserts documents _id 0..n-1 with v = w = 0 into coll.
func seedCounted(t *testing.T, coll *mongo.Collection, n int) {
	t.Helper()
	docs := make([]any, n)
	for i := range docs {
		docs[i] = bson.D{{Key: "_id", Value: int64(i)}, {Key: "v", Value: int64(0)}, {Key: "w", Value: int64(0)}}
	}
	if _, err := coll.InsertMany(ctx(t, 30*time.Second), docs); err != nil {
		t.Fatal(err)
	}
}

// TestFindReadsAsTheCursorAdvances: a plain find is read from the
// collection batch by batch, as a server reads it, not collected whole
// before its first batch. Documents inserted after the first batch went out
// take positions past the cursor (the collection has no holes), so a find
// read as it advances returns them, and a result built whole before the
// first batch cannot hold them. Each document is returned once.
func TestFindReadsAsTheCursorAdvances(t *testing.T) {
	managed(t)
	client := testmongo.Client(t)
	coll := testmongo.NewDatabase(t, client).Collection("schedules")
	const n, later = 500, 100
	seedCounted(t, coll, n)
	c := ctx(t, time.Minute)

	for _, tc := range []struct {
		name string
		opts *options.FindOptionsBuilder
	}{
		{"batchSize 50", options.Find().SetBatchSize(50)},
		{"default first batch", options.Find()},
		{"sort $natural", options.Find().SetBatchSize(50).SetSort(bson.D{{Key: "$natural", Value: 1}})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			count, err := coll.CountDocuments(c, bson.D{})
			if err != nil {
				t.Fatal(err)
			}
			cur, err := coll.Find(c, bson.D{}, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer cur.Close(c)
			// The first batch is in hand; insert past the end of the collection.
			added := make([]any, later)
			for i := range added {
				added[i] = bson.D{{Key: "_id", Value: count + int64(i)}, {Key: "v", Value: int64(0)}, {Key: "w", Value: int64(0)}}
			}
			if _, err := coll.InsertMany(c, added); err != nil {
				t.Fatal(err)
			}
			seen := map[int64]int{}
			for cur.Next(c) {
				seen[cur.Current.Lookup("_id").Int64()]++
			}
			if err := cur.Err(); err != nil {
				t.Fatal(err)
			}
			total := int(count) + later
			var wrong []string
			for id := range int64(total) {
				if seen[id] != 1 {
					wrong = append(wrong, fmt.Sprintf("%d: %d times", id, seen[id]))
				}
			}
			if len(wrong) > 0 || len(seen) != total {
				t.Errorf("%d distinct documents returned, want %d (the %d present and the %d inserted after the first batch); "+
					"not returned once: %d, the first %v", len(seen), total, count, later, len(wrong), wrong[:min(5, len(wrong))])
			}
		})
	}
}

// TestFindDuringWritesReturnsEachDocumentOnce: a find read in small batches
// while the collection changes under it, between its batches (updates of
// every document, deletes ahead of and behind the cursor, inserts that fill
// the holes or go past the end) and at the same time (another client's
// writes). Every document present throughout is returned exactly once, no
// document twice, and each whole (v = w: a round sets both).
func TestFindDuringWritesReturnsEachDocumentOnce(t *testing.T) {
	managed(t)
	client := testmongo.Client(t)
	coll := testmongo.NewDatabase(t, client).Collection("schedules")
	// Documents whose _id is a multiple of 5 may be deleted; the others stay.
	const n = 3000
	deletable := func(id int64) bool { return id < n && id%5 == 0 }
	seedCounted(t, coll, n)
	c := ctx(t, 2*time.Minute)

	// The concurrent writer: rewrites a range of 100 documents each round
	// (adding a field), inserts a document past n and deletes a deletable
	// one. (Small writes: the test server keeps every change event.)
	done := make(chan struct{})
	var wg sync.WaitGroup
	var writeErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for round := int64(1); ; round++ {
			select {
			case <-done:
				return
			default:
			}
			lo := (round * 100) % n
			if _, err := coll.UpdateMany(c, bson.D{{Key: "_id", Value: bson.D{{Key: "$gte", Value: lo}, {Key: "$lt", Value: lo + 100}}}},
				bson.D{{Key: "$set", Value: bson.D{{Key: "v", Value: round}, {Key: "w", Value: round},
					{Key: fmt.Sprintf("f%d", round%50), Value: round}}}}); err != nil {
				writeErr = err
				return
			}
			id := int64(1_000_000) + round
			if _, err := coll.InsertOne(c, bson.D{{Key: "_id", Value: id}, {Key: "v", Value: round}, {Key: "w", Value: round}}); err != nil {
				writeErr = err
				return
			}
			if _, err := coll.DeleteOne(c, bson.D{{Key: "_id", Value: (round * 35) % n}}); err != nil {
				writeErr = err
				return
			}
		}
	}()
	var once sync.Once
	stopWriter := func() {
		once.Do(func() {
			close(done)
			wg.Wait()
		})
	}
	defer stopWriter()

	cur, err := coll.Find(c, bson.D{}, options.Find().SetBatchSize(37))
	if err != nil {
		t.Fatal(err)
	}
	defer cur.Close(c)
	seen := map[int64]int{}
	batches := 0
	for next := int64(2_000_000); cur.Next(c); {
		raw := cur.Current
		id := raw.Lookup("_id").Int64()
		seen[id]++
		if err := wholeDoc(raw); err != nil {
			t.Error(err)
		}
		if cur.RemainingBatchLength() > 0 {
			continue
		}
		// Between batches: delete a deletable document behind the cursor
		// and one ahead of it, insert two (the first fills a hole), and
		// update one kept document ahead.
		batches++
		ahead := (id + 400) / 5 * 5
		for _, del := range []int64{id / 5 * 5, ahead} {
			if deletable(del) {
				if _, err := coll.DeleteOne(c, bson.D{{Key: "_id", Value: del}}); err != nil {
					t.Fatal(err)
				}
			}
		}
		for range 2 {
			next++
			if _, err := coll.InsertOne(c, bson.D{{Key: "_id", Value: next}, {Key: "v", Value: int64(-1)}, {Key: "w", Value: int64(-1)}}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := coll.UpdateOne(c, bson.D{{Key: "_id", Value: (ahead + 1) % n}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "v", Value: int64(-2)}, {Key: "w", Value: int64(-2)}, {Key: "between", Value: true}}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := cur.Err(); err != nil {
		t.Fatalf("after %d documents: %v", len(seen), err)
	}
	stopWriter() // writeErr is the writer's until it has stopped
	if writeErr != nil {
		t.Fatalf("concurrent writer: %v", writeErr)
	}
	if batches < n/37 {
		t.Errorf("%d batches, want at least %d", batches, n/37)
	}
	for id, times := range seen {
		if times != 1 {
			t.Errorf("document %d returned %d times", id, times)
		}
	}
	for id := range int64(n) {
		if !deletable(id) && seen[id] != 1 {
			t.Errorf("document %d, present throughout, returned %d times, want once", id, seen[id])
		}
	}
	t.Logf("%d batches, %d documents returned (%d kept throughout)", batches, len(seen), n-n/5)
}

// TestStreamedFindFilterProjectionAndDrop: a streamed find applies its
// filter and projection as the library's does, in the collection's order,
// and one whose collection is dropped while it is read fails as a server's
// does (QueryPlanKilled) instead of returning what is left.
func TestStreamedFindFilterProjectionAndDrop(t *testing.T) {
	managed(t)
	client := testmongo.Client(t)
	coll := testmongo.NewDatabase(t, client).Collection("schedules")
	const n = 1000
	seedCounted(t, coll, n)
	c := ctx(t, time.Minute)
	if _, err := coll.UpdateMany(c, bson.D{{Key: "_id", Value: bson.D{{Key: "$mod", Value: bson.A{3, 0}}}}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "third", Value: true}, {Key: "v", Value: int64(7)}}}}); err != nil {
		t.Fatal(err)
	}

	cur, err := coll.Find(c, bson.D{{Key: "third", Value: true}},
		options.Find().SetBatchSize(20).SetProjection(bson.D{{Key: "v", Value: 1}}))
	if err != nil {
		t.Fatal(err)
	}
	want := int64(0)
	for cur.Next(c) {
		d := cur.Current
		if id := d.Lookup("_id").Int64(); id != want {
			t.Fatalf("document %d, want %d", id, want)
		}
		if v := d.Lookup("v").Int64(); v != 7 {
			t.Errorf("document %d: v %d, want 7", want, v)
		}
		if _, err := d.LookupErr("w"); err == nil {
			t.Errorf("document %d holds w, which the projection leaves out", want)
		}
		want += 3
	}
	if err := cur.Err(); err != nil {
		t.Fatal(err)
	}
	_ = cur.Close(c)
	if want != (n+2)/3*3 {
		t.Errorf("read up to %d, want %d documents", want/3, (n+2)/3)
	}

	cur, err = coll.Find(c, bson.D{}, options.Find().SetBatchSize(10))
	if err != nil {
		t.Fatal(err)
	}
	defer cur.Close(c)
	if err := coll.Drop(c); err != nil {
		t.Fatal(err)
	}
	read := 0
	for cur.Next(c) {
		read++
	}
	var se mongo.ServerError
	if err := cur.Err(); !errors.As(err, &se) || !se.HasErrorCode(175) {
		t.Fatalf("after %d documents of a dropped collection: %v, want QueryPlanKilled (175)", read, err)
	}
	if read != 10 {
		t.Errorf("%d documents read, want the first batch's 10", read)
	}
}
