package changestream

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/resumetoken"
)

// persister is where the saver keeps the position: a resume token store,
// or a state file with the token store (see statePersister).
type persister interface {
	// save stores position t and reports whether it was stored; false
	// means "try again later" (the failure is logged).
	save(ctx context.Context, t bson.Raw) bool
	// forget deletes the stored position.
	forget(ctx context.Context)
	// defaults is the save timing used for the Options left zero.
	defaults() saveTiming
}

// saveTiming says when the saver saves.
type saveTiming struct {
	// delay is how long an applied event's position may wait for a save;
	// negative saves synchronously after each event.
	delay time.Duration
	// idle is the least time between two saves of an idle stream's
	// advancing position.
	idle time.Duration
	// maxEvents saves at once when this many applied events are unsaved.
	maxEvents int
	// syncOK says whether a negative delay is allowed (in defaults only).
	syncOK bool
}

// saver persists the applied position off the apply path, coalesced: the
// position owner hands it each applied token (applied), idle position
// (advanced) or full reload's position (soon) and carries on; a goroutine
// saves the latest one once it is timing.delay old, at once after
// timing.maxEvents events or a full reload. flush saves synchronously (at
// shutdown, and after each event with a negative delay); drop forgets the
// stored token.
// saveMu orders saves, flushes and drops so that an older token is never
// written after a newer one or after a drop.
type saver struct {
	to     persister
	timing saveTiming

	kick chan struct{}

	mu       sync.Mutex
	token    bson.Raw  // latest position not yet saved; nil when none
	events   int       // events applied since the last save
	prompt   bool      // token is a full reload's position: save it without the delay
	since    time.Time // when the first of those events was applied
	lastSave time.Time
	lastTook time.Duration // how long the last save took
	retryAt  time.Time     // after a failed save, not before this

	saveMu sync.Mutex
}

// saveRetryDelay is the pause after a failed save before the next try.
const saveRetryDelay = time.Second

// saveDutyFactor spaces saves by their own cost: after a save that took d,
// the next one (for events, not a flush) waits until d·saveDutyFactor has
// passed since it, so saving never takes more than about a tenth of the
// time. A token save (about a millisecond) is never held back by it; a
// state file of a million documents (about a second to write) is then
// written at most every ten seconds or so while edits come, instead of
// every DefaultStateSaveDelay.
const saveDutyFactor = 10

func newSaver(to persister, timing saveTiming) *saver {
	return &saver{to: to, timing: timing, kick: make(chan struct{}, 1), lastSave: time.Now()}
}

func (s *saver) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// applied records the position after an applied event.
func (s *saver) applied(ctx context.Context, t bson.Raw) {
	if s.timing.delay < 0 {
		s.set(t, 1)
		s.flush(ctx)
		return
	}
	if s.set(t, 1) {
		s.wake()
	}
}

// soon records a full reload's position, to be saved without waiting for
// timing.delay (still spaced by the saves' own cost) while the stream goes
// on: a state file of a million schedules takes about a second to write,
// which the stream's readiness need not wait for. With synchronous saves
// (a negative delay) it is saved before soon returns.
func (s *saver) soon(ctx context.Context, t bson.Raw) {
	if t == nil {
		return
	}
	if s.timing.delay < 0 {
		s.applied(ctx, t) // saved before returning, as every position then
		return
	}
	s.set(t, 1)
	s.mu.Lock()
	s.prompt = true // with the token just set: flush takes both at once
	s.mu.Unlock()
	s.wake()
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
		if s.events >= s.timing.maxEvents {
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
	spaced := time.Until(s.lastSave.Add(s.lastTook * saveDutyFactor))
	if s.events > 0 {
		if s.prompt || s.events >= s.timing.maxEvents {
			return max(0, spaced), true
		}
		return max(time.Until(s.since.Add(s.timing.delay)), spaced), true
	}
	return max(time.Until(s.lastSave.Add(s.timing.idle)), spaced), true
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
	t, events, prompt := s.token, s.events, s.prompt
	s.token, s.events, s.prompt = nil, 0, false
	s.mu.Unlock()
	if t == nil {
		return
	}
	start := time.Now()
	if !s.to.save(ctx, t) {
		// Keep it for the next attempt unless a newer one came meanwhile.
		s.mu.Lock()
		if s.token == nil {
			s.token, s.events, s.prompt = t, events, prompt
		}
		s.retryAt = time.Now().Add(saveRetryDelay)
		s.mu.Unlock()
		s.wake() // the goroutine may be idle if this was a flush from the stream loop
		return
	}
	s.mu.Lock()
	s.lastSave = time.Now()
	s.lastTook = s.lastSave.Sub(start)
	s.mu.Unlock()
}

// drop forgets any pending position and deletes the stored token.
func (s *saver) drop(ctx context.Context) {
	s.saveMu.Lock()
	defer s.saveMu.Unlock()
	s.mu.Lock()
	s.token, s.events, s.prompt = nil, 0, false
	s.mu.Unlock()
	s.to.forget(ctx)
}

// tokenPersister keeps the position in the resume token store.
type tokenPersister struct {
	store resumetoken.Store
	id    string
	log   *slog.Logger
	// saved is told when a token was stored.
	saved func(at time.Time)
}

func (p *tokenPersister) save(ctx context.Context, t bson.Raw) bool {
	if err := p.store.Save(ctx, p.id, t); err != nil {
		if ctx.Err() == nil {
			p.log.Warn("saving resume token failed; will retry", "watcher_id", p.id, "error", err)
		}
		return false
	}
	p.saved(time.Now())
	return true
}

func (p *tokenPersister) forget(ctx context.Context) {
	if err := p.store.Delete(ctx, p.id); err != nil && ctx.Err() == nil {
		p.log.Warn("deleting resume token failed", "watcher_id", p.id, "error", err)
	}
}

func (p *tokenPersister) defaults() saveTiming {
	return saveTiming{delay: DefaultSaveDelay, idle: DefaultIdleSaveInterval, syncOK: true}
}
