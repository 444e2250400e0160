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
//
// # Saving the position
//
// The resume token is saved only after the events before it were applied
// (at-least-once), but not after every event: a background saver writes
// the latest applied token once it is Options.SaveDelay old (default
// 100 ms) or Options.SaveMaxEvents events behind (default 1000), whichever
// comes first, so the apply path never waits for the database. The stored
// token is therefore at most SaveDelay plus one save's round trip, or
// SaveMaxEvents events, behind what is armed; after a crash those events
// are replayed, which is harmless because reloads are idempotent. Pending
// positions are flushed before and after each full reload and on shutdown;
// an idle stream's advancing position is saved every IdleSaveInterval. A
// negative SaveDelay saves synchronously after every event instead.
//
// # Warm restart
//
// With Options.State set, the watcher also keeps the documents it applied
// and persists them together with the token they correspond to (every
// StateSaveDelay while events come, default 1 s; the token store is then
// written right after the state, with the same token, so the two stay
// equal). On start, when the stored state's token equals the stored resume
// token, the sink is armed from the state (ReplaceAll, no collection read)
// and the stream resumes after that token, replaying what changed while
// the daemon was down. A missing, corrupt or mismatched state, or a token
// that differs (a crash between the two saves, or a token reset), means the
// usual full reload; so does the server refusing the token.
package changestream

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
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
	// Upsert applies the current version of one document. It returns
	// when the change took effect (for the daemon: when the job's timer was
	// armed, before that was logged); the zero time means "when Upsert
	// returns". EventInfo.Applied is that instant.
	Upsert(doc bson.Raw) time.Time
	// Delete forgets the document with this _id, returning when that took
	// effect as Upsert does.
	Delete(id bson.RawValue) time.Time
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
	// stream's advancing resume token.
	IdleSaveInterval time.Duration
	// SaveDelay bounds how long an applied event's token may wait before
	// it is saved (default DefaultSaveDelay); negative saves synchronously
	// after each event (without State only).
	SaveDelay time.Duration
	// SaveMaxEvents saves at once when this many applied events are not yet
	// saved (default DefaultSaveMaxEvents).
	SaveMaxEvents int
	// State, when set, persists the applied documents with their token for
	// warm restarts (see the package doc).
	State StateStore
	// StateSaveDelay replaces SaveDelay when State is set (default
	// DefaultStateSaveDelay): each save writes the whole state.
	StateSaveDelay time.Duration
	// StateIdleInterval replaces IdleSaveInterval when State is set
	// (default DefaultStateIdleInterval).
	StateIdleInterval time.Duration
	// Hooks lets a caller observe the watcher (metrics); any may be nil.
	Hooks Hooks
}

// Defaults of Options.
const (
	DefaultSaveDelay         = 100 * time.Millisecond
	DefaultSaveMaxEvents     = 1000
	DefaultStateSaveDelay    = time.Second
	DefaultStateIdleInterval = time.Minute
)

// TimedSink is a Sink that reports how a ReplaceAll divided its time
// between decoding the documents and applying them to the engine; the
// watcher logs it with each full reload.
type TimedSink interface {
	Sink
	ReplaceAllTimed(docs []bson.Raw) (changed []string, decode, apply time.Duration)
}

// EventInfo describes one applied change event.
type EventInfo struct {
	// Op is the operation type (insert, update, replace, delete).
	Op string
	// WallTime is the event's wallTime (servers 6.0+), zero if absent.
	WallTime time.Time
	// UpdatedAt is the document's updated_at, zero if absent.
	UpdatedAt time.Time
	// Received is when the stream handed the event over; Applied is when
	// the change took effect in the sink (see Sink.Upsert).
	Received, Applied time.Time
}

