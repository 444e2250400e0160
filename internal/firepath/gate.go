package firepath

import (
	"container/list"
	"context"
	"errors"
	"sync"
	"sync/atomic"
)

// Errors of Gate.Acquire.
var (
	// ErrGateFull: the gate's bound of waiting fires is reached; the fire
	// was not queued.
	ErrGateFull = errors.New("admission gate: queue of waiting fires is full")
	// ErrGateClosed: the gate was closed before the fire was admitted.
	ErrGateClosed = errors.New("admission gate closed")
)

// Gate admits fires to run. It is not a worker pool: an admitted fire runs
// its action on its own goroutine, and the gate only counts what runs. A
// fire is admitted when its category's bound (perCategory, if the category
// has one) and the global bound (if > 0) both have room. A fire of a
// category without a bound, when there is no global bound, is admitted at
// once without taking the gate's lock (the default configuration).
//
// Fires that cannot be admitted wait. Waiting fires are admitted
// round-robin across categories: the categories with waiting fires form a
// ring in order of arrival, within a category fires go in arrival order,
// and when a slot frees the next category in the ring that can be admitted
// goes; a category at its own bound is passed over (it does not block the
// others) and the turn moves on past the category admitted. A fire whose
// context ends while waiting leaves the queue and is never admitted later.
//
// The zero Gate is not usable; use NewGate.
type Gate struct {
	global     int            // bound on all admitted fires; <= 0: none
	bounds     map[string]int // per-category bounds (only those >= 1)
	queueLimit int            // bound on waiting fires; <= 0: none

	closed atomic.Bool
	// free counts the admitted fires of the categories on the fast path
	// (no bound of theirs, no global bound): category -> *atomic.Int64.
	free sync.Map

	mu      sync.Mutex
	running map[string]int        // admitted fires per category (slow path)
	total   int                   // admitted fires (slow path)
	queues  map[string]*list.List // waiting fires per category, FIFO of *gateWaiter
	ring    []string              // categories with waiting fires, in order of arrival
	next    int                   // index in ring of the category whose turn it is
	waiting int
}

// Waiter states (gateWaiter.state, written under Gate.mu before ready is
// closed).
const (
	waiterQueued = iota
	waiterAdmitted
	waiterClosed
)

type gateWaiter struct {
	category string
	elem     *list.Element
	ready    chan struct{} // closed when state leaves waiterQueued
	state    int
}

// NewGate returns a gate admitting at most global fires at once (<= 0: no
// global bound), at most perCategory[c] fires of category c at once (a
// value <= 0 or a category not in the map: no bound), with at most
// queueLimit fires waiting for admission (<= 0: no bound). The map is
// copied.
func NewGate(global int, perCategory map[string]int, queueLimit int) *Gate {
	g := &Gate{
		global:     global,
		bounds:     map[string]int{},
		queueLimit: queueLimit,
		running:    map[string]int{},
		queues:     map[string]*list.List{},
	}
	for c, n := range perCategory {
		if n > 0 {
			g.bounds[c] = n
		}
	}
	return g
}

// fast reports whether fires of category are admitted without the lock:
// no bound of their own and no global bound.
func (g *Gate) fast(category string) bool {
	if g.global > 0 {
		return false
	}
	_, bounded := g.bounds[category]
	return !bounded
}

// Acquire admits one fire of category, waiting while a bound is reached.
// It returns a release function to call when the fire's action has ended
// (calling it more than once is harmless), or an error and no release:
// ErrGateClosed after Close, ErrGateFull when the fire would have to wait
// and queueLimit fires already wait, ctx.Err() when ctx ends before
// admission (the fire is then removed from the queue).
func (g *Gate) Acquire(ctx context.Context, category string) (release func(), err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if g.closed.Load() {
		return nil, ErrGateClosed
	}
	if g.fast(category) {
		return g.acquireFree(category), nil
	}

	rel, w, err := g.enqueue(category)
	if w == nil {
		return rel, err
	}
	select {
	case <-w.ready:
	case <-ctx.Done():
	}
	return g.settle(ctx, w)
}

// enqueue admits a slow-path fire of category at once (release set) or
// queues it (waiter set), or refuses it (err set).
func (g *Gate) enqueue(category string) (release func(), w *gateWaiter, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed.Load() {
		return nil, nil, ErrGateClosed
	}
	// Every waiter that could be admitted has been (dispatch runs on every
	// change), so when no fire of this category waits and its bounds have
	// room, admitting it now takes nothing from a waiter.
	q := g.queues[category]
	if (q == nil || q.Len() == 0) && g.canAdmit(category) {
		g.admit(category)
		return g.releaser(category), nil, nil
	}
	if g.queueLimit > 0 && g.waiting >= g.queueLimit {
		return nil, nil, ErrGateFull
	}
	w = &gateWaiter{category: category, ready: make(chan struct{})}
	if q == nil {
		q = list.New()
		g.queues[category] = q
	}
	if q.Len() == 0 {
		g.ring = append(g.ring, category)
	}
	w.elem = q.PushBack(w)
	g.waiting++
	return nil, w, nil
}

