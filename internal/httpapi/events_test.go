package httpapi_test

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cronswap/cronswap/internal/httpapi"
)

// sseClient reads one /api/events stream line by line.
type sseClient struct {
	lines chan string
	res   *http.Response
}

func openEvents(t *testing.T, f *fixture) *sseClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.srv.URL+"/api/events", nil)
	res, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("events = %d %q", res.StatusCode, res.Header.Get("Content-Type"))
	}
	c := &sseClient{lines: make(chan string, 1024), res: res}
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() { _ = res.Body.Close() })
	return c
}

// next returns the next event as "name data", failing after a deadline.
func (c *sseClient) next(t *testing.T) string {
	t.Helper()
	deadline := time.After(5 * time.Second)
	var name string
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				t.Fatal("stream ended")
			}
			switch {
			case strings.HasPrefix(l, "event: "):
				name = strings.TrimPrefix(l, "event: ")
			case strings.HasPrefix(l, "data: "):
				return name + " " + strings.TrimPrefix(l, "data: ")
			}
		case <-deadline:
			t.Fatal("no event within 5 s")
		}
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A client gets hello, then the schedule and run events published.
func TestEventsHelloAndChanges(t *testing.T) {
	b := httpapi.NewBroker(httpapi.BrokerOptions{})
	f := newFixture(t, func(o *httpapi.Options) { o.Events = b })
	c := openEvents(t, f)
	if got := c.next(t); got != `hello {"instance_id":"replica-1"}` {
		t.Fatalf("first event %q", got)
	}
	waitFor(t, "the client", func() bool { return b.Clients() == 1 })
	b.ScheduleChanged("daily_report")
	b.RunChanged("daily_report", "succeeded")
	if got := c.next(t); got != `schedule {"id":"daily_report"}` {
		t.Errorf("schedule event %q", got)
	}
	if got := c.next(t); got != `run {"id":"daily_report","status":"succeeded"}` {
		t.Errorf("run event %q", got)
	}
}

// A client that does not read is dropped once its buffer is full, and
// Publish never waits for it.
func TestEventsSlowClientDropped(t *testing.T) {
	b := httpapi.NewBroker(httpapi.BrokerOptions{Buffer: 4})
	f := newFixture(t, func(o *httpapi.Options) { o.Events = b })
	c := openEvents(t, f) // read by nobody after hello: the socket fills
	_ = c
	waitFor(t, "the client", func() bool { return b.Clients() == 1 })
	big := strings.Repeat("x", 64<<10)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; b.Clients() > 0 && i < 100000; i++ {
			b.ScheduleChanged(big)
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Publish blocked on a slow client")
	}
	if n := b.Clients(); n != 0 {
		t.Errorf("%d clients still subscribed after flooding", n)
	}
}

// Pings keep the stream alive.
func TestEventsPing(t *testing.T) {
	b := httpapi.NewBroker(httpapi.BrokerOptions{Ping: 10 * time.Millisecond})
	f := newFixture(t, func(o *httpapi.Options) { o.Events = b })
	c := openEvents(t, f)
	deadline := time.After(5 * time.Second)
	for {
		select {
		case l := <-c.lines:
			if l == ": ping" {
				return
			}
		case <-deadline:
			t.Fatal("no ping")
		}
	}
}

// Close ends the open streams and refuses new ones at once.
func TestEventsClose(t *testing.T) {
	b := httpapi.NewBroker(httpapi.BrokerOptions{})
	f := newFixture(t, func(o *httpapi.Options) { o.Events = b })
	c := openEvents(t, f)
	c.next(t) // hello
	waitFor(t, "the client", func() bool { return b.Clients() == 1 })
	b.Close()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case _, ok := <-c.lines:
			if !ok {
				if ch, _ := b.Subscribe(); ch != nil {
					if _, open := <-ch; open {
						t.Error("a subscription after Close is open")
					}
				}
				return
			}
		case <-deadline:
			t.Fatal("the stream did not end after Close")
		}
	}
}
