// Package changestream keeps a sink (the scheduler) equal to the schedules
// collection. It watches the collection's change stream, persists the resume
// position after each applied event, reconnects with capped exponential
// backoff, and falls back to a full reload whenever the position is lost:
// list, then watch, then relist when the position is gone — the pattern of
// client-go's Reflector, with the stream opened before the list so that no
// edit falls in the gap.
//
// A periodic resync (Options.ResyncInterval), or a call to Resync, diffs
// the whole collection against the sink once the stream has caught up, and
// reports the jobs it had to correct as drift.
//
// Where the server has no change streams (a standalone mongod answers 40573)
// the watcher polls: a full diff every poll interval.
//
// # Saving the position
//
// One owner, position, holds the resume token and makes every change of it:
// resumed from the store, advanced after an applied event or an empty
// batch, lost (token refused, history lost, stream invalidated) — a loss
// deletes the stored token and makes a full reload due.
//
// The resume token is saved only after the events before it were applied
// (at-least-once), but not after every event: a background saver writes
// the latest applied token once it is Options.SaveDelay old (default
// DefaultSaveDelay) or Options.SaveMaxEvents events behind (default
// DefaultSaveMaxEvents), whichever comes first, so the apply path never
// waits for the database. The stored token is therefore at most SaveDelay
// plus one save's round trip, or SaveMaxEvents events, behind what is
// armed; after a crash those events are replayed, which is harmless
// because reloads are idempotent. Pending positions are flushed before and
// after each full reload and on shutdown; an idle stream's advancing
// position is saved every IdleSaveInterval. A negative SaveDelay saves
// synchronously after every event instead.
//
// # Full reads
//
// A full reload reads the collection one document at a time (Feed.Snapshot)
// into the sink (Sink.ReplaceAll): no one holds the whole collection, and
// the read's progress (documents, bytes) is in Status.Reload and logged
// every few seconds. A read that fails is retried from the start after a
// backoff; the error is in Status.LastError, and one that will recur until
// something outside the watcher changes (IsRepeating, or the same error
// several times in a row) keeps the watcher not ready, retrying at
// BackoffMax with one error line per attempt, instead of looking like a
// passing network failure.
//
// # Warm restart
//
// With Options.State and Options.StateDocs set, the watcher persists the
// documents the sink applied (listed by StateDocs, written one at a time)
// together with the token they correspond to (every SaveDelay while events
// come, default DefaultStateSaveDelay; the token store is then written
// right after the state, with the same token, so the two stay equal). On
// start, when the stored state's token equals the stored resume token, the
// sink is armed from the state (ReplaceAll, no collection read) and the
// stream resumes after that token, replaying what changed while the daemon
// was down. A missing, corrupt or mismatched state, or a token that
// differs (a crash between the two saves, or a token reset), means the
// usual full reload; so does the server refusing the token.
package changestream

import (
	"context"
	"errors"
	"iter"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/resumetoken"
	"github.com/cronswap/cronswap/schedule"
)

// Sink receives the collection's contents. Its methods are called from one
// goroutine, in stream order.
type Sink interface {
	// Upsert applies the current version of one document.
	Upsert(doc bson.Raw)
	// Delete forgets the document with this _id.
	Delete(id bson.RawValue)
	// ReplaceAll makes the sink equal to the collection docs reads, and
	// returns the ids it had to change. docs yields every document of the
	// collection once, one at a time, so that no one holds the whole
	// collection: a document is valid only until the next one is read
	// (the read reuses its buffers), and the sink copies what it keeps.
	// When the read fails, docs yields the error last (with a nil
	// document): the sink keeps what it applied — each document read is a
	// committed version, and the stream replays what follows — but must
	// not take the documents it did not see as deleted, and returns the
	// error; the watcher then retries the whole reload.
	ReplaceAll(docs iter.Seq2[bson.Raw, error]) (changed []string, err error)
}

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

// EventInfo describes one applied change event.
type EventInfo struct {
	// Op is the operation type (insert, update, replace, delete).
	Op string
	// WallTime is the event's wallTime (servers 6.0+), zero if absent.
	WallTime time.Time
	// UpdatedAt is the document's updated_at, zero if absent.
	UpdatedAt time.Time
	// Received is when the stream handed the event over.
	Received time.Time
	// Applied is when the sink's Upsert or Delete call for the event
	// returned (for the daemon: the job re-armed and the change logged).
	Applied time.Time
	// Event is the change event as the server sent it (its _id is the
	// resume token, identical on every watcher of the collection). The
	// stream reuses the buffer: it is valid only during the Hooks.Event
	// call; copy what must outlive it.
	Event bson.Raw
}

