// Package batch groups requests that arrive while earlier ones are being
// served, so that one database round trip answers many callers (group
// commit): a lone request goes out at once, and everything that arrives
// while batches are out waits for the next one, up to a maximum per batch,
// with a bounded number of batches out at once. A Batcher holds no
// goroutine while nothing is pending, and a request handed over with
// Enqueue holds none while it waits. It serves the fire path's claims and
// ends and the triggers' bookkeeping.
package batch

import (
	"context"
	"sync"
)

// Batcher serves requests of type Req in batches with one result of type
// Res per request. Its zero value is not usable; call New.
type Batcher[Req, Res any] struct {
	max   int
	limit int
	do    func([]Req) []Res

	mu      sync.Mutex
	pending []item[Req, Res]
	out     int // batches being served
	// shrunk, when not nil, is closed the next time pending shrinks
	// (WaitFewer waits on it).
	shrunk chan struct{}
}

// item is one request waiting for its batch: its result goes to done (a
// caller blocked in Submit) or to then (a request handed over with
// Enqueue: no goroutine waits for it).
type item[Req, Res any] struct {
	req  Req
	done chan Res
	then func(Res)
}

// New returns a batcher that hands do at most maxBatch requests at once,
// with at most inflight calls of do running at once (each at least 1). do
// must return one result per request, in order.
func New[Req, Res any](maxBatch, inflight int, do func([]Req) []Res) *Batcher[Req, Res] {
	return &Batcher[Req, Res]{max: max(maxBatch, 1), limit: max(inflight, 1), do: do}
}

// Submit hands req to the next batch and waits for its result, or until
// ctx ends (ctx's error then; the request is still served, its result
// dropped).
func (b *Batcher[Req, Res]) Submit(ctx context.Context, req Req) (Res, error) {
	done := make(chan Res, 1)
	b.add(item[Req, Res]{req: req, done: done}, 0)
	select {
	case res := <-done:
		return res, nil
	case <-ctx.Done():
		var zero Res
		return zero, ctx.Err()
	}
}

// Enqueue hands req to the next batch and returns at once; then is called
// with the result on the goroutine that served the batch, so it must not
// block (a caller with more to do starts a goroutine there). A request
// waiting so costs its item, not a goroutine.
func (b *Batcher[Req, Res]) Enqueue(req Req, then func(Res)) {
	b.add(item[Req, Res]{req: req, then: then}, 0)
}

// TryEnqueue is Enqueue unless limit (> 0) requests already wait for a
// batch: then it returns false at once and then is never called. It bounds
// the memory a backlog may take when the batches cannot keep up.
func (b *Batcher[Req, Res]) TryEnqueue(req Req, limit int, then func(Res)) bool {
	return b.add(item[Req, Res]{req: req, then: then}, limit)
}

// Waiting returns how many requests wait for a batch.
func (b *Batcher[Req, Res]) Waiting() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.pending)
}

// WaitFewer waits until at most n requests wait for a batch; false when
// ctx ended first. A producer whose requests lead to this batcher's (a
// claim won leads to an end) waits on it to let those go first.
func (b *Batcher[Req, Res]) WaitFewer(ctx context.Context, n int) bool {
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

// add queues it unless limit (> 0) requests already wait, and starts a
// server when fewer than the inflight bound are out.
func (b *Batcher[Req, Res]) add(it item[Req, Res], limit int) bool {
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
func (b *Batcher[Req, Res]) serve() {
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
				it.then(res[i])
			} else {
				it.done <- res[i]
			}
		}
	}
}

// take removes the next batch from pending (nil when none is pending: the
// server's turn is given back). The items left move to the front of the
// same array; an array grown by a backlog is given back once the queue is
// short again.
func (b *Batcher[Req, Res]) take() []item[Req, Res] {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := min(len(b.pending), b.max)
	if n == 0 {
		b.out--
		return nil
	}
	items := make([]item[Req, Res], n)
	copy(items, b.pending)
	k := copy(b.pending, b.pending[n:])
	clear(b.pending[k:])
	b.pending = b.pending[:k]
	if c := cap(b.pending); c > 4*b.max && c > 4*k {
		b.pending = append([]item[Req, Res](nil), b.pending...)
	}
	if b.shrunk != nil {
		close(b.shrunk)
		b.shrunk = nil
	}
	return items
}
