package changestream

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/resumetoken"
)

// logCounter counts the log records at warn level and above by message.
type logCounter struct {
	mu   sync.Mutex
	msgs map[string]int
	all  int
}

func (c *logCounter) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (c *logCounter) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.msgs == nil {
		c.msgs = map[string]int{}
	}
	c.msgs[r.Message]++
	c.all++
	return nil
}
func (c *logCounter) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *logCounter) WithGroup(string) slog.Handler      { return c }

func (c *logCounter) counts() (map[string]int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.msgs {
		out[k] = v
	}
	return out, c.all
}

// A full read that fails the same way every time (here a document the
// server cannot return, BSONObjectTooLarge) keeps the watcher running and
// not ready, with the error in its status, one log line per retry and the
// longest backoff; once the read works the watcher turns ready and the
// error is gone. The documents read before the failure were applied; none
// was taken as deleted.
func TestRepeatingReadErrorKeepsWatcherNotReady(t *testing.T) {
	feed := newFakeFeed()
	for i := range 5 {
		feed.docs[fmt.Sprintf("j%d", i)] = doc(fmt.Sprintf("j%d", i), "0 9 * * *")
	}
	tooLarge := mongo.CommandError{Code: 10334, Name: "BSONObjectTooLarge", Message: "BSONObj size: 17000000 is invalid"}
	feed.failReads(3, tooLarge)
	logs := &logCounter{}
	var mu sync.Mutex
	var delays []time.Duration
	sink := newMemSink()
	w, stop := startWith(t, feed, resumetoken.NewMemStore(), sink, func(o *Options) {
		o.Logger = slog.New(logs)
		o.BackoffMin, o.BackoffMax = time.Millisecond, 20*time.Millisecond
		o.Hooks.Reconnect = func(_ int, d time.Duration, _ error) { mu.Lock(); delays = append(delays, d); mu.Unlock() }
	})
	defer stop()
	waitFor(t, "several failed reads", func() bool { return feed.snapshotReads() >= 4 })
	st := w.Status()
	if st.Ready || !st.Repeating || !strings.Contains(st.LastError, "BSONObjectTooLarge") || st.ErrorSince.IsZero() {
		t.Fatalf("status while the read keeps failing: %+v", st)
	}
	if got := len(sink.snapshot()); got != 3 {
		t.Fatalf("sink holds %d jobs, want the 3 read before the failure", got)
	}
	// One log line per attempt, and every delay the longest.
	mu.Lock()
	steps := slices.Clone(delays)
	mu.Unlock()
	msgs, all := logs.counts()
	const line = "not ready: the same error keeps recurring and will until the collection, the server or the configuration changes; retrying"
	if msgs[line] < len(steps) || all > len(steps)+1 {
		t.Fatalf("%d retries logged %d lines (%v)", len(steps), all, msgs)
	}
	for _, d := range steps {
		if d != 20*time.Millisecond {
			t.Fatalf("delays %v: a repeating error should wait BackoffMax each time", steps)
		}
	}

	feed.failReads(0, nil)
	waitFor(t, "ready once the read works", func() bool { return w.Status().Ready })
	if st := w.Status(); st.LastError != "" || st.Repeating || !st.ErrorSince.IsZero() {
		t.Fatalf("status once ready: %+v", st)
	}
	if got := len(sink.snapshot()); got != 5 {
		t.Fatalf("sink holds %d jobs, want 5", got)
	}
}

// An error with no code that says it repeats counts as repeating from its
// third occurrence in a row; a different error starts over.
func TestSameErrorThreeTimesRepeats(t *testing.T) {
	var f failure
	now := time.Now()
	boom := errors.New("decoding the reply: unexpected end")
	for i, want := range []bool{false, false, true, true} {
		if got := f.record(boom, now); got.repeating != want || got.count != i+1 {
			t.Fatalf("occurrence %d: %+v, want repeating %v", i+1, got, want)
		}
	}
	if got := f.record(errors.New("another"), now.Add(time.Second)); got.repeating || got.count != 1 || !got.since.Equal(now.Add(time.Second)) {
		t.Fatalf("a different error: %+v, want a new failure", got)
	}
	if !IsRepeating(fmt.Errorf("read schedules: %w", errors.New("connection(x) length of read message too large"))) {
		t.Fatal("a reply over the driver's limit should repeat")
	}
	if IsRepeating(context.DeadlineExceeded) || IsRepeating(errors.New("connection refused")) {
		t.Fatal("transient errors do not repeat")
	}
}

// While a full read runs, the status says which and how far it got; when
// it is done, the progress is cleared.
func TestFullReadProgressInStatus(t *testing.T) {
	feed := newFakeFeed()
	for i := range 10 {
		feed.docs[fmt.Sprintf("j%d", i)] = doc(fmt.Sprintf("j%d", i), "0 9 * * *")
	}
	release := make(chan struct{})
	reached := make(chan struct{})
	sink := &gateSink{memSink: newMemSink(), after: 6, reached: reached, release: release}
	w, stop := startWith(t, feed, resumetoken.NewMemStore(), sink.memSink, func(o *Options) { o.Sink = sink })
	defer stop()
	<-reached
	// The count is published every progressCheckEvery documents and at the
	// end: here the 6 read are not yet published, the read is.
	st := w.Status()
	if st.Ready || st.Reload.Reason != ReasonStartup || st.Reload.StartedAt.IsZero() {
		t.Fatalf("status during the read: %+v", st)
	}
	close(release)
	waitFor(t, "ready", func() bool { return w.Status().Ready })
	if st := w.Status(); st.Reload != (ReloadProgress{}) {
		t.Fatalf("progress after the read: %+v", st.Reload)
	}
}

// gateSink is a memSink whose ReplaceAll stops after `after` documents
// until release is closed.
type gateSink struct {
	*memSink
	after   int
	reached chan struct{}
	release chan struct{}
	once    sync.Once
}

func (g *gateSink) ReplaceAll(docs iter.Seq2[bson.Raw, error]) ([]string, error) {
	n := 0
	return g.memSink.ReplaceAll(func(yield func(bson.Raw, error) bool) {
		for d, err := range docs {
			if n++; n == g.after {
				g.once.Do(func() { close(g.reached); <-g.release })
			}
			if !yield(d, err) {
				return
			}
		}
	})
}
