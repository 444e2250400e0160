package admin

import (
	"context"
	"time"

	"github.com/cronswap/cronswap/internal/timeline"
)

// Timeline returns the timeline of job id over [from, to] (zero ends take
// the defaults of timeline.Window); loc is the zone of a schedule that
// names none. Errors wrap timeline.ErrBadRange for a range that cannot be
// served and timeline.ErrNotFound for a job nothing is known about.
func (s *Store) Timeline(ctx context.Context, id string, from, to time.Time, loc *time.Location) (timeline.Timeline, error) {
	return timeline.NewReader(s.db, timeline.Options{Location: loc, Now: s.now}).Build(ctx, id, from, to)
}
