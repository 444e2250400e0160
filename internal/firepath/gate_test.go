package firepath

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// gateWait polls cond until it holds, failing the test after a deadline.
// The poll only observes; no test relies on a sleep for ordering.
func gateWait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// gateResult is what one background Acquire returned.
type gateResult struct {
	name    string
	release func()
	err     error
}

// acquireAsync starts Acquire(ctx, category) on its own goroutine, waits
// until it is queued (Waiting reaches want) and returns the channel of its
// result. Queuing one waiter at a time fixes the order of arrival.
func acquireAsync(t *testing.T, g *Gate, ctx context.Context, category, name string, want int) <-chan gateResult {
	t.Helper()
	ch := make(chan gateResult, 1)
	go func() {
		rel, err := g.Acquire(ctx, category)
		ch <- gateResult{name: name, release: rel, err: err}
	}()
	gateWait(t, fmt.Sprintf("%s queued (%d waiting)", name, want), func() bool { return g.Waiting() == want })
	return ch
}

// recv returns the result of ch, failing the test if none comes in time.
func recv(t *testing.T, ch <-chan gateResult) gateResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("Acquire did not return")
		return gateResult{}
	}
}

// notYet fails the test if ch already has a result: the waiter must still
// be waiting (its Acquire has not returned). Waiting() tells it is queued;
// this tells nothing was delivered.
func notYet(t *testing.T, ch <-chan gateResult, what string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s: Acquire returned (err %v) while it should wait", what, r.err)
	default:
	}
}

// admissionOrder starts the waiters' admissions by calling open, then
// releases each admitted fire in turn and returns the names in the order
// they were admitted. With one slot free at a time the order received is
// the order of admission.
func admissionOrder(t *testing.T, g *Gate, chans []<-chan gateResult, open func()) []string {
	t.Helper()
	merged := make(chan gateResult, len(chans))
	for _, ch := range chans {
		go func() {
			select {
			case r := <-ch:
				merged <- r
			case <-time.After(10 * time.Second):
				merged <- gateResult{err: errors.New("Acquire did not return")}
			}
		}()
	}
	open()
	var order []string
	for range chans {
		r := <-merged
		if r.err != nil {
			t.Fatalf("%s: %v (admitted so far: %v)", r.name, r.err, order)
		}
		order = append(order, r.name)
		r.release()
	}
	return order
}

func mustAcquire(t *testing.T, g *Gate, category string) func() {
	t.Helper()
	rel, err := g.Acquire(context.Background(), category)
	if err != nil {
		t.Fatalf("Acquire(%q): %v", category, err)
	}
	return rel
}

// Without any bound every fire is admitted at once and counted; release is
// idempotent.
func TestGateUnboundedAdmitsAtOnce(t *testing.T) {
	t.Parallel()
	g := NewGate(0, nil, 1)
	var rels []func()
	for range 100 {
		rels = append(rels, mustAcquire(t, g, "a"))
	}
	rels = append(rels, mustAcquire(t, g, ""))
	if got := g.Running("a"); got != 100 {
		t.Fatalf("Running(a) = %d, want 100", got)
	}
	if got := g.Running(""); got != 1 {
		t.Fatalf("Running(\"\") = %d, want 1", got)
	}
	if got := g.Waiting(); got != 0 {
		t.Fatalf("Waiting = %d, want 0 (the queue limit 1 must not apply to admitted fires)", got)
	}
	for _, r := range rels {
		r()
		r()
	}
	if got := g.Running("a"); got != 0 {
		t.Fatalf("Running(a) after releasing twice = %d, want 0", got)
	}
	if got := g.Running("never"); got != 0 {
		t.Fatalf("Running(never) = %d", got)
	}
}

