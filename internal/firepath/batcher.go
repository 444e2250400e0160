package firepath

import (
	"context"
	"sync"
)

// batcher groups requests that arrive while earlier ones are being
// served, so that one database request answers many fires (group commit):
// a lone request goes out at once, and everything that arrives while
// inflight batches are out waits for the next one, up to max per batch.
// do answers a batch with one result per request, in order.
type batcher[Req, Res any] struct {
	max int
	do  func([]Req) []Res

	mu      sync.Mutex
	pending []batchItem[Req, Res]
	out     int // batches being served
	limit   int // batches served at once
	// shrunk, when not nil, is closed the next time pending shrinks
	// (waitFewer waits on it).
	shrunk chan struct{}
}

// batchItem is one request waiting for its batch: its result goes to
// done (a caller blocked in submit), or to then, called on a goroutine of
// its own (a request handed over with enqueue: no goroutine waits).
type batchItem[Req, Res any] struct {
	req  Req
	done chan Res
	then func(Res)
}

func newBatcher[Req, Res any](maxBatch, inflight int, do func([]Req) []Res) *batcher[Req, Res] {
	return &batcher[Req, Res]{max: max(maxBatch, 1), limit: max(inflight, 1), do: do}
}

// submit hands req to the next batch and waits for its result.
func (b *batcher[Req, Res]) submit(req Req) Res {
	res, _ := b.submitBounded(req, 0)
	return res
}

// submitBounded is submit unless limit (> 0) requests already wait: then
// it returns at once with ok false.
func (b *batcher[Req, Res]) submitBounded(req Req, limit int) (res Res, ok bool) {
	done := make(chan Res, 1)
	if !b.add(batchItem[Req, Res]{req: req, done: done}, limit) {
		return res, false
	}
	return <-done, true
}

// enqueue hands req to the next batch and returns at once: then is called
// with its result, on a goroutine of its own, once the batch is answered.
// Unless limit (> 0) requests already wait: then it returns false and
// then is never called. A request waiting so costs its item, not a
// goroutine.
func (b *batcher[Req, Res]) enqueue(req Req, limit int, then func(Res)) bool {
	return b.add(batchItem[Req, Res]{req: req, then: then}, limit)
}

// add queues it unless limit (> 0) requests already wait, and starts a
// server when fewer than the inflight bound are out.
func (b *batcher[Req, Res]) add(it batchItem[Req, Res], limit int) bool {
	b.mu.Lock()
	if limit > 0 && len(b.pending) >= limit {
		b.mu.Unlock()
		return false
	}
	b.pending = append(b.pending, it)
	start := b.out < b.limit
	if start {
		b.out++
	}
	b.mu.Unlock()
	if start {
		go b.serve()
	}
	return true
}

// serve answers batches until nothing is pending; it owns one of the
// inflight turns.
func (b *batcher[Req, Res]) serve() {
	for {
		items := b.take()
		if items == nil {
			return
		}
		reqs := make([]Req, len(items))
		for i, it := range items {
			reqs[i] = it.req
		}
		res := b.do(reqs)
		for i, it := range items {
			if it.then != nil {
				go it.then(res[i])
			} else {
				it.done <- res[i]
			}
		}
	}
}

// take removes the next batch from pending (nil when none is pending:
// the server's turn is given back). The items left are moved to the front
// of the same array, so a long queue costs no allocation per batch; an
// array grown by a backlog is given back once the queue is short again.
func (b *batcher[Req, Res]) take() []batchItem[Req, Res] {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := min(len(b.pending), b.max)
	if n == 0 {
		b.out--
		return nil
	}
	items := make([]batchItem[Req, Res], n)
	copy(items, b.pending)
	k := copy(b.pending, b.pending[n:])
	clear(b.pending[k:])
	b.pending = b.pending[:k]
	if c := cap(b.pending); c > 4*b.max && c > 4*k {
		b.pending = append([]batchItem[Req, Res](nil), b.pending...)
	}
	if b.shrunk != nil {
		close(b.shrunk)
		b.shrunk = nil
	}
	return items
}

// waiting returns how many requests wait for a batch.
func (b *batcher[Req, Res]) waiting() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.pending)
}

// waitFewer waits until at most n requests wait for a batch; false when
// ctx ended first.
func (b *batcher[Req, Res]) waitFewer(ctx context.Context, n int) bool {
	for {
		b.mu.Lock()
		if len(b.pending) <= n {
			b.mu.Unlock()
			return true
		}
		if b.shrunk == nil {
			b.shrunk = make(chan struct{})
		}
		ch := b.shrunk
		b.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}
