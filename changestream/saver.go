package changestream

import (
	"context"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// State is the collection as the sink has applied it, with the resume token
// it corresponds to: arming from Docs and resuming the stream after Token
// reproduces the sink's state without reading the collection.
type State struct {
	Token bson.Raw
	Docs  []bson.Raw
}

// StateStore persists State for warm restarts (see Options.State).
type StateStore interface {
	// Load returns the stored state; any error means "do a full reload"
	// (an error wrapping fs.ErrNotExist: there is none yet).
	Load(ctx context.Context) (State, error)
	// Save replaces the stored state atomically.
	Save(ctx context.Context, st State) error
}

// saver persists the applied position off the apply path, coalesced: the
// stream loop hands it each applied token (applied) or idle position
// (advanced) and carries on; a goroutine saves the latest one once it is
// SaveDelay old, or at once after SaveMaxEvents events. flush saves
// synchronously (full reloads, shutdown); drop forgets the stored token.
// saveMu orders saves, flushes and drops so that an older token is never
// written after a newer one or after a drop.
type saver struct {
	w *Watcher

	kick chan struct{}

	mu       sync.Mutex
	token    bson.Raw  // latest position not yet saved; nil when none
	events   int       // events applied since the last save
	since    time.Time // when the first of those events was applied
	lastSave time.Time
	retryAt  time.Time // after a failed save, not before this

	saveMu sync.Mutex
}

// saveRetryDelay is the pause after a failed save before the next try.
const saveRetryDelay = time.Second

func newSaver(w *Watcher) *saver {
	return &saver{w: w, kick: make(chan struct{}, 1), lastSave: time.Now()}
}

func (s *saver) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// applied records the position after an applied event.
func (s *saver) applied(ctx context.Context, t bson.Raw) {
	if s.w.opts.SaveDelay < 0 && s.w.state == nil {
		s.set(t, 1)
		s.flush(ctx)
		return
	}
	if s.set(t, 1) {
		s.wake()
	}
}

// advanced records an idle stream's new position (no event applied).
func (s *saver) advanced(t bson.Raw) {
	if s.set(t, 0) {
		s.wake()
	}
}

// set records t and reports whether the saver should look at it now.
func (s *saver) set(t bson.Raw, events int) bool {
	if t == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.token != nil && string(s.token) == string(t) && events == 0 {
		return false
	}
	first := s.token == nil
	s.token = t
	if events > 0 {
		if s.events == 0 {
			s.since = time.Now()
			first = true
		}
		s.events += events
		if s.events >= s.w.opts.SaveMaxEvents {
			return true
		}
	}
	return first
}

// due returns how long until the pending position should be saved; ok is
// false when nothing is pending.
func (s *saver) due() (wait time.Duration, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.token == nil {
		return 0, false
	}
	if wait := time.Until(s.retryAt); wait > 0 {
		return wait, true
	}
	if s.events > 0 {
		if s.events >= s.w.opts.SaveMaxEvents {
			return 0, true
		}
		return time.Until(s.since.Add(s.w.saveDelay())), true
	}
	return time.Until(s.lastSave.Add(s.w.idleDelay())), true
}

// run saves pending positions until ctx ends.
func (s *saver) run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for ctx.Err() == nil {
		wait, ok := s.due()
		switch {
		case !ok:
			select {
			case <-ctx.Done():
				return
			case <-s.kick:
			}
		case wait <= 0:
			s.flush(ctx)
		default:
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				return
			case <-s.kick:
				timer.Stop() // Go 1.23+: no stale tick can be received after Stop
			case <-timer.C:
			}
		}
	}
}

// flush saves the pending position now (with the state, if configured).
func (s *saver) flush(ctx context.Context) {
	s.saveMu.Lock()
	defer s.saveMu.Unlock()
	s.mu.Lock()
	t, events := s.token, s.events
	s.token, s.events = nil, 0
	s.mu.Unlock()
	if t == nil {
		return
	}
	if !s.w.persist(ctx, t) {
		// Keep it for the next attempt unless a newer one came meanwhile.
		s.mu.Lock()
		if s.token == nil {
			s.token, s.events = t, events
		}
		s.retryAt = time.Now().Add(saveRetryDelay)
		s.mu.Unlock()
		s.wake() // the goroutine may be idle if this was a flush from the stream loop
		return
	}
	s.mu.Lock()
	s.lastSave = time.Now()
	s.mu.Unlock()
}

// drop forgets any pending position and deletes the stored token.
func (s *saver) drop(ctx context.Context) {
	s.saveMu.Lock()
	defer s.saveMu.Unlock()
	s.mu.Lock()
	s.token, s.events = nil, 0
	s.mu.Unlock()
	s.w.dropToken(ctx)
}

// mirror is a sink wrapper that remembers the documents it applied, for
// the state file. Snapshots may run concurrently with the stream loop.
type mirror struct {
	Sink
	mu   sync.Mutex
	docs map[string]bson.Raw // by _id (type byte + value bytes)
}

func newMirror(s Sink) *mirror { return &mirror{Sink: s, docs: map[string]bson.Raw{}} }

func idKey(v bson.RawValue) string { return string(rune(v.Type)) + string(v.Value) }

func (m *mirror) Upsert(doc bson.Raw) time.Time {
	at := m.Sink.Upsert(doc)
	if id, err := doc.LookupErr("_id"); err == nil {
		d := append(bson.Raw(nil), doc...) // the stream reuses its buffers
		m.mu.Lock()
		m.docs[idKey(id)] = d
		m.mu.Unlock()
	}
	return at
}

func (m *mirror) Delete(id bson.RawValue) time.Time {
	at := m.Sink.Delete(id)
	m.mu.Lock()
	delete(m.docs, idKey(id))
	m.mu.Unlock()
	return at
}

func (m *mirror) ReplaceAll(docs []bson.Raw) []string {
	changed := m.Sink.ReplaceAll(docs)
	m.set(docs)
	return changed
}

func (m *mirror) ReplaceAllTimed(docs []bson.Raw) ([]string, time.Duration, time.Duration) {
	ts, ok := m.Sink.(TimedSink)
	if !ok {
		start := time.Now()
		return m.ReplaceAll(docs), 0, time.Since(start)
	}
	changed, dec, app := ts.ReplaceAllTimed(docs)
	m.set(docs)
	return changed, dec, app
}

func (m *mirror) set(docs []bson.Raw) {
	next := make(map[string]bson.Raw, len(docs))
	for _, d := range docs {
		if id, err := d.LookupErr("_id"); err == nil {
			next[idKey(id)] = d
		}
	}
	m.mu.Lock()
	m.docs = next
	m.mu.Unlock()
}

func (m *mirror) snapshot() []bson.Raw {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]bson.Raw, 0, len(m.docs))
	for _, d := range m.docs {
		out = append(out, d)
	}
	return out
}
