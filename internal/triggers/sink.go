package triggers

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/firepath"
	"github.com/cronswap/cronswap/internal/history"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/schedule"
)

// DefaultBackfillInterval is the least time between two backfilled slots
// a replica offers to the fire path (5 a second): a backfill of a long
// range does not flood the claim path, the job's lock or the action.
const DefaultBackfillInterval = 200 * time.Millisecond

// maxSlotBumps bounds how often a run-now request's scheduled_at is moved
// past another record of the same millisecond.
const maxSlotBumps = 5

// ErrNoJob is returned by a Schedules lookup for a job without a schedule.
var ErrNoJob = errors.New("no such job")

// Runner runs an off-schedule fire (jobs.Runner is one).
type Runner interface {
	RunOffSchedule(f firepath.OffScheduleFire) firepath.OffScheduleResult
}

// Options configures a Sink.
type Options struct {
	// Runner runs the requests.
	Runner Runner
	// Store writes their outcomes.
	Store *Store
	// Schedules returns the job's schedule, also when it is paused or
	// disabled; an error wrapping ErrNoJob when there is none, one wrapping
	// schedule.ErrInvalid when its document is bad.
	Schedules func(ctx context.Context, jobID string) (schedule.Schedule, error)
	// FirstSeen returns the job's first sighting (history.ReadFirstSeen;
	// ok false when there is none). A backfill request of a slot at or
	// before it is refused (CheckFirstSeen) unless it says
	// FieldBeforeFirstSeen. Nil checks nothing.
	FirstSeen func(ctx context.Context, jobID string) (seen history.Sighting, ok bool, err error)
	// Location is the default time zone of expressions (config timezone).
	Location *time.Location
	// Logger receives the log (default slog.Default()).
	Logger *slog.Logger
	// BackfillInterval: default DefaultBackfillInterval.
	BackfillInterval time.Duration
	// Deadline is how long after a replica saw a request its run may
	// still start (jobs.DefaultOffScheduleDeadline when 0).
	Deadline time.Duration
}

// Sink is the changestream.Sink of the triggers collection: every pending
// request it is handed (an insert, or found by a full read at start and at
// each resync) is run through Runner on a goroutine of its own; backfill
// requests are offered oldest first, one per BackfillInterval. A request
// being handled is not started again when its document comes back (the
// daemon's own outcome writes do). Its methods return at once.
type Sink struct {
	opts Options
	log  *slog.Logger

	mu       sync.Mutex
	inflight map[string]bool
	queue    []Request // backfill requests waiting for their turn
	// backfilling holds the jobs with a backfilled slot being offered.
	backfilling map[string]bool
	closed      bool
	wake        chan struct{}
	stop        chan struct{}
	wg          sync.WaitGroup
}

// NewSink returns a sink; Close stops it.
func NewSink(opts Options) *Sink {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.BackfillInterval <= 0 {
		opts.BackfillInterval = DefaultBackfillInterval
	}
	if opts.Location == nil {
		opts.Location = time.UTC
	}
	s := &Sink{opts: opts, log: opts.Logger, inflight: map[string]bool{}, backfilling: map[string]bool{}, wake: make(chan struct{}, 1), stop: make(chan struct{})}
	s.wg.Add(1)
	go s.pace()
	return s
}

// Close stops taking requests and waits for those being handled to have
// their outcome written (call it after the runner's Shutdown, which ends
// their runs). Requests left pending are handled by another replica or at
// the next start.
func (s *Sink) Close() {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.stop)
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// Upsert implements changestream.Sink.
func (s *Sink) Upsert(doc bson.Raw) { s.take(doc, false) }

// Delete implements changestream.Sink: a deleted request is forgotten (a
// run already started goes on).
func (s *Sink) Delete(bson.RawValue) {}

// ReplaceAll implements changestream.Sink: every pending request is
// handled (oldest backfilled slot first), every running one reconciled
// with its run record (a replica that died mid-run leaves it running; its
// record says how the run ended). It reports no ids: a request is not
// state the sink keeps.
func (s *Sink) ReplaceAll(docs []bson.Raw) []string {
	type entry struct {
		doc  bson.Raw
		slot time.Time
	}
	es := make([]entry, 0, len(docs))
	for _, d := range docs {
		var slot time.Time
		if v, err := d.LookupErr(FieldSlot); err == nil {
			slot, _ = v.TimeOK()
		}
		es = append(es, entry{d, slot})
	}
	slices.SortStableFunc(es, func(a, b entry) int { return a.slot.Compare(b.slot) })
	for _, e := range es {
		s.take(e.doc, true)
	}
	return nil
}

