package testmongo_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/testmongo"
)

// What a server puts in one cursor reply (see ServerBatches in the launcher).
const (
	// maxBatchBytes is the most bytes of documents in one reply:
	// BSONObjMaxUserSize.
	maxBatchBytes = 16 << 20
	// defaultFirstBatch is a find's or aggregate's first batch when the
	// command names no batchSize.
	defaultFirstBatch = 101
	// driverMaxMessage is the largest message the Go driver reads
	// (maxMessageSizeBytes); a reply past it fails with "length of read
	// message too large".
	driverMaxMessage = 48_000_000
)

// batch is one cursor reply as the driver received it.
type batch struct {
	command string // find, aggregate, getMore
	docs    int
	bytes   int // the documents' BSON sizes added up
	reply   int // the whole reply
}

// batchRecorder keeps the cursor replies a client receives.
type batchRecorder struct {
	mu      sync.Mutex
	batches []batch
}

func (r *batchRecorder) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Succeeded: func(_ context.Context, e *event.CommandSucceededEvent) {
		switch e.CommandName {
		case "find", "aggregate", "getMore":
		default:
			return
		}
		b := batch{command: e.CommandName, reply: len(e.Reply)}
		for _, key := range []string{"firstBatch", "nextBatch"} {
			v, err := e.Reply.LookupErr("cursor", key)
			if err != nil {
				continue
			}
			vals, _ := v.Array().Values()
			for _, d := range vals {
				b.docs++
				b.bytes += len(d.Value)
			}
		}
		r.mu.Lock()
		r.batches = append(r.batches, b)
		r.mu.Unlock()
	}}
}

// take returns the replies received since the last take.
func (r *batchRecorder) take() []batch {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.batches
	r.batches = nil
	return out
}

// bigDoc is document i of the large set: about docBytes of BSON.
func bigDoc(i, docBytes int) bson.D {
	return bson.D{{Key: "_id", Value: fmt.Sprintf("big-%05d", i)}, {Key: "i", Value: int32(i)},
		{Key: "pad", Value: strings.Repeat(string(rune('a'+i%26)), docBytes-60)}}
}

