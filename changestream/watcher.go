// Package changestream keeps a sink (the scheduler) equal to the schedules
// collection. It watches the collection's change stream, persists the resume
// position after each applied event, reconnects with capped exponential
// backoff, and falls back to a full reload whenever the position is lost:
// list, then watch, then relist when the position is gone — the pattern of
// client-go's Reflector, with the stream opened before the list so that no
// edit falls in the gap.
//
// Where the server has no change streams (a standalone mongod answers 40573)
// the watcher polls: a full diff every poll interval.
package changestream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/resumetoken"
)

// Sink receives the collection's contents. Its methods are called from one
// goroutine, in stream order.
type Sink interface {
	// Upsert applies the current version of one document.
	Upsert(doc bson.Raw)
	// Delete forgets the document with this _id.
	Delete(id bson.RawValue)
	// ReplaceAll makes the sink equal to docs (a whole collection) and
	// returns the ids it had to change.
	ReplaceAll(docs []bson.Raw) []string
}

// Watch modes.
const (
	ModeAuto         = "auto"
	ModeChangeStream = "changestream"
	ModePoll         = "poll"
)

// Reasons for a full reload, as logged and counted.
const (
	ReasonStartup      = "startup"
	ReasonTokenRefused = "token_refused"
	ReasonLostPosition = "lost_position"
	ReasonInvalidate   = "invalidate"
	ReasonPoll         = "poll"
	ReasonResync       = "resync"
	// ReasonUnattributable: an event did not say which document changed.
	ReasonUnattributable = "unattributable_event"
)

// Server error codes that mean the stream cannot continue from its position.
var lostPositionCodes = []int{
	286, // ChangeStreamHistoryLost
	280, // ChangeStreamFatalError
	260, // InvalidResumeToken
	136, // CappedPositionLost
}

// Server error codes that mean change streams are not available here.
var unsupportedCodes = []int{
	40573, // "The $changeStream stage is only supported on replica sets"
	115,   // CommandNotSupported
	59,    // CommandNotFound
}

// Options configures a Watcher.
type Options struct {
	// ID names this watcher's resume token (the instance id).
	ID     string
	Feed   Feed
	Tokens resumetoken.Store
	Sink   Sink
	Logger *slog.Logger
	// Mode is auto, changestream or poll.
	Mode string
	// PollInterval is the full-diff period in poll mode.
	PollInterval time.Duration
	// ResyncInterval is the period of the safety-net full diff while
	// streaming; 0 disables it.
	ResyncInterval time.Duration
	// BackoffMin and BackoffMax bound the reconnect backoff.
	BackoffMin, BackoffMax time.Duration
	// IdleSaveInterval is the least time between two saves of an idle
	// stream's advancing resume token (saves after events are immediate).
	IdleSaveInterval time.Duration
	// Hooks lets a caller observe the watcher (metrics); any may be nil.
	Hooks Hooks
}

// Hooks are optional callbacks for observability.
type Hooks struct {
	// Event is called after an event was applied.
	Event func(op string, wallTime time.Time)
	// FullReload is called after a full reload, with its reason and the ids it changed.
	FullReload func(reason string, changed []string)
	// Reconnect is called before each reconnect attempt.
	Reconnect func(attempt int, delay time.Duration, err error)
	// Drift is called with the jobs a periodic resync found out of step
	// with the collection, once it is sure no queued event explains them.
	Drift func(ids []string)
}

// Status is a snapshot of the watcher's state.
type Status struct {
	// Mode is "changestream" or "poll" once decided, else the configured mode.
	Mode string
	// Ready is true once the first full sync is done and while the watcher
	// is streaming or polling (false while reconnecting).
	Ready        bool
	LastEventAt  time.Time
	TokenSavedAt time.Time
	FullReloads  int64
	Reconnects   int64
}

// Watcher keeps a Sink equal to a collection.
type Watcher struct {
	opts Options
	log  *slog.Logger

	mu     sync.Mutex
	status Status
	synced bool
}

// New returns a watcher; call Run to start it.
func New(opts Options) *Watcher {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Mode == "" {
		opts.Mode = ModeAuto
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = 5 * time.Second
	}
	if opts.BackoffMin <= 0 {
		opts.BackoffMin = 100 * time.Millisecond
	}
	if opts.BackoffMax < opts.BackoffMin {
		opts.BackoffMax = max(10*time.Second, opts.BackoffMin)
	}
	if opts.IdleSaveInterval <= 0 {
		opts.IdleSaveInterval = 5 * time.Second
	}
	return &Watcher{opts: opts, log: opts.Logger, status: Status{Mode: opts.Mode}}
}

