package jobs

import "sync"

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
}

type batchItem[Req, Res any] struct {
	req  Req
	done chan Res
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
	b.mu.Lock()
	if limit > 0 && len(b.pending) >= limit {
		b.mu.Unlock()
		return res, false
	}
	b.pending = append(b.pending, batchItem[Req, Res]{req: req, done: done})
	start := b.out < b.limit
	if start {
		b.out++
	}
	b.mu.Unlock()
	if start {
		go b.serve()
	}
	return <-done, true
}

// serve answers batches until nothing is pending; it owns one of the
// inflight turns.
func (b *batcher[Req, Res]) serve() {
	for {
		b.mu.Lock()
		n := min(len(b.pending), b.max)
		if n == 0 {
			b.out--
			b.mu.Unlock()
			return
		}
		items := b.pending[:n:n]
		b.pending = append([]batchItem[Req, Res](nil), b.pending[n:]...)
		b.mu.Unlock()

		reqs := make([]Req, len(items))
		for i, it := range items {
			reqs[i] = it.req
		}
		res := b.do(reqs)
		for i, it := range items {
			it.done <- res[i]
		}
	}
}

// waiting returns how many requests wait for a batch.
func (b *batcher[Req, Res]) waiting() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.pending)
}
