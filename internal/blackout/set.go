package blackout

import (
	"iter"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Set holds the windows of the blackouts collection, kept equal to it by a
// change-stream watcher (Set implements changestream.Sink) and read by the
// fire path (Match). A bad document never removes a good window: an edit
// that makes a window invalid keeps its last valid version in force (the
// rule of schedules, last known good), and the error is logged with the
// window's _id and kept for Rejected.
type Set struct {
	log *slog.Logger
	loc *time.Location

	mu       sync.RWMutex
	windows  map[string]Window // valid windows by id
	rejected map[string]string // id (or a rendering of the _id) → error
	// order is the ids of windows, sorted: the first matching window
	// names a skip, the same one on every replica.
	order []string
}

// NewSet returns an empty set. loc is the zone of a recurring window whose
// document names none (nil: UTC).
func NewSet(loc *time.Location, log *slog.Logger) *Set {
	if log == nil {
		log = slog.Default()
	}
	return &Set{log: log, loc: loc, windows: map[string]Window{}, rejected: map[string]string{}}
}

// Match returns the window a fire of a job of category at slot falls in:
// the first matching window in id order.
func (s *Set) Match(category string, slot time.Time) (Window, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, id := range s.order {
		if w := s.windows[id]; w.Matches(category, slot) {
			return w, true
		}
	}
	return Window{}, false
}

// Windows returns the valid windows, by id.
func (s *Set) Windows() []Window {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]Window, 0, len(s.order))
	for _, id := range s.order {
		out = append(out, s.windows[id])
	}
	return out
}

// Rejected returns the errors of the documents refused, by id (a window
// kept on its last valid version is in both Windows and Rejected).
func (s *Set) Rejected() map[string]string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make(map[string]string, len(s.rejected))
	for k, v := range s.rejected {
		out[k] = v
	}
	return out
}

// Upsert implements changestream.Sink: it applies the current version of
// one window document.
func (s *Set) Upsert(doc bson.Raw) {
	w, err := Decode(doc, s.loc)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.apply(w, err)
}

// apply records one decoded document; s.mu is held.
func (s *Set) apply(w Window, err error) (changed bool) {
	if err != nil {
		_, kept := s.windows[w.ID]
		if s.rejected[w.ID] != err.Error() {
			s.log.Error("blackout window refused", "blackout_id", w.ID, "kept_previous", kept, "error", err)
			s.rejected[w.ID] = err.Error()
			return true
		}
		return false
	}
	delete(s.rejected, w.ID)
	prev, had := s.windows[w.ID]
	if had && sameWindow(prev, w) {
		return false
	}
	s.windows[w.ID] = w
	if !had {
		s.order = append(s.order, w.ID)
		sort.Strings(s.order)
	}
	s.log.Info("blackout window in force", windowAttrs(w)...)
	return true
}

// Delete implements changestream.Sink: the window with this _id is gone.
func (s *Set) Delete(id bson.RawValue) {
	key, _ := DecodeID(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.remove(key)
}

// remove forgets the window key; s.mu is held.
func (s *Set) remove(key string) (changed bool) {
	_, rejected := s.rejected[key]
	delete(s.rejected, key)
	if _, ok := s.windows[key]; !ok {
		return rejected
	}
	delete(s.windows, key)
	s.order = slices.DeleteFunc(s.order, func(id string) bool { return id == key })
	s.log.Info("blackout window removed", "blackout_id", key)
	return true
}

// ReplaceAll implements changestream.Sink: the set becomes the windows of
// docs; it returns the ids it changed. A read that fails keeps the windows
// it did not reach.
func (s *Set) ReplaceAll(docs iter.Seq2[bson.Raw, error]) (changed []string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := make(map[string]bool)
	for doc, err := range docs {
		if err != nil {
			return changed, err
		}
		w, err := Decode(doc, s.loc)
		seen[w.ID] = true
		if s.apply(w, err) {
			changed = append(changed, w.ID)
		}
	}
	var gone []string
	for id := range s.windows {
		if !seen[id] {
			gone = append(gone, id)
		}
	}
	for id := range s.rejected {
		if !seen[id] {
			gone = append(gone, id)
		}
	}
	for _, id := range gone {
		if s.remove(id) {
			changed = append(changed, id)
		}
	}
	return changed, nil
}

func sameWindow(a, b Window) bool {
	return a.ID == b.ID && a.From.Equal(b.From) && a.To.Equal(b.To) && a.CronExpr == b.CronExpr &&
		a.Duration == b.Duration && a.Timezone == b.Timezone && slices.Equal(a.Categories, b.Categories) &&
		a.Reason == b.Reason
}

func windowAttrs(w Window) []any {
	attrs := []any{"blackout_id", w.ID, "reason", w.Reason}
	if w.Recurring() {
		attrs = append(attrs, "cron_expr", w.CronExpr, "duration", w.Duration)
		if w.Timezone != "" {
			attrs = append(attrs, "timezone", w.Timezone)
		}
	} else {
		attrs = append(attrs, "from", w.From, "to", w.To)
	}
	if len(w.Categories) > 0 {
		attrs = append(attrs, "categories", w.Categories)
	}
	return attrs
}