// take starts handling one request document; full says it comes from a
// full read (running requests are reconciled then).
func (s *Sink) take(doc bson.Raw, full bool) {
	seen := time.Now()
	req, err := Decode(doc)
	if err != nil {
		if Final(req.Status) {
			return
		}
		s.log.Warn("trigger refused", "trigger_id", req.Key, "error", err)
		if req.ID.Type == 0 {
			return // no _id to write the error on
		}
		s.start(req.Key+"\x00bad", func() { s.write(req, "reject", s.opts.Store.Reject(s.ctx(), req.ID, err.Error(), time.Now())) })
		return
	}
	switch {
	case Final(req.Status):
		return
	case req.Status == StatusRunning || req.Status == StatusBuffered:
		// Its run's replica writes the outcome; a full read also looks
		// whether the run ended without one (its replica died).
		if full {
			s.start(req.Key, func() { s.reconcile(req) })
		}
		return
	}
	if req.RequestedAt.IsZero() {
		req.RequestedAt = seen
	}
	if req.Backfill() {
		s.mu.Lock()
		if !s.closed && !s.inflight[req.Key] {
			s.inflight[req.Key] = true
			s.queue = append(s.queue, req)
			s.signal()
		}
		s.mu.Unlock()
		return
	}
	s.start(req.Key, func() { s.run(req, seen) })
}

// idle reports whether no request is being handled or waiting.
func (s *Sink) idle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.inflight) == 0 && len(s.queue) == 0
}

// start runs fn on a goroutine of its own unless key is being handled.
func (s *Sink) start(key string, fn func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.inflight[key] {
		return
	}
	s.inflight[key] = true
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer s.done(key)
		fn()
	}()
}

func (s *Sink) done(key string) {
	s.mu.Lock()
	delete(s.inflight, key)
	s.mu.Unlock()
}

// pace offers the queued backfill requests, oldest first, one per
// BackfillInterval, and one job's one at a time: the next slot of a job is
// offered once the previous one ended, so that under a policy that takes
// the lock the slots of a backfill run one after another instead of
// skipping each other.
func (s *Sink) pace() {
	defer s.wg.Done()
	var last time.Time
	for {
		s.mu.Lock()
		var req Request
		ok := false
		for i, q := range s.queue {
			if !s.backfilling[q.JobID] {
				req, ok = q, true
				s.queue = append(s.queue[:i:i], s.queue[i+1:]...)
				s.backfilling[q.JobID] = true
				break
			}
		}
		s.mu.Unlock()
		if !ok {
			select {
			case <-s.wake:
				continue
			case <-s.stop:
				return
			}
		}
		if wait := time.Until(last.Add(s.opts.BackfillInterval)); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-s.stop:
				t.Stop()
				s.done(req.Key)
				return
			}
		}
		last = time.Now()
		offered := last
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer s.signal()
			defer s.backfilled(req.JobID)
			defer s.done(req.Key)
			s.run(req, offered)
		}()
	}
}

// backfilled marks job's backfilled slot ended.
func (s *Sink) backfilled(job string) {
	s.mu.Lock()
	delete(s.backfilling, job)
	s.mu.Unlock()
}

// signal wakes the pacer.
func (s *Sink) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// ctx is the context of the store's operations, each of which bounds
// itself by jobs.DefaultOpTimeout: not tied to the sink's life, so
// outcomes are still written at shutdown.
func (s *Sink) ctx() context.Context { return context.Background() }

func (s *Sink) write(req Request, what string, err error) {
	if err != nil {
		s.log.Warn("could not write the trigger's outcome", "trigger_id", req.Key, "job_id", req.JobID, "outcome", what, "error", err)
	}
}

