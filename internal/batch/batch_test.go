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