// Interleaving: categories A:5, B:3, C:2 waiting at once behind one slot are
// admitted A B C A B C A B A A.
func TestGateInterleavesCategories(t *testing.T) {
	t.Parallel()
	g := NewGate(1, nil, 0)
	hold := mustAcquire(t, g, "hold")
	var chans []<-chan gateResult
	n := 0
	for _, c := range []struct {
		cat string
		n   int
	}{{"A", 5}, {"B", 3}, {"C", 2}} {
		for i := range c.n {
			n++
			chans = append(chans, acquireAsync(t, g, context.Background(), c.cat, fmt.Sprintf("%s%d", c.cat, i+1), n))
		}
	}
	order := admissionOrder(t, g, chans, hold)
	if got, want := strings.Join(order, " "), "A1 B1 C1 A2 B2 C2 A3 B3 A4 A5"; got != want {
		t.Fatalf("admission order %q, want %q", got, want)
	}
	if g.Waiting() != 0 {
		t.Fatalf("Waiting = %d after all admitted", g.Waiting())
	}
}

// Within a category fires go in arrival order; a category arriving later
// joins the ring behind the others.
func TestGateFIFOWithinCategoryAndLateCategory(t *testing.T) {
	t.Parallel()
	g := NewGate(1, nil, 0)
	hold := mustAcquire(t, g, "")
	var chans []<-chan gateResult
	for i, w := range []struct{ cat, name string }{{"A", "a1"}, {"A", "a2"}, {"B", "b1"}, {"A", "a3"}, {"C", "c1"}} {
		chans = append(chans, acquireAsync(t, g, context.Background(), w.cat, w.name, i+1))
	}
	order := admissionOrder(t, g, chans, hold)
	if got, want := strings.Join(order, " "), "a1 b1 c1 a2 a3"; got != want {
		t.Fatalf("order %q, want %q", got, want)
	}
}

// A category at its own max_running waits without holding up other
// categories: with no global bound the others are admitted at once, and
// with a global bound a freed slot goes to the next category that can take
// it, passing over the one at its bound.
func TestGateCategoryBoundDoesNotBlockOthers(t *testing.T) {
	t.Parallel()
	t.Run("no global bound", func(t *testing.T) {
		t.Parallel()
		g := NewGate(0, map[string]int{"billing": 2}, 0)
		b1 := mustAcquire(t, g, "billing")
		b2 := mustAcquire(t, g, "billing")
		w3 := acquireAsync(t, g, context.Background(), "billing", "b3", 1)
		w4 := acquireAsync(t, g, context.Background(), "billing", "b4", 2)
		// Other categories (bounded or not) go at once.
		var others []func()
		for range 50 {
			others = append(others, mustAcquire(t, g, "reports"), mustAcquire(t, g, ""))
		}
		notYet(t, w3, "b3")
		if got := g.Running("billing"); got != 2 {
			t.Fatalf("Running(billing) = %d, want 2", got)
		}
		for _, r := range others {
			r()
		}
		notYet(t, w3, "b3 after other categories released")
		b1()
		r3 := recv(t, w3)
		if r3.err != nil {
			t.Fatal(r3.err)
		}
		notYet(t, w4, "b4")
		if got := g.Running("billing"); got != 2 {
			t.Fatalf("Running(billing) = %d, want 2", got)
		}
		b2()
		r4 := recv(t, w4)
		if r4.err != nil {
			t.Fatal(r4.err)
		}
		r3.release()
		r4.release()
		if got := g.Running("billing"); got != 0 {
			t.Fatalf("Running(billing) = %d, want 0", got)
		}
	})
	t.Run("global bound", func(t *testing.T) {
		t.Parallel()
		g := NewGate(2, map[string]int{"billing": 1}, 0)
		b1 := mustAcquire(t, g, "billing")
		// billing is at its bound; the global bound still has room.
		wb := acquireAsync(t, g, context.Background(), "billing", "b2", 1)
		o1 := mustAcquire(t, g, "other") // admitted past the waiting billing fire
		// Now the global bound is reached too: these wait behind billing.
		wc := acquireAsync(t, g, context.Background(), "C", "c1", 2)
		wd := acquireAsync(t, g, context.Background(), "D", "d1", 3)
		// A slot frees that billing cannot use (billing is still at 1):
		// billing is passed over and C, next in the ring, goes.
		o1()
		rc := recv(t, wc)
		if rc.err != nil {
			t.Fatal(rc.err)
		}
		notYet(t, wb, "b2 (billing at its bound)")
		notYet(t, wd, "d1 (global bound reached)")
		// billing's own slot frees: the turn is D's (after C) and D can go;
		// billing's waiter needs the global slot too, so it goes after.
		b1()
		rd := recv(t, wd)
		if rd.err != nil {
			t.Fatal(rd.err)
		}
		notYet(t, wb, "b2 (global bound reached)")
		rc.release()
		rb := recv(t, wb)
		if rb.err != nil {
			t.Fatal(rb.err)
		}
		rb.release()
		rd.release()
		if g.Waiting() != 0 || g.Running("billing") != 0 || g.Running("C") != 0 || g.Running("D") != 0 {
			t.Fatalf("left over: waiting %d running billing %d", g.Waiting(), g.Running("billing"))
		}
	})
}