// TestBatchesCappedLikeAServer reads a collection of 60 MB — past the
// driver's 48 MB message limit, so the library's one reply per result fails —
// through the driver: plain and with batch sizes, find, aggregate and a
// change stream that resumes after the 3,000 inserts. Every document must
// arrive, the first batch must hold 101 documents unless the command asked
// otherwise, and no reply may carry more than 16 MiB of documents, each
// batch cut only where the next document would not fit.
func TestBatchesCappedLikeAServer(t *testing.T) {
	const n, docBytes = 3000, 20_000 // 60 MB: > 48 MB, about 3.6 × 16 MiB
	rec := &batchRecorder{}
	uri := testmongo.Shared(t).URI
	client, err := mongo.Connect(options.Client().ApplyURI(uri).SetMonitor(rec.monitor()).
		SetServerSelectionTimeout(10 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	db := testmongo.NewDatabase(t, client)
	coll := db.Collection("big")
	c := ctx(t, 3*time.Minute)

	cs, err := coll.Watch(c, mongo.Pipeline{})
	if err != nil {
		t.Fatal(err)
	}
	start := cs.ResumeToken()
	_ = cs.Close(c)
	for lo := 0; lo < n; lo += 200 {
		docs := make([]any, 0, 200)
		for i := lo; i < min(lo+200, n); i++ {
			docs = append(docs, bigDoc(i, docBytes))
		}
		if _, err := coll.InsertMany(c, docs); err != nil {
			t.Fatal(err)
		}
	}
	rec.take()

	// readAll reads a cursor to its end, checking each document against
	// the one inserted (in insertion order).
	readAll := func(t *testing.T, cur *mongo.Cursor, want int) {
		t.Helper()
		defer cur.Close(c)
		i := 0
		for cur.Next(c) {
			d := cur.Current
			if got, wantID := d.Lookup("_id").StringValue(), fmt.Sprintf("big-%05d", i); got != wantID {
				t.Fatalf("document %d is %s, want %s", i, got, wantID)
			}
			if pad := d.Lookup("pad").StringValue(); len(pad) != docBytes-60 || pad[0] != byte('a'+i%26) {
				t.Fatalf("document %d: pad of %d bytes starting %q", i, len(pad), pad[:1])
			}
			i++
		}
		if err := cur.Err(); err != nil {
			t.Fatalf("after %d documents: %v", i, err)
		}
		if i != want {
			t.Fatalf("read %d documents, want %d", i, want)
		}
	}

	// check asserts the replies of one read: the first batch's size, the
	// byte bound, and that every batch but the last was cut only where
	// the next document would not fit or the count was reached.
	check := func(t *testing.T, batches []batch, first, perBatch, total int) {
		t.Helper()
		if len(batches) == 0 {
			t.Fatal("no cursor replies seen")
		}
		docs, largest := 0, 0
		for i, b := range batches {
			t.Logf("%s: %d documents, %d bytes of documents, reply %d bytes", b.command, b.docs, b.bytes, b.reply)
			if b.bytes > maxBatchBytes {
				t.Errorf("reply %d carries %d bytes of documents, more than 16 MiB", i, b.bytes)
			}
			if b.reply > driverMaxMessage {
				t.Errorf("reply %d is %d bytes, past the driver's limit", i, b.reply)
			}
			limit := perBatch
			if i == 0 {
				limit = first
			}
			last := i == len(batches)-1
			if b.docs > limit {
				t.Errorf("reply %d holds %d documents, more than the %d asked for", i, b.docs, limit)
			}
			if !last && b.docs < limit && b.bytes+b.bytes/max(b.docs, 1) <= maxBatchBytes {
				t.Errorf("reply %d holds %d documents (%d bytes) but another would have fit", i, b.docs, b.bytes)
			}
			docs += b.docs
			largest = max(largest, b.reply)
		}
		if docs != total {
			t.Errorf("replies held %d documents, want %d", docs, total)
		}
		if got := batches[0].docs; got != min(first, total) && batches[0].bytes+docBytes <= maxBatchBytes {
			t.Errorf("first batch holds %d documents, want %d", got, first)
		}
		if min(perBatch, total)*docBytes > maxBatchBytes && largest < maxBatchBytes-2*docBytes {
			t.Errorf("largest reply %d bytes: the 16 MiB bound was never reached", largest)
		}
	}
	unbounded := int(^uint(0) >> 1)

	t.Run("find", func(t *testing.T) {
		cur, err := coll.Find(c, bson.D{})
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, cur, n)
		check(t, rec.take(), defaultFirstBatch, unbounded, n)
	})
	t.Run("find batchSize 2000", func(t *testing.T) {
		cur, err := coll.Find(c, bson.D{}, options.Find().SetBatchSize(2000))
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, cur, n)
		check(t, rec.take(), 2000, 2000, n)
	})
	t.Run("find batchSize 400", func(t *testing.T) {
		cur, err := coll.Find(c, bson.D{}, options.Find().SetBatchSize(400))
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, cur, n)
		batches := rec.take()
		check(t, batches, 400, 400, n)
		if len(batches) != (n+399)/400 {
			t.Errorf("%d replies, want %d of 400 documents (8 MB each)", len(batches), (n+399)/400)
		}
	})
	t.Run("find limit 150", func(t *testing.T) {
		cur, err := coll.Find(c, bson.D{}, options.Find().SetLimit(150))
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, cur, 150)
		check(t, rec.take(), defaultFirstBatch, unbounded, 150)
	})
	t.Run("aggregate", func(t *testing.T) {
		cur, err := coll.Aggregate(c, mongo.Pipeline{{{Key: "$match", Value: bson.D{}}}})
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, cur, n)
		check(t, rec.take(), defaultFirstBatch, unbounded, n)
	})
	t.Run("change stream resumed after the inserts", func(t *testing.T) {
		cs, err := coll.Watch(c, mongo.Pipeline{}, options.ChangeStream().SetResumeAfter(start))
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close(c)
		i := 0
		for i < n && cs.Next(c) {
			d := cs.Current.Lookup("fullDocument").Document()
			if got, want := d.Lookup("_id").StringValue(), fmt.Sprintf("big-%05d", i); got != want {
				t.Fatalf("event %d is for %s, want %s", i, got, want)
			}
			i++
		}
		if i != n {
			t.Fatalf("read %d events, want %d: %v", i, n, cs.Err())
		}
		// The events are larger than the documents (the event's own
		// fields), so count only the replies' byte bound and sum.
		total := 0
		for _, b := range rec.take() {
			t.Logf("%s: %d events, %d bytes of events, reply %d bytes", b.command, b.docs, b.bytes, b.reply)
			if b.bytes > maxBatchBytes || b.reply > driverMaxMessage {
				t.Errorf("%s reply carries %d bytes of events (%d in all)", b.command, b.bytes, b.reply)
			}
			if b.command == "aggregate" && b.docs > defaultFirstBatch {
				t.Errorf("first batch holds %d events, more than %d", b.docs, defaultFirstBatch)
			}
			total += b.docs
		}
		if total < n {
			t.Errorf("replies held %d events, want at least %d", total, n)
		}
	})
	if err := coll.Drop(c); err != nil { // 60 MB less in the shared server's heap
		t.Log(err)
	}
}
