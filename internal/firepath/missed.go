package firepath

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/schedule"
)

// pendingMiss is a missed range waiting to be recorded.
type pendingMiss struct {
	record.MissedRange
	// next walks the job's slots (nil when unknown): it joins consecutive
	// slots into one range and splits a range around decided slots.
	next record.NextFunc
	// notBefore is when no replica can start a slot of the range any more
	// (the last slot's starting deadline or catch-up window, plus
	// missedMargin): only then is it recorded.
	notBefore time.Time
}

// ledger holds the missed ranges of this process waiting to be recorded,
// per job in slot order. A slot that follows a waiting range of the same
// job and reason (by the job's schedule) extends it, so an outage of an
// every-second job waits as one range, not one entry per slot. It holds at
// most limit ranges.
type ledger struct {
	mu    sync.Mutex
	byJob map[string][]*pendingMiss
	n     int
	limit int
}

func newLedger(limit int) *ledger {
	return &ledger{byJob: map[string][]*pendingMiss{}, limit: limit}
}

// add queues p, joining it to the range it continues; false when the
// ledger is full and p was not queued. A range put back after a failed
// write (again) is queued whatever the bound: it was counted in already.
func (l *ledger) add(p *pendingMiss, again bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	q := l.byJob[p.JobID]
	i := sort.Search(len(q), func(i int) bool { return q[i].From.After(p.From) })
	if i > 0 {
		prev := q[i-1]
		if !p.From.After(prev.To) {
			return true // already waiting
		}
		if p.next != nil && prev.Reason == p.Reason && p.next(prev.To).Equal(p.From) {
			prev.To, prev.Count = p.To, prev.Count+p.Count
			if p.notBefore.After(prev.notBefore) {
				prev.notBefore = p.notBefore
			}
			return true
		}
	}
	if !again && l.n >= l.limit {
		return false
	}
	q = append(q, nil)
	copy(q[i+1:], q[i:])
	q[i] = p
	l.byJob[p.JobID] = q
	l.n++
	return true
}

// take removes and returns the ranges recordable at now.
func (l *ledger) take(now time.Time) []*pendingMiss {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*pendingMiss
	for id, q := range l.byJob {
		kept := q[:0]
		for _, p := range q {
			if now.Before(p.notBefore) {
				kept = append(kept, p)
			} else {
				out = append(out, p)
			}
		}
		l.n -= len(q) - len(kept)
		if len(kept) == 0 {
			delete(l.byJob, id)
		} else {
			l.byJob[id] = kept
		}
	}
	return out
}

// all removes and returns every waiting range.
func (l *ledger) all() []*pendingMiss {
	return l.take(time.Unix(1<<62, 0))
}

// earliest returns the earliest notBefore of the waiting ranges; false
// when none waits.
func (l *ledger) earliest() (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var t time.Time
	for _, q := range l.byJob {
		for _, p := range q {
			if t.IsZero() || p.notBefore.Before(t) {
				t = p.notBefore
			}
		}
	}
	return t, !t.IsZero()
}

// RecordMissed queues a range of slots of s (armed with jitter delay)
// that did not run, to be recorded in job_runs once no replica can start
// any of them any more (see record.Store.RecordMissed). The daemon calls it
// for the gaps it finds at start-up; the runner itself for the fires it
// drops. Without a store it does nothing.
func (r *Runner) RecordMissed(s schedule.Schedule, delay time.Duration, m record.MissedRange) {
	r.queueMissed(s, delay, m)
}

func (r *Runner) queueMissed(s schedule.Schedule, delay time.Duration, m record.MissedRange) {
	if r.missed == nil {
		return
	}
	last := schedule.Due{Schedule: s, Slot: m.To, Delay: delay}
	wait := r.startingDeadline(last)
	if r.opts.CatchupWindow != nil {
		wait = max(wait, r.opts.CatchupWindow(s.ActionName()))
	}
	p := &pendingMiss{MissedRange: m, notBefore: last.At().Add(wait + missedMargin)}
	if r.opts.Slots != nil {
		p.next, _ = r.opts.Slots(s.ID)
	}
	if !r.missed.add(p, false) {
		r.log.Warn("missed slots not recorded: too many waiting to be recorded", "job_id", m.JobID,
			"scheduled_at", m.From, "last_scheduled_at", m.To, "count", m.Count, "reason", m.Reason,
			"missed_backlog", r.opts.MissedBacklog)
	}
}

