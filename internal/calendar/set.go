package calendar

import (
	"iter"
	"log/slog"
	"slices"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// ProblemDeleted is the problem of a calendar whose document was deleted:
// its last dates stay in force for the schedules that exclude it, so that
// no holiday is run because a calendar went missing.
const ProblemDeleted = "deleted from the calendars collection; its last dates stay in force"

// Set holds the calendars of the calendars collection, kept equal to it by
// a change-stream watcher (Set implements changestream.Sink), for the
// schedules that exclude them. A calendar is never lost by accident: an
// edit that makes its document invalid keeps its last valid version in
// force (last known good, as for schedules and blackout windows), and so
// does deleting it; either is a problem Lookup reports, for the schedules
// that name the calendar to show.
type Set struct {
	log *slog.Logger

	mu sync.RWMutex
	// cals are the last valid versions, by name.
	cals map[string]Calendar
	// problems are the refusals (the document's error) and deletions
	// (ProblemDeleted), by name (or a rendering of the _id).
	problems map[string]string
}

// NewSet returns an empty set.
func NewSet(log *slog.Logger) *Set {
	if log == nil {
		log = slog.Default()
	}
	return &Set{log: log, cals: map[string]Calendar{}, problems: map[string]string{}}
}

// Lookup returns the calendar name in force: its last valid version
// (found false when there has never been one), and its problem ("" when
// its document is there and valid).
func (s *Set) Lookup(name string) (c Calendar, found bool, problem string) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	c, found = s.cals[name]
	problem = s.problems[name]
	if !found && problem == "" {
		problem = "no such calendar"
	}
	return c, found, problem
}

// Names returns the names of the calendars in force, sorted.
func (s *Set) Names() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]string, 0, len(s.cals))
	for name := range s.cals {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// Upsert implements changestream.Sink: it applies the current version of
// one calendar document.
func (s *Set) Upsert(doc bson.Raw) {
	c, err := Decode(doc)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.apply(c, err)
}

// apply records one decoded document; s.mu is held.
func (s *Set) apply(c Calendar, err error) (changed bool) {
	if err != nil {
		if s.problems[c.Name] != err.Error() {
			_, kept := s.cals[c.Name]
			s.log.Error("calendar refused", "calendar", c.Name, "kept_previous", kept, "error", err)
			s.problems[c.Name] = err.Error()
			return true
		}
		return false
	}
	_, hadProblem := s.problems[c.Name]
	delete(s.problems, c.Name)
	if prev, had := s.cals[c.Name]; had && same(prev, c) {
		return hadProblem
	}
	s.cals[c.Name] = c
	s.log.Info("calendar in force", "calendar", c.Name, "dates", len(c.Dates), "yearly", len(c.Yearly), "ranges", len(c.Ranges))
	return true
}

// Delete implements changestream.Sink: the calendar's document is gone.
// Its last version stays in force, with ProblemDeleted.
func (s *Set) Delete(id bson.RawValue) {
	name, _ := DecodeName(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.remove(name)
}

// remove marks the calendar name deleted; s.mu is held.
func (s *Set) remove(name string) (changed bool) {
	if _, ok := s.cals[name]; !ok {
		_, had := s.problems[name]
		delete(s.problems, name) // a refused document that never was valid
		return had
	}
	if s.problems[name] == ProblemDeleted {
		return false
	}
	s.problems[name] = ProblemDeleted
	s.log.Warn("calendar deleted; its last dates stay in force for the schedules that exclude it", "calendar", name)
	return true
}

// ReplaceAll implements changestream.Sink: the set becomes the calendars
// of docs (those missing from docs are deleted, as Delete does); it
// returns the names it changed. A read that fails keeps the calendars it
// did not reach.
func (s *Set) ReplaceAll(docs iter.Seq2[bson.Raw, error]) (changed []string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := make(map[string]bool)
	for doc, err := range docs {
		if err != nil {
			return changed, err
		}
		c, err := Decode(doc)
		seen[c.Name] = true
		if s.apply(c, err) {
			changed = append(changed, c.Name)
		}
	}
	var gone []string
	for name := range s.cals {
		if !seen[name] {
			gone = append(gone, name)
		}
	}
	for name := range s.problems {
		if _, valid := s.cals[name]; !valid && !seen[name] {
			gone = append(gone, name)
		}
	}
	slices.Sort(gone)
	for _, name := range gone {
		if s.remove(name) {
			changed = append(changed, name)
		}
	}
	return changed, nil
}

// same reports whether a and b hold the same dates in the same zone.
func same(a, b Calendar) bool {
	return a.Name == b.Name && a.Timezone == b.Timezone && slices.Equal(a.Dates, b.Dates) &&
		slices.Equal(a.Yearly, b.Yearly) && slices.Equal(a.Ranges, b.Ranges) &&
		a.Description == b.Description && a.Source == b.Source
}
