package jobs

import (
	"context"
	"errors"
	"sync"
)

// TEMPORARY stand-in for the gate helper's implementation.

var (
	ErrGateFull   = errors.New("gate queue full")
	ErrGateClosed = errors.New("gate closed")
)

type Gate struct {
	mu      sync.Mutex
	global  chan struct{}
	cats    map[string]chan struct{}
	closed  chan struct{}
	limit   int
	waiting int
}

func NewGate(global int, perCategory map[string]int, queueLimit int) *Gate {
	g := &Gate{cats: map[string]chan struct{}{}, closed: make(chan struct{}), limit: queueLimit}
	if global > 0 {
		g.global = make(chan struct{}, global)
	}
	for c, n := range perCategory {
		g.cats[c] = make(chan struct{}, n)
	}
	return g
}

func (g *Gate) Acquire(ctx context.Context, category string) (func(), error) {
	select {
	case <-g.closed:
		return nil, ErrGateClosed
	default:
	}
	cat := g.cats[category]
	if cat == nil && g.global == nil {
		return func() {}, nil
	}
	g.mu.Lock()
	if g.limit > 0 && g.waiting >= g.limit {
		g.mu.Unlock()
		return nil, ErrGateFull
	}
	g.waiting++
	g.mu.Unlock()
	defer func() { g.mu.Lock(); g.waiting--; g.mu.Unlock() }()
	take := func(c chan struct{}) error {
		if c == nil {
			return nil
		}
		select {
		case c <- struct{}{}:
			return nil
		case <-g.closed:
			return ErrGateClosed
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := take(cat); err != nil {
		return nil, err
	}
	if err := take(g.global); err != nil {
		if cat != nil {
			<-cat
		}
		return nil, err
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			if g.global != nil {
				<-g.global
			}
			if cat != nil {
				<-cat
			}
		})
	}, nil
}

func (g *Gate) Close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.closed:
	default:
		close(g.closed)
	}
}

func (g *Gate) Waiting() int { g.mu.Lock(); defer g.mu.Unlock(); return g.waiting }
