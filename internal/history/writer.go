package history

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Defaults of WriterOptions.
const (
	// DefaultQueueSize is how many entries may wait for the database.
	DefaultQueueSize = 10000
	// DefaultBatch is the most entries one insert writes.
	DefaultBatch = 100
	// DefaultRetryMin and DefaultRetryMax bound the wait between two
	// attempts of a failed write.
	DefaultRetryMin = 100 * time.Millisecond
	DefaultRetryMax = 10 * time.Second
)

// codeDuplicateKey is the server's duplicate key error.
const codeDuplicateKey = 11000

// WriterOptions configures a Writer; zero fields take the defaults above.
type WriterOptions struct {
	QueueSize          int
	Batch              int
	RetryMin, RetryMax time.Duration
	// Logger receives the writer's logs (default slog.Default()).
	Logger *slog.Logger
}

// Writer stores entries in the history collection in the background: the
// caller hands them over without waiting (Enqueue), Run inserts them in
// batches and retries a failed insert until it works, so nothing is lost
// while the database is reachable and the queue has room. An entry whose
// _id is already stored (another replica, or a replay) counts as written.
// What is still queued when the process dies is lost (other replicas
// usually write the same entries).
type Writer struct {
	coll *mongo.Collection
	opts WriterOptions
	q    chan Entry

	mu     sync.Mutex
	closed bool
}

// NewWriter returns a writer into coll; call Run to start it.
func NewWriter(coll *mongo.Collection, opts WriterOptions) *Writer {
	if opts.QueueSize <= 0 {
		opts.QueueSize = DefaultQueueSize
	}
	if opts.Batch <= 0 {
		opts.Batch = DefaultBatch
	}
	if opts.RetryMin <= 0 {
		opts.RetryMin = DefaultRetryMin
	}
	if opts.RetryMax < opts.RetryMin {
		opts.RetryMax = max(DefaultRetryMax, opts.RetryMin)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Writer{coll: coll, opts: opts, q: make(chan Entry, opts.QueueSize)}
}

// Enqueue implements Queue: it queues e without blocking and reports false
// when the queue is full or closed (e is dropped).
func (w *Writer) Enqueue(e Entry) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return false
	}
	select {
	case w.q <- e:
		return true
	default:
		return false
	}
}

// Close ends the queue: Run returns once what is queued is written.
func (w *Writer) Close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.closed = true
		close(w.q)
	}
}

// Run writes queued entries until Close was called and the queue is
// written, or ctx ends (what is still queued then is lost, and logged).
func (w *Writer) Run(ctx context.Context) {
	batch := make([]Entry, 0, w.opts.Batch)
	for {
		batch = batch[:0]
		select {
		case <-ctx.Done():
			w.abandon(0)
			return
		case e, ok := <-w.q:
			if !ok {
				return
			}
			batch = append(batch, e)
		}
	fill:
		for len(batch) < w.opts.Batch {
			select {
			case e, ok := <-w.q:
				if !ok {
					break fill
				}
				batch = append(batch, e)
			default:
				break fill
			}
		}
		if !w.write(ctx, batch) {
			w.abandon(len(batch))
			return
		}
	}
}

// abandon logs the entries lost because ctx ended: pending (taken from the
// queue, not written) plus what is still queued.
func (w *Writer) abandon(pending int) {
	n := pending + len(w.q)
	if n > 0 {
		w.opts.Logger.Warn("schedule history entries not written before shutdown", "collection", w.coll.Name(), "entries", n)
	}
}

// write inserts batch, retrying until it is stored; false when ctx ended
// first.
func (w *Writer) write(ctx context.Context, batch []Entry) bool {
	wait := w.opts.RetryMin
	for attempt := 1; ; attempt++ {
		_, err := w.coll.InsertMany(ctx, batch, options.InsertMany().SetOrdered(false))
		if w.done(batch, err) {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		w.opts.Logger.Warn("writing schedule history failed; retrying", "collection", w.coll.Name(),
			"entries", len(batch), "job_id", batch[0].JobID, "attempt", attempt, "retry_in", wait, "error", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
		wait = min(2*wait, w.opts.RetryMax)
	}
}

// done reports whether the insert's outcome settles batch: written,
// already stored (duplicate _id), or refused for good (logged and
// dropped). Errors of the connection or the write concern are retried.
func (w *Writer) done(batch []Entry, err error) bool {
	failed := map[int]mongo.BulkWriteError{}
	if err != nil {
		var bwe mongo.BulkWriteException
		if !errors.As(err, &bwe) || bwe.WriteConcernError != nil || len(bwe.WriteErrors) == 0 {
			return false
		}
		for _, we := range bwe.WriteErrors {
			failed[we.Index] = we
		}
	}
	for i, e := range batch {
		we, bad := failed[i]
		switch {
		case !bad:
			w.opts.Logger.Debug("schedule history entry written", "collection", w.coll.Name(), "job_id", e.JobID,
				"history_id", e.ID, "op", e.Op, "changes", len(e.Changes))
		case we.Code == codeDuplicateKey:
			w.opts.Logger.Debug("schedule history entry already recorded", "collection", w.coll.Name(), "job_id", e.JobID,
				"history_id", e.ID, "op", e.Op)
		default:
			w.opts.Logger.Warn("schedule history entry refused by the server; dropped", "collection", w.coll.Name(),
				"job_id", e.JobID, "history_id", e.ID, "op", e.Op, "error", we.Message, "code", we.Code)
		}
	}
	return true
}
