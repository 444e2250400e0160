package changestream

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Feed is the server side of the watcher: a change stream on the schedules
// collection and reads of the collection itself. MongoFeed is the real one;
// tests substitute their own.
type Feed interface {
	// Open opens a change stream with fullDocument updateLookup. A nil
	// resumeAfter opens at the current position.
	Open(ctx context.Context, resumeAfter bson.Raw) (Stream, error)
	// Snapshot reads every document of the collection, one at a time:
	// each document is valid only until the next one is read, and a read
	// that fails yields its error last, with a nil document (see
	// Sink.ReplaceAll). The read starts when the sequence is ranged over,
	// and stops when the range ends, so the whole collection is never
	// held at once.
	Snapshot(ctx context.Context) iter.Seq2[bson.Raw, error]
	// Lookup reads the document with the given _id; nil, nil when absent.
	Lookup(ctx context.Context, id bson.RawValue) (bson.Raw, error)
}

// Stream is an open change stream (the subset of *mongo.ChangeStream the
// watcher uses). It is used from one goroutine only.
type Stream interface {
	// TryNext returns true with an event in Current, or false after one
	// empty round trip (or an error, see Err).
	TryNext(ctx context.Context) bool
	// Current is the event TryNext returned.
	Current() bson.Raw
	// ResumeToken is the position after the last event or empty batch.
	ResumeToken() bson.Raw
	// Err is the error that ended the stream, nil if none.
	Err() error
	// ID is the server cursor id; 0 once the server closed the stream.
	ID() int64
	// Close releases the server cursor.
	Close(ctx context.Context) error
}

// MongoFeed watches one MongoDB collection.
type MongoFeed struct {
	coll    *mongo.Collection
	maxWait time.Duration
	// filter and sort shape the full reads (nil: every document).
	filter, sort bson.D
}

// NewMongoFeed returns a feed over coll. maxAwait bounds how long one empty
// getMore waits on the server (and so how often an idle stream's resume
// token can be refreshed); 0 means the server default (1 s).
func NewMongoFeed(coll *mongo.Collection, maxAwait time.Duration) *MongoFeed {
	return &MongoFeed{coll: coll, maxWait: maxAwait}
}

// WithSnapshot returns a copy of f whose full reads (Snapshot) read only
// the documents matching filter, in sort order (nil: natural order): for a
// sink that acts on some documents only, so that the others cost nothing
// to read at each start and resync. The change stream still carries every
// event; the sink ignores those it does not act on.
func (f *MongoFeed) WithSnapshot(filter, sort bson.D) *MongoFeed {
	c := *f
	c.filter, c.sort = filter, sort
	return &c
}

// Open implements Feed.
func (f *MongoFeed) Open(ctx context.Context, resumeAfter bson.Raw) (Stream, error) {
	opts := options.ChangeStream().SetFullDocument(options.UpdateLookup)
	if f.maxWait > 0 {
		opts.SetMaxAwaitTime(f.maxWait)
	}
	if resumeAfter != nil {
		opts.SetResumeAfter(resumeAfter)
	}
	cs, err := f.coll.Watch(ctx, mongo.Pipeline{}, opts)
	if err != nil {
		return nil, fmt.Errorf("open change stream on %s: %w", f.coll.Name(), err)
	}
	return mongoStream{cs}, nil
}

// SnapshotBatchSize is the batch size of MongoFeed's full reads: the
// documents each reply of the server carries (a server also stops a reply
// at 16 MiB). Two batches are read ahead while the sink applies the
// current one, so a full read holds at most three batches of the
// collection: about 0.3 MB of 100-byte schedules, 48 MiB at the very most.
const SnapshotBatchSize = 1000

// snapshotReadAhead is how many batches MongoFeed's reader may have read
// that the sink has not finished applying.
const snapshotReadAhead = 2