// Hooks are optional callbacks for observability.
type Hooks struct {
	// Event is called after an event was applied.
	Event func(EventInfo)
	// FullReload is called after a full reload, with its reason and the ids it changed.
	FullReload func(reason string, changed []string)
	// Reconnect is called before each reconnect attempt.
	Reconnect func(attempt int, delay time.Duration, err error)
	// Drift is called with the jobs a periodic resync found out of step
	// with the collection, once it is sure no queued event explains them.
	Drift func(ids []string)
	// Synced is called once, after the sink was first made equal to the
	// collection (first full reload, or armed from the state file). An
	// engine is much faster to fill while its timers are not running, so
	// the daemon starts them here.
	Synced func()
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

	sink  Sink
	saver *saver
	state *mirror // nil without Options.State

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
	if opts.SaveDelay == 0 {
		opts.SaveDelay = DefaultSaveDelay
	}
	if opts.SaveMaxEvents <= 0 {
		opts.SaveMaxEvents = DefaultSaveMaxEvents
	}
	if opts.StateSaveDelay <= 0 {
		opts.StateSaveDelay = DefaultStateSaveDelay
	}
	if opts.StateIdleInterval <= 0 {
		opts.StateIdleInterval = DefaultStateIdleInterval
	}
	w := &Watcher{opts: opts, log: opts.Logger, sink: opts.Sink, status: Status{Mode: opts.Mode}}
	if opts.State != nil {
		w.state = newMirror(opts.Sink)
		w.sink = w.state
	}
	w.saver = newSaver(w)
	return w
}

func (w *Watcher) saveDelay() time.Duration {
	if w.state != nil {
		return w.opts.StateSaveDelay
	}
	return max(w.opts.SaveDelay, 0)
}

func (w *Watcher) idleDelay() time.Duration {
	if w.state != nil {
		return w.opts.StateIdleInterval
	}
	return w.opts.IdleSaveInterval
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

// replaceAll hands docs to the sink, timing decode and apply when it can.
func (w *Watcher) replaceAll(docs []bson.Raw) (changed []string, decode, apply time.Duration) {
	if ts, ok := w.sink.(TimedSink); ok {
		return ts.ReplaceAllTimed(docs)
	}
	start := time.Now()
	changed = w.sink.ReplaceAll(docs)
	return changed, 0, time.Since(start)
}

// fullReload reads the whole collection and makes the sink equal to it.
func (w *Watcher) fullReload(ctx context.Context, reason string) error {
	_, err := w.reload(ctx, reason)
	return err
}

// reload is fullReload returning the ids it changed.
func (w *Watcher) reload(ctx context.Context, reason string) ([]string, error) {
	w.saver.flush(ctx) // what was applied before stays saved if the reload fails
	start := time.Now()
	docs, err := w.opts.Feed.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	read := time.Since(start)
	changed, decode, apply := w.replaceAll(docs)
	w.mu.Lock()
	w.status.FullReloads++
	w.mu.Unlock()
	w.markSynced()
	if reason != ReasonPoll || len(changed) > 0 {
		w.log.Info("full reload", "reason", reason, "documents", len(docs),
			"changed", len(changed), "changed_ids", firstIDs(changed, 20), "duration", time.Since(start),
			"read", read, "decode", decode, "engine", apply)
	}
	if w.opts.Hooks.FullReload != nil {
		w.opts.Hooks.FullReload(reason, changed)
	}
	return changed, nil
}

// markSynced records that the sink holds the collection, calling
// Hooks.Synced the first time.
func (w *Watcher) markSynced() {
	w.mu.Lock()
	first := !w.synced
	w.synced = true
	w.mu.Unlock()
	if first && w.opts.Hooks.Synced != nil {
		w.opts.Hooks.Synced()
	}
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
	saverCtx, stopSaver := context.WithCancel(ctx)
	saverDone := make(chan struct{})
	go func() { defer close(saverDone); w.saver.run(saverCtx) }()
	err := w.stream(ctx)
	stopSaver()
	<-saverDone
	w.saveFinal()
	return err
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
			if token != nil && w.warmStart(ctx, token) {
				needFull = ""
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
				w.saver.set(t, 1)
				w.saver.flush(ctx)
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
			w.saver.drop(ctx)
			needFull = next
		case err != nil:
			attempt++
			w.backoff(ctx, attempt, err)
		}
	}
	return nil
}

