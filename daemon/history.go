package daemon

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/changestream"
	"github.com/cronswap/cronswap/internal/history"
)

// historyFlushTimeout bounds how long shutdown waits for queued history
// entries to be written once the watcher has stopped.
const historyFlushTimeout = 5 * time.Second

// editHistory wires the edit history into the watcher: the recorder wraps
// the engine's sink and follows the watcher's hooks, the writer stores
// the edits it records and sightings the jobs' first sightings. Retention
// is runs.retention, so the history covers at least the runs it explains.
type editHistory struct {
	coll      *mongo.Collection
	writer    *history.Writer
	sightings *history.Sightings
	recorder  *history.Recorder
}

func newEditHistory(coll *mongo.Collection, sink changestream.Sink, instance string, retention time.Duration, log *slog.Logger) *editHistory {
	w := history.NewWriter(coll, history.WriterOptions{Logger: log})
	s := history.NewSightings(coll, history.SightingsOptions{Instance: instance, Retention: retention, Logger: log})
	return &editHistory{coll: coll, writer: w, sightings: s,
		recorder: history.NewRecorder(sink, w, history.RecorderOptions{Instance: instance, Retention: retention, Logger: log, Sightings: s})}
}

// hook adds the recorder to the watcher's hooks, after what they already
// do. polling reports whether the watcher polls (no change stream): a
// full reload is then the collection as it is, and its jobs are sighted.
func (h *editHistory) hook(hooks changestream.Hooks, polling func() bool) changestream.Hooks {
	reload := hooks.FullReload
	hooks.FullReload = func(reason string, changed []string) {
		if reload != nil {
			reload(reason, changed)
		}
		if polling() {
			h.recorder.ReadIsCurrent()
		}
	}
	event := hooks.Event
	hooks.Event = func(ev changestream.EventInfo) {
		if event != nil {
			event(ev)
		}
		h.recorder.Observe(ev)
	}
	idle := hooks.Idle
	hooks.Idle = func() {
		if idle != nil {
			idle()
		}
		h.recorder.CaughtUp()
	}
	return hooks
}

// run creates the collection's indexes and writes entries and sightings
// until stop is called; stop waits at most historyFlushTimeout for the
// queues.
func (h *editHistory) run(log *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	go ensureIndexes(ctx, h.coll.Name(), func(ctx context.Context) error { return history.EnsureIndexes(ctx, h.coll) }, log)
	var wg sync.WaitGroup
	wg.Go(func() { h.writer.Run(ctx) })
	wg.Go(func() { h.sightings.Run(ctx) })
	done := make(chan struct{})
	go func() { defer close(done); wg.Wait() }()
	return func() {
		h.writer.Close()
		h.sightings.Close()
		t := time.NewTimer(historyFlushTimeout)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
		}
		cancel()
		<-done
	}
}

// ensureIndexes runs create with backoff until it succeeds or ctx ends
// (the daemon starts without waiting for the database).
func ensureIndexes(ctx context.Context, collection string, create func(context.Context) error, log *slog.Logger) {
	wait := 500 * time.Millisecond
	for {
		octx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := create(octx)
		cancel()
		if err == nil {
			log.Debug("indexes in place", "collection", collection)
			return
		}
		log.Warn("could not create indexes; retrying", "collection", collection, "error", err, "retry_in", wait)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, 30*time.Second)
	}
}
