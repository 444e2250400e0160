package admin

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/triggers"
)

// RunNow asks the daemons to run job id once now (a paused job too): it
// inserts a run-now request into the triggers collection, naming by as the
// requester, after checking that the job has a schedule (else an error
// wrapping ErrNotFound). args, when not nil, replaces the schedule's args
// for this run. It returns the request's id; the run's id is
// triggers.RunIDOf of its hex.
func (s *Store) RunNow(ctx context.Context, id string, args bson.Raw, by string) (bson.ObjectID, error) {
	if _, err := s.Schedule(ctx, id); err != nil {
		return bson.ObjectID{}, err
	}
	return triggers.RunNow(ctx, triggers.Collection(s.db), id, args, by, s.now())
}
