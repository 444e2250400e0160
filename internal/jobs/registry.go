package jobs

import (
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/cronswap/cronswap/schedule"
)

// Spec is a registered action with its run policy.
type Spec struct {
	Action Action
	// Timeout bounds each run; 0 is none.
	Timeout time.Duration
	// Overlap is the overlap policy; empty means DefaultOverlap.
	Overlap Overlap
	// Jitter bounds a fixed per-job delay after each slot of the schedules
	// running this action (the slot's identity stays the undelayed time);
	// 0 is none.
	Jitter time.Duration
	// StartingDeadline is how long after its slot plus jitter a fire of
	// this action may still start; 0 means the runner's default.
	StartingDeadline time.Duration
	// Retry says how a failed run is tried again as further attempts of
	// its slot; the zero policy does not retry.
	Retry RetryPolicy
	// PauseAfterFailures, when positive, pauses the job after that many
	// consecutive failed slots (job_pauses) until an operator resumes it.
	PauseAfterFailures int
}

// Registry maps action names to actions. It is safe for concurrent use. It
// is also the engine's policy for the schedules it arms: Check refuses a
// schedule naming an action it does not have, Jitter gives the action's
// jitter bound.
type Registry struct {
	mu      sync.RWMutex
	actions map[string]Spec
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{actions: map[string]Spec{}} }

// FromDefinitions builds a registry from named action definitions (the
// configuration's jobs section). The first bad definition, in name order,
// is refused with an error naming it.
func FromDefinitions(defs map[string]Definition) (*Registry, error) {
	names := make([]string, 0, len(defs))
	for name := range defs {
		names = append(names, name)
	}
	sort.Strings(names)
	r := NewRegistry()
	client := NewHTTPClient()
	for _, name := range names {
		s, err := defs[name].Spec()
		if err != nil {
			return nil, fmt.Errorf("job %q: %w", name, err)
		}
		if h, ok := s.Action.(*HTTPAction); ok && h.Client == nil {
			h.Client = client
		}
		r.Register(name, s)
	}
	return r, nil
}

// Register adds or replaces an action under name. Go programs embedding
// cronswap use it to run a function: r.Register("cleanup", jobs.Spec{Action: jobs.ActionFunc(fn)}).
func (r *Registry) Register(name string, s Spec) {
	if s.Overlap == "" {
		s.Overlap = DefaultOverlap
	}
	r.mu.Lock()
	r.actions[name] = s
	r.mu.Unlock()
}

// Lookup returns the action registered under name.
func (r *Registry) Lookup(name string) (Spec, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	s, ok := r.actions[name]
	return s, ok
}

// Names lists the registered action names, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.actions))
	for n := range r.actions {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Check refuses a schedule whose action is not registered, with a
// *schedule.Error on its job field that names the action and the known ones.
func (r *Registry) Check(s schedule.Schedule) error {
	if _, ok := r.Lookup(s.ActionName()); !ok {
		return &schedule.Error{ID: s.ID, Field: schedule.FieldJob,
			Reason: fmt.Sprintf("unknown action %q: not in the config's jobs (known: %v)", s.ActionName(), r.Names())}
	}
	return nil
}

// Jitter returns the jitter bound of the schedule's action; 0 when it has
// none or is not registered.
func (r *Registry) Jitter(s schedule.Schedule) time.Duration {
	spec, _ := r.Lookup(s.ActionName())
	return spec.Jitter
}