// A waiter whose context ends leaves the queue, gets ctx.Err() and is not
// admitted later; the others keep their order.
func TestGateContextCancelRemovesWaiter(t *testing.T) {
	t.Parallel()
	g := NewGate(1, nil, 0)
	hold := mustAcquire(t, g, "x")
	ctx, cancel := context.WithCancel(context.Background())
	w1 := acquireAsync(t, g, context.Background(), "A", "a1", 1)
	wc := acquireAsync(t, g, ctx, "B", "cancelled", 2)
	w2 := acquireAsync(t, g, context.Background(), "A", "a2", 3)
	w3 := acquireAsync(t, g, context.Background(), "C", "c1", 4)
	cancel()
	r := recv(t, wc)
	if !errors.Is(r.err, context.Canceled) || r.release != nil {
		t.Fatalf("cancelled waiter: release %v err %v, want nil and context.Canceled", r.release != nil, r.err)
	}
	if got := g.Waiting(); got != 3 {
		t.Fatalf("Waiting = %d after cancel, want 3", got)
	}
	order := admissionOrder(t, g, []<-chan gateResult{w1, w2, w3}, hold)
	if g.Running("B") != 0 {
		t.Fatal("the cancelled waiter was admitted")
	}
	if got, want := strings.Join(order, " "), "a1 c1 a2"; got != want {
		t.Fatalf("order %q, want %q", got, want)
	}

	// A context already ended is refused before anything else.
	done, stop := context.WithCancel(context.Background())
	stop()
	if _, err := g.Acquire(done, "A"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire with an ended ctx: %v", err)
	}
	// A deadline passing while waiting gives DeadlineExceeded.
	hold = mustAcquire(t, g, "x")
	dctx, dcancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer dcancel()
	if _, err := g.Acquire(dctx, "A"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire past its deadline: %v", err)
	}
	if g.Waiting() != 0 {
		t.Fatalf("Waiting = %d after the deadline", g.Waiting())
	}
	hold()
	if g.Running("x") != 0 || g.Running("A") != 0 {
		t.Fatal("slots left admitted")
	}
}

// Close wakes every waiter with ErrGateClosed and refuses later fires on
// both paths; fires already admitted release normally.
func TestGateClose(t *testing.T) {
	t.Parallel()
	g := NewGate(0, map[string]int{"billing": 1}, 0)
	b := mustAcquire(t, g, "billing")
	free := mustAcquire(t, g, "other")
	w1 := acquireAsync(t, g, context.Background(), "billing", "b2", 1)
	w2 := acquireAsync(t, g, context.Background(), "billing", "b3", 2)
	g.Close()
	for _, ch := range []<-chan gateResult{w1, w2} {
		if r := recv(t, ch); !errors.Is(r.err, ErrGateClosed) || r.release != nil {
			t.Fatalf("%s: err %v, want ErrGateClosed", r.name, r.err)
		}
	}
	if g.Waiting() != 0 {
		t.Fatalf("Waiting = %d after Close", g.Waiting())
	}
	for _, cat := range []string{"billing", "other"} {
		if _, err := g.Acquire(context.Background(), cat); !errors.Is(err, ErrGateClosed) {
			t.Fatalf("Acquire(%s) after Close: %v, want ErrGateClosed", cat, err)
		}
	}
	b()
	free()
	if g.Running("billing") != 0 || g.Running("other") != 0 {
		t.Fatal("releases after Close did not count")
	}
	g.Close() // twice is harmless
}

