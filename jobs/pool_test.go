package jobs

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Interleaved dispatch across categories: A:5, B:3, C:2 due at once and one
// worker run as A B C A B C A B A A.
func TestPoolInterleavesCategories(t *testing.T) {
	t.Parallel()
	p := NewPool(1)
	defer func() { p.Close(); p.Wait() }()

	// Hold the only worker so that all ten tasks are queued first.
	gate := make(chan struct{})
	busy := make(chan struct{})
	p.Submit("gate", func() { close(busy); <-gate }, nil)
	<-busy

	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	for _, c := range []struct {
		cat string
		n   int
	}{{"A", 5}, {"B", 3}, {"C", 2}} {
		for range c.n {
			wg.Add(1)
			cat := c.cat
			p.Submit(cat, func() {
				defer wg.Done()
				mu.Lock()
				order = append(order, cat)
				mu.Unlock()
			}, nil)
		}
	}
	close(gate)
	wg.Wait()
	if got, want := strings.Join(order, " "), "A B C A B C A B A A"; got != want {
		t.Fatalf("dispatch order %q, want %q", got, want)
	}
}

// Within a category, tasks run in arrival order; a category arriving later
// joins the ring behind the others.
func TestPoolFIFOWithinCategoryAndLateCategory(t *testing.T) {
	t.Parallel()
	p := NewPool(1)
	defer func() { p.Close(); p.Wait() }()
	gate := make(chan struct{})
	busy := make(chan struct{})
	p.Submit("", func() { close(busy); <-gate }, nil)
	<-busy
	var order []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	add := func(cat, name string) {
		wg.Add(1)
		p.Submit(cat, func() { defer wg.Done(); mu.Lock(); order = append(order, name); mu.Unlock() }, nil)
	}
	add("A", "a1")
	add("A", "a2")
	add("B", "b1")
	add("A", "a3")
	add("C", "c1")
	close(gate)
	wg.Wait()
	if got, want := strings.Join(order, " "), "a1 b1 c1 a2 a3"; got != want {
		t.Fatalf("order %q, want %q", got, want)
	}
}

func TestPoolBoundsConcurrency(t *testing.T) {
	t.Parallel()
	const workers = 3
	p := NewPool(workers)
	var cur, peak atomic.Int32
	var wg sync.WaitGroup
	for i := range 30 {
		wg.Add(1)
		p.Submit(string(rune('a'+i%4)), func() {
			defer wg.Done()
			n := cur.Add(1)
			for {
				old := peak.Load()
				if n <= old || peak.CompareAndSwap(old, n) {
					break
				}
			}
			time.Sleep(2 * time.Millisecond)
			cur.Add(-1)
		}, nil)
	}
	wg.Wait()
	p.Close()
	p.Wait()
	if got := peak.Load(); got > workers || got < 1 {
		t.Fatalf("peak concurrency %d, want 1..%d", got, workers)
	}
}

func TestPoolCloseDropsWaiting(t *testing.T) {
	t.Parallel()
	p := NewPool(1)
	gate := make(chan struct{})
	busy := make(chan struct{})
	p.Submit("x", func() { close(busy); <-gate }, nil)
	<-busy
	var ran, dropped atomic.Int32
	for range 4 {
		p.Submit("y", func() { ran.Add(1) }, func() { dropped.Add(1) })
	}
	p.Close()
	if p.Submit("y", func() { ran.Add(1) }, func() { dropped.Add(1) }) {
		t.Error("Submit after Close = true")
	}
	close(gate)
	p.Wait()
	if ran.Load() != 0 || dropped.Load() != 4 {
		t.Fatalf("ran %d dropped %d, want 0 and 4", ran.Load(), dropped.Load())
	}
}

// The in-process guard lets one goroutine per key through at a time and
// never blocks other keys.
func TestKeyGuard(t *testing.T) {
	t.Parallel()
	g := newKeyGuard()
	var inside atomic.Int32
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			g.lock("j")
			if n := inside.Add(1); n != 1 {
				t.Errorf("%d goroutines inside the guard of one key", n)
			}
			time.Sleep(time.Millisecond)
			inside.Add(-1)
			g.unlock("j")
		})
	}
	g.lock("held")
	done := make(chan struct{})
	go func() { g.lock("other"); g.unlock("other"); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a held key blocked another key")
	}
	g.unlock("held")
	wg.Wait()
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.slots) != 0 {
		t.Errorf("%d guard entries left behind", len(g.slots))
	}
}
