package triggers

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/changestream"
)

// Feed is the changestream.Feed of the requests collection: its change
// stream, and full reads (at start, at each resync) of the requests that
// have not ended only — pending and running ones, the only ones the sink
// acts on — oldest backfilled slot first, so that the ended requests kept
// for the runs' retention cost nothing to read.
type Feed struct {
	*changestream.MongoFeed
	coll *mongo.Collection
}

// NewFeed returns the feed over coll; maxAwait is the change stream's
// getMore wait (see changestream.NewMongoFeed).
func NewFeed(coll *mongo.Collection, maxAwait time.Duration) *Feed {
	return &Feed{MongoFeed: changestream.NewMongoFeed(coll, maxAwait), coll: coll}
}

// Snapshot implements changestream.Feed.
func (f *Feed) Snapshot(ctx context.Context) ([]bson.Raw, error) {
	cur, err := f.coll.Find(ctx, bson.D{{Key: FieldStatus, Value: bson.D{{Key: "$in", Value: bson.A{nil, StatusRunning}}}}},
		options.Find().SetSort(bson.D{{Key: FieldSlot, Value: 1}}))
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