// reportMissed logs and counts a missed record this replica wrote.
func (r *Runner) reportMissed(m record.MissedRange) {
	r.log.Info("missed slots recorded", "job_id", m.JobID, "scheduled_at", m.From, "last_scheduled_at", m.To,
		"count", m.Count, "reason", m.Reason)
	if h := r.opts.Hooks.Missed; h != nil {
		h(m.JobID, m.Reason, m.Count)
	}
}

// flushTick is how often the flusher looks for recordable ranges.
const flushTick = 250 * time.Millisecond

// flushLoop records the waiting ranges as they become recordable. After a
// failure (the database unreachable) it waits, doubling up to 30 s, or
// until a claim reaches the database again.
func (r *Runner) flushLoop() {
	defer close(r.flushDone)
	t := time.NewTicker(flushTick)
	defer t.Stop()
	var retryAt time.Time
	backoff := time.Second
	for {
		select {
		case <-r.flushStop:
			return
		case <-t.C:
		}
		if time.Now().Before(retryAt) && !r.dbAnswered.Swap(false) {
			continue
		}
		if r.flush(r.clock.Now()) {
			backoff = time.Second
			retryAt = time.Time{}
			continue
		}
		retryAt = time.Now().Add(backoff)
		backoff = min(2*backoff, 30*time.Second)
	}
}

// flushWorkers is how many ranges are recorded at once.
const flushWorkers = 8

// flush records the ranges recordable at now; it reports false when one
// could not be written (it waits again, with the rest of its batch).
func (r *Runner) flush(now time.Time) bool {
	r.flushMu.Lock()
	defer r.flushMu.Unlock()
	due := r.missed.take(now)
	if len(due) == 0 {
		return true
	}
	work := make(chan *pendingMiss)
	var mu sync.Mutex
	var failed []*pendingMiss
	var wg sync.WaitGroup
	for range min(flushWorkers, len(due)) {
		wg.Go(func() {
			for p := range work {
				ctx, cancel := context.WithTimeout(context.Background(), r.opts.OpTimeout)
				written, err := r.opts.Store.RecordMissed(ctx, p.MissedRange, p.next, r.opts.InstanceID, r.clock.Now())
				cancel()
				for _, w := range written {
					r.reportMissed(w)
				}
				if err != nil {
					r.log.Warn("could not record missed slots; trying again", "job_id", p.JobID, "scheduled_at", p.From,
						"last_scheduled_at", p.To, "reason", p.Reason, "error", err)
					mu.Lock()
					failed = append(failed, p)
					mu.Unlock()
				}
			}
		})
	}
	for i, p := range due {
		mu.Lock()
		stop := len(failed) > 0
		if stop {
			failed = append(failed, due[i:]...)
		}
		mu.Unlock()
		if stop {
			break
		}
		work <- p
	}
	close(work)
	wg.Wait()
	for _, p := range failed {
		r.missed.add(p, true)
	}
	return len(failed) == 0
}

// stopFlushing ends the flusher at shutdown: it records what becomes
// recordable within missedFlushAtShutdown, and logs what is left — lost
// with the process; if no replica runs those slots, the next start-up
// finds them as a gap (no_replica_running), unless another replica has run
// later slots of the job by then.
func (r *Runner) stopFlushing() {
	if r.missed == nil {
		return
	}
	r.flushOnce.Do(func() { close(r.flushStop) })
	<-r.flushDone
	until := time.Now().Add(missedFlushAtShutdown)
	for {
		ok := r.flush(r.clock.Now())
		next, waiting := r.missed.earliest()
		if !waiting || !ok || time.Now().After(until) {
			break
		}
		// next is on the runner's clock; wait on the real one.
		wait := next.Sub(r.clock.Now())
		if time.Now().Add(wait).After(until) {
			break
		}
		time.Sleep(max(wait, 10*time.Millisecond))
	}
	for _, p := range r.missed.all() {
		r.log.Warn("missed slots not recorded before exit", "job_id", p.JobID, "scheduled_at", p.From,
			"last_scheduled_at", p.To, "count", p.Count, "reason", p.Reason)
	}
}
