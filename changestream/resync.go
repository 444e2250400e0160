package changestream

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// resyncMaxDelay bounds how long a requested resync waits for the stream to
// be idle, and how long its suspects wait for an event that explains them.
const resyncMaxDelay = 30 * time.Second

// resyncRequest is a pending request for a full diff.
type resyncRequest struct {
	reason string    // "" when none is pending
	since  time.Time // when it was first requested
}

// Resync asks for a full diff of the collection against the sink, the same
// one the periodic resync (Options.ResyncInterval) does. It returns at
// once; the diff runs on the watcher's goroutine: while streaming, as soon
// as the stream has caught up with the events before it (at the latest
// 30 s after the request), in poll mode at once. Jobs it corrects that no
// queued event explains are reported as drift (Hooks.Drift). reason is what
// the full reload is logged and counted as (ReasonResync when empty);
// requests made while one is pending join it and keep its reason.
func (w *Watcher) Resync(reason string) {
	if reason == "" {
		reason = ReasonResync
	}
	w.mu.Lock()
	if w.resync.reason == "" {
		w.resync = resyncRequest{reason: reason, since: time.Now()}
	}
	w.mu.Unlock()
	select {
	case w.resyncKick <- struct{}{}:
	default:
	}
}

// resyncPending reports whether a resync is requested, and since when.
func (w *Watcher) resyncPending() (since time.Time, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.resync.since, w.resync.reason != ""
}

// takeResync clears the pending request and returns its reason: the full
// diff that follows serves it.
func (w *Watcher) takeResync() (reason string, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	reason = w.resync.reason
	w.resync = resyncRequest{}
	return reason, reason != ""
}

// runResync runs the pending resync. It returns the ids it changed: drift
// suspects.
func (w *Watcher) runResync(ctx context.Context) []string {
	reason, ok := w.takeResync()
	if !ok {
		return nil
	}
	changed, err := w.reload(ctx, reason)
	if err != nil && ctx.Err() == nil {
		w.log.Warn("resync failed", "reason", reason, "error", err)
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
