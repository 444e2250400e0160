package history

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/pace"
)

// DefaultSightingsBatch is the most sighting writes one bulk write sends
// (a full read that finds many jobs without a sighting, after an upgrade).
const DefaultSightingsBatch = 500

// DefaultSightingsReadBatch is how many live sightings one reply carries
// when Run reads them, at the first full read it handles.
const DefaultSightingsReadBatch = 1000

// sightingsProgressEvery is how often a full read's walk that writes
// sightings logs how far it got (a first start of a million jobs writes
// a million, 500 at a time, at a pace: two minutes or more); the walk ends
// with one line of what it wrote.
const sightingsProgressEvery = 10 * time.Second

// SightingsOptions configures Sightings; zero fields take the defaults.
type SightingsOptions struct {
	// Instance names this replica in what it writes.
	Instance string
	// Retention is how long a deleted job's sighting is kept; it must be
	// positive.
	Retention time.Duration
	// QueueSize bounds the insert and delete events waiting to be written
	// (default DefaultQueueSize).
	QueueSize int
	// Batch is DefaultSightingsBatch when zero.
	Batch int
	// ReadBatch is DefaultSightingsReadBatch when zero.
	ReadBatch int
	// RetryMin and RetryMax bound the wait between two attempts of a
	// failed write (defaults DefaultRetryMin, DefaultRetryMax).
	RetryMin, RetryMax time.Duration
	// Logger receives the logs (default slog.Default()).
	Logger *slog.Logger
	// Now is the clock of recorded_at (default time.Now).
	Now func() time.Time
}

// Sightings keeps the first-sighting entries of the jobs (Sighting) in
// the history collection, in the background: the watcher's goroutine hands
// over what it saw without waiting (Inserted, Deleted, Present), and Run
// writes it, retrying a failed write until it works.
//
// What it writes: a job's insert event, or a full read that contains a job
// with no live sighting, stores the sighting (the first write wins; every
// write is conditional, see seenModel and goneModel); a delete event, or a
// full read without a job that has a live sighting, marks it deleted, so
// that it expires a retention later. Run reads the live sightings once, at
// the first full read it handles, at a pace (pace.Rest), and keeps
// them in memory: a later full read (a resync, a poll) writes only for
// jobs that appeared or disappeared, so an idle daemon sends nothing, and
// a deployment that had no sightings gets one per job at its first start,
// never again.
type Sightings struct {
	coll *mongo.Collection
	opts SightingsOptions

	mu      sync.Mutex
	pending []sightingOp
	events  int // Inserted and Deleted ops in pending
	closed  bool
	wake    chan struct{}

	// Owned by Run: the jobs this replica believes have a live sighting,
	// each with the pass of present that last found it in a full read (0:
	// none yet); not loaded until the first full read read them. One set, no
	// per-read copy: a full read of every job marks the entries it lists
	// with a new pass, and the others are the jobs it no longer found.
	live liveSet
	pass uint32

	// rest waits between two replies of the live sightings' read, and
	// after each batch a full read's walk writes (restFor; tests record
	// it).
	rest func(ctx context.Context, took time.Duration) error
	// closing is closed by Close: the read rests no more, so that what
	// is queued behind it is written within the daemon's stop if it can.
	closing chan struct{}
	// progressEvery is sightingsProgressEvery (tests make it 0: a line
	// after every batch).
	progressEvery time.Duration
}

// sightingOp is one thing seen, in the order the watcher saw it.
type sightingOp struct {
	kind sightingKind
	job  string
	at   time.Time
	// A full read: its job ids.
	ids []string
}

type sightingKind int

const (
	sightInserted sightingKind = iota
	sightDeleted
	sightPresent
)

