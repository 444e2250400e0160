package daemon

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cronswap/cronswap/internal/actions"
	"github.com/cronswap/cronswap/jobs"
)

// Handle registers h under name, with its run policy p: the schedules whose
// job field is name (or, without a job field, whose _id is) run h. The
// cronswap binary registers the config file's exec and http actions the
// same way, so Go handlers and configured actions mix. Register every
// handler before Run: a schedule naming no registered handler is refused,
// with the same last_error as an unknown action in the config.
//
// h is handed each run with a context that ends when the run must stop:
// its lease was lost, a later fire replaced it (jobs.OverlapCancelOther),
// p.Timeout passed, or the service shuts down (after
// Options.ShutdownGrace). What h returns is the run's outcome (nil:
// succeeded; else failed, with the error's text); a panic is recorded as a
// failure with its message, and the service goes on.
func (s *Service) Handle(name string, h jobs.Handler, p jobs.Policy) error {
	if name == "" {
		return errors.New("daemon: Handle: the name is empty")
	}
	if h == nil {
		return fmt.Errorf("daemon: Handle %q: the handler is nil", name)
	}
	policy, err := actions.CheckPolicy(p)
	if err != nil {
		return fmt.Errorf("daemon: Handle %q: %w", name, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return fmt.Errorf("daemon: Handle %q: called after Run; register every handler before Run", name)
	}
	s.registry.Register(name, actions.Action{Handler: h, Policy: policy})
	return nil
}

// catchupFor is the catch-up window of the jobs running handler name: its
// policy's, else Options.Catchup.
func (s *Service) catchupFor(name string) time.Duration {
	if a, ok := s.registry.Lookup(name); ok && a.Catchup != nil {
		return *a.Catchup
	}
	return s.opts.Catchup
}

// catchupAnywhere reports whether the jobs of some registered handler
// have a catch-up window (catchupFor: its own, else the default); a job
// naming no registered handler is refused, never armed. When none has,
// the start-up catch-up has no slot to offer, and runCatchUp skips its
// walk over the armed jobs (at a million: a list of every id, and a
// schedule made for each, while the start's memory peaks).
func (s *Service) catchupAnywhere() bool {
	return slices.ContainsFunc(s.registry.Names(), func(name string) bool { return s.catchupFor(name) > 0 })
}