// settle ends the wait of w, woken by admission, Close or ctx.
func (g *Gate) settle(ctx context.Context, w *gateWaiter) (func(), error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch w.state {
	case waiterAdmitted:
		if err := ctx.Err(); err != nil {
			// Admitted as the context ended: the caller will not run, so
			// the slot goes to the next waiter.
			g.unadmit(w.category)
			return nil, err
		}
		return g.releaser(w.category), nil
	case waiterClosed:
		return nil, ErrGateClosed
	default:
		g.remove(w)
		return nil, ctx.Err()
	}
}

// acquireFree admits a fire on the fast path.
func (g *Gate) acquireFree(category string) func() {
	c, ok := g.free.Load(category)
	if !ok {
		c, _ = g.free.LoadOrStore(category, new(atomic.Int64))
	}
	n := c.(*atomic.Int64)
	n.Add(1)
	var done atomic.Bool
	return func() {
		if done.CompareAndSwap(false, true) {
			n.Add(-1)
		}
	}
}

// releaser returns the idempotent release of an admitted slow-path fire.
func (g *Gate) releaser(category string) func() {
	var done atomic.Bool
	return func() {
		if !done.CompareAndSwap(false, true) {
			return
		}
		g.mu.Lock()
		g.unadmit(category)
		g.mu.Unlock()
	}
}

// canAdmit reports whether both bounds of category have room. g.mu held.
func (g *Gate) canAdmit(category string) bool {
	if g.global > 0 && g.total >= g.global {
		return false
	}
	if b, ok := g.bounds[category]; ok && g.running[category] >= b {
		return false
	}
	return true
}

// admit counts one admitted fire of category. g.mu held.
func (g *Gate) admit(category string) {
	g.running[category]++
	g.total++
}

// unadmit uncounts one admitted fire of category and admits the waiters
// that now fit. g.mu held.
func (g *Gate) unadmit(category string) {
	g.total--
	if n := g.running[category] - 1; n > 0 {
		g.running[category] = n
	} else {
		delete(g.running, category)
	}
	g.dispatch()
}

// dispatch admits waiting fires round-robin while one can be. g.mu held.
func (g *Gate) dispatch() {
	for len(g.ring) > 0 {
		if g.global > 0 && g.total >= g.global {
			return
		}
		if g.next >= len(g.ring) {
			g.next = 0
		}
		i := -1
		for k := range len(g.ring) {
			j := (g.next + k) % len(g.ring)
			if g.canAdmit(g.ring[j]) {
				i = j
				break
			}
		}
		if i < 0 {
			return
		}
		cat := g.ring[i]
		q := g.queues[cat]
		w := q.Remove(q.Front()).(*gateWaiter)
		w.elem = nil
		g.waiting--
		if q.Len() == 0 {
			delete(g.queues, cat)
			g.ring = append(g.ring[:i], g.ring[i+1:]...)
			g.next = i // now the category after cat
		} else {
			g.next = i + 1
		}
		g.admit(cat)
		w.state = waiterAdmitted
		close(w.ready)
	}
}

// remove takes a still-queued waiter out of the queue. g.mu held.
func (g *Gate) remove(w *gateWaiter) {
	q := g.queues[w.category]
	q.Remove(w.elem)
	w.elem = nil
	g.waiting--
	if q.Len() > 0 {
		return
	}
	delete(g.queues, w.category)
	for i, c := range g.ring {
		if c != w.category {
			continue
		}
		g.ring = append(g.ring[:i], g.ring[i+1:]...)
		if i < g.next {
			g.next--
		}
		break
	}
	// A waiter that could not be admitted leaving frees no slot, so there
	// is nothing to dispatch.
}

// Close refuses every later Acquire and wakes every waiting fire with
// ErrGateClosed. Fires already admitted are not affected; their release
// still works.
func (g *Gate) Close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed.Store(true)
	for _, cat := range g.ring {
		q := g.queues[cat]
		for e := q.Front(); e != nil; e = e.Next() {
			w := e.Value.(*gateWaiter)
			w.elem = nil
			w.state = waiterClosed
			close(w.ready)
		}
		delete(g.queues, cat)
	}
	g.ring = nil
	g.next = 0
	g.waiting = 0
}

// Waiting returns how many fires wait for admission.
func (g *Gate) Waiting() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.waiting
}

// Running returns how many fires of category are admitted and not yet
// released.
func (g *Gate) Running(category string) int {
	if g.fast(category) {
		if c, ok := g.free.Load(category); ok {
			return int(c.(*atomic.Int64).Load())
		}
		return 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.running[category]
}
