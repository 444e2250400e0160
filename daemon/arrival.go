package daemon

import (
	"iter"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/changestream"
	"github.com/cronswap/cronswap/internal/record"
)

// A job can reach this replica only with a full reload after the first:
// its insert (or the edit that enabled or mended it) came while the change
// stream had lost its position, or between two polls. It was not armed
// here from its document's updated_at until that reload, and unless
// another replica ran them, its slots in between would be neither run nor
// recorded. The start-up gap is looked for once, at the first sync, and
// the stall gap only after a job's first fire here; this is the gap of a
// late arrival. It goes the start-up gap's way (startupGaps): every slot
// from the document's updated_at up to the engine's first fire of the
// job is recorded missed (no_replica_running; outside_catchup_window
// beyond its catch-up window), and the recorder leaves out the slots
// another replica decided.
//
// Only a job the reload put in force (scheduler.Added) counts, and only
// when its document was written after the previous full reload began:
// anything older was in that reload's read. A job armed because the
// members changed (its document older) is the hand-over's business.

// arrivals collects the jobs a full reload puts in force, from the second
// full reload on.
type arrivals struct {
	// collecting: a full reload after the first is under way. Read
	// without the lock first by applied (called for every job of the
	// first sync too).
	collecting atomic.Bool

	mu sync.Mutex
	// synced: a full reload has completed.
	synced bool
	// since is when the last completed full reload began; began, when
	// the one under way did.
	since, began time.Time
	// added are the jobs put in force since the last completed reload
	// began (kept across a failed reload: its retry finds them in force).
	added []string
}

// begin marks the start of a full reload at now.
func (a *arrivals) begin(now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.began = now
	a.collecting.Store(a.synced)
}

// applied notes job id put in force (the engine's Applied hook, Added).
func (a *arrivals) applied(id string) {
	if !a.collecting.Load() {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.collecting.Load() { // again, under the lock: end may have run
		a.added = append(a.added, id)
	}
}

// end marks the end of the reload under way, ok when it completed. It
// returns, for a completed reload that is not the first, the jobs it put
// in force and when the previous completed reload began.
func (a *arrivals) end(ok bool) (added []string, since time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.collecting.Store(false)
	if !ok {
		return nil, time.Time{}
	}
	added, since = a.added, a.since
	first := !a.synced
	a.added, a.since, a.synced = nil, a.began, true
	if first {
		return nil, time.Time{}
	}
	return added, since
}

// arrivalSink is the schedules' sink with the late arrivals' gaps behind
// its full reloads.
type arrivalSink struct {
	changestream.Sink
	s *Service
}

// ReplaceAll implements changestream.Sink.
func (a arrivalSink) ReplaceAll(docs iter.Seq2[bson.Raw, error]) ([]string, error) {
	a.s.arrivals.begin(time.Now())
	changed, err := a.Sink.ReplaceAll(docs)
	if added, since := a.s.arrivals.end(err == nil); len(added) > 0 {
		go a.s.recordArrivalGaps(added, since)
	}
	return changed, err
}

// arrivalWait bounds the wait for the engine to fire a job that just
// arrived (its timer is set on the engine's own goroutine).
const arrivalWait = 10 * time.Second

// recordArrivalGaps hands to the runner, to be recorded missed, the slots
// of each job of ids that no one here ran between its document's
// updated_at (when after since) and the engine's first fire of it.
func (s *Service) recordArrivalGaps(ids []string, since time.Time) {
	waitUntil := time.Now().Add(arrivalWait)
	for _, id := range ids {
		st, ok := s.engine.Get(id)
		if !ok || !st.Armed || !st.UpdatedAt.After(since) {
			continue // disarmed since, or written before the last reload read it
		}
		from, delay, fires := s.engine.FiresFrom(id)
		for !fires && time.Now().Before(waitUntil) {
			time.Sleep(10 * time.Millisecond)
			from, delay, fires = s.engine.FiresFrom(id)
		}
		next, nextOK := s.engine.NextFunc(id)
		if !fires || !nextOK {
			continue // not firing here (an engine not started, or disarmed meanwhile)
		}
		now := time.Now()
		notBefore := now.Add(-s.opts.Retention)
		if st.UpdatedAt.After(notBefore) {
			notBefore = st.UpdatedAt
		}
		for _, m := range startupGaps(id, gapInput{notBefore: notBefore, firesFrom: from, delay: delay,
			window: s.catchupFor(st.ActionName()), now: now, next: record.NextFunc(next)}, s.log) {
			s.log.Info("slots missed before the job reached this replica", "job_id", m.JobID, "scheduled_at", m.From,
				"last_scheduled_at", m.To, "count", m.Count, "reason", m.Reason, "updated_at", st.UpdatedAt)
			s.runner.RecordMissed(st.Schedule, delay, m)
		}
	}
}
