package triggers

import (
	"context"
	"errors"
	"iter"
	"log/slog"
	"slices"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/batch"
	"github.com/cronswap/cronswap/internal/firepath"
	"github.com/cronswap/cronswap/internal/history"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/schedule"
)

// DefaultBackfillInterval is the least time between two backfilled slots
// of one job that a replica offers to the fire path (5 a second per job):
// a backfill of a long range does not flood the job's lock or its action.
const DefaultBackfillInterval = 200 * time.Millisecond

// DefaultMaxInFlight bounds the requests a replica handles at once (each
// one waits in the fire path for its claim grace, its claim, its run and
// its end); the others wait in the replica's queue, which costs memory,
// not a goroutine.
const DefaultMaxInFlight = 512

// ErrNoJob is returned by a Schedules lookup for a job without a schedule.
var ErrNoJob = errors.New("no such job")

// Runner runs an off-schedule fire (firepath.Runner is one).
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
	// schedule.ErrInvalid when its document is bad. Schedules(coll) batches
	// the lookups.
	Schedules func(ctx context.Context, jobID string) (schedule.Schedule, error)
	// FirstSeen returns the job's first sighting (history.ReadFirstSeen;
	// ok false when there is none). A backfill request of a slot at or
	// before it is refused (CheckFirstSeen) unless it says
	// FieldBeforeFirstSeen. The sink batches its calls: one per job asked
	// for meanwhile, at most 2 batches at once. Nil checks nothing.
	FirstSeen func(ctx context.Context, jobID string) (seen history.Sighting, ok bool, err error)
	// Location is the default time zone of expressions (config timezone).
	Location *time.Location
	// Logger receives the log (default slog.Default()).
	Logger *slog.Logger
	// BackfillInterval: default DefaultBackfillInterval.
	BackfillInterval time.Duration
	// Deadline is how long after a replica saw a request its run may
	// still start (firepath.DefaultOffScheduleDeadline when 0).
	Deadline time.Duration
	// MaxInFlight bounds the requests handled at once: default
	// DefaultMaxInFlight.
	MaxInFlight int
	// Owns reports whether this replica owns a job (the runner's
	// firepath.RunnerOptions.Owns). The owner claims a request at once; the
	// other replicas put it aside for ClaimGrace before a worker takes it
	// up, so that the owner's running write reaches them first and they
	// drop it. Nil: every job is owned.
	Owns func(jobID string) bool
	// ClaimGrace is how long a request of a job this replica does not own
	// is put aside: default firepath.DefaultClaimGrace, the runner's own
	// (which waits out any rest, longer on a slow database).
	ClaimGrace time.Duration
}

// Sink is the changestream.Sink of the triggers collection. Every request
// it is handed (an insert, or found by a full read at start and at each
// resync) becomes a task in its queue: a pending request is run through
// Runner, a malformed one rejected, a running one (at a full read)
// reconciled with its run record. At most MaxInFlight tasks are handled
// at once, each on a worker goroutine; the store batches their database
// requests. Backfill requests are offered per job, oldest slot first, one
// slot of a job at a time and at most one per BackfillInterval. A request
// of a job this replica does not own waits ClaimGrace before it is queued.
// A request is handled once at a time: its document coming back (the
// daemons' own writes do) starts nothing, and a waiting request that
// another replica took meanwhile (it says running, buffered or how its run
// ended) is dropped. Its methods return at once.
type Sink struct {
	opts Options
	log  *slog.Logger

	mu sync.Mutex
	// open holds the requests being handled or queued, by requestKey.
	open map[string]*task
	// ready is the queue of tasks waiting for a worker, oldest first.
	ready []*task
	// workers is the number of worker goroutines.
	workers int
	// backfills holds the queued backfill requests per job.
	backfills map[string]*jobBackfill
	// slots holds, per job with run-now runs being claimed here, the
	// scheduled_at values (Unix ms) in use (reserveSlot).
	slots  map[string]*jobSlots
	closed bool
	// wg counts the workers and the writes they left to the store.
	wg sync.WaitGroup
	// firstSeen batches the calls of Options.FirstSeen (nil without it).
	firstSeen *batch.Batcher[string, firstSeenAnswer]
}

// firstSeenAnswer is one job's first sighting as Options.FirstSeen gave it.
type firstSeenAnswer struct {
	seen history.Sighting
	ok   bool
	err  error
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
	if opts.Deadline <= 0 {
		opts.Deadline = firepath.DefaultOffScheduleDeadline
	}
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = DefaultMaxInFlight
	}
	if opts.ClaimGrace <= 0 {
		opts.ClaimGrace = firepath.DefaultClaimGrace
	}
	s := &Sink{opts: opts, log: opts.Logger, open: map[string]*task{}, backfills: map[string]*jobBackfill{},
		slots: map[string]*jobSlots{}}
	if opts.FirstSeen != nil {
		s.firstSeen = batch.New(storeBatchMax, readBatchesAtOnce, s.firstSeenBatch)
	}
	return s
}