// warmStart arms the sink from the stored state when it is at the stored
// token, and reports whether it did.
func (w *Watcher) warmStart(ctx context.Context, token bson.Raw) bool {
	if w.opts.State == nil {
		return false
	}
	start := time.Now()
	st, err := w.opts.State.Load(ctx)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			w.log.Info("no state file yet; doing a full reload", "watcher_id", w.opts.ID)
		} else {
			w.log.Warn("state file unusable; doing a full reload", "watcher_id", w.opts.ID, "error", err)
		}
		return false
	}
	if !bytesEqual(st.Token, token) {
		w.log.Info("state file is not at the stored resume position (token reset, or stopped between the two saves); doing a full reload",
			"watcher_id", w.opts.ID, "state_token", tokenString(st.Token), "stored_token", tokenString(token))
		return false
	}
	read := time.Since(start)
	changed, decode, apply := w.replaceAll(st.Docs)
	w.markSynced()
	w.log.Info("armed from state file", "watcher_id", w.opts.ID, "documents", len(st.Docs),
		"changed", len(changed), "duration", time.Since(start), "read", read, "decode", decode, "engine", apply)
	return true
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
			w.saver.drop(ctx)
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
		w.saver.drop(ctx)
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
	var resync <-chan time.Time
	if w.opts.ResyncInterval > 0 {
		t := time.NewTicker(w.opts.ResyncInterval)
		defer t.Stop()
		resync = t.C
	}
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
	for ctx.Err() == nil {
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
			w.saver.applied(ctx, *token)
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
		// Keep the stored position fresh, but not on every round trip
		// (the saver waits IdleSaveInterval).
		if t := cs.ResumeToken(); t != nil && !bytesEqual(t, *token) {
			*token = t
			w.saver.advanced(t)
		}
	}
	return "", nil
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
	received := time.Now()
	op, _ := ev.Lookup("operationType").StringValueOK()
	var updatedAt, wall, applied time.Time
	if v, err := ev.LookupErr("wallTime"); err == nil && v.Type == bson.TypeDateTime {
		wall = v.Time()
	}
	switch op {
	case "insert", "update", "replace":
		full, err := ev.LookupErr("fullDocument")
		if err == nil && full.Type == bson.TypeEmbeddedDocument {
			if _, err := full.Document().LookupErr("_id"); err == nil {
				updatedAt = docUpdatedAt(full.Document())
				applied = w.sink.Upsert(full.Document())
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
			applied = w.sink.Delete(id)
		} else {
			updatedAt = docUpdatedAt(doc)
			applied = w.sink.Upsert(doc)
		}
	case "delete":
		id, ok := eventID(ev)
		if !ok {
			return op, w.unattributable(ctx, op, ev)
		}
		applied = w.sink.Delete(id)
	default:
		return op, nil
	}
	now := time.Now()
	if applied.IsZero() {
		applied = now
	}
	w.update(func(s *Status) { s.LastEventAt = now })
	if w.opts.Hooks.Event != nil {
		w.opts.Hooks.Event(EventInfo{Op: op, WallTime: wall, UpdatedAt: updatedAt, Received: received, Applied: applied})
	}
	return op, nil
}

func docUpdatedAt(doc bson.Raw) time.Time {
	if v, err := doc.LookupErr("updated_at"); err == nil && v.Type == bson.TypeDateTime {
		return v.Time()
	}
	return time.Time{}
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

// persist saves the state (if configured) and then the token t, and
// reports whether the token was saved. The state is saved first so that the
// stored token never names a position the state file has not reached: a
// crash between the two leaves them unequal, which only costs a full
// reload on the next start.
func (w *Watcher) persist(ctx context.Context, t bson.Raw) bool {
	if w.state != nil {
		start := time.Now()
		docs := w.state.snapshot() // taken after t was applied: at least as new as t
		if err := w.opts.State.Save(ctx, State{Token: t, Docs: docs}); err != nil {
			if ctx.Err() == nil {
				w.log.Warn("saving state file failed; the next start will reload everything unless a later save works",
					"watcher_id", w.opts.ID, "error", err)
			}
		} else {
			w.log.Debug("state file saved", "documents", len(docs), "duration", time.Since(start))
		}
	}
	if err := w.opts.Tokens.Save(ctx, w.opts.ID, t); err != nil {
		if ctx.Err() == nil {
			w.log.Warn("saving resume token failed; will retry", "watcher_id", w.opts.ID, "error", err)
		}
		return false
	}
	now := time.Now()
	w.update(func(s *Status) { s.TokenSavedAt = now })
	return true
}

// saveFinal stores the last applied position on shutdown, with a short
// deadline of its own since the run context is already done.
func (w *Watcher) saveFinal() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	w.saver.flush(ctx)
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
