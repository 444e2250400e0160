package daemon

import (
	"errors"
	"fmt"
	"time"

	"github.com/cronswap/cronswap/internal/jobs"
)

// Handle registers spec under name: the schedules whose job field (or,
// without one, whose _id) is name run it. Register every handler before Run;
// a schedule naming a handler that is not registered is refused with its
// last_error, as an unknown action is.
func (s *Service) Handle(name string, spec jobs.Spec, catchup *time.Duration) error {
	if name == "" {
		return errors.New("daemon: Handle: the name is empty")
	}
	if spec.Action == nil {
		return fmt.Errorf("daemon: Handle %q: no handler", name)
	}
	if catchup != nil && *catchup < 0 {
		return fmt.Errorf("daemon: Handle %q: catchup %s: must be 0 (off) or positive", name, *catchup)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return fmt.Errorf("daemon: Handle %q: called after Run; register every handler before Run", name)
	}
	if catchup != nil {
		s.catchup[name] = *catchup
	} else {
		delete(s.catchup, name)
	}
	s.registry.Register(name, spec)
	return nil
}