// run handles a pending request seen at seen.
func (s *Sink) run(req Request, seen time.Time) {
	log := s.log.With("trigger_id", req.Key, "job_id", req.JobID)
	sctx, cancel := context.WithTimeout(context.Background(), firepath.DefaultOpTimeout)
	sched, err := s.opts.Schedules(sctx, req.JobID)
	cancel()
	switch {
	case errors.Is(err, ErrNoJob) || errors.Is(err, schedule.ErrInvalid):
		log.Warn("trigger refused", "error", err)
		s.write(req, "reject", s.opts.Store.Reject(s.ctx(), req.ID, err.Error(), time.Now()))
		return
	case err != nil:
		// Left pending: the next full read (resync, restart) or another
		// replica handles it.
		log.Warn("trigger not handled: could not read the job's schedule", "error", err)
		return
	}
	if req.HasArgs {
		sched.Args = req.Args
	}
	if req.Backfill() {
		err := s.checkSlot(sched, req.Slot)
		if err == nil && !req.BeforeFirstSeen && s.opts.FirstSeen != nil {
			fctx, cancel := context.WithTimeout(context.Background(), firepath.DefaultOpTimeout)
			seen, ok, ferr := s.opts.FirstSeen(fctx, req.JobID)
			cancel()
			if ferr != nil {
				log.Warn("trigger not handled: could not read the job's first sighting", "error", ferr)
				return // left pending, as when the schedule cannot be read
			}
			err = CheckFirstSeen(req.JobID, []time.Time{req.Slot}, seen, ok)
		}
		if err != nil {
			log.Warn("backfill refused", "scheduled_at", req.Slot, "error", err)
			s.write(req, "reject", s.opts.Store.Reject(s.ctx(), req.ID, err.Error(), time.Now()))
			return
		}
	}
	forgot := false
	for bump := 0; ; bump++ {
		f := firepath.OffScheduleFire{Schedule: sched, Offered: seen, Deadline: s.opts.Deadline,
			Started: func(l record.Lease) {
				// Beside the action, not before it: the write never delays
				// the start, and written after the end it matches nothing.
				now := time.Now()
				s.wg.Add(1) // run's own count keeps the group open
				go func() {
					defer s.wg.Done()
					s.write(req, record.StatusRunning, s.opts.Store.Started(s.ctx(), req.ID, l, now))
				}()
			}}
		if req.Backfill() {
			f.RunID, f.Slot = record.RunID(req.JobID, req.Slot), req.Slot
		} else {
			// A run-now request waits on the job's lock under a policy
			// that buffers; a backfilled slot does not (backfill paces
			// one slot per job at a time instead).
			f.RunID, f.Slot, f.Buffer = RunIDOf(req.Key), RunSlot(req.Key, req.RequestedAt, bump), true
		}
		res := s.opts.Runner.RunOffSchedule(f)
		switch {
		case res.Status == record.StatusBuffered:
			// Whichever replica takes it from the lock's buffer writes
			// the rest (jobs.RequestReporter: Store.BufferedStarted,
			// BufferedEnded).
			log.Info("trigger buffered", "run_id", f.RunID, "scheduled_at", f.Slot, "reason", res.Error)
			s.write(req, res.Status, s.opts.Store.Buffered(s.ctx(), req.ID, f.RunID, res.Error, time.Now()))
			return
		case res.Ran || res.Status == record.StatusSkipped:
			log.Info("trigger ended", "run_id", f.RunID, "status", res.Status)
			s.write(req, res.Status, s.opts.Store.Finish(s.ctx(), req.ID, f.RunID, res.Status, res.Error, time.Now()))
			return
		case res.NotRun == firepath.NotRunShuttingDown || res.NotRun == firepath.NotRunUnreachable:
			log.Warn("trigger not run; left pending for another replica or the next start", "reason", res.NotRun, "error", res.Error)
			return
		case res.NotRun == firepath.NotRunUnknownAction:
			s.unknownAction(log, req, f.RunID, res.Error)
			return
		case res.NotRun != "":
			log.Warn("trigger not run", "reason", res.NotRun, "error", res.Error)
			s.write(req, StatusNotRun, s.opts.Store.NotRun(s.ctx(), req.ID, res.NotRun+": "+res.Error, time.Now()))
			return
		}
		// Already fired: by another replica for this request, or (a
		// backfill) before; or another record has the run's scheduled_at.
		ctx := s.ctx()
		rec, err := s.opts.Store.Record(ctx, f.RunID)
		if err != nil {
			log.Warn("trigger claimed elsewhere; could not read its record", "run_id", f.RunID, "error", err)
			return
		}
		if rec != nil {
			if req.Backfill() {
				// This request's run if the request says so; else the slot
				// was decided before.
				s.write(req, rec.Status, s.opts.Store.FromRecord(ctx, req.ID, *rec, false, time.Now()))
				s.write(req, StatusAlreadyRan, s.opts.Store.AlreadyRan(ctx, req.ID, *rec, time.Now()))
			} else {
				s.write(req, rec.Status, s.opts.Store.FromRecord(ctx, req.ID, *rec, true, time.Now()))
			}
			return // a run still running: its replica writes the outcome
		}
		if !req.Backfill() {
			if bump < maxSlotBumps {
				continue // another record of the same millisecond: the next one
			}
			s.write(req, StatusNotRun, s.opts.Store.NotRun(ctx, req.ID, "no free scheduled_at for the run's record", time.Now()))
			return
		}
		other, err := s.opts.Store.RecordAt(ctx, req.JobID, req.Slot)
		switch {
		case err != nil:
			log.Warn("backfill: could not read the slot's record", "scheduled_at", req.Slot, "error", err)
			return
		case other == nil:
			if bump < maxSlotBumps {
				continue // gone in between: try again
			}
			return
		case other.Status == record.StatusMissed && !forgot:
			ok, err := s.opts.Store.ForgetMissed(ctx, *other)
			if err != nil {
				log.Warn("backfill: could not replace the slot's missed record", "scheduled_at", req.Slot, "error", err)
				return
			}
			if ok {
				forgot = true
				log.Info("backfill: the slot's missed record gives way to its run", "scheduled_at", req.Slot, "missed_id", other.ID)
				continue
			}
			fallthrough
		default:
			why := "slot " + req.Slot.Format(time.RFC3339) + " is covered by record " + other.ID + " (" + other.Status + ")"
			if other.Status == record.StatusMissed {
				why += ": it starts a range of missed slots; backfill the slots after it, or delete the record first"
			}
			log.Warn("backfill not run", "scheduled_at", req.Slot, "error", why)
			s.write(req, StatusNotRun, s.opts.Store.NotRun(ctx, req.ID, why, time.Now()))
			return
		}
	}
}

