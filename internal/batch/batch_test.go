package batch

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Requests that arrive while a batch is out go together in the next one,
// each caller gets its own result, and no more batches run at once than
// the bound.
func TestBatchesWhatArrivesWhileOut(t *testing.T) {
	release := make(chan struct{})
	var sizes []int
	var mu sync.Mutex
	var running, most, taken atomic.Int32
	b := New(100, 2, func(reqs []int) []int {
		taken.Add(int32(len(reqs)))
		n := running.Add(1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		<-release
		running.Add(-1)
		mu.Lock()
		sizes = append(sizes, len(reqs))
		mu.Unlock()
		out := make([]int, len(reqs))
		for i, r := range reqs {
			out[i] = r * 10
		}
		return out
	})
	var wg sync.WaitGroup
	got := make([]int, 250)
	for i := range got {
		wg.Go(func() { got[i], _ = b.Submit(context.Background(), i) })
	}
	deadline := time.Now().Add(10 * time.Second)
	// Two batches go out (the first alone); the rest wait for them.
	for running.Load() < 2 || int(taken.Load())+b.Waiting() < 250 {
		if time.Now().After(deadline) {
			t.Fatalf("%d batches out, %d taken, %d waiting: want 2 out and the rest waiting", running.Load(), taken.Load(), b.Waiting())
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	for i, r := range got {
		if r != i*10 {
			t.Fatalf("request %d got %d, want %d", i, r, i*10)
		}
	}
	if most.Load() > 2 {
		t.Errorf("%d batches at once, want at most 2", most.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	total := 0
	for _, s := range sizes {
		if s > 100 {
			t.Errorf("a batch of %d, want at most 100", s)
		}
		total += s
	}
	if total != 250 || len(sizes) > 5 {
		t.Errorf("batches %v: want 250 requests in at most 5 batches", sizes)
	}
}

// Enqueue returns at once and hands the result to then.
func TestEnqueueCallsThen(t *testing.T) {
	b := New(10, 1, func(reqs []string) []int {
		out := make([]int, len(reqs))
		for i, r := range reqs {
			out[i] = len(r)
		}
		return out
	})
	done := make(chan int, 1)
	b.Enqueue("abc", func(n int) { done <- n })
	select {
	case n := <-done:
		if n != 3 {
			t.Fatalf("then got %d, want 3", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("then was never called")
	}
}

// A caller whose context ends stops waiting; its request is still served.
func TestSubmitReturnsWhenContextEnds(t *testing.T) {
	release := make(chan struct{})
	served := make(chan int, 1)
	b := New(10, 1, func(reqs []int) []int {
		<-release
		served <- reqs[0]
		return reqs
	})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.Submit(ctx, 7); err != context.Canceled {
		t.Fatalf("Submit with an ended context: %v, want context.Canceled", err)
	}
	close(release)
	select {
	case n := <-served:
		if n != 7 {
			t.Fatalf("served %d, want 7", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the abandoned request was never served")
	}
}

// heldBatcher returns a batcher (one batch out at once) whose batches wait
// for release, and a channel that says when a batch went out.
func heldBatcher() (b *Batcher[int, int], release chan struct{}, out chan int) {
	release, out = make(chan struct{}), make(chan int, 100)
	b = New(100, 1, func(reqs []int) []int {
		out <- len(reqs)
		<-release
		return reqs
	})
	return b, release, out
}

// TryEnqueue refuses a request once limit requests wait (the one out in a
// batch does not count), never calls its then, and serves the others.
func TestTryEnqueueBoundsTheWaiting(t *testing.T) {
	b, release, out := heldBatcher()
	results := make(chan int, 10)
	then := func(n int) { results <- n }
	if !b.TryEnqueue(0, 3, then) {
		t.Fatal("the first request refused")
	}
	<-out // the first is out, alone; the next wait for it
	for i := 1; i <= 3; i++ {
		if !b.TryEnqueue(i, 3, then) {
			t.Fatalf("request %d refused with %d waiting, limit 3", i, b.Waiting())
		}
	}
	if b.TryEnqueue(4, 3, func(int) { t.Error("then called for a refused request") }) {
		t.Fatal("a request accepted with 3 waiting, limit 3")
	}
	if b.Waiting() != 3 {
		t.Fatalf("%d waiting, want 3", b.Waiting())
	}
	close(release)
	got := map[int]bool{}
	for range 4 {
		select {
		case n := <-results:
			got[n] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("results %v: want 0-3", got)
		}
	}
	if !got[0] || !got[1] || !got[2] || !got[3] {
		t.Fatalf("results %v: want 0-3", got)
	}
	// Below the limit again: accepted.
	if !b.TryEnqueue(5, 3, then) {
		t.Fatal("a request refused with nothing waiting")
	}
	if n := <-results; n != 5 {
		t.Fatalf("result %d, want 5", n)
	}
}

// WaitFewer returns once no more than n requests wait — when a batch takes
// them — and false when its context ends first.
func TestWaitFewerWaitsForTheQueueToShrink(t *testing.T) {
	b, release, out := heldBatcher()
	b.Enqueue(0, func(int) {})
	<-out
	for i := 1; i <= 5; i++ {
		b.Enqueue(i, func(int) {})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if b.WaitFewer(ctx, 2) {
		t.Fatal("WaitFewer(2) returned true with 5 waiting")
	}
	if !b.WaitFewer(context.Background(), 5) {
		t.Fatal("WaitFewer(5) returned false with 5 waiting")
	}
	// What waits when it returns: 5 until release lets the batch out.
	type answer struct {
		ok      bool
		waiting int
	}
	done := make(chan answer, 1)
	go func() {
		ok := b.WaitFewer(context.Background(), 2)
		done <- answer{ok, b.Waiting()}
	}()
	// Let the batch out only once the waiter is parked on the queue.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		b.mu.Lock()
		parked := b.shrunk != nil
		b.mu.Unlock()
		if parked {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("WaitFewer(2) with 5 waiting never waited for the queue to shrink")
		}
	}
	close(release)
	select {
	case a := <-done:
		if !a.ok || a.waiting > 2 {
			t.Fatalf("WaitFewer(2) = %v with %d waiting, want true with at most 2", a.ok, a.waiting)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitFewer(2) never returned after the batch took the waiting requests")
	}
}
