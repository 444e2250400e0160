package changestream

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/cronswap/cronswap/resumetoken"
)

// reloadLog collects full reloads by reason.
type reloadLog struct {
	reloads chan reloadRecord
	drifts  chan []string
}

type reloadRecord struct {
	reason  string
	changed []string
}

func newReloadLog(o *Options) *reloadLog {
	l := &reloadLog{reloads: make(chan reloadRecord, 1000), drifts: make(chan []string, 1000)}
	o.Hooks.FullReload = func(reason string, changed []string) { l.reloads <- reloadRecord{reason, slices.Clone(changed)} }
	o.Hooks.Drift = func(ids []string) { l.drifts <- slices.Clone(ids) }
	return l
}

// next returns the next full reload with reason, skipping others.
func (l *reloadLog) next(t *testing.T, reason string) reloadRecord {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case r := <-l.reloads:
			if r.reason == reason {
				return r
			}
		case <-deadline:
			t.Fatalf("no full reload with reason %q", reason)
		}
	}
}

func TestResyncWhileStreamingRestoresDriftWithTheCallersReason(t *testing.T) {
	feed := newFakeFeed()
	feed.docs["a"] = doc("a", "0 9 * * *")
	feed.docs["b"] = doc("b", "@hourly")
	sink := newMemSink()
	var log *reloadLog
	w, _ := startWith(t, feed, resumetoken.NewMemStore(), sink, func(o *Options) {
		o.ResyncInterval = -1 // no periodic resync: only the call below
		log = newReloadLog(o)
	})
	waitFor(t, "ready", func() bool { return w.Status().Ready })
	log.next(t, ReasonStartup)
	// The sink lost "a" behind the stream's back.
	sink.mu.Lock()
	delete(sink.armed, "a")
	sink.mu.Unlock()

	w.Resync("operator")
	if r := log.next(t, "operator"); !slices.Equal(r.changed, []string{"a"}) {
		t.Fatalf("resync changed %v, want [a]", r.changed)
	}
	select {
	case ids := <-log.drifts:
		if !slices.Equal(ids, []string{"a"}) {
			t.Fatalf("drift %v, want [a]", ids)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no drift reported")
	}
	if got := sink.snapshot(); got["a"] != "0 9 * * *" || len(got) != 2 {
		t.Fatalf("after resync: %v", got)
	}

	// An empty reason counts as a resync.
	w.Resync("")
	if r := log.next(t, ReasonResync); len(r.changed) != 0 {
		t.Fatalf("resync of an exact sink changed %v", r.changed)
	}
	select {
	case r := <-log.reloads:
		t.Fatalf("unrequested full reload %+v", r)
	default:
	}
}

func TestResyncInPollModeRunsAtOnce(t *testing.T) {
	feed := newFakeFeed()
	feed.docs["a"] = doc("a", "0 9 * * *")
	sink := newMemSink()
	var log *reloadLog
	w, _ := startWith(t, feed, resumetoken.NewMemStore(), sink, func(o *Options) {
		o.Mode = ModePoll
		o.PollInterval = time.Hour
		log = newReloadLog(o)
	})
	waitFor(t, "ready", func() bool { return w.Status().Ready })
	log.next(t, ReasonPoll)
	feed.mu.Lock()
	feed.docs["b"] = doc("b", "@daily")
	feed.mu.Unlock()

	w.Resync("operator")
	if r := log.next(t, "operator"); !slices.Equal(r.changed, []string{"b"}) {
		t.Fatalf("resync changed %v, want [b]", r.changed)
	}
	if got := sink.snapshot(); got["b"] != "@daily" {
		t.Fatalf("after resync: %v", got)
	}
}

// A resync requested before the stream's first full reload is served by
// that reload: no second diff follows.
func TestResyncBeforeTheFirstReloadIsServedByIt(t *testing.T) {
	feed := newFakeFeed()
	feed.docs["a"] = doc("a", "0 9 * * *")
	gate := &gatedFeed{fakeFeed: feed, opened: make(chan struct{}), release: make(chan struct{})}
	o := Options{ID: "w1", Feed: gate, Tokens: resumetoken.NewMemStore(), Sink: newMemSink(), ResyncInterval: -1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	log := newReloadLog(&o)
	w := New(o)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	<-gate.opened
	w.Resync("operator")
	close(gate.release)
	waitFor(t, "ready", func() bool { return w.Status().Ready })
	if _, pending := w.resyncPending(); pending {
		t.Fatal("the resync is still pending after the full reload that followed it")
	}
	cancel()
	<-done
	done <- nil // for the cleanup
	log.next(t, ReasonStartup)
	select {
	case r := <-log.reloads:
		t.Fatalf("second full reload %+v after the startup one", r)
	default:
	}
}
