package changestream

import (
	"context"
	"errors"
	"fmt"
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
	// Snapshot reads every document of the collection.
	Snapshot(ctx context.Context) ([]bson.Raw, error)
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

// Snapshot implements Feed.
func (f *MongoFeed) Snapshot(ctx context.Context) ([]bson.Raw, error) {
	filter, opts := f.filter, options.Find()
	if filter == nil {
		filter = bson.D{}
	}
	if f.sort != nil {
		opts.SetSort(f.sort)
	}
	cur, err := f.coll.Find(ctx, filter, opts)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", f.coll.Name(), err)
	}
	defer cur.Close(context.WithoutCancel(ctx))
	var docs []bson.Raw
	for cur.Next(ctx) {
		docs = append(docs, append(bson.Raw(nil), cur.Current...))
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", f.coll.Name(), err)
	}
	return docs, nil
}

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
