package triggers

import (
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Retrying a request the database did not answer for: the first wait,
// doubling up to the last, as long as the request may still start.
const (
	retryFirst = time.Second
	retryMax   = 30 * time.Second
)

// taskStep is what a task does next.
type taskStep int

const (
	// stepRun runs a pending request.
	stepRun taskStep = iota
	// stepReject marks a malformed request rejected.
	stepReject
	// stepReconcile copies the outcome of a running request's run record.
	stepReconcile
	// stepUnknownAction decides a request whose action this replica
	// lacks, once a replica that has it had its chance.
	stepUnknownAction
)

// task is one request being handled.
type task struct {
	key  string
	req  Request
	step taskStep
	// why is the rejection (stepReject) or the unknown action's error.
	why string
	// seen is when this replica was handed the request (for a backfill,
	// when its slot was offered); the starting deadline counts from it.
	seen time.Time
	// runID is the run's id once known (stepUnknownAction).
	runID string
	// retries counts the times the request was put back after the
	// database did not answer.
	retries int
	// queued: waiting for a worker, its job's turn or a retry; dropped:
	// taken by another replica while it waited.
	queued, dropped bool
	// offered: a backfilled slot its job's queue let go (the job's next
	// slot waits for it to be done).
	offered bool
}

// jobBackfill is one job's backfill requests waiting for their turn.
type jobBackfill struct {
	waiting []*task // by slot
	busy    bool    // a slot of the job is being offered
	next    time.Time
	timer   *time.Timer
}

// requestKey names a request among those handled: its _id's type and
// bytes, so that _ids of any type (a malformed request's too) are told
// apart.
func requestKey(id bson.RawValue) string { return string(rune(id.Type)) + string(id.Value) }

// takenElsewhere reports whether a request with status has been taken by
// a replica for good: claimed, waiting on the lock, or its run (or its
// slot's) decided. Refusals that yield to a run (rejected for a lacking
// action, not run) do not count: this replica may still run it.
func takenElsewhere(status string) bool {
	switch status {
	case "", StatusRejected, StatusNotRun:
		return false
	}
	return true
}

// add queues t unless its request is being handled already.
func (s *Sink) add(t *task) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.open[t.key] != nil {
		return
	}
	s.open[t.key] = t
	t.queued = true
	if t.step == stepRun && t.req.Backfill() {
		q := s.backfills[t.req.JobID]
		if q == nil {
			q = &jobBackfill{}
			s.backfills[t.req.JobID] = q
		}
		i, _ := slices.BinarySearchFunc(q.waiting, t.req.Slot, func(w *task, slot time.Time) int { return w.req.Slot.Compare(slot) })
		q.waiting = slices.Insert(q.waiting, i, t)
		s.offerBackfill(t.req.JobID)
		return
	}
	s.queue(t)
}

// queue hands a task to the workers: at once, or, for a request of a job
// this replica does not own, after the claim grace. Called with s.mu held.
func (s *Sink) queue(t *task) {
	if t.step == stepRun && t.retries == 0 && s.opts.Owns != nil && !s.opts.Owns(t.req.JobID) {
		if wait := s.opts.ClaimGrace - time.Since(t.seen); wait > 0 {
			s.laterLocked(t, wait)
			return
		}
	}
	s.ready = append(s.ready, t)
	s.dispatch()
}

// drop forgets the queued task of request key (another replica took the
// request) and reports whether there was one; a task being handled goes
// on.
func (s *Sink) drop(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.open[key]
	if t == nil || !t.queued || t.step != stepRun {
		return false
	}
	t.dropped = true
	delete(s.open, key)
	if q := s.backfills[t.req.JobID]; q != nil && t.req.Backfill() {
		if i := slices.Index(q.waiting, t); i >= 0 {
			q.waiting = slices.Delete(q.waiting, i, i+1)
		}
		s.backfillDone(t)
	}
	return true
}

// backfillDone lets t's job offer its next slot once t, an offered slot,
// is done. Called with s.mu held.
func (s *Sink) backfillDone(t *task) {
	if !t.offered {
		return
	}
	t.offered = false
	if q := s.backfills[t.req.JobID]; q != nil {
		q.busy = false
	}
	s.offerBackfill(t.req.JobID)
}

// offerBackfill moves job's oldest waiting slot to the ready queue when
// no slot of the job is being offered and its interval has passed (a
// timer comes back otherwise). Called with s.mu held.
func (s *Sink) offerBackfill(job string) {
	q := s.backfills[job]
	if q == nil || q.busy || q.timer != nil || s.closed {
		return
	}
	if len(q.waiting) == 0 {
		delete(s.backfills, job)
		return
	}
	now := time.Now()
	if wait := q.next.Sub(now); wait > 0 {
		q.timer = time.AfterFunc(wait, func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			q.timer = nil
			s.offerBackfill(job)
		})
		return
	}
	t := q.waiting[0]
	q.waiting = q.waiting[1:]
	q.busy, q.next = true, now.Add(s.opts.BackfillInterval)
	t.seen, t.offered = now, true
	s.queue(t)
}

// dispatch starts a worker for a task just queued, unless MaxInFlight
// run (each takes the next task once its own is done). Called with s.mu
// held.
func (s *Sink) dispatch() {
	if s.workers < s.opts.MaxInFlight && len(s.ready) > 0 && !s.closed {
		s.workers++
		s.wg.Add(1)
		go s.work()
	}
}

// work handles tasks until none waits.
func (s *Sink) work() {
	defer s.wg.Done()
	for {
		t := s.next()
		if t == nil {
			return
		}
		s.handle(t)
	}
}

// next takes the oldest waiting task; nil (the worker ends) when none
// waits or the sink is closed.
func (s *Sink) next() *task {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.ready) > 0 && !s.closed {
		t := s.ready[0]
		s.ready[0] = nil
		s.ready = s.ready[1:]
		if t.dropped {
			continue
		}
		t.queued = false
		return t
	}
	s.workers--
	return nil
}

// later puts t back in the queue after d (it keeps its place in open,
// and counts as queued meanwhile: another replica may take it).
func (s *Sink) later(t *task, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.laterLocked(t, d)
}

// laterLocked is later with s.mu held.
func (s *Sink) laterLocked(t *task, d time.Duration) {
	t.queued = true
	time.AfterFunc(d, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.closed || t.dropped {
			return
		}
		s.ready = append(s.ready, t)
		s.dispatch()
	})
}

// retry puts t back for another try after a backoff when it can still
// start before its deadline; it reports whether it did.
func (s *Sink) retry(t *task) bool {
	wait := min(retryFirst<<min(t.retries, 5), retryMax)
	if time.Now().Add(wait).After(t.seen.Add(s.opts.Deadline)) {
		return false
	}
	t.retries++
	s.later(t, wait)
	return true
}

// idle reports whether no request is being handled or waiting.
func (s *Sink) idle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.open) == 0 && s.workers == 0
}
