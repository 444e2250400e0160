package daemon

import (
	"testing"
	"time"
)

// gotTurn returns a channel closed once turn(id) returned for a fire
// started now, and where its gate is put.
func gotTurn(g *handOverGates, id string) (<-chan struct{}, **fireGate) {
	done := make(chan struct{})
	var gate *fireGate
	go func() {
		defer close(done)
		gate = g.turn(id)
	}()
	return done, &gate
}

func waitClosed(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func waitWaiting(t *testing.T, g *handOverGates, n int) {
	t.Helper()
	waitFor(t, 10*time.Second, "fires waiting", func() bool { return g.waiting() == n })
}

func notClosed(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
		t.Fatalf("%s", what)
	default:
	}
}

// Without a hand-over a fire goes its way at once; a fire of a job the
// re-division just armed waits from before the job is held until its
// hand-over is released, and the fires held take their turns one after
// the other, the last one removing the gate; a fire after the release
// does not wait behind them.
func TestHandOverGatesHoldAFireUntilTheHandOverThenInTurn(t *testing.T) {
	g := newHandOverGates()
	if gate := g.turn("a"); gate != nil {
		t.Fatal("a fire with no hand-over under way was held")
	}
	g.expect(func(id string) bool { return id == "a" })
	if gate := g.turn("b"); gate != nil {
		t.Fatal("a fire of a job not just armed was held")
	}
	first, firstGate := gotTurn(g, "a")
	waitWaiting(t, g, 1)
	g.hold([]string{"a"})
	second, secondGate := gotTurn(g, "a")
	waitWaiting(t, g, 2)
	notClosed(t, first, "a fire went before its job's hand-over was released")
	g.release("a")
	waitClosed(t, first, "the first fire's turn")
	notClosed(t, second, "the second fire went before the first was done")
	if gate := g.turn("a"); gate != nil {
		t.Fatal("a fire after the release was held behind the fires held before it")
	}
	g.done("a", *firstGate)
	waitClosed(t, second, "the second fire's turn")
	g.done("a", *secondGate)
	if gate := g.turn("a"); gate != nil || g.active.Load() {
		t.Fatal("a fire after the hand-over and its waiting fires was held")
	}
}

// hold lets go of the fires gated under the expectation whose jobs are
// not held (their hand-over offers nothing), and a job released with no
// fire waiting leaves no gate.
func TestHandOverGatesLetGoOfJobsNotHeld(t *testing.T) {
	g := newHandOverGates()
	g.expect(func(string) bool { return true })
	fire, gate := gotTurn(g, "x")
	waitWaiting(t, g, 1)
	g.hold([]string{"y"})
	waitClosed(t, fire, "the fire of a job not held")
	g.done("x", *gate)
	g.release("y")
	g.release("y") // idempotent
	if g.active.Load() || len(g.gates) != 0 {
		t.Fatalf("gates %v left after every hand-over was released", g.gates)
	}
}
