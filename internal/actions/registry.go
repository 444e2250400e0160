package actions

import (
	"fmt"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/cronswap/cronswap/jobs"
	"github.com/cronswap/cronswap/schedule"
)

// BufferingPolicies lists the buffering policies of the registered
// actions (empty: none buffers).
func (r *Registry) BufferingPolicies() []jobs.Overlap {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []jobs.Overlap
	seen := map[jobs.Overlap]bool{}
	for _, s := range r.actions {
		if s.Overlap.Buffers() && !seen[s.Overlap] {
			seen[s.Overlap] = true
			out = append(out, s.Overlap)
		}
	}
	return out
}

// Action is a registered action: its handler and its run policy.
type Action struct {
	Handler jobs.Handler
	jobs.Policy
}

// Registry maps action names to actions. It is safe for concurrent use. It
// is also the engine's policy for the schedules it arms: Check refuses a
// schedule naming an action it does not have, Jitter gives the action's
// jitter bound.
type Registry struct {
	mu      sync.RWMutex
	actions map[string]Action
	// client is the http client of the actions built by FromDefinitions
	// (nil for a registry from NewRegistry).
	client *http.Client
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{actions: map[string]Action{}} }

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
	r.client = NewHTTPClient()
	for _, name := range names {
		s, err := defs[name].Action()
		if err != nil {
			return nil, fmt.Errorf("job %q: %w", name, err)
		}
		if h, ok := s.Handler.(*HTTPAction); ok && h.Client == nil {
			h.Client = r.client
		}
		r.Register(name, s)
	}
	return r, nil
}

// Register adds or replaces an action under name; a Go function runs as
// r.Register("cleanup", Action{Handler: jobs.HandlerFunc(fn)}).
func (r *Registry) Register(name string, s Action) {
	if s.Overlap == "" {
		s.Overlap = jobs.DefaultOverlap
	}
	r.mu.Lock()
	r.actions[name] = s
	r.mu.Unlock()
}

// Lookup returns the action registered under name.
func (r *Registry) Lookup(name string) (Action, bool) {
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

// AnyRetries reports whether some registered action retries failed runs.
func (r *Registry) AnyRetries() bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, s := range r.actions {
		if s.Retry.Enabled() {
			return true
		}
	}
	return false
}
