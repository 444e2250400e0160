package firepath

import (
	"sync"
	"time"

	"github.com/cronswap/cronswap/internal/record"
)

// How the stall watch notices that this process did not run for a while
// (frozen by SIGSTOP, a paused VM, a stop-the-world pause).
const (
	// stallTick is how often the watch notes that the process runs.
	stallTick = 100 * time.Millisecond
	// stallThreshold is the gap between two notes that counts as a stall:
	// an action's end seen within it after a stall may have happened
	// during the stall.
	stallThreshold = time.Second
)

// stallWatch notes when this process last ran, so that the end of an
// action seen only after the process stalled is recorded as observed (with
// the bound it happened after), not as the action's end (docs/locks.md,
// "The record tells the truth"). Safe for concurrent use.
type stallWatch struct {
	mu sync.Mutex
	// last is when the process was last seen running (monotonic);
	// stallFrom and stallTo the last stall seen.
	last, stallFrom, stallTo time.Time
	stop                     chan struct{}
	done                     chan struct{}
	closeOnce                sync.Once
}

// stalls says, for an action's end seen at now (monotonic), whether the
// process stalled just before: then the end happened after from (and
// could only be seen at now).
type stalls interface {
	endedAfter(now time.Time) (from time.Time, stalled bool)
}

func newStallWatch() *stallWatch {
	w := &stallWatch{last: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	go w.loop()
	return w
}

func (w *stallWatch) loop() {
	defer close(w.done)
	t := time.NewTicker(stallTick)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
			w.note(time.Now())
		}
	}
}

// note records that the process runs at now; a gap since the last note
// longer than stallThreshold is a stall.
func (w *stallWatch) note(now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if now.Sub(w.last) > stallThreshold {
		w.stallFrom, w.stallTo = w.last, now
	}
	w.last = now
}

// endedAfter implements stalls: the process stalled just before now when
// no note was taken for longer than stallThreshold (the stall is seen
// before the watch saw it), or when the watch's last stall ended less than
// stallThreshold ago.
func (w *stallWatch) endedAfter(now time.Time) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case now.Sub(w.last) > stallThreshold:
		return w.last, true
	case !w.stallTo.IsZero() && now.Sub(w.stallTo) < stallThreshold:
		return w.stallFrom, true
	}
	return time.Time{}, false
}

func (w *stallWatch) close() {
	w.closeOnce.Do(func() { close(w.stop) })
	<-w.done
}

// endSeen is the end of a run that started at startedAt, as this process
// sees it now: when the process stalled just before, the action may have
// ended during the stall, so the end is marked observed, with the bound it
// happened after (on the runner's clock, not before the run started).
func (r *Runner) endSeen(startedAt time.Time) record.RunEnd {
	end := record.RunEnd{StartedAt: startedAt, EndedAt: r.clock.Now()}
	seen := time.Now()
	if from, stalled := r.stalls.endedAfter(seen); stalled {
		end.Observed = true
		end.After = laterOf(startedAt, end.EndedAt.Add(-seen.Sub(from)))
	}
	return end
}
