package daemon

import (
	"sync"
	"sync/atomic"
)

// handOverGates keeps the engine's fires of a job behind its hand-over's
// offers. A re-division arms an orphaned job at once and then offers the
// slots of its hand-over window, one claim after the other, oldest first;
// the engine meanwhile fires the job's current slots. A claim takes no
// slot older than one already claimed, so an engine fire claimed before
// the hand-over's offers are answered left them skipped ("a later slot was
// claimed"), and under a slow database that was most of the window.
//
// So from just before the re-division arms its jobs (expect) until the
// hand-over of a job has offered its slots (release), a fire of that job
// waits for its turn (turn). Once the hand-over is done the fires held
// meanwhile are offered in the order they took their turn, each claimed
// before the next (and with the hand-over window to start in, their slots
// being due during the hand-over); the fires after the release go the
// usual way at once, and the last of those held removes the gate.
// Everything is idempotent and releases on every path: a gate never holds
// a fire beyond its hand-over.
type handOverGates struct {
	// active is false while there is no gate and no expectation: the
	// fire path's check is then one atomic load.
	active atomic.Bool

	mu sync.Mutex
	// expected reports, until hold, whether a fire of a job not yet
	// gated is of a job the re-division under way just armed at once.
	expected func(id string) bool
	gates    map[string]*fireGate
}

// fireGate is the turn of one job's fires: the token is in turn while a
// fire may claim; the hand-over holds it (the channel empty) until
// release.
type fireGate struct {
	turn    chan struct{}
	waiting int  // fires between taking their place and giving back the turn
	done    bool // the hand-over released the job
}

func newHandOverGates() *handOverGates {
	return &handOverGates{gates: map[string]*fireGate{}}
}

// expect gates, until hold, the fires of the jobs for which justArmed
// reports true: the jobs a re-division arms at once, from before it arms
// the first of them.
func (g *handOverGates) expect(justArmed func(id string) bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.expected = justArmed
	g.active.Store(true)
}

// hold gates the fires of ids until release, ends the expectation, and
// lets go of the jobs a fire gated under it that are not among ids.
func (g *handOverGates) hold(ids []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.expected = nil
	held := make(map[string]bool, len(ids))
	for _, id := range ids {
		held[id] = true
		if gate := g.gates[id]; gate == nil || gate.done {
			// (A gate done already belongs to an earlier hand-over: its
			// fires still take their turns on it, and remove nothing.)
			g.gates[id] = &fireGate{turn: make(chan struct{}, 1)}
		}
	}
	for id, gate := range g.gates {
		if !held[id] {
			g.releaseLocked(id, gate)
		}
	}
	g.active.Store(len(g.gates) > 0)
}

// release ends the hand-over of each of ids: its fires that wait take
// their turns, those after them go the usual way. A job not gated, or
// released already, is left as it is.
func (g *handOverGates) release(ids ...string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, id := range ids {
		if gate := g.gates[id]; gate != nil {
			g.releaseLocked(id, gate)
		}
	}
	g.active.Store(g.expected != nil || len(g.gates) > 0)
}

func (g *handOverGates) releaseLocked(id string, gate *fireGate) {
	if gate.done {
		return
	}
	gate.done = true
	if gate.waiting == 0 {
		delete(g.gates, id)
		return
	}
	gate.turn <- struct{}{}
}

// turn returns nil when a fire of job id may go the usual way: no
// hand-over of the job is under way (released ones included). Otherwise
// it waits until the fire's turn (the job's hand-over released, and the
// fires that took their place before it done) and returns the gate, which
// the caller hands back to done once its claim is answered.
func (g *handOverGates) turn(id string) *fireGate {
	if !g.active.Load() {
		return nil
	}
	g.mu.Lock()
	gate := g.gates[id]
	if gate != nil && gate.done {
		// Released: the fires held meanwhile take their turns, this one
		// goes the usual way. Under a slow database a queue of fires each
		// claimed after the one before would only grow.
		g.mu.Unlock()
		return nil
	}
	if gate == nil {
		if g.expected == nil || !g.expected(id) {
			g.mu.Unlock()
			return nil
		}
		gate = &fireGate{turn: make(chan struct{}, 1)}
		g.gates[id] = gate
	}
	gate.waiting++
	g.mu.Unlock()
	<-gate.turn
	return gate
}

// done gives back the turn of a fire of job id that turn returned gate
// for: to the next fire waiting, or, when none waits, the gate is removed.
func (g *handOverGates) done(id string, gate *fireGate) {
	g.mu.Lock()
	defer g.mu.Unlock()
	gate.waiting--
	if gate.waiting > 0 {
		gate.turn <- struct{}{}
		return
	}
	if g.gates[id] == gate {
		delete(g.gates, id)
	}
	g.active.Store(g.expected != nil || len(g.gates) > 0)
}

// waiting returns how many fires wait for their turn or claim in it.
func (g *handOverGates) waiting() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, gate := range g.gates {
		n += gate.waiting
	}
	return n
}