// unknownActionWait is how long a replica whose config lacks the job's
// action waits before it refuses the request: long enough for a replica
// that has it (a config being rolled out) to claim it first.
const unknownActionWait = firepath.DefaultClaimGrace + time.Second

// unknownAction refuses a request whose job's action this replica does not
// have, unless another replica ran it meanwhile (a run's outcome, which
// may also come after the refusal, wins over it).
func (s *Sink) unknownAction(log *slog.Logger, req Request, runID, why string) {
	t := time.NewTimer(unknownActionWait)
	select {
	case <-t.C:
	case <-s.stop:
		t.Stop()
		return
	}
	rec, err := s.opts.Store.Record(s.ctx(), runID)
	switch {
	case err != nil:
		log.Warn("trigger not handled: could not read its record", "run_id", runID, "error", err)
	case rec != nil:
		s.write(req, rec.Status, s.opts.Store.FromRecord(s.ctx(), req.ID, *rec, true, time.Now()))
	default:
		log.Warn("trigger refused", "reason", firepath.NotRunUnknownAction, "error", why)
		s.write(req, StatusRejected, s.opts.Store.Reject(s.ctx(), req.ID, why, time.Now()))
	}
}

// checkSlot reports an error unless slot is a cron slot of sched.
func (s *Sink) checkSlot(sched schedule.Schedule, slot time.Time) error {
	cs, err := sched.Parse(s.opts.Location)
	if err != nil {
		return err
	}
	if next := cs.Next(slot.Add(-time.Second)); !next.Equal(slot) {
		return invalid("", FieldSlot, "%s is not a cron slot of job %s (%q; the next one is %s)",
			slot.Format(time.RFC3339), sched.ID, sched.CronExpr, next.UTC().Format(time.RFC3339))
	}
	return nil
}

// reconcile copies the outcome of a running or buffered request's run
// record once it ended (its replica may have died before writing it).
func (s *Sink) reconcile(req Request) {
	if req.RunID == "" {
		return
	}
	ctx := s.ctx()
	rec, err := s.opts.Store.Record(ctx, req.RunID)
	if err != nil || rec == nil {
		return
	}
	s.write(req, rec.Status, s.opts.Store.FromRecord(ctx, req.ID, *rec, false, time.Now()))
}