// firstSeenBatch asks Options.FirstSeen once per job of jobIDs.
func (s *Sink) firstSeenBatch(jobIDs []string) []firstSeenAnswer {
	byJob := map[string]firstSeenAnswer{}
	out := make([]firstSeenAnswer, len(jobIDs))
	for i, job := range jobIDs {
		a, ok := byJob[job]
		if !ok {
			ctx, cancel := context.WithTimeout(context.Background(), firepath.DefaultOpTimeout)
			a.seen, a.ok, a.err = s.opts.FirstSeen(ctx, job)
			cancel()
			byJob[job] = a
		}
		out[i] = a
	}
	return out
}

// checkFirstSeen applies CheckFirstSeen to backfill request req; err is
// the refusal, lookupErr a failed lookup (nothing decided).
func (s *Sink) checkFirstSeen(req Request) (err, lookupErr error) {
	if s.firstSeen == nil || req.BeforeFirstSeen {
		return nil, nil
	}
	a, cerr := s.firstSeen.Submit(s.ctx(), req.JobID)
	if cerr == nil {
		cerr = a.err
	}
	if cerr != nil {
		return nil, cerr
	}
	return CheckFirstSeen(req.JobID, []time.Time{req.Slot}, a.seen, a.ok), nil
}

// Close stops taking requests and waits for those being handled to have
// their outcome written (call it after the runner's Shutdown, which ends
// their runs). Requests still queued are left pending, for another replica
// or the next start.
func (s *Sink) Close() {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		for _, q := range s.backfills {
			if q.timer != nil {
				q.timer.Stop()
			}
		}
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
// state the sink keeps. The read (the requests that have not ended, a
// small set) is collected before it is handled, to order it; a read that
// fails has the requests it read handled, and returns its error.
func (s *Sink) ReplaceAll(docs iter.Seq2[bson.Raw, error]) ([]string, error) {
	type entry struct {
		doc  bson.Raw
		slot time.Time
	}
	var es []entry
	var failed error
	for d, err := range docs {
		if err != nil {
			failed = err
			break
		}
		var slot time.Time
		if v, err := d.LookupErr(FieldSlot); err == nil {
			slot, _ = v.TimeOK()
		}
		es = append(es, entry{append(bson.Raw(nil), d...), slot}) // the read reuses d
	}
	slices.SortStableFunc(es, func(a, b entry) int { return a.slot.Compare(b.slot) })
	for _, e := range es {
		s.take(e.doc, true)
	}
	return nil, failed
}

// take queues the handling of one request document; full says it comes
// from a full read (running requests are reconciled then).
func (s *Sink) take(doc bson.Raw, full bool) {
	seen := time.Now()
	req, err := Decode(doc)
	if req.ID.Type == 0 {
		if err != nil {
			s.log.Warn("trigger refused: no _id to write the error on", "error", err)
		}
		return
	}
	key := requestKey(req.ID)
	if err != nil {
		if Final(req.Status) {
			return
		}
		s.log.Warn("trigger refused", "trigger_id", req.Key, "error", err)
		s.add(&task{key: key, req: req, step: stepReject, why: err.Error(), seen: seen})
		return
	}
	switch {
	case takenElsewhere(req.Status):
		if s.drop(key) {
			s.log.Debug("trigger taken by another replica", "trigger_id", req.Key, "job_id", req.JobID, "run_id", req.RunID,
				"status", req.Status)
		}
		if full && !Final(req.Status) {
			// Its run's replica writes the outcome; a full read also looks
			// whether the run ended without one (its replica died).
			s.add(&task{key: key, req: req, step: stepReconcile, seen: seen})
		}
		return
	case Final(req.Status):
		// Refused or not run by another replica: this one may still run
		// it, as it was handed it before (its task stays).
		return
	}
	if req.RequestedAt.IsZero() {
		req.RequestedAt = seen
	}
	s.add(&task{key: key, req: req, step: stepRun, seen: seen})
}

// handle runs t's step; the request is forgotten when it is done, unless
// the step put it back for later.
func (s *Sink) handle(t *task) {
	again := false
	switch t.step {
	case stepReject:
		s.write(t.req, StatusRejected, s.opts.Store.Reject(s.ctx(), t.req.ID, t.why, time.Now()))
	case stepReconcile:
		s.reconcile(t.req)
	case stepRun:
		again = s.run(t)
	case stepUnknownAction:
		s.unknownAction(t)
	}
	if again {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open[t.key] == t {
		delete(s.open, t.key)
	}
	s.backfillDone(t)
}

// ctx is the context of the store's operations, each of which bounds
// itself: not tied to the sink's life, so outcomes are still written at
// shutdown.
func (s *Sink) ctx() context.Context { return context.Background() }

func (s *Sink) write(req Request, what string, err error) {
	if err != nil {
		s.log.Warn("could not write the trigger's outcome", "trigger_id", req.Key, "job_id", req.JobID, "outcome", what, "error", err)
	}
}

// run handles a pending request; it reports whether the request was put
// back for a later try.
func (s *Sink) run(t *task) bool {
	req, seen := t.req, t.seen
	log := s.log.With("trigger_id", req.Key, "job_id", req.JobID)
	sched, err := s.opts.Schedules(s.ctx(), req.JobID)
	switch {
	case errors.Is(err, ErrNoJob) || errors.Is(err, schedule.ErrInvalid):
		log.Warn("trigger refused", "error", err)
		s.write(req, StatusRejected, s.opts.Store.Reject(s.ctx(), req.ID, err.Error(), time.Now()))
		return false
	case err != nil:
		if s.retry(t) {
			log.Warn("trigger waits: could not read the job's schedule", "error", err, "retry", t.retries)
			return true
		}
		// Left pending: the next full read (resync, restart) or another
		// replica handles it.
		log.Warn("trigger not handled: could not read the job's schedule", "error", err)
		return false
	}
	if req.HasArgs {
		sched.Args = req.Args
	}
	if req.Backfill() {
		err := s.checkSlot(sched, req.Slot)
		if err == nil {
			var lookupErr error
			if err, lookupErr = s.checkFirstSeen(req); lookupErr != nil {
				if s.retry(t) {
					log.Warn("trigger waits: could not read the job's first sighting", "error", lookupErr, "retry", t.retries)
					return true
				}
				log.Warn("trigger not handled: could not read the job's first sighting", "error", lookupErr)
				return false // left pending, as when the schedule cannot be read
			}
		}
		if err != nil {
			log.Warn("backfill refused", "scheduled_at", req.Slot, "error", err)
			s.write(req, StatusRejected, s.opts.Store.Reject(s.ctx(), req.ID, err.Error(), time.Now()))
			return false
		}
	}
	forgot := false
	for bump := 0; ; bump++ {
		// Set by Started on the runner's worker, read once RunOffSchedule
		// has returned the run's result.
		var start RunStart
		f := firepath.OffScheduleFire{Schedule: sched, Offered: seen, Deadline: s.opts.Deadline,
			Started: func(l record.Lease) {
				// Beside the action, not before it: the write goes with the
				// next batch and never delays the start; written after the
				// end it matches nothing, so Finish writes the start again.
				// The worker's count keeps the group open until it is added.
				start = RunStart{Lease: l, At: time.Now()}
				s.wg.Add(1)
				s.opts.Store.StartedLater(req.ID, l, start.At, func(err error) {
					defer s.wg.Done()
					s.write(req, StatusRunning, err)
				})
			}}
		if req.Backfill() {
			f.RunID, f.Slot = record.RunID(req.JobID, req.Slot), req.Slot
		} else {
			// A run-now request waits on the job's lock under a policy
			// that buffers; a backfilled slot does not (backfill paces
			// one slot per job at a time instead).
			f.RunID, f.Buffer = RunIDOf(req.Key), true
			f.Slot, bump = s.reserveSlot(req, bump)
		}
		res := s.opts.Runner.RunOffSchedule(f)
		if !req.Backfill() {
			// Every outcome but a refusal before the claim leaves a record
			// at f.Slot: this run's, or another's (AlreadyFired).
			s.releaseSlot(req.JobID, f.Slot, res.NotRun == "")
		}
		switch {
		case res.Status == record.StatusBuffered:
			// Whichever replica takes it from the lock's buffer writes
			// the rest (firepath.RequestReporter: Store.BufferedStarted,
			// BufferedEnded).
			log.Info("trigger buffered", "run_id", f.RunID, "scheduled_at", f.Slot, "reason", res.Error)
			s.write(req, res.Status, s.opts.Store.Buffered(s.ctx(), req.ID, f.RunID, res.Error, time.Now()))
			return false
		case res.Ran || res.Status == record.StatusSkipped:
			log.Info("trigger ended", "run_id", f.RunID, "status", res.Status)
			s.write(req, res.Status, s.opts.Store.Finish(s.ctx(), req.ID, f.RunID, start, res.Status, res.Error, time.Now()))
			return false
		case res.NotRun == firepath.NotRunShuttingDown:
			log.Warn("trigger not run; left pending for another replica or the next start", "reason", res.NotRun, "error", res.Error)
			return false
		case res.NotRun == firepath.NotRunUnreachable:
			if s.retry(t) {
				log.Warn("trigger waits: the database did not answer its claim", "error", res.Error, "retry", t.retries)
				return true
			}
			log.Warn("trigger not run; left pending for another replica or the next start", "reason", res.NotRun, "error", res.Error)
			return false
		case res.NotRun == firepath.NotRunUnknownAction:
			// Refused once a replica that has the action had its chance.
			t.step, t.runID, t.why = stepUnknownAction, f.RunID, res.Error
			s.later(t, unknownActionWait)
			return true
		case res.NotRun != "":
			log.Warn("trigger not run", "reason", res.NotRun, "error", res.Error)
			s.notRun(req, f.RunID, res.NotRun+": "+res.Error)
			return false
		}
		// Already fired: by another replica for this request, or (a
		// backfill) before; or another record has the run's scheduled_at.
		ctx := s.ctx()
		rec, err := s.opts.Store.Record(ctx, f.RunID)
		if err != nil {
			log.Warn("trigger claimed elsewhere; could not read its record", "run_id", f.RunID, "error", err)
			return false
		}
		if rec != nil {
			if req.Backfill() && !ranFor(*rec, req) {
				// The slot was decided before the request.
				s.write(req, rec.Status, s.opts.Store.FromRecord(ctx, req.ID, *rec, false, time.Now()))
				s.write(req, StatusAlreadyRan, s.opts.Store.AlreadyRan(ctx, req.ID, *rec, time.Now()))
			} else {
				s.write(req, rec.Status, s.opts.Store.FromRecord(ctx, req.ID, *rec, true, time.Now()))
			}
			return false // a run still running: its replica writes the outcome
		}
		if !req.Backfill() {
			if bump < maxSlotBumps {
				continue // another record of the same millisecond: the next one
			}
			s.notRun(req, f.RunID, "no free scheduled_at for the run's record")
			return false
		}
		other, err := s.opts.Store.RecordAt(ctx, req.JobID, req.Slot)
		switch {
		case err != nil:
			log.Warn("backfill: could not read the slot's record", "scheduled_at", req.Slot, "error", err)
			return false
		case other == nil:
			if bump < maxSlotBumps {
				continue // gone in between: try again
			}
			return false
		case other.Status == record.StatusMissed && !forgot:
			ok, err := s.opts.Store.ForgetMissed(ctx, *other)
			if err != nil {
				log.Warn("backfill: could not replace the slot's missed record", "scheduled_at", req.Slot, "error", err)
				return false
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
			return false
		}
	}
}

// ranFor reports whether run record rec is the run of backfill request
// req rather than an earlier decision of its slot: it started once the
// request was asked for.
func ranFor(rec record.RunDoc, req Request) bool {
	return !rec.StartedAt.IsZero() && !rec.StartedAt.Before(req.RequestedAt)
}

// notRun marks req not run, with why, unless its run has a record by now
// (another replica took it): then the record's outcome is the request's.
// Another replica that runs it later still writes its outcome over
// not_run.
func (s *Sink) notRun(req Request, runID, why string) {
	ctx := s.ctx()
	if !req.Backfill() {
		rec, err := s.opts.Store.Record(ctx, runID)
		if err != nil {
			s.log.Warn("trigger not run; could not read its record", "trigger_id", req.Key, "job_id", req.JobID, "run_id", runID, "error", err)
			return
		}
		if rec != nil {
			s.write(req, rec.Status, s.opts.Store.FromRecord(ctx, req.ID, *rec, true, time.Now()))
			return
		}
	}
	s.write(req, StatusNotRun, s.opts.Store.NotRun(ctx, req.ID, why, time.Now()))
}

// unknownActionWait is how long a replica whose config lacks the job's
// action waits before it refuses the request: long enough for a replica
// that has it (a config being rolled out) to claim it first.
const unknownActionWait = firepath.DefaultClaimGrace + time.Second

// unknownAction refuses a request whose job's action this replica does not
// have, unless another replica ran it meanwhile (a run's outcome, which
// may also come after the refusal, wins over it).
func (s *Sink) unknownAction(t *task) {
	req := t.req
	log := s.log.With("trigger_id", req.Key, "job_id", req.JobID)
	rec, err := s.opts.Store.Record(s.ctx(), t.runID)
	switch {
	case err != nil:
		log.Warn("trigger not handled: could not read its record", "run_id", t.runID, "error", err)
	case rec != nil:
		s.write(req, rec.Status, s.opts.Store.FromRecord(s.ctx(), req.ID, *rec, true, time.Now()))
	default:
		log.Warn("trigger refused", "reason", firepath.NotRunUnknownAction, "error", t.why)
		s.write(req, StatusRejected, s.opts.Store.Reject(s.ctx(), req.ID, t.why, time.Now()))
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
