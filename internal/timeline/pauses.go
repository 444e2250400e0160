package timeline

import (
	"context"
	"errors"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/internal/record"
)

// failurePause reads the job's pause after consecutive failed slots: nil
// when it is not paused (a damaged pause document pauses nothing).
func (r *Reader) failurePause(ctx context.Context, id string) (*record.PauseDoc, error) {
	raw, err := r.db.Collection(record.PausesCollection).FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the pause of job %q from %s: %w", id, record.PausesCollection, err)
	}
	p, paused, _ := record.DecodePause(id, raw)
	if !paused {
		return nil, nil
	}
	return &p, nil
}