// Hooks are optional callbacks for observability.
type Hooks struct {
	// Event is called after an event was applied.
	Event func(EventInfo)
	// FullReload is called after a full reload, with its reason and the ids it changed.
	FullReload func(reason string, changed []string)
	// Reconnect is called before each reconnect attempt.
	Reconnect func(attempt int, delay time.Duration, err error)
	// Drift is called with the jobs a resync found out of step with the
	// collection, once it is sure no queued event explains them.
	Drift func(ids []string)
	// Idle is called after each empty round trip of the stream: every
	// event committed before the round trip began has been applied (and
	// passed to Event). It is called from the watcher's goroutine, like
	// Event, and must return quickly.
	Idle func()
	// Synced is called once, after the sink was first made equal to the
	// collection (first full reload, or armed from the state file). An
	// engine is much faster to fill while its timers are not running, so
	// the daemon starts them here.
	Synced func()
}

// Status is a snapshot of the watcher's state.
type Status struct {
	// Mode is ModeChangeStream or ModePoll once decided, else the
	// configured mode.
	Mode Mode
	// Ready is true once the first full sync is done and while the watcher
	// is streaming or polling (false while reconnecting).
	Ready bool
	// LastEventAt is when the last change event was applied.
	LastEventAt time.Time
	// TokenSavedAt is when the resume token was last stored.
	TokenSavedAt time.Time
	// FullReloads counts full reloads (poll diffs and resyncs included).
	FullReloads int64
	// Reconnects counts reconnect attempts.
	Reconnects int64
	// Reload is the full read under way (Reason empty when none): what
	// a replica that is not ready yet is doing.
	Reload ReloadProgress
	// LastError is the error of the last failed attempt while the watcher
	// is not ready (empty once it is ready again), ErrorSince when that
	// error first occurred, and Repeating whether it is one that will
	// recur until the collection, the server or the configuration
	// changes (see IsRepeating): the watcher keeps retrying, at
	// BackoffMax, without turning ready.
	LastError  string
	ErrorSince time.Time
	Repeating  bool
}

// Watcher keeps a Sink equal to a collection.
type Watcher struct {
	opts Options
	log  *slog.Logger

	sink  Sink // opts.Sink
	saver *saver
	pos   *position

	// failing is the failure that keeps the watcher from being ready;
	// used from the watcher's goroutine only.
	failing failure

	// resyncKick wakes the poll loop when a resync is requested.
	resyncKick chan struct{}

	mu     sync.Mutex
	status Status
	synced bool
	resync resyncRequest // guarded by mu
}

// New returns a watcher; call Run to start it. Zero options take the
// defaults documented on Options.
func New(opts Options) *Watcher {
	opts = opts.withDefaults()
	w := &Watcher{opts: opts, log: opts.Logger, sink: opts.Sink, status: Status{Mode: opts.Mode},
		resyncKick: make(chan struct{}, 1)}
	tokens := &tokenPersister{store: opts.Tokens, id: opts.ID, log: opts.Logger,
		saved: func(at time.Time) { w.update(func(s *Status) { s.TokenSavedAt = at }) }}
	var to persister = tokens
	if opts.State != nil && opts.StateDocs != nil {
		to = &statePersister{tokens: tokens, store: opts.State, docs: opts.StateDocs, id: opts.ID, log: opts.Logger}
	}
	w.saver = newSaver(to, opts.timing(to.defaults()))
	w.pos = newPosition(w.saver, opts.Logger, opts.ID)
	return w
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
	var now bool
	w.update(func(s *Status) {
		s.Ready = ready && w.synced
		if now = s.Ready; now {
			s.LastError, s.ErrorSince, s.Repeating = "", time.Time{}, false
		}
	})
	if now {
		w.failing = failure{}
	}
}

// fullReload reads the whole collection and makes the sink equal to it.
func (w *Watcher) fullReload(ctx context.Context, reason string) error {
	_, err := w.reload(ctx, reason)
	return err
}

