package admin

import (
	"context"
	"errors"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/internal/jobs"
)

// FailurePause returns the pause of job id after consecutive failed slots
// (job_pauses) when it pauses the job. A damaged document is reported by
// damage, with what it holds; it pauses the job only when its state says
// paused.
func (s *Store) FailurePause(ctx context.Context, id string) (p jobs.PauseDoc, paused bool, damage, err error) {
	raw, err := jobs.PausesCollectionOf(s.db).FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return jobs.PauseDoc{}, false, nil, nil
	}
	if err != nil {
		return jobs.PauseDoc{}, false, nil, fmt.Errorf("read the pause of job %s in %s: %w", id, jobs.PausesCollection, err)
	}
	p, paused, damage = jobs.DecodePause(id, raw)
	return p, paused, damage, nil
}

// ResumeFailurePause clears the pause of job id after consecutive failed
// slots, if it is paused; by names who resumed it.
func (s *Store) ResumeFailurePause(ctx context.Context, id, by string) (bool, error) {
	return jobs.ResumePaused(ctx, jobs.PausesCollectionOf(s.db), id, by, s.now())
}
