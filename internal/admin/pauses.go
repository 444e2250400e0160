package admin

import (
	"context"
	"errors"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/internal/record"
)

// FailurePause returns the pause of job id after consecutive failed slots
// (job_pauses) when it pauses the job. A damaged document is reported by
// damage, with what it holds; it pauses the job only when its state says
// paused.
func (s *Store) FailurePause(ctx context.Context, id string) (p record.PauseDoc, paused bool, damage, err error) {
	raw, err := record.PausesCollectionOf(s.db).FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return record.PauseDoc{}, false, nil, nil
	}
	if err != nil {
		return record.PauseDoc{}, false, nil, fmt.Errorf("read the pause of job %s in %s: %w", id, record.PausesCollection, err)
	}
	p, paused, damage = record.DecodePause(id, raw)
	return p, paused, damage, nil
}

// ResumeFailurePause clears the pause of job id after consecutive failed
// slots, if it is paused; by names who resumed it.
func (s *Store) ResumeFailurePause(ctx context.Context, id, by string) (bool, error) {
	return s.records().ResumePaused(ctx, id, by, s.now())
}
