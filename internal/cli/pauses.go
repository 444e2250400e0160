package cli

import (
	"context"
	"fmt"
	"strconv"

	"github.com/cronswap/cronswap/internal/record"
)

// failurePauseView is how a schedule's pause after consecutive failed
// slots (job_pauses) is shown: nil when the job is not paused so.
type failurePauseView = record.PauseDoc

// withFailurePause adds the job's pause after failures to v.
func (s *session) withFailurePause(ctx context.Context, v scheduleView) (scheduleView, error) {
	if v.InvalidID {
		return v, nil
	}
	p, paused, damage, err := s.store.FailurePause(ctx, v.ID)
	if err != nil {
		return v, err
	}
	if damage != nil && v.Error == "" {
		v.Error = damage.Error()
	}
	if paused {
		v.FailurePause = &p
	}
	return v, nil
}

// resumeFailurePause clears the job's pause after failures; it reports
// whether there was one.
func (s *session) resumeFailurePause(ctx context.Context, id string) (bool, error) {
	return s.store.ResumeFailurePause(ctx, id, currentUser())
}

// attemptFields are the lines `runs get` adds for a run of an action that
// retries: the attempt, when the next is due, and one line per ended
// attempt.
func attemptFields(r record.RunDoc) [][2]string {
	if r.Attempt == 0 && len(r.Attempts) == 0 {
		return nil
	}
	out := [][2]string{{"ATTEMPT", strconv.Itoa(r.Attempt)}}
	if !r.RetryAt.IsZero() {
		out = append(out, [2]string{"RETRY AT", rfc3339(r.RetryAt, nil)})
	}
	for _, a := range r.Attempts {
		line := fmt.Sprintf("%s on %s, fence %d, %s .. %s", a.Status, a.Instance, a.Fence,
			rfc3339(a.StartedAt, nil), rfc3339(a.EndedAt, nil))
		if a.Error != "" {
			line += ": " + a.Error
		}
		out = append(out, [2]string{"ATTEMPT " + strconv.Itoa(a.Attempt), line})
	}
	return out
}