// Snapshot implements Feed: a find with SnapshotBatchSize, whose batches a
// goroutine reads ahead of the sink (at most snapshotReadAhead of them),
// so that the server's work on the next batch overlaps the sink's on this
// one.
func (f *MongoFeed) Snapshot(ctx context.Context) iter.Seq2[bson.Raw, error] {
	return func(yield func(bson.Raw, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		full := make(chan *docBatch, snapshotReadAhead)
		free := make(chan *docBatch, snapshotReadAhead+1)
		for range snapshotReadAhead + 1 {
			free <- &docBatch{}
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			defer close(full)
			f.readBatches(ctx, full, free)
		}()
		defer func() {
			cancel()
			for range full { // let the reader end
			}
			<-done
		}()
		for b := range full {
			if b.err != nil {
				yield(nil, b.err)
				return
			}
			for i := range b.ends {
				if !yield(b.doc(i), nil) {
					return
				}
			}
			b.reset()
			free <- b
		}
		// The reader stops without handing anything over when the
		// caller's context ends (a shutdown during a resync): the read is
		// short, and must not end as if the collection ended there, or the
		// sink takes every document not read as deleted.
		if err := ctx.Err(); err != nil {
			yield(nil, fmt.Errorf("read %s: %w", f.coll.Name(), err))
		}
	}
}

// readBatches runs the find and hands its batches over full, taking empty
// ones from free; a failure is handed over as a batch holding only it.
func (f *MongoFeed) readBatches(ctx context.Context, full, free chan *docBatch) {
	filter, opts := f.filter, options.Find().SetBatchSize(SnapshotBatchSize)
	if filter == nil {
		filter = bson.D{}
	}
	if f.sort != nil {
		opts.SetSort(f.sort)
	}
	fail := func(err error) {
		select {
		case full <- &docBatch{err: fmt.Errorf("read %s: %w", f.coll.Name(), err)}:
		case <-ctx.Done():
		}
	}
	cur, err := f.coll.Find(ctx, filter, opts)
	if err != nil {
		fail(err)
		return
	}
	defer cur.Close(context.WithoutCancel(ctx))
	var b *docBatch
	for cur.Next(ctx) {
		if b == nil {
			select {
			case b = <-free:
			case <-ctx.Done():
				return
			}
		}
		b.add(cur.Current)
		if cur.RemainingBatchLength() == 0 { // the server's batch ends here
			select {
			case full <- b:
				b = nil
			case <-ctx.Done():
				return
			}
		}
	}
	if err := cur.Err(); err != nil {
		if ctx.Err() == nil {
			fail(err)
		}
		return
	}
	if b != nil && len(b.ends) > 0 {
		select {
		case full <- b:
		case <-ctx.Done():
		}
	}
}

// docBatch is one batch of a full read: the documents back to back in one
// buffer, reused from batch to batch.
type docBatch struct {
	buf  []byte
	ends []int // end of document i in buf
	err  error
}

func (b *docBatch) add(doc bson.Raw) {
	b.buf = append(b.buf, doc...)
	b.ends = append(b.ends, len(b.buf))
}

func (b *docBatch) doc(i int) bson.Raw {
	start := 0
	if i > 0 {
		start = b.ends[i-1]
	}
	return bson.Raw(b.buf[start:b.ends[i]:b.ends[i]])
}

func (b *docBatch) reset() { b.buf, b.ends = b.buf[:0], b.ends[:0] }

// Lookup implements Feed.
func (f *MongoFeed) Lookup(ctx context.Context, id bson.RawValue) (bson.Raw, error) {
	raw, err := f.coll.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("look up %s in %s: %w", id, f.coll.Name(), err)
	}
	return raw, nil
}

type mongoStream struct{ cs *mongo.ChangeStream }

func (s mongoStream) TryNext(ctx context.Context) bool { return s.cs.TryNext(ctx) }
func (s mongoStream) Current() bson.Raw                { return s.cs.Current }
func (s mongoStream) ResumeToken() bson.Raw            { return s.cs.ResumeToken() }
func (s mongoStream) Err() error                       { return s.cs.Err() }
func (s mongoStream) ID() int64                        { return s.cs.ID() }
func (s mongoStream) Close(ctx context.Context) error  { return s.cs.Close(ctx) }
