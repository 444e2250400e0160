package triggers

import (
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/changestream"
)

// NewFeed returns the changestream.Feed of the requests collection coll:
// its change stream (maxAwait is the getMore wait, see
// changestream.NewMongoFeed), and full reads (at start, at each resync) of
// the requests that have not ended only — pending, buffered and running
// ones, the only ones the sink acts on — oldest backfilled slot first, so
// that the ended requests kept for the runs' retention cost nothing to
// read.
func NewFeed(coll *mongo.Collection, maxAwait time.Duration) *changestream.MongoFeed {
	return changestream.NewMongoFeed(coll, maxAwait).WithSnapshot(
		bson.D{{Key: FieldStatus, Value: bson.D{{Key: "$in", Value: bson.A{nil, StatusRunning, StatusBuffered}}}}},
		bson.D{{Key: FieldSlot, Value: 1}})
}