// queueLimit bounds the waiting fires, not the admitted ones.
func TestGateQueueFull(t *testing.T) {
	t.Parallel()
	g := NewGate(1, nil, 2)
	hold := mustAcquire(t, g, "x")
	w1 := acquireAsync(t, g, context.Background(), "A", "a1", 1)
	w2 := acquireAsync(t, g, context.Background(), "B", "b1", 2)
	if _, err := g.Acquire(context.Background(), "C"); !errors.Is(err, ErrGateFull) {
		t.Fatalf("third waiter: %v, want ErrGateFull", err)
	}
	if g.Waiting() != 2 {
		t.Fatalf("Waiting = %d, want 2", g.Waiting())
	}
	hold()
	r1 := recv(t, w1)
	// One left the queue: there is room for one more waiter again.
	w3 := acquireAsync(t, g, context.Background(), "C", "c1", 2)
	r1.release()
	r2 := recv(t, w2)
	r2.release()
	r3 := recv(t, w3)
	if r3.err != nil {
		t.Fatal(r3.err)
	}
	r3.release()
}

// A second release of a bounded fire frees nothing more: one slot, one
// waiter admitted.
func TestGateReleaseIdempotent(t *testing.T) {
	t.Parallel()
	g := NewGate(0, map[string]int{"A": 1}, 0)
	rel := mustAcquire(t, g, "A")
	w1 := acquireAsync(t, g, context.Background(), "A", "a2", 1)
	w2 := acquireAsync(t, g, context.Background(), "A", "a3", 2)
	rel()
	r1 := recv(t, w1)
	rel()
	rel()
	notYet(t, w2, "a3 after a repeated release")
	if g.Running("A") != 1 || g.Waiting() != 1 {
		t.Fatalf("Running %d Waiting %d, want 1 and 1", g.Running("A"), g.Waiting())
	}
	r1.release()
	r2 := recv(t, w2)
	r2.release()
	r2.release()
	if g.Running("A") != 0 {
		t.Fatalf("Running = %d, want 0", g.Running("A"))
	}
}

// Under concurrent load, with waiters cancelled at random, the bounds are
// never exceeded, and at the end nothing is left waiting or counted.
func TestGateBoundsUnderLoad(t *testing.T) {
	t.Parallel()
	const global = 4
	bounds := map[string]int{"A": 2, "B": 1}
	g := NewGate(global, bounds, 0)
	var total atomic.Int32
	cur := map[string]*atomic.Int32{"A": {}, "B": {}, "C": {}}
	var admitted, refused atomic.Int32
	var wg sync.WaitGroup
	for i := range 400 {
		cat := []string{"A", "B", "C"}[i%3]
		wg.Go(func() {
			ctx := context.Background()
			if i%7 == 0 {
				c, cancel := context.WithCancel(ctx)
				cancel()
				ctx = c
			} else if i%5 == 0 {
				c, cancel := context.WithTimeout(ctx, time.Duration(i%3)*time.Millisecond)
				defer cancel()
				ctx = c
			}
			rel, err := g.Acquire(ctx, cat)
			if err != nil {
				if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("Acquire: %v", err)
				}
				refused.Add(1)
				return
			}
			admitted.Add(1)
			if n := total.Add(1); n > global {
				t.Errorf("%d fires admitted, global bound %d", n, global)
			}
			if n := cur[cat].Add(1); bounds[cat] > 0 && int(n) > bounds[cat] {
				t.Errorf("%d fires of %s admitted, bound %d", n, cat, bounds[cat])
			}
			cur[cat].Add(-1)
			total.Add(-1)
			rel()
		})
	}
	wg.Wait()
	if admitted.Load()+refused.Load() != 400 || admitted.Load() == 0 {
		t.Fatalf("admitted %d refused %d", admitted.Load(), refused.Load())
	}
	if g.Waiting() != 0 {
		t.Fatalf("Waiting = %d at the end", g.Waiting())
	}
	for _, c := range []string{"A", "B", "C"} {
		if n := g.Running(c); n != 0 {
			t.Fatalf("Running(%s) = %d at the end", c, n)
		}
	}
}