// Status returns a snapshot of the watcher's state.
func (w *Watcher) Status() Status {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.status
}

func (w *Watcher) update(f func(*Status)) {
	w.mu.Lock()
	f(&w.status)
	w.mu.Unlock()
}

func (w *Watcher) setReady(ready bool) {
	w.update(func(s *Status) { s.Ready = ready && w.synced })
}

// fullReload reads the whole collection and makes the sink equal to it.
func (w *Watcher) fullReload(ctx context.Context, reason string) error {
	_, err := w.reload(ctx, reason)
	return err
}

// reload is fullReload returning the ids it changed.
func (w *Watcher) reload(ctx context.Context, reason string) ([]string, error) {
	start := time.Now()
	docs, err := w.opts.Feed.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	changed := w.opts.Sink.ReplaceAll(docs)
	w.mu.Lock()
	w.synced = true
	w.status.FullReloads++
	w.mu.Unlock()
	if reason != ReasonPoll || len(changed) > 0 {
		w.log.Info("full reload", "reason", reason, "documents", len(docs),
			"changed", len(changed), "changed_ids", firstIDs(changed, 20), "duration", time.Since(start))
	}
	if w.opts.Hooks.FullReload != nil {
		w.opts.Hooks.FullReload(reason, changed)
	}
	return changed, nil
}

func firstIDs(ids []string, n int) []string {
	if len(ids) > n {
		return ids[:n]
	}
	return ids
}

// Run watches until ctx is cancelled, then saves the last applied position
// and returns nil. It returns an error only for misconfiguration.
func (w *Watcher) Run(ctx context.Context) error {
	switch w.opts.Mode {
	case ModePoll:
		w.update(func(s *Status) { s.Mode = ModePoll })
		return w.poll(ctx)
	case ModeAuto, ModeChangeStream:
	default:
		return fmt.Errorf("watch mode %q: want auto, changestream or poll", w.opts.Mode)
	}
	return w.stream(ctx)
}

