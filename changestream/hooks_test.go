package changestream

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/cronswap/cronswap/resumetoken"
)

// TestEventHookCarriesTheEventAndIdleFollowsIt checks that Hooks.Event
// hands over the change event itself (its _id is the resume token) and
// that Hooks.Idle is called once the stream has caught up with the
// events pushed before it.
func TestEventHookCarriesTheEventAndIdleFollowsIt(t *testing.T) {
	feed := newFakeFeed()
	var mu sync.Mutex
	var log []string // "event:<_data>" and "idle", in call order
	hooks := Hooks{
		Event: func(ev EventInfo) {
			data, _ := ev.Event.Lookup("_id", "_data").StringValueOK()
			mu.Lock()
			log = append(log, "event:"+data)
			mu.Unlock()
		},
		Idle: func() {
			mu.Lock()
			if n := len(log); n == 0 || log[n-1] != "idle" {
				log = append(log, "idle")
			}
			mu.Unlock()
		},
	}
	w := New(Options{ID: "w1", Feed: feed, Tokens: resumetoken.NewMemStore(), Sink: newMemSink(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Hooks: hooks, IdleSaveInterval: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitFor(t, "ready", func() bool { return w.Status().Ready })
	feed.push(event("insert", "a", "@hourly", 1), event("update", "a", "@daily", 2))
	waitFor(t, "both events, then idle", func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := len(log)
		return n >= 3 && log[n-1] == "idle" && log[n-2] == "event:00000002" && log[n-3] == "event:00000001"
	})
}