// Fast path: no bounds at all (the default configuration).
func BenchmarkGateUnbounded(b *testing.B) {
	g := NewGate(0, nil, 0)
	ctx := context.Background()
	cats := []string{"", "a", "b", "c"}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			rel, err := g.Acquire(ctx, cats[i%len(cats)])
			if err != nil {
				b.Fatal(err)
			}
			rel()
			i++
		}
	})
}

// Slow path: a global bound and a category bound, with contention.
func BenchmarkGateBounded(b *testing.B) {
	g := NewGate(8, map[string]int{"a": 2}, 0)
	ctx := context.Background()
	cats := []string{"", "a", "b", "c"}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			rel, err := g.Acquire(ctx, cats[i%len(cats)])
			if err != nil {
				b.Fatal(err)
			}
			rel()
			i++
		}
	})
}

// A waiter admitted just as its context ended does not keep the slot: it
// gets ctx.Err() and the slot goes to the next waiter. (Driven through the
// internal steps of Acquire, which cannot be ordered from outside.)
func TestGateAdmittedAsContextEnds(t *testing.T) {
	t.Parallel()
	g := NewGate(1, nil, 0)
	hold := mustAcquire(t, g, "x")
	_, w, err := g.enqueue("A")
	if w == nil || err != nil {
		t.Fatalf("enqueue: waiter %v err %v, want queued", w != nil, err)
	}
	next := acquireAsync(t, g, context.Background(), "B", "b1", 2)
	ctx, cancel := context.WithCancel(context.Background())
	hold() // admits w
	select {
	case <-w.ready:
	default:
		t.Fatal("the waiter was not admitted by the release")
	}
	cancel()
	if rel, err := g.settle(ctx, w); rel != nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("settle: release %v err %v, want nil and context.Canceled", rel != nil, err)
	}
	if g.Running("A") != 0 {
		t.Fatalf("Running(A) = %d, want 0", g.Running("A"))
	}
	r := recv(t, next)
	if r.err != nil {
		t.Fatalf("next waiter: %v", r.err)
	}
	r.release()
}

// A category leaving the ring before the turn's position (its last waiter
// cancelled) does not make the ring skip the category whose turn it is.
func TestGateCancelBeforeTurnKeepsTurn(t *testing.T) {
	t.Parallel()
	g := NewGate(1, nil, 0)
	hold := mustAcquire(t, g, "x")
	ctx, cancel := context.WithCancel(context.Background())
	w1 := acquireAsync(t, g, context.Background(), "A", "a1", 1)
	wc := acquireAsync(t, g, ctx, "A", "a2", 2)
	wb := acquireAsync(t, g, context.Background(), "B", "b1", 3)
	wcc := acquireAsync(t, g, context.Background(), "C", "c1", 4)
	hold() // a1 admitted; B's turn next
	r1 := recv(t, w1)
	if r1.err != nil {
		t.Fatal(r1.err)
	}
	cancel() // A leaves the ring, ahead of the turn
	if r := recv(t, wc); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("a2: %v, want context.Canceled", r.err)
	}
	order := admissionOrder(t, g, []<-chan gateResult{wb, wcc}, r1.release)
	if got, want := strings.Join(order, " "), "b1 c1"; got != want {
		t.Fatalf("order %q, want %q", got, want)
	}
}
