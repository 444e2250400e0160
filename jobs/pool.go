package jobs

import (
	"errors"
	"sync"
)

// Pool runs tasks on a bounded number of workers. Waiting tasks are handed
// out round-robin by category: the categories with
// waiting tasks form a ring in order of arrival, and each dispatch takes the
// oldest task of the next category in the ring, so one large category
// cannot starve the others. Within a category tasks run in arrival order.
type Pool struct {
	mu     sync.Mutex
	cond   *sync.Cond
	queues map[string][]*poolTask
	ring   []string // categories with waiting tasks, in order of arrival
	next   int      // index in ring of the next category to serve
	closed bool
	wg     sync.WaitGroup
	// limit bounds the tasks waiting for a worker (<= 0: no bound);
	// waiting counts them.
	limit   int
	waiting int
}

// Errors of Offer.
var (
	// ErrPoolClosed: the pool was closed; the task was not queued.
	ErrPoolClosed = errors.New("pool closed")
	// ErrPoolFull: the pool's bound of waiting tasks is reached; the task
	// was not queued.
	ErrPoolFull = errors.New("pool queue full")
)

type poolTask struct {
	run  func()
	drop func()
}

// NewPool starts a pool of n workers (at least 1) whose queue of waiting
// tasks is not bounded.
func NewPool(n int) *Pool { return NewBoundedPool(n, 0) }

// NewBoundedPool starts a pool of n workers (at least 1) that holds at
// most limit tasks waiting for a worker (limit <= 0: no bound).
func NewBoundedPool(n, limit int) *Pool {
	p := &Pool{queues: map[string][]*poolTask{}, limit: limit}
	p.cond = sync.NewCond(&p.mu)
	for range max(n, 1) {
		p.wg.Add(1)
		go p.work()
	}
	return p
}

// Submit queues run under category. If the pool is closed before a worker
// takes the task, drop is called instead (if not nil). Submit reports
// false, calling neither, when the pool is already closed.
func (p *Pool) Submit(category string, run, drop func()) bool {
	return p.Offer(category, run, drop) == nil
}

// Offer is Submit that says why a task was not queued: ErrPoolClosed, or
// ErrPoolFull when the bound of waiting tasks is reached (neither run nor
// drop is called then).
func (p *Pool) Offer(category string, run, drop func()) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrPoolClosed
	}
	if p.limit > 0 && p.waiting >= p.limit {
		return ErrPoolFull
	}
	p.waiting++
	if len(p.queues[category]) == 0 {
		p.ring = append(p.ring, category)
	}
	p.queues[category] = append(p.queues[category], &poolTask{run: run, drop: drop})
	p.cond.Signal()
	return nil
}

// take removes the next task in round-robin order; false when none waits.
func (p *Pool) take() (*poolTask, bool) {
	if len(p.ring) == 0 {
		return nil, false
	}
	if p.next >= len(p.ring) {
		p.next = 0
	}
	cat := p.ring[p.next]
	q := p.queues[cat]
	p.waiting--
	t := q[0]
	q[0] = nil
	q = q[1:]
	if len(q) == 0 {
		delete(p.queues, cat)
		p.ring = append(p.ring[:p.next], p.ring[p.next+1:]...)
		// p.next now points at the category after cat.
	} else {
		p.queues[cat] = q
		p.next++
	}
	return t, true
}

func (p *Pool) work() {
	defer p.wg.Done()
	p.mu.Lock()
	for {
		t, ok := p.take()
		if !ok {
			if p.closed {
				p.mu.Unlock()
				return
			}
			p.cond.Wait()
			continue
		}
		p.mu.Unlock()
		t.run()
		p.mu.Lock()
	}
}

// Close stops taking tasks: waiting tasks are dropped (their drop called),
// running ones finish. It returns at once; Wait waits for the workers.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	var dropped []*poolTask
	for len(p.ring) > 0 {
		t, _ := p.take()
		dropped = append(dropped, t)
	}
	p.cond.Broadcast()
	p.mu.Unlock()
	for _, t := range dropped {
		if t.drop != nil {
			t.drop()
		}
	}
}

// queued returns how many tasks wait for a worker.
func (p *Pool) queued() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waiting
}

// Wait waits until Close was called and every worker has returned.
func (p *Pool) Wait() { p.wg.Wait() }

// keyGuard is the in-process guard in front of the database, the first of
// the two layers of exactly-once (the lock claim is the second): per job id
// at most one goroutine of this process makes an acquisition attempt at a
// time; others wait for it.
type keyGuard struct {
	mu    sync.Mutex
	slots map[string]*guardSlot
}

type guardSlot struct {
	ch   chan struct{}
	refs int
}

func newKeyGuard() *keyGuard { return &keyGuard{slots: map[string]*guardSlot{}} }

// lock takes key's slot, waiting while another goroutine holds it.
func (g *keyGuard) lock(key string) {
	g.mu.Lock()
	s := g.slots[key]
	if s == nil {
		s = &guardSlot{ch: make(chan struct{}, 1)}
		g.slots[key] = s
	}
	s.refs++
	g.mu.Unlock()
	s.ch <- struct{}{}
}

// unlock frees key's slot; the entry goes away with its last user.
func (g *keyGuard) unlock(key string) {
	g.mu.Lock()
	s := g.slots[key]
	<-s.ch
	s.refs--
	if s.refs == 0 {
		delete(g.slots, key)
	}
	g.mu.Unlock()
}