// stream is the change-stream loop: open (resume from the stored token if
// any), full reload when needed, consume, and on error reconnect.
func (w *Watcher) stream(ctx context.Context) error {
	var (
		token      bson.Raw
		tokenSaved time.Time
		needFull   = ReasonStartup
		attempt    = 0
		loadToken  = true
	)
	for ctx.Err() == nil {
		if loadToken {
			loadToken = false
			token, tokenSaved = w.loadToken(ctx)
			if ctx.Err() != nil {
				break
			}
		}
		cs, reason, err := w.open(ctx, token, tokenSaved)
		if reason != "" {
			token = nil
			if needFull == "" || needFull == ReasonStartup {
				needFull = reason
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if IsUnsupported(err) && w.opts.Mode == ModeAuto {
				w.log.Warn("server has no change streams; falling back to polling",
					"error", err, "poll_interval", w.opts.PollInterval)
				w.update(func(s *Status) { s.Mode = ModePoll })
				return w.poll(ctx)
			}
			attempt++
			w.backoff(ctx, attempt, err)
			continue
		}
		w.update(func(s *Status) { s.Mode = ModeChangeStream })
		if needFull != "" {
			if err := w.fullReload(ctx, needFull); err != nil {
				_ = cs.Close(context.WithoutCancel(ctx))
				if ctx.Err() != nil {
					break
				}
				attempt++
				w.backoff(ctx, attempt, err)
				continue
			}
			needFull = ""
			// Store the position the reload is consistent with, so a
			// restart resumes from here even if no edit comes.
			if t := cs.ResumeToken(); t != nil {
				token = t
				w.saveToken(ctx, t)
			}
		}
		attempt = 0
		w.setReady(true)
		next, err := w.consume(ctx, cs, &token)
		_ = cs.Close(context.WithoutCancel(ctx))
		w.setReady(false)
		switch {
		case ctx.Err() != nil:
		case next != "":
			// Position gone or stream invalidated: start over at the current
			// position with a full reload.
			token = nil
			w.dropToken(ctx)
			needFull = next
		case err != nil:
			attempt++
			w.backoff(ctx, attempt, err)
		}
	}
	w.saveFinal(token)
	return nil
}

// loadToken reads the stored token; a malformed one is dropped.
func (w *Watcher) loadToken(ctx context.Context) (bson.Raw, time.Time) {
	for attempt := 1; ctx.Err() == nil; attempt++ {
		t, err := w.opts.Tokens.Load(ctx, w.opts.ID)
		switch {
		case err == nil:
			return t.Value, t.SavedAt
		case errors.Is(err, resumetoken.ErrNotFound):
			w.log.Info("no stored resume token; will open at the current position after a full reload", "watcher_id", w.opts.ID)
			return nil, time.Time{}
		case errors.Is(err, resumetoken.ErrMalformed):
			w.log.Warn("stored resume token is malformed; dropping it and doing a full reload", "watcher_id", w.opts.ID, "error", err)
			w.dropToken(ctx)
			return nil, time.Time{}
		}
		if ctx.Err() != nil {
			break
		}
		w.backoff(ctx, attempt, err)
	}
	return nil, time.Time{}
}

// open opens the stream. With a token it resumes after it; if the server
// refuses the token, the token is dropped and the stream opened at the
// current position, and reason says a full reload is due.
func (w *Watcher) open(ctx context.Context, token bson.Raw, savedAt time.Time) (Stream, string, error) {
	if token != nil {
		cs, err := w.opts.Feed.Open(ctx, token)
		if err == nil {
			w.log.Info("resuming change stream from stored token", "watcher_id", w.opts.ID,
				"token_age", age(savedAt), "token", tokenString(token))
			return cs, "", nil
		}
		var se mongo.ServerError
		if !errors.As(err, &se) || IsUnsupported(err) {
			return nil, "", err // transient (network) or no change streams at all: keep the token
		}
		w.log.Warn("server refused the stored resume token; dropping it, opening at the current position and reloading everything",
			"watcher_id", w.opts.ID, "token", tokenString(token), "token_age", age(savedAt), "error", err)
		w.dropToken(ctx)
		cs, err = w.opts.Feed.Open(ctx, nil)
		return cs, ReasonTokenRefused, err
	}
	cs, err := w.opts.Feed.Open(ctx, nil)
	if err == nil {
		w.log.Info("change stream opened at the current position", "watcher_id", w.opts.ID)
	}
	return cs, "", err
}

func age(t time.Time) string {
	if t.IsZero() {
		return "unknown"
	}
	return time.Since(t).Round(time.Millisecond).String()
}

// tokenString renders a token for logs, shortened.
func tokenString(t bson.Raw) string {
	s := t.String()
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// consume applies events until an error, an invalidation or ctx ends. It
// returns a full-reload reason when the position is gone, else the error.
func (w *Watcher) consume(ctx context.Context, cs Stream, token *bson.Raw) (string, error) {
	lastSave := time.Now()
	var resync <-chan time.Time
	if w.opts.ResyncInterval > 0 {
		t := time.NewTicker(w.opts.ResyncInterval)
		defer t.Stop()
		resync = t.C
	}
	saved := *token
	// A resync is due from a tick on; it runs when the stream is caught up
	// (an empty round trip), or at the latest resyncMaxDelay after the tick
	// on a stream that is never idle. The ids it changed are only suspects
	// until the stream is idle again: an edit committed between the last
	// event and the read shows in the read before its event arrives, and
	// that event clears the suspicion.
	var (
		resyncDue time.Time
		suspects  drift
	)
	for {
		select {
		case <-resync:
			if resyncDue.IsZero() {
				resyncDue = time.Now()
			}
		default:
		}
		if !resyncDue.IsZero() && time.Since(resyncDue) > resyncMaxDelay {
			suspects.add(w.resync(ctx))
			resyncDue = time.Time{}
		}
		if !suspects.since.IsZero() && time.Since(suspects.since) > resyncMaxDelay {
			w.reportDrift(ctx, &suspects)
		}
		if cs.TryNext(ctx) {
			ev := cs.Current()
			op, err := w.apply(ctx, ev)
			if err != nil {
				return "", err // lookup failed: reconnect and replay from the last saved token
			}
			suspects.clear(ev)
			if op == "invalidate" || op == "drop" || op == "rename" || op == "dropDatabase" {
				w.log.Warn("schedules collection was dropped, renamed or the stream invalidated; reloading everything", "operation", op)
				return ReasonInvalidate, nil
			}
			*token = cs.ResumeToken()
			w.saveToken(ctx, *token)
			saved, lastSave = *token, time.Now()
			continue
		}
		if err := cs.Err(); err != nil {
			if ctx.Err() != nil {
				return "", nil
			}
			if IsLostPosition(err) {
				w.log.Warn("change stream lost its resume position; reloading everything", "error", err)
				return ReasonLostPosition, nil
			}
			w.log.Warn("change stream failed; reconnecting from the last applied position", "error", err)
			return "", err
		}
		if cs.ID() == 0 {
			w.log.Warn("server closed the change stream; reloading everything")
			return ReasonInvalidate, nil
		}
		// Idle: the engine has every event so far. Suspects no event
		// explained are drift; a due resync runs now.
		w.reportDrift(ctx, &suspects)
		if !resyncDue.IsZero() {
			suspects.add(w.resync(ctx))
			resyncDue = time.Time{}
		}
		// Keep the stored position fresh, but not on every round trip.
		if t := cs.ResumeToken(); t != nil && !bytesEqual(t, saved) && time.Since(lastSave) >= w.opts.IdleSaveInterval {
			*token = t
			w.saveToken(ctx, t)
			saved, lastSave = t, time.Now()
		} else if t != nil {
			*token = t
		}
	}
}

// resyncMaxDelay bounds how long a due resync waits for the stream to be idle.
const resyncMaxDelay = 30 * time.Second

// resync is the periodic safety-net full diff while streaming. It returns
// the ids it changed: drift suspects.
func (w *Watcher) resync(ctx context.Context) []string {
	changed, err := w.reload(ctx, ReasonResync)
	if err != nil && ctx.Err() == nil {
		w.log.Warn("periodic resync failed", "error", err)
	}
	return changed
}

// reportDrift logs and reports the suspects left, if any, and forgets them.
func (w *Watcher) reportDrift(ctx context.Context, d *drift) {
	if len(d.ids) == 0 {
		*d = drift{}
		return
	}
	ids := make([]string, 0, len(d.ids))
	for id := range d.ids {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	w.log.Log(ctx, slog.LevelWarn, "resync found drift: the engine had missed changes to these jobs; corrected",
		"drifted", len(ids), "job_ids", firstIDs(ids, 50))
	if w.opts.Hooks.Drift != nil {
		w.opts.Hooks.Drift(ids)
	}
	*d = drift{}
}

// drift holds the ids a resync changed that no event has explained yet.
type drift struct {
	ids   map[string]struct{}
	since time.Time
}

func (d *drift) add(ids []string) {
	if len(ids) == 0 {
		return
	}
	if d.ids == nil {
		d.ids = map[string]struct{}{}
		d.since = time.Now()
	}
	for _, id := range ids {
		d.ids[id] = struct{}{}
	}
}

// clear drops the suspect an applied event names.
func (d *drift) clear(ev bson.Raw) {
	if len(d.ids) == 0 {
		return
	}
	if v, ok := eventID(ev); ok {
		if id, ok := v.StringValueOK(); ok {
			delete(d.ids, id)
		}
	}
}

func bytesEqual(a, b bson.Raw) bool { return string(a) == string(b) }

// apply hands one event to the sink and returns its operation type.
func (w *Watcher) apply(ctx context.Context, ev bson.Raw) (string, error) {
	op, _ := ev.Lookup("operationType").StringValueOK()
	var wall time.Time
	if v, err := ev.LookupErr("wallTime"); err == nil && v.Type == bson.TypeDateTime {
		wall = v.Time()
	}
	switch op {
	case "insert", "update", "replace":
		full, err := ev.LookupErr("fullDocument")
		if err == nil && full.Type == bson.TypeEmbeddedDocument {
			if _, err := full.Document().LookupErr("_id"); err == nil {
				w.opts.Sink.Upsert(full.Document())
				break
			}
		}
		// updateLookup found nothing (deleted since) or no full document:
		// look again; absent means deleted.
		id, ok := eventID(ev)
		if !ok {
			return op, w.unattributable(ctx, op, ev)
		}
		doc, err := w.opts.Feed.Lookup(ctx, id)
		if err != nil {
			return op, err
		}
		if doc == nil {
			w.opts.Sink.Delete(id)
		} else {
			w.opts.Sink.Upsert(doc)
		}
	case "delete":
		id, ok := eventID(ev)
		if !ok {
			return op, w.unattributable(ctx, op, ev)
		}
		w.opts.Sink.Delete(id)
	default:
		return op, nil
	}
	now := time.Now()
	w.update(func(s *Status) { s.LastEventAt = now })
	if w.opts.Hooks.Event != nil {
		w.opts.Hooks.Event(op, wall)
	}
	return op, nil
}

// unattributable handles an event that names no document (a server that
// does not follow MongoDB's event format): nothing tells which job changed,
// so the whole collection is reloaded instead of guessing.
func (w *Watcher) unattributable(ctx context.Context, op string, ev bson.Raw) error {
	w.log.Warn("change event names no document; reloading everything", "operation", op, "event", tokenString(ev))
	return w.fullReload(ctx, ReasonUnattributable)
}

// eventID reads the changed document's _id: fullDocument._id when present
// (the test server puts the update delta in documentKey), else documentKey._id.
func eventID(ev bson.Raw) (bson.RawValue, bool) {
	if v, err := ev.LookupErr("fullDocument", "_id"); err == nil {
		return v, true
	}
	if v, err := ev.LookupErr("documentKey", "_id"); err == nil {
		return v, true
	}
	return bson.RawValue{}, false
}

func (w *Watcher) saveToken(ctx context.Context, t bson.Raw) {
	if t == nil {
		return
	}
	if err := w.opts.Tokens.Save(ctx, w.opts.ID, t); err != nil {
		if ctx.Err() == nil {
			w.log.Warn("saving resume token failed; will retry with the next one", "watcher_id", w.opts.ID, "error", err)
		}
		return
	}
	now := time.Now()
	w.update(func(s *Status) { s.TokenSavedAt = now })
}

// saveFinal stores the last applied position on shutdown, with a short
// deadline of its own since the run context is already done.
func (w *Watcher) saveFinal(t bson.Raw) {
	if t == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	w.saveToken(ctx, t)
}

func (w *Watcher) dropToken(ctx context.Context) {
	if err := w.opts.Tokens.Delete(ctx, w.opts.ID); err != nil && ctx.Err() == nil {
		w.log.Warn("deleting resume token failed", "watcher_id", w.opts.ID, "error", err)
	}
}

// backoff sleeps a capped exponential delay with jitter (half to full of
// min·2^(attempt-1), at most max), or until ctx ends.
func (w *Watcher) backoff(ctx context.Context, attempt int, err error) {
	d := Backoff(attempt, w.opts.BackoffMin, w.opts.BackoffMax)
	w.update(func(s *Status) { s.Reconnects++ })
	w.log.Warn("reconnecting after error", "attempt", attempt, "delay", d, "error", err)
	if w.opts.Hooks.Reconnect != nil {
		w.opts.Hooks.Reconnect(attempt, d, err)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// Backoff returns the delay before reconnect attempt n (1-based): min·2^(n-1)
// capped at max, with jitter taking it down to half of that at random.
func Backoff(n int, lo, hi time.Duration) time.Duration {
	d := lo
	for i := 1; i < n && d < hi; i++ {
		d *= 2
	}
	d = min(d, hi)
	half := d / 2
	return half + rand.N(half+1)
}

// poll replaces the change stream with a full diff every poll interval.
func (w *Watcher) poll(ctx context.Context) error {
	attempt := 0
	for ctx.Err() == nil {
		if err := w.fullReload(ctx, ReasonPoll); err != nil {
			if ctx.Err() != nil {
				break
			}
			w.setReady(false)
			attempt++
			w.backoff(ctx, attempt, err)
			continue
		}
		attempt = 0
		w.setReady(true)
		t := time.NewTimer(w.opts.PollInterval)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	return nil
}

// IsLostPosition reports whether err means the stream cannot resume from its
// position and a full reload is due.
func IsLostPosition(err error) bool {
	var se mongo.ServerError
	if !errors.As(err, &se) {
		return false
	}
	for _, c := range lostPositionCodes {
		if se.HasErrorCode(c) {
			return true
		}
	}
	return se.HasErrorLabel("NonResumableChangeStreamError")
}

// IsUnsupported reports whether err means the server has no change streams.
func IsUnsupported(err error) bool {
	var se mongo.ServerError
	if !errors.As(err, &se) {
		return false
	}
	for _, c := range unsupportedCodes {
		if se.HasErrorCode(c) {
			return true
		}
	}
	return false
}