// NewSightings returns the keeper of the sightings in coll; call Run.
func NewSightings(coll *mongo.Collection, opts SightingsOptions) *Sightings {
	if opts.QueueSize <= 0 {
		opts.QueueSize = DefaultQueueSize
	}
	if opts.Batch <= 0 {
		opts.Batch = DefaultSightingsBatch
	}
	if opts.ReadBatch <= 0 {
		opts.ReadBatch = DefaultSightingsReadBatch
	}
	if opts.RetryMin <= 0 {
		opts.RetryMin = DefaultRetryMin
	}
	if opts.RetryMax < opts.RetryMin {
		opts.RetryMax = max(DefaultRetryMax, opts.RetryMin)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &Sightings{coll: coll, opts: opts, wake: make(chan struct{}, 1), closing: make(chan struct{}),
		progressEvery: sightingsProgressEvery}
	s.rest = s.restFor
	return s
}

// restFor rests after a reply of the live sightings' read, and after each
// batch a full read's walk writes (pace.Rest), until Close is called, or
// until ctx ends: a joining replica of a million jobs reads a million
// sightings while the others claim their fires, and a first start writes
// a million while its own fires are claimed.
func (s *Sightings) restFor(ctx context.Context, took time.Duration) error {
	return pace.Rest(ctx, took, s.closing)
}

// Inserted hands over a job's insert event at at (its time).
func (s *Sightings) Inserted(jobID string, at time.Time) {
	s.push(sightingOp{kind: sightInserted, job: jobID, at: at})
}

// Deleted hands over a job's delete event at at.
func (s *Sightings) Deleted(jobID string, at time.Time) {
	s.push(sightingOp{kind: sightDeleted, job: jobID, at: at})
}

// Present hands over the whole collection as it was at at: its job ids,
// which must not be modified later.
func (s *Sightings) Present(ids []string, at time.Time) {
	s.push(sightingOp{kind: sightPresent, ids: ids, at: at})
}

// push queues op without blocking. A full read replaces a full read queued
// right before it (the newer one says all the older one did); an event
// that does not fit the queue is dropped and logged.
func (s *Sightings) push(op sightingOp) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	switch {
	case op.kind == sightPresent && len(s.pending) > 0 && s.pending[len(s.pending)-1].kind == sightPresent:
		s.pending[len(s.pending)-1] = op
	case op.kind != sightPresent && s.events >= s.opts.QueueSize:
		s.opts.Logger.Warn("first-sighting queue full; event dropped", "collection", s.coll.Name(), "job_id", op.job)
		return
	default:
		if op.kind != sightPresent {
			s.events++
		}
		s.pending = append(s.pending, op)
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Close ends the queue: Run returns once what is queued is written.
func (s *Sightings) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		close(s.closing)
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// next takes the oldest queued op; ok is false when there is none, and
// closed says whether none will come.
func (s *Sightings) next() (op sightingOp, ok, closed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending) == 0 {
		return op, false, s.closed
	}
	op = s.pending[0]
	s.pending[0] = sightingOp{}
	s.pending = s.pending[1:]
	if op.kind != sightPresent {
		s.events--
	}
	return op, true, s.closed
}

// Run writes what is queued until Close was called and the queue is
// written, or ctx ends (what is still queued then is lost, and logged).
func (s *Sightings) Run(ctx context.Context) {
	for {
		op, ok, closed := s.next()
		if !ok {
			if closed {
				return
			}
			select {
			case <-s.wake:
				continue
			case <-ctx.Done():
				s.abandon(0)
				return
			}
		}
		if !s.retry(ctx, op) {
			s.abandon(1)
			return
		}
	}
}

func (s *Sightings) abandon(taken int) {
	s.mu.Lock()
	n := taken + len(s.pending)
	s.mu.Unlock()
	if n > 0 {
		s.opts.Logger.Warn("first sightings not written before shutdown", "collection", s.coll.Name(), "pending", n)
	}
}

// retry applies op until it is done; false when ctx ended first.
func (s *Sightings) retry(ctx context.Context, op sightingOp) bool {
	wait := s.opts.RetryMin
	for attempt := 1; ; attempt++ {
		err := s.apply(ctx, op)
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		s.opts.Logger.Warn("writing first sightings failed; retrying", "collection", s.coll.Name(), "job_id", op.job,
			"attempt", attempt, "retry_in", wait, "error", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
		wait = min(2*wait, s.opts.RetryMax)
	}
}

// apply writes one op; an error means try again (it is idempotent).
func (s *Sightings) apply(ctx context.Context, op sightingOp) error {
	now := s.opts.Now()
	switch op.kind {
	case sightInserted:
		if _, err := s.write(ctx, []mongo.WriteModel{seenModel(op.job, op.at, SourceInsert, s.opts.Instance, now)}); err != nil {
			return err
		}
		if s.live.loaded() {
			s.live.set(op.job, s.pass)
		}
		s.opts.Logger.Debug("first sighting: insert", "collection", s.coll.Name(), "job_id", op.job, "at", op.at)
	case sightDeleted:
		matched, err := s.write(ctx, []mongo.WriteModel{goneModel(op.job, op.at, s.opts.Retention)})
		if err != nil {
			return err
		}
		// Unmatched: another replica marked it already, or the sighting
		// is of a later life of the job, or was taken after this delete
		// (a full read racing it). The job stays live here, so that the
		// next full read without it marks it, if still needed.
		if matched > 0 && s.live.loaded() {
			s.live.Remove(op.job)
		}
		s.opts.Logger.Debug("first sighting: delete", "collection", s.coll.Name(), "job_id", op.job, "at", op.at, "matched", matched)
	case sightPresent:
		return s.present(ctx, op)
	}
	return nil
}

// present reconciles the live sightings with a full read taken at op.at.
// The jobs without a live sighting are written as they are met, a batch
// at a time, so that neither a set of the read's jobs nor a list of the
// jobs to write is built: at a first start that is every job. An error
// leaves what was written marked; the retry walks op again.
//
// Each of its two walks (the jobs sighted, the jobs gone) logs one line
// when it wrote something, with how many and how long it took, and a
// progress line every progressEvery while it runs; each batch is logged
// at debug.
func (s *Sightings) present(ctx context.Context, op sightingOp) error {
	if !s.live.loaded() {
		live, err := readLive(ctx, s.coll, s.opts.ReadBatch, s.rest)
		if err != nil {
			return err
		}
		s.live = live
	}
	s.pass++
	pass := s.pass
	now := s.opts.Now()
	sighted := s.newWalkLog("first sightings recorded from a full read", "first sightings being recorded from a full read", op.at)
	seen := make([]string, 0, min(len(op.ids), s.opts.Batch))
	flush := func() error {
		if len(seen) == 0 {
			return nil
		}
		models := make([]mongo.WriteModel, len(seen))
		for i, id := range seen {
			models[i] = seenModel(id, op.at, SourceRead, s.opts.Instance, now)
		}
		if err := s.pacedWrite(ctx, models); err != nil {
			return err
		}
		for _, id := range seen {
			s.live.set(id, pass)
		}
		sighted.wrote(len(seen))
		seen = seen[:0]
		return nil
	}
	for _, id := range op.ids {
		if s.live.renew(id, pass) {
			continue
		}
		if seen = append(seen, id); len(seen) == s.opts.Batch {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := flush(); err != nil {
		return err
	}
	sighted.done()
	gone := s.live.notIn(pass)
	marked := s.newWalkLog("first sightings of jobs a full read no longer found marked deleted",
		"first sightings of jobs a full read no longer found being marked deleted", op.at)
	for len(gone) > 0 {
		n := min(len(gone), s.opts.Batch)
		models := make([]mongo.WriteModel, n)
		for i, id := range gone[:n] {
			models[i] = goneModel(id, op.at, s.opts.Retention)
		}
		if err := s.pacedWrite(ctx, models); err != nil {
			return err
		}
		for _, id := range gone[:n] {
			s.live.Remove(id)
		}
		marked.wrote(n)
		gone = gone[n:]
	}
	marked.done()
	return nil
}

// walkLog logs one of present's walks: msg once at its end when it wrote
// anything, progress every progressEvery while it runs, each batch at
// debug.
type walkLog struct {
	s             *Sightings
	msg, progress string
	at            time.Time // the full read's
	started, last time.Time
	jobs          int
}

// newWalkLog starts the log of a walk of a full read taken at at.
func (s *Sightings) newWalkLog(msg, progress string, at time.Time) *walkLog {
	now := time.Now()
	return &walkLog{s: s, msg: msg, progress: progress, at: at, started: now, last: now}
}

// wrote counts a batch of n jobs written.
func (w *walkLog) wrote(n int) {
	w.jobs += n
	log := w.s.opts.Logger
	log.Debug("first sightings: a batch written", "collection", w.s.coll.Name(), "jobs", n, "at", w.at)
	if now := time.Now(); now.Sub(w.last) >= w.s.progressEvery {
		w.last = now
		log.Info(w.progress, "collection", w.s.coll.Name(), "jobs", w.jobs, "elapsed", now.Sub(w.started), "at", w.at)
	}
}

// done logs the walk's line, when it wrote anything.
func (w *walkLog) done() {
	if w.jobs > 0 {
		w.s.opts.Logger.Info(w.msg, "collection", w.s.coll.Name(), "jobs", w.jobs, "took", time.Since(w.started), "at", w.at)
	}
}

// pacedWrite is write for the walks of a full read (a first start of a
// million jobs writes a million sightings), which nothing waits for: it
// rests after each batch as a background read does (rest, pace.Rest), so
// that the walk takes at most a share of the server's time and the
// replica's claims and edits are not queued behind it; after Close it
// rests no more.
func (s *Sightings) pacedWrite(ctx context.Context, models []mongo.WriteModel) error {
	began := time.Now()
	if _, err := s.write(ctx, models); err != nil {
		return err
	}
	return s.rest(ctx, time.Since(began))
}

// write sends models as one unordered bulk write and returns how many
// documents matched or were upserted. A duplicate key (a live sighting
// another replica or an earlier write stored) is done; another write
// error is logged and dropped; anything else is returned, to retry.
func (s *Sightings) write(ctx context.Context, models []mongo.WriteModel) (int64, error) {
	res, err := s.coll.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
	var n int64
	if res != nil {
		n = res.MatchedCount + res.UpsertedCount
	}
	if err == nil {
		return n, nil
	}
	var bwe mongo.BulkWriteException
	if !errors.As(err, &bwe) || bwe.WriteConcernError != nil || len(bwe.WriteErrors) == 0 {
		return n, err
	}
	for _, we := range bwe.WriteErrors {
		if we.Code != codeDuplicateKey {
			s.opts.Logger.Warn("first sighting refused by the server; dropped", "collection", s.coll.Name(),
				"error", we.Message, "code", we.Code)
		}
	}
	return n, nil
}