// reload is fullReload returning the ids it changed. The collection is
// read and applied one document at a time (Feed.Snapshot into
// Sink.ReplaceAll), its progress in the status and the log.
func (w *Watcher) reload(ctx context.Context, reason string) ([]string, error) {
	// A position applied before and not saved yet stays with the saver,
	// which writes it in the background (the documents it lists with it
	// are at least as new, read or not), so it stays saved if the reload
	// fails; the read does not wait for that write, with a state file the
	// whole collection's.
	start := time.Now()
	r := w.beginRead(reason, start)
	changed, err := w.sink.ReplaceAll(r.count(w.opts.Feed.Snapshot(ctx)))
	w.endRead()
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	w.status.FullReloads++
	w.mu.Unlock()
	w.markSynced()
	if reason != ReasonPoll || len(changed) > 0 {
		took := time.Since(start)
		w.log.Info("full reload", "reason", reason, "documents", r.docs, "bytes", r.bytes,
			"changed", len(changed), "changed_ids", firstIDs(changed, 20), "duration", took,
			"read", r.readWait, "apply", r.apply, "documents_per_second", rate(r.docs, took))
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

// firstIDs returns the first n of ids (all when fewer) as a log shows
// them (schedule.ShowKey): the key of a document whose _id is not a job id
// as "_id" and the _id's rendering, not with its marker byte, which is not
// text.
func firstIDs(ids []string, n int) []string {
	out := make([]string, 0, min(len(ids), n))
	for _, id := range ids[:min(len(ids), n)] {
		out = append(out, schedule.ShowKey(id))
	}
	return out
}

// Run watches until ctx is cancelled, then saves the last applied position
// and returns nil. It returns an error only for misconfiguration (an
// unknown Options.Mode).
func (w *Watcher) Run(ctx context.Context) error {
	if _, err := ParseMode(string(w.opts.Mode)); err != nil {
		return err
	}
	if w.opts.Mode == ModePoll {
		w.update(func(s *Status) { s.Mode = ModePoll })
		return w.poll(ctx)
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

// streamState is a state of the change-stream loop.
type streamState int

const (
	// stateLoad reads the stored position and, when a state file is at
	// it, arms the sink from the file.
	stateLoad streamState = iota
	// stateOpen opens the stream after the position, or at the current
	// position when there is none (or the server refuses it).
	stateOpen
	// stateReload makes the sink equal to the collection when the
	// position says it is not in step. The stream is open before the
	// read, so no edit falls in between.
	stateReload
	// stateConsume applies events until the stream ends.
	stateConsume
	// stateBackoff waits, then goes back to the state that failed.
	stateBackoff
	// statePoll: the server has no change streams; poll from now on.
	statePoll
)

// streamRun is the change-stream loop's state besides the position.
type streamRun struct {
	state   streamState
	cs      Stream      // the open stream in stateReload and stateConsume
	attempt int         // failed attempts since the last success
	err     error       // in stateBackoff: the failure
	retry   streamState // in stateBackoff: where to go after the wait
}

// failed moves to stateBackoff, retrying state next after the wait.
func (r *streamRun) failed(next streamState, err error) streamState {
	r.err, r.retry = err, next
	return stateBackoff
}

// closeStream closes the open stream, if any.
func (r *streamRun) closeStream(ctx context.Context) {
	if r.cs != nil {
		_ = r.cs.Close(context.WithoutCancel(ctx))
		r.cs = nil
	}
}

// stream is the change-stream loop: load the stored position, open the
// stream, reload the collection when the position requires it, consume,
// and on failure back off and open again.
func (w *Watcher) stream(ctx context.Context) error {
	r := &streamRun{state: stateLoad}
	defer r.closeStream(ctx)
	for ctx.Err() == nil {
		switch r.state {
		case stateLoad:
			r.state = w.load(ctx, r)
		case stateOpen:
			r.state = w.open(ctx, r)
		case stateReload:
			r.state = w.reloadStream(ctx, r)
		case stateConsume:
			r.state = w.consumeStream(ctx, r)
		case stateBackoff:
			r.attempt++
			w.backoff(ctx, r.attempt, r.err)
			r.state, r.err = r.retry, nil
		case statePoll:
			return w.poll(ctx)
		}
	}
	return nil
}

// load reads the stored token into the position; a malformed one is lost.
func (w *Watcher) load(ctx context.Context, r *streamRun) streamState {
	t, err := w.opts.Tokens.Load(ctx, w.opts.ID)
	switch {
	case err == nil:
		w.pos.resumed(t.Value, t.SavedAt)
		if w.warmStart(ctx, t.Value) {
			w.pos.warm()
		}
	case errors.Is(err, resumetoken.ErrNotFound):
		w.log.Info("no stored resume token; will open at the current position after a full reload", "watcher_id", w.opts.ID)
	case errors.Is(err, resumetoken.ErrMalformed):
		w.pos.lose(ctx, lossMalformed, "error", err)
	default:
		return r.failed(stateLoad, err)
	}
	r.attempt = 0
	return stateOpen
}

// open opens the stream at the position. A token the server refuses is
// lost, and the stream opened at the current position instead.
func (w *Watcher) open(ctx context.Context, r *streamRun) streamState {
	if t := w.pos.token; t != nil {
		cs, err := w.opts.Feed.Open(ctx, t)
		if err == nil {
			w.log.Info("resuming change stream from stored token", "watcher_id", w.opts.ID,
				"token_age", w.pos.age(), "token", tokenString(t))
			return w.opened(r, cs)
		}
		var se mongo.ServerError
		if !errors.As(err, &se) || IsUnsupported(err) {
			return w.openFailed(r, err) // transient (network) or no change streams at all: keep the token
		}
		w.pos.lose(ctx, lossRefused, "token", tokenString(t), "token_age", w.pos.age(), "error", err)
	}
	cs, err := w.opts.Feed.Open(ctx, nil)
	if err != nil {
		return w.openFailed(r, err)
	}
	w.log.Info("change stream opened at the current position", "watcher_id", w.opts.ID)
	return w.opened(r, cs)
}

func (w *Watcher) opened(r *streamRun, cs Stream) streamState {
	r.cs = cs
	w.update(func(s *Status) { s.Mode = ModeChangeStream })
	if w.pos.reload != "" {
		return stateReload
	}
	return stateConsume
}

// openFailed falls back to polling when the server has no change streams
// and the mode allows it, else retries the open after a backoff.
func (w *Watcher) openFailed(r *streamRun, err error) streamState {
	if IsUnsupported(err) && w.opts.Mode == ModeAuto {
		w.log.Warn("server has no change streams; falling back to polling",
			"error", err, "poll_interval", w.opts.PollInterval)
		w.update(func(s *Status) { s.Mode = ModePoll })
		return statePoll
	}
	return r.failed(stateOpen, err)
}

// reloadStream does the full reload the position asks for, then stores the
// position the reload is consistent with.
func (w *Watcher) reloadStream(ctx context.Context, r *streamRun) streamState {
	w.takeResync() // the reload below is the full diff a pending resync asked for
	if err := w.fullReload(ctx, w.pos.reload); err != nil {
		r.closeStream(ctx)
		return r.failed(stateOpen, err)
	}
	w.pos.reloaded(ctx, r.cs.ResumeToken())
	return stateConsume
}

// consumeStream applies events until the stream ends, then reopens: at
// once when the position was lost (a full reload follows), after a backoff
// on an error.
func (w *Watcher) consumeStream(ctx context.Context, r *streamRun) streamState {
	r.attempt = 0
	w.setReady(true)
	err := w.consume(ctx, r.cs)
	r.closeStream(ctx)
	w.setReady(false)
	if err != nil && ctx.Err() == nil {
		return r.failed(stateOpen, err)
	}
	return stateOpen
}

// tokenString renders a token for logs, shortened.
func tokenString(t bson.Raw) string {
	s := t.String()
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// consume applies events until an error, a lost position or ctx ends. It
// returns the error that ended the stream; nil when ctx ended or the
// position was lost (the position says so).
func (w *Watcher) consume(ctx context.Context, cs Stream) error {
	var tick <-chan time.Time
	if w.opts.ResyncInterval > 0 {
		t := time.NewTicker(w.opts.ResyncInterval)
		defer t.Stop()
		tick = t.C
	}
	// A resync is due from a request (Resync, or a tick) on; it runs when
	// the stream is caught up (an empty round trip), or at the latest
	// resyncMaxDelay after the request on a stream that is never idle. The
	// ids it changed are only suspects until the stream is idle again: an
	// edit committed between the last event and the read shows in the read
	// before its event arrives, and that event clears the suspicion.
	var suspects drift
	for ctx.Err() == nil {
		select {
		case <-tick:
			w.Resync(ReasonResync)
		default:
		}
		if since, ok := w.resyncPending(); ok && time.Since(since) > resyncMaxDelay {
			suspects.add(w.runResync(ctx))
		}
		if !suspects.since.IsZero() && time.Since(suspects.since) > resyncMaxDelay {
			w.reportDrift(ctx, &suspects)
		}
		if cs.TryNext(ctx) {
			ev := cs.Current()
			op, err := w.apply(ctx, ev)
			if err != nil {
				return err // lookup failed: reconnect and replay from the last applied position
			}
			suspects.clear(ev)
			if op == "invalidate" || op == "drop" || op == "rename" || op == "dropDatabase" {
				w.pos.lose(ctx, lossInvalidated, "operation", op)
				return nil
			}
			w.pos.advance(ctx, cs.ResumeToken(), true)
			continue
		}
		if err := cs.Err(); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if IsLostPosition(err) {
				w.pos.lose(ctx, lossHistory, "error", err)
				return nil
			}
			w.log.Warn("change stream failed; reconnecting from the last applied position", "error", err)
			return err
		}
		if cs.ID() == 0 {
			w.pos.lose(ctx, lossClosed)
			return nil
		}
		// Idle: the engine has every event so far. Suspects no event
		// explained are drift; a due resync runs now.
		w.reportDrift(ctx, &suspects)
		if w.opts.Hooks.Idle != nil {
			w.opts.Hooks.Idle()
		}
		if _, ok := w.resyncPending(); ok {
			suspects.add(w.runResync(ctx))
		}
		// Keep the stored position fresh, but not on every round trip
		// (the saver waits for the idle save interval).
		w.pos.advance(ctx, cs.ResumeToken(), false)
	}
	return nil
}

func bytesEqual(a, b bson.Raw) bool { return string(a) == string(b) }

// apply hands one event to the sink and returns its operation type.
func (w *Watcher) apply(ctx context.Context, ev bson.Raw) (string, error) {
	received := time.Now()
	op, _ := ev.Lookup("operationType").StringValueOK()
	var updatedAt, wall time.Time
	if v, err := ev.LookupErr("wallTime"); err == nil && v.Type == bson.TypeDateTime {
		wall = v.Time()
	}
	switch op {
	case "insert", "update", "replace":
		full, err := ev.LookupErr("fullDocument")
		if err == nil && full.Type == bson.TypeEmbeddedDocument {
			if _, err := full.Document().LookupErr("_id"); err == nil {
				updatedAt = docUpdatedAt(full.Document())
				w.sink.Upsert(full.Document())
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
			w.sink.Delete(id)
		} else {
			updatedAt = docUpdatedAt(doc)
			w.sink.Upsert(doc)
		}
	case "delete":
		id, ok := eventID(ev)
		if !ok {
			return op, w.unattributable(ctx, op, ev)
		}
		w.sink.Delete(id)
	default:
		return op, nil
	}
	applied := time.Now()
	w.update(func(s *Status) { s.LastEventAt = applied })
	if w.opts.Hooks.Event != nil {
		w.opts.Hooks.Event(EventInfo{Op: op, WallTime: wall, UpdatedAt: updatedAt, Received: received, Applied: applied, Event: ev})
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

// saveFinal stores the last applied position on shutdown, with a short
// deadline of its own since the run context is already done. The position
// is written even when it was saved before (an idle stream whose position
// has not moved), so the stored token says when this watcher stopped.
func (w *Watcher) saveFinal() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if t := w.pos.token; t != nil && w.pos.reload == "" {
		w.saver.set(t, 0)
	}
	w.saver.flush(ctx)
}

// backoff sleeps a capped exponential delay with jitter (half to full of
// min·2^(attempt-1), at most max), or until ctx ends. An error that
// repeats (see failure) waits the longest delay at once. Each step logs
// one line and puts the error in the status, where /readyz shows it.
func (w *Watcher) backoff(ctx context.Context, attempt int, err error) {
	f := w.failing.record(err, time.Now())
	d := Backoff(attempt, w.opts.BackoffMin, w.opts.BackoffMax)
	if f.repeating {
		d = w.opts.BackoffMax
	}
	w.update(func(s *Status) {
		s.Reconnects++
		s.LastError, s.ErrorSince, s.Repeating = f.text, f.since, f.repeating
	})
	if f.repeating {
		w.log.Error("not ready: the same error keeps recurring and will until the collection, the server or the configuration changes; retrying",
			"attempt", attempt, "delay", d, "error", err, "failing_since", f.since, "failures", f.count)
	} else {
		w.log.Warn("reconnecting after error", "attempt", attempt, "delay", d, "error", err)
	}
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

// poll replaces the change stream with a full diff every poll interval; a
// requested resync runs at once.
func (w *Watcher) poll(ctx context.Context) error {
	attempt := 0
	for ctx.Err() == nil {
		reason := ReasonPoll
		if r, ok := w.takeResync(); ok {
			reason = r
		}
		if err := w.fullReload(ctx, reason); err != nil {
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
		case <-w.resyncKick:
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
