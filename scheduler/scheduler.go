package scheduler

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"iter"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/cronswap/cronswap/internal/crondialect"
	"github.com/cronswap/cronswap/internal/lifetime"
	"github.com/cronswap/cronswap/schedule"
)

// DefaultShards is the number of robfig engines when Options.Shards is not
// set. robfig re-sorts all entries of an engine on every add and remove, so
// the cost of one change grows with the jobs per shard: 4096 shards keep
// that at about 120 entries with 500,000 jobs armed (a re-division of a
// million jobs among replicas changes ~150,000 entries per replica). A
// shard's robfig engine, goroutine and timer are made when it first gets
// an entry, so an engine of a few jobs runs a few of them (see
// scripts/bench-engine.sh).
const DefaultShards = 4096

// FireFunc is called when an armed job fires. d carries the schedule as
// armed (decoded and validated), the cron slot (the scheduled activation
// time, not the wall-clock time of the call; see the package documentation)
// and the job's jitter delay. It runs in a goroutine of its own, started by
// robfig; a panic in it is recovered and logged. Engine.Stop waits for
// running calls.
type FireFunc func(d schedule.Due)

// Policy is what the configuration says about a schedule beyond its own
// fields. The engine asks it only about enabled schedules, so a job can
// always be paused.
type Policy interface {
	// Check is an extra check of an enabled schedule (e.g. its action exists); non-nil rejects it.
	Check(s schedule.Schedule) error
	// Jitter is the jitter bound of an enabled schedule's action (<= 0: none).
	Jitter(s schedule.Schedule) time.Duration
}

// Options configures an Engine. The zero value works: UTC, DefaultShards
// shards, no fire callback, no policy, slog.Default, time.Now.
type Options struct {
	// Location is the time zone of schedules that name none (nil means UTC).
	Location *time.Location
	// Shards is the number of robfig engines the jobs are spread over by a
	// hash of their id (<= 0 means DefaultShards).
	Shards int
	// Fire is called for every fire; nil drops fires.
	Fire FireFunc
	// Policy checks and gives the jitter bound of every enabled schedule
	// (nil: no extra check, no jitter). Policy.Check runs after the
	// expression parsed; a non-nil error rejects the schedule like an
	// unparsable one. A job with jitter bound b is dispatched a fixed delay
	// in [0, b) after each of its slots; the delay is derived from the job
	// id alone (see JitterDelay), so every replica delays a job by the same
	// amount, and the fire callback still receives the undelayed slot. A
	// changed bound re-arms the job.
	Policy Policy
	// Logger receives the engine's logs (nil means slog.Default()).
	Logger *slog.Logger
	// Now is the clock for next-run and slot computations (nil means
	// time.Now). robfig's own timers always use the real clock.
	Now func() time.Time
	// Hooks let a caller observe the engine (metrics); any may be nil.
	Hooks Hooks
	// Arms, when set, says whether this engine arms job id's timer. A
	// valid, enabled schedule of a job it does not arm is kept all the
	// same — its last known good, in its compact decoded form, for when
	// the job comes to this engine — but has no timer (Status.Elsewhere):
	// another replica arms it. Nil arms every job. Rearm asks again for
	// every job.
	Arms func(id string) bool
	// Stalled, when set, is called instead of Fire for a fire whose job's
	// armed entry skipped slots before it (the process stalled past
	// them): the slots of d's schedule strictly after after and before
	// d.Slot. The callee decides those slots and fires d (see stall.go).
	Stalled func(d schedule.Due, after time.Time)
}

// Hooks are optional callbacks for observability. They are called
// synchronously, on the goroutine that called the engine, and must be quick.
type Hooks struct {
	// Applied is called when Reload (or Sync) has put a valid schedule in
	// force — armed, re-armed, disarmed or updated in place — right after
	// the engine's state changed and before the change is logged.
	Applied func(id string, o Outcome)
	// Rejected is called when a refusal — by Reload, Reject, Sync or
	// Recheck — puts job id into the rejected state (Status.LastError
	// set): the job was unknown, or its latest document had been applied.
	// A job already rejected is not reported again, whether the same bad
	// document is read again (every poll, every resync) or another bad
	// one comes; once a valid document clears the error, its next refusal
	// is reported. Called right after the engine's state changed.
	Rejected func(id string)
}

// Outcome says what Reload did with a schedule.
type Outcome int

// The outcomes of Reload.
const (
	// Added: the job was not armed and now is.
	Added Outcome = iota + 1
	// Replaced: the job's timing changed; its old entry was removed and a
	// new one armed.
	Replaced
	// Unchanged: the timing equals the current one; robfig was not touched,
	// only the other fields (action, category, args, ...) and the error
	// were updated.
	Unchanged
	// Disarmed: the job is known but not armed (enabled: false).
	Disarmed
	// Rejected: the schedule is invalid; the last known good state stays.
	Rejected
	// Held: the schedule is valid and enabled, and kept, but this engine
	// does not arm it (Options.Arms): another replica does.
	Held
)

// String returns the outcome's lower-case name.
func (o Outcome) String() string {
	switch o {
	case Added:
		return "added"
	case Replaced:
		return "replaced"
	case Unchanged:
		return "unchanged"
	case Disarmed:
		return "disarmed"
	case Rejected:
		return "rejected"
	case Held:
		return "held"
	default:
		return fmt.Sprintf("Outcome(%d)", int(o))
	}
}

// Item is one document of a full snapshot handed to Sync: either a decoded
// schedule, or the error that made it undecodable (then Schedule.ID is the
// job id if it could be read, else empty), or, with Same, a job whose
// document is the one the engine last applied for it.
type Item struct {
	Schedule schedule.Schedule
	Err      error
	// Same says the snapshot lists job Schedule.ID (the only field set)
	// with the very document the engine last applied for it, byte for
	// byte: Sync keeps the job as it is, counted unchanged, without
	// decoding it again. Only a caller that follows what the engine was
	// given may say so (a periodic resync of a million schedules spent
	// most of its allocation decoding documents found unchanged); a job
	// the engine does not know (Knows) cannot be Same.
	Same bool
}

// SyncStats counts what Sync did.
type SyncStats struct {
	// Per outcome, the number of items (Removed: of jobs absent from the
	// snapshot).
	Added, Replaced, Unchanged, Disarmed, Removed, Rejected, Held int
	// Changed lists, each once, the ids whose state the sync changed:
	// timer, any other schedule field but updated_at, or recorded error;
	// those the snapshot listed in its order, then those it removed,
	// sorted. A snapshot that matches the engine yields none, even when it
	// holds bad documents that were rejected before; re-saved documents
	// that differ only in updated_at do not count either.
	Changed []string
}

// Status is the read-only view of one job: its schedule and the engine's
// own state of it. The HTTP API and catch-up read it.
type Status struct {
	// Schedule is the last valid schedule (the one armed, while Armed), or
	// the bad document as far as it was read when no valid one was seen.
	// Its ID is always the job id.
	schedule.Schedule
	// NextRun is the next activation after now; zero when not armed.
	NextRun time.Time
	// LastError is the error of the most recent rejected document for this
	// job, empty once a valid document was applied after it.
	LastError string
	// Armed is true while a timer for the job is armed.
	Armed bool
	// Delay is the job's jitter delay: the fire for slot NextRun is
	// dispatched at NextRun+Delay. Zero without jitter.
	Delay time.Duration
	// Elsewhere is true for a valid, enabled job that has not ended and
	// that this engine does not arm (Options.Arms): another replica arms
	// it. NextRun is its next activation all the same.
	Elsewhere bool
	// Ended says why the job fires no more although its schedule is valid
	// and enabled: lifetime.ReasonAfterEnd once its end_at has passed,
	// lifetime.ReasonMaxRuns once a claim found its run count at
	// max_runs (End); empty otherwise. An ended job has no NextRun and is
	// not Armed.
	Ended string
}

// Engine arms and re-arms cron timers for jobs. Its methods are safe for
// concurrent use.
type Engine struct {
	opts   Options
	log    *slog.Logger
	shards []*shard

	mu    sync.RWMutex
	jobs  jobIndex // guarded by mu; records are never modified once stored (record.gen aside)
	armed int      // guarded by mu
	// rejected counts the jobs whose record holds an error (Rejected);
	// guarded by mu.
	rejected int
	// reserved is the room Reserve made in an empty engine, until the
	// Sync that fills it takes it (guarded by mu).
	reserved int
	// version counts the records stored (Version); written under mu.
	version atomic.Uint64

	// life serialises Start, Stop and Sync; started, syncs and loaded are
	// guarded by it.
	life    sync.Mutex
	started bool
	syncs   uint32 // Syncs begun (never 0); the current one's number marks what it lists
	// loaded: a Sync has ended without an error (the start's load of
	// every job is done); later Syncs log each change as Reload does.
	loaded bool

	// robfig operations, for tests proving that idempotent reloads do not
	// touch robfig.
	adds, removes atomic.Int64

	// retired holds robfig entries waiting to be removed (see retire).
	retired retiredQueue

	// zones caches the locations of the zones the jobs name, by IANA name
	// (zone): the parsed schedules share them.
	zones sync.Map // string → *time.Location
}

// retiredQueue is the robfig entries of replaced or removed jobs still to
// be taken out of their shards. One goroutine drains it while it is not
// empty and exits when it is, so no goroutine outlives the work and a burst
// of edits costs one goroutine, not one per edit.
//
// The drain is paced by the engine's budget of robfig changes (pace,
// shared with ArmPaced): each removal is a hand-off to the shard's run
// loop, which re-sorts the shard and builds a new entry list, so a
// re-division that disarms tens of thousands of jobs at once (Rearm) would
// otherwise take a core for seconds, away from the claims of the jobs
// still firing, and, on a small machine, from the database beside it. A
// retired entry waiting its turn costs nothing but memory: it has no next
// activation and never runs. wait (Stop) drains the rest without pauses.
type retiredQueue struct {
	mu       sync.Mutex
	idle     sync.Cond // signalled when draining stops; uses mu
	pending  []retiredEntry
	draining bool
	hurry    bool // set by wait: no more pauses
	pace     *pacer
	// woken ends a pause at once when wait sets hurry.
	woken chan struct{}
}

// paceBurst and pacePause are the engine's budget of robfig changes made
// in bulk (the retired queue's drain and ArmPaced, together): paceBurst
// changes, then a pause of pacePause from the end of the last of them —
// about 5,000 a second while a backlog lasts on an idle machine, fewer on
// a busy one, where the changes themselves take longer.
const (
	paceBurst = 256
	pacePause = 50 * time.Millisecond
)

// pacer keeps the engine's budget of robfig changes made in bulk: its
// users reserve their changes before making them and say when they are
// done.
type pacer struct {
	mu    sync.Mutex
	pause time.Duration // pacePause; tests change it
	count int           // changes reserved since the last pause
	last  time.Time     // when the last of them was made
}

// reserve returns once n (<= paceBurst) more changes fit the budget,
// waiting when they would make the burst longer than paceBurst until
// pause has passed since its last change. It does not wait when hurry
// reports true, and stops waiting when woken receives.
func (p *pacer) reserve(n int, hurry func() bool, woken <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.count > 0 && p.count+n > paceBurst {
		left := p.pause - time.Since(p.last)
		if left <= 0 || hurry() {
			p.count, p.last = 0, time.Now()
			break
		}
		p.mu.Unlock()
		t := time.NewTimer(left)
		select {
		case <-t.C:
		case <-woken:
			t.Stop()
		}
		p.mu.Lock()
	}
	p.count += n
}

// room is how many changes fit the current burst without a pause.
func (p *pacer) room() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return paceBurst - p.count
}

// done records that the changes reserved were made.
func (p *pacer) done() {
	p.mu.Lock()
	p.last = time.Now()
	p.mu.Unlock()
}

// retiredEntry is one robfig entry to take out: its shard's robfig engine
// and its id.
type retiredEntry struct {
	cron *cron.Cron
	id   cron.EntryID
}

// add queues one entry, starting the drainer if none runs.
func (q *retiredQueue) add(c *cron.Cron, id cron.EntryID) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.pending = append(q.pending, retiredEntry{c, id})
	if !q.draining {
		q.draining = true
		go q.drain()
	}
}

func (q *retiredQueue) drain() {
	for {
		room := q.pace.room() // before q.mu: reserve takes q.mu (hurried) under the pacer's
		q.mu.Lock()
		if len(q.pending) == 0 {
			q.pending = nil // the backing array of a large backlog goes
			q.draining, q.hurry = false, false
			select {
			case <-q.woken: // a wake-up nobody waited for must not cut a later pause
			default:
			}
			q.idle.Broadcast()
			q.mu.Unlock()
			return
		}
		// What fits the current burst goes at once; with no room left, a
		// whole burst waits for the pause.
		n := min(len(q.pending), paceBurst)
		if room > 0 {
			n = min(n, room)
		}
		batch := slices.Clone(q.pending[:n])
		q.pending = q.pending[n:]
		q.mu.Unlock()
		q.pace.reserve(n, q.hurried, q.woken)
		for _, r := range batch {
			r.cron.Remove(r.id)
		}
		q.pace.done()
	}
}

// hurried reports whether wait asked the drain to skip its pauses.
func (q *retiredQueue) hurried() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.hurry
}

// wait returns once every queued entry has been removed, draining the
// rest without pauses.
func (q *retiredQueue) wait() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.draining {
		q.hurry = true
		select {
		case q.woken <- struct{}{}:
		default:
		}
	}
	for q.draining {
		q.idle.Wait()
	}
}

// shard is one robfig engine and the lock serialising changes to its jobs.
type shard struct {
	// mu serialises Reload/Reject/Remove for the jobs hashed onto this
	// shard, including the robfig calls, so that concurrent changes of one
	// job apply in some order and never leak an entry. It is taken before
	// Engine.mu, never the other way round.
	mu sync.Mutex
	// cron is the shard's robfig engine, made by Engine.timers when the
	// shard first gets an entry and kept from then on; guarded by mu.
	cron *cron.Cron
	// running says whether cron runs, or is to be started when it is made:
	// the engine runs and the shard is not paused by a Sync; guarded by mu.
	running bool
	// armed counts the shard's robfig entries; guarded by mu.
	armed int
}

// New returns an engine configured by opts. Call Start to run its timers.
func New(opts Options) *Engine {
	if opts.Location == nil {
		opts.Location = time.UTC
	}
	if opts.Shards <= 0 {
		opts.Shards = DefaultShards
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	e := &Engine{
		opts: opts,
		log:  opts.Logger,
		jobs: newJobIndex(),
	}
	e.retired.idle.L = &e.retired.mu
	e.retired.pace, e.retired.woken = &pacer{pause: pacePause}, make(chan struct{}, 1)
	for range opts.Shards {
		e.shards = append(e.shards, &shard{})
	}
	return e
}

// timers returns shard sh's robfig engine, made the first time the shard
// gets an entry and started then if the shard runs. The caller holds sh.mu.
func (e *Engine) timers(sh *shard) *cron.Cron {
	if sh.cron == nil {
		sh.cron = cron.New(cron.WithLocation(e.opts.Location), cron.WithLogger(cronLogger{e.log}))
		if sh.running {
			sh.cron.Start()
		}
	}
	return sh.cron
}

// Start starts the timers of all shards. Jobs may be loaded before or after.
func (e *Engine) Start() {
	e.life.Lock()
	defer e.life.Unlock()
	e.started = true
	for _, sh := range e.shards {
		sh.mu.Lock()
		sh.running = true
		if sh.cron != nil {
			sh.cron.Start()
		}
		sh.mu.Unlock()
	}
}

// Stop stops the timers of all shards. The returned context is done once all
// fire callbacks that were running have returned. The engine keeps its jobs
// and may be started again.
func (e *Engine) Stop() context.Context {
	e.life.Lock()
	defer e.life.Unlock()
	e.started = false
	e.retired.wait()
	var ctxs []context.Context
	for _, sh := range e.shards {
		sh.mu.Lock()
		sh.running = false
		if sh.cron != nil {
			ctxs = append(ctxs, sh.cron.Stop())
		}
		sh.mu.Unlock()
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer cancel()
		for _, c := range ctxs {
			<-c.Done()
		}
	}()
	return ctx
}

func (e *Engine) now() time.Time {
	return e.opts.Now().In(e.opts.Location)
}

func (e *Engine) shardOf(id string) *shard {
	return e.shards[e.shardIndex(id)]
}

// shardIndex is the FNV-1a hash of id modulo the number of shards.
func (e *Engine) shardIndex(id string) int {
	const offset32, prime32 = 2166136261, 16777619
	h := uint32(offset32)
	for i := 0; i < len(id); i++ {
		h ^= uint32(id[i])
		h *= prime32
	}
	return int(h % uint32(len(e.shards)))
}

// JitterDelay returns the dispatch delay of job id under jitter bound
// bound: the 64-bit FNV-1a hash of id modulo bound, so the same on every
// replica, and uniformly spread over [0, bound) across jobs. It is zero
// when bound <= 0.
func JitterDelay(id string, bound time.Duration) time.Duration {
	if bound <= 0 {
		return 0
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(id))
	return time.Duration(h.Sum64() % uint64(bound))
}

// jitterOf returns the jitter bound of s: zero unless s is enabled and
// Options.Policy gives a positive bound.
func (e *Engine) jitterOf(s schedule.Schedule) time.Duration {
	if !s.Enabled || e.opts.Policy == nil {
		return 0
	}
	return max(0, e.opts.Policy.Jitter(s))
}

// policyCheck runs Options.Policy.Check on s when s is enabled.
func (e *Engine) policyCheck(s schedule.Schedule) error {
	return checkPolicy(s, e.opts.Policy)
}

// PolicyError is a refusal by a Policy of a schedule whose own fields are
// valid: one naming an action the configuration lacks, say. Its message is
// the policy's own, so the engine's last error reads the same with or
// without it; a caller that checks a schedule away from the daemons (the
// command line) can tell it apart, since a Go program embedding the
// engine may have a policy of its own.
type PolicyError struct {
	// Err is the policy's refusal.
	Err error
}

// Error returns the policy's own message.
func (e *PolicyError) Error() string { return e.Err.Error() }

// Unwrap returns the policy's refusal.
func (e *PolicyError) Unwrap() error { return e.Err }

// Check is the engine's whole check of one schedule as decoded by
// schedule.DecodeFields, before it is armed: the expression parses in the
// schedule's zone (def when it names none, nil meaning UTC) with its
// daylight-saving mode and fires at least once, and, when the schedule is
// enabled, p accepts it (nil: no policy). A refusal by p is a
// *PolicyError; any other refusal wraps schedule.ErrInvalid. The engine
// arms exactly the schedules Check accepts, so every writer of the
// schedules collection (the command line's schedules set) checks with it
// rather than with rules of its own.
func Check(s schedule.Schedule, def *time.Location, p Policy) (cron.Schedule, error) {
	sched, err := s.Parse(def)
	if err != nil {
		return nil, err
	}
	if err := checkPolicy(s, p); err != nil {
		return nil, err
	}
	return sched, nil
}

// checkPolicy runs p.Check on s when s is enabled and p is set, its refusal
// as a *PolicyError.
func checkPolicy(s schedule.Schedule, p Policy) error {
	if !s.Enabled || p == nil {
		return nil
	}
	if err := p.Check(s); err != nil {
		return &PolicyError{Err: err}
	}
	return nil
}

func (e *Engine) load(id string) *record {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.jobs.get(id)
}

// store replaces the record of id (nil deletes it) and keeps the armed
// counts. The caller holds the lock of sh, the job's shard.
func (e *Engine) store(sh *shard, id string, r *record) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.version.Add(1)
	if old := e.jobs.get(id); old != nil {
		if old.fire != nil {
			e.armed--
			sh.armed--
		}
		if old.state().err != "" {
			e.rejected--
		}
	}
	if r == nil {
		e.jobs.Remove(id)
		return
	}
	if r.state().err != "" {
		e.rejected++
	}
	if r.fire != nil {
		e.armed++
		sh.armed++
		r.fire.rec.Store(r) // the next fire carries r's fields
	}
	e.jobs.set(id, r)
}

// parseKey is what a parsed expression depends on besides the engine's
// default zone: the job id too when the expression has H, whose values
// are hashed from it.
type parseKey struct {
	expr, tz string
	dst      schedule.DSTMode
	hashID   string
}

// parseCache maps expressions already parsed by one Sync to their timing.
// Timings are immutable, so jobs with the same expression share one: its
// strings and parsed schedule.
type parseCache map[parseKey]*timing

// check is Check in the engine's default zone with its policy, reusing
// cache when it holds the expression (nil means no cache). It returns the
// timing of s, its schedule not bounded by s's lifetime.
func (e *Engine) check(s schedule.Schedule, cache parseCache) (*timing, error) {
	key := parseKey{expr: s.CronExpr, tz: s.Timezone, dst: s.DST}
	if crondialect.UsesHash(s.CronExpr) {
		key.hashID = s.ID
	}
	if t, ok := cache[key]; ok {
		if err := e.policyCheck(s); err != nil {
			return nil, err
		}
		return t, nil
	}
	sched, err := e.checkZoned(s)
	if err != nil {
		return nil, err
	}
	t := newTiming(s, sched)
	if cache != nil {
		cache[key] = t
	}
	return t, nil
}

// checkZoned is Check in the engine's default zone with its policy, its
// time zone taken from the engine's zone cache: time.LoadLocation reads
// and parses the zone's file on every call, and a fleet of distinct
// expressions misses the parse cache on every job. A zone that does not
// load is left to Check, which refuses it.
func (e *Engine) checkZoned(s schedule.Schedule) (cron.Schedule, error) {
	if s.Timezone == "" {
		return Check(s, e.opts.Location, e.opts.Policy)
	}
	loc, ok := e.zone(s.Timezone)
	if !ok {
		return Check(s, e.opts.Location, e.opts.Policy)
	}
	// The zone is loaded: parsing s in it is parsing s without its zone
	// field in loc (a CRON_TZ= prefix wins over both alike).
	inZone := s
	inZone.Timezone = ""
	sched, err := inZone.Parse(loc)
	if err != nil {
		return nil, err
	}
	if err := checkPolicy(s, e.opts.Policy); err != nil {
		return nil, err
	}
	return sched, nil
}

// Reload applies one schedule. It is idempotent: applying the same timing
// again leaves the robfig entry untouched (Unchanged). A changed timing
// replaces only this job's entry. enabled: false disarms the job but keeps it
// visible. An invalid schedule is Rejected and the job keeps its last known
// good timer (see Reject).
func (e *Engine) Reload(s schedule.Schedule) Outcome {
	o, _ := e.reload(s, applyOne)
	return o
}

// apply says how reload and remove treat one job: at which level a
// successful change is logged, which parse cache they share (nil: none),
// and whether a retired robfig entry is taken out before they return.
type apply struct {
	lvl   slog.Level
	cache parseCache
	// removeInline takes a replaced or removed job's robfig entry out
	// before returning instead of through the retired queue (see retire).
	removeInline bool
	// gen marks the records stored as listed by that Sync (record.gen);
	// 0 outside a Sync.
	gen uint32
	// relisted, set by Sync, becomes true when a job is applied that the
	// same Sync listed already (see noteListed).
	relisted *bool
}

// noteListed sets how.relisted when old, the record a Sync is about to
// replace, was listed by that Sync already: the snapshot lists its job
// twice (a collection scan may return a document that moved again).
func (how apply) noteListed(old *record) {
	if how.relisted != nil && old != nil && old.gen == how.gen {
		*how.relisted = true
	}
}

// applyOne is how Reload and Remove apply one edit: logged at info, the
// old entry retired without waiting for robfig.
var applyOne = apply{lvl: slog.LevelInfo}

// retire disarms the robfig entry of a replaced or removed job. The entry's
// job is marked retired first, so from here on it neither runs nor asks
// robfig for another activation. Taking it out of robfig's list can then
// wait: while robfig runs, Remove is a hand-off to the shard's run loop that
// blocks until the loop comes round, and an edit should not wait for that
// (the target is event received → armed within 1 ms at the 99th
// percentile), so the entry goes to the engine's retired queue. inline
// removes it before returning instead: Sync uses it, so that robfig's lists
// match the engine's jobs when Sync returns. The caller holds sh.mu.
func (e *Engine) retire(sh *shard, old *record, inline bool) {
	old.fire.retired.Store(true)
	e.removes.Add(1)
	if inline {
		sh.cron.Remove(old.fire.entry)
		return
	}
	e.retired.add(sh.cron, old.fire.entry)
}

// reload is Reload applying s as how says. It also reports whether the
// job's state changed (see SyncStats.Changed).
func (e *Engine) reload(s schedule.Schedule, how apply) (Outcome, bool) {
	if s.ID == "" {
		e.log.Warn("scheduler: schedule without job id ignored", "cron_expr", s.CronExpr)
		return Rejected, false
	}
	sh := e.shardOf(s.ID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return e.reloadLocked(sh, s, how)
}

// reloadLocked is reload with the lock of sh, the job's shard, held.
func (e *Engine) reloadLocked(sh *shard, s schedule.Schedule, how apply) (Outcome, bool) {
	jitter := e.jitterOf(s)
	old := e.load(s.ID)
	how.noteListed(old)

	if old != nil && old.valid && old.sameTiming(s) && old.state().jitter == jitter {
		// The same timing parses to the same schedule: only the policy's
		// check (the action may have changed) is left to do.
		if err := e.policyCheck(s); err != nil {
			return Rejected, e.rejectLocked(s.ID, old, heapCopy(s), err, how.gen)
		}
		// The timing (and so the parsed schedule the entry runs on) is
		// kept; the error and the pending schedule are cleared.
		r := pack(s, old.t, jobState{jitter: jitter, ended: old.state().ended}, old)
		r.valid, r.fire, r.slots, r.gen = true, old.fire, old.slots, old.gen
		r.mark(how.gen)
		e.store(sh, s.ID, &r)
		if e.opts.Hooks.Applied != nil {
			e.opts.Hooks.Applied(s.ID, Unchanged)
		}
		if old.state().err != "" {
			e.log.Log(context.Background(), how.lvl, "scheduler: schedule valid again, error cleared",
				"job_id", s.ID, "cron_expr", s.CronExpr)
		} else if e.log.Enabled(context.Background(), slog.LevelDebug) {
			e.log.Debug("scheduler: schedule unchanged", "job_id", s.ID, "cron_expr", s.CronExpr)
		}
		return Unchanged, old.state().err != "" || !old.sameExceptTiming(s)
	}
	t, err := e.check(s, how.cache)
	if err != nil {
		return Rejected, e.rejectLocked(s.ID, old, heapCopy(s), err, how.gen)
	}
	// Only the slots the job's lifetime lets run are armed (a plain
	// schedule is armed as parsed, in a timing other jobs may share).
	if life := lifetimeOf(s); !life.IsZero() {
		t = &timing{expr: t.expr, tz: t.tz, dst: t.dst, sched: life.Bound(t.sched)}
	}

	r := new(record)
	*r = pack(s, t, jobState{jitter: jitter}, old)
	r.valid = true
	if old != nil {
		r.slots, r.gen = old.slots, old.gen
	}
	r.mark(how.gen)
	wasArmed := old != nil && old.fire != nil
	outcome := Disarmed
	if s.Enabled && !e.arms(s.ID) {
		outcome = Held
	}
	if s.Enabled && outcome != Held {
		// Arm the new entry first: with the shard's run loop waiting,
		// this hand-off returns at once; the old entry is retired after.
		f := e.newFiring(s.ID, r)
		if wasArmed {
			old.fire.retired.Store(true) // never two live entries for one job
		}
		f.entry = e.timers(sh).Schedule(f, f)
		e.adds.Add(1)
		outcome = Added
		if wasArmed {
			outcome = Replaced
		}
	}
	if wasArmed {
		e.retire(sh, old, how.removeInline)
	}
	e.store(sh, s.ID, r)
	if e.opts.Hooks.Applied != nil {
		e.opts.Hooks.Applied(s.ID, outcome)
	}

	if ctx := context.Background(); e.log.Enabled(ctx, how.lvl) {
		attrs := []slog.Attr{slog.String("job_id", s.ID), slog.String("cron_expr", s.CronExpr),
			slog.String("outcome", outcome.String())}
		if s.Timezone != "" {
			attrs = append(attrs, slog.String("timezone", s.Timezone))
		}
		if r.fire != nil {
			if next := r.nextRun(s.ID, e.now()); next.IsZero() {
				attrs = append(attrs, slog.String("ended", lifetime.ReasonAfterEnd))
			} else {
				attrs = append(attrs, slog.String("next_run", e.showTime(next, s.Timezone)))
			}
			if d := r.delay(s.ID); d > 0 {
				attrs = append(attrs, slog.Duration("jitter_delay", d))
			}
		}
		e.log.LogAttrs(ctx, how.lvl, "scheduler: schedule applied", attrs...)
	}
	return outcome, true
}

// heapCopy returns a copy of s of its own. Taking the address of a
// parameter or a range variable instead would move it to the heap on every
// call, also on the paths that do not reject (an allocation of a whole
// Schedule per job and per Sync item).
func heapCopy(s schedule.Schedule) *schedule.Schedule { return &s }

// Reject records err as the last error of job id after a bad document for
// it, keeping its last known good timer armed. For a job not seen before
// the error is recorded with the job not armed. An empty id is only logged.
func (e *Engine) Reject(id string, err error) {
	if err == nil {
		err = errors.New("rejected without a reason")
	}
	e.reject(id, nil, err, applyOne)
}

// reject is Reject with the rejected schedule, when known, marking the
// record as listed by how's Sync (none for applyOne). It reports whether
// the job's state changed.
func (e *Engine) reject(id string, bad *schedule.Schedule, err error, how apply) bool {
	if id == "" {
		e.log.Warn("scheduler: bad schedule without job id ignored", "error", err)
		return false
	}
	sh := e.shardOf(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	old := e.load(id)
	how.noteListed(old)
	return e.rejectLocked(id, old, bad, err, how.gen)
}

// mark records that Sync gen listed the job; gen 0 (no Sync) leaves the
// mark as it was.
func (r *record) mark(gen uint32) {
	if gen != 0 {
		r.gen = gen
	}
}

// rejectLocked records err for id; bad is the rejected schedule when known,
// gen the Sync that lists it (0: none). It reports whether the job's state
// changed. The caller holds the job's shard lock.
func (e *Engine) rejectLocked(id string, old *record, bad *schedule.Schedule, err error, gen uint32) bool {
	var r record
	switch {
	case old != nil && (old.valid || bad == nil):
		r = *old // the last known good stays, armed or not
	case bad != nil:
		r = pack(*bad, newTiming(*bad, nil), jobState{}, old)
	}
	if old != nil {
		r.slots, r.gen = old.slots, old.gen
	}
	r.mark(gen)
	st := r.state()
	st.err = err.Error()
	st.pending = bad // nil for a document that could not be decoded: nothing to apply again
	r = r.withState(st)
	e.store(e.shardOf(id), id, &r)
	if st.err != "" && (old == nil || old.state().err == "") && e.opts.Hooks.Rejected != nil {
		e.opts.Hooks.Rejected(id)
	}
	changed := old == nil || old.state().err != st.err || old.schedule(id) != r.schedule(id)
	lvl := slog.LevelWarn
	if !changed {
		lvl = slog.LevelDebug // the same rejection again, e.g. by a periodic resync
	}
	msg := msgRejectedKept
	if !r.valid {
		msg = msgRejectedUnarmed // nothing to keep: no valid version was ever applied
	}
	e.log.Log(context.Background(), lvl, msg, "job_id", schedule.ShowKey(id), "error", err, "armed", r.fire != nil)
	return changed
}

// The lines a rejection is logged with: the job keeps its last known good
// (armed or not, as that version says), or it has none and is not armed.
const (
	msgRejectedKept    = "scheduler: schedule rejected, last known good kept"
	msgRejectedUnarmed = "scheduler: schedule rejected, not armed: no valid version of the job is known"
)

// Remove disarms job id and forgets it, including its last error and slot
// memory. It reports whether the job was known.
func (e *Engine) Remove(id string) bool {
	return e.remove(id, applyOne)
}

// remove is Remove, taking the robfig entry out before returning when
// how.removeInline is set (see retire).
func (e *Engine) remove(id string, how apply) bool {
	sh := e.shardOf(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	old := e.load(id)
	if old == nil {
		return false
	}
	if old.fire != nil {
		e.retire(sh, old, how.removeInline)
	}
	e.store(sh, id, nil)
	e.log.Info("scheduler: schedule removed", "job_id", schedule.ShowKey(id))
	return true
}

// Sync applies a full snapshot of the schedules, read one item at a time
// (the snapshot is never held whole): every item is applied as by Reload
// (or Reject when it carries an error), and once items has ended without
// an error, every known job that items did not list is removed. An error
// from items ends the Sync there: what was applied stays (each item is a
// current version), nothing is removed, and the error is returned with the
// counts so far. Until a Sync has ended without an error (the start's
// load of every job), per-job changes are logged at debug level; after
// it each one is logged as Reload logs it, so that a change a full read
// finds (a poll, a resync, an edit its read met before its event) has its
// line too; rejections are warnings throughout. The totals are logged at
// info level, after the first load only when something changed (a poll
// that finds nothing logs nothing). Sync is meant to be called
// by the single goroutine that also calls Reload and Remove: a job
// reloaded concurrently with a Sync that does not list it may be removed
// again.
//
// A shard that holds no armed job when the snapshot brings it one (all of
// them on the first Sync of a large fleet) is paused until Sync ends:
// robfig then appends entries without sorting, and sorts each shard once
// when it is started again, and Sync returns once they have computed the
// first activation of their entries. A paused shard has no timer that
// could be missed; the jobs added to it are armed as of the end of Sync.
func (e *Engine) Sync(items iter.Seq2[Item, error]) (SyncStats, error) {
	e.life.Lock()
	defer e.life.Unlock()
	if e.syncs++; e.syncs == 0 {
		e.syncs = 1 // 0 marks a job no Sync listed
	}
	p := pauser{e: e}
	defer p.resume()
	var st SyncStats
	// Per-job changes are logged at debug level during the start's load,
	// at Reload's level after it; the robfig lists match the engine's
	// jobs when Sync returns, so retired entries go inline. relisted:
	// only when the snapshot lists a job twice can Changed hold an id
	// twice.
	relisted := false
	how := apply{lvl: slog.LevelDebug, cache: make(parseCache), removeInline: true, gen: e.syncs, relisted: &relisted}
	if e.loaded {
		how.lvl = applyOne.lvl
	}
	first := true
	for it, err := range items {
		if first {
			// Taken at the first item: the daemon's snapshot makes the
			// room (the collection's count) once its read has begun.
			first = false
			st.Changed = e.takeReserved()
		}
		if err != nil {
			st.finish(relisted)
			return st, err
		}
		id := it.Schedule.ID
		if it.Same {
			if e.relist(id, how) {
				st.Unchanged++
				continue
			}
			// Nothing to apply: the job was not decoded. It stays unknown
			// until a snapshot lists its document.
			e.log.Error("scheduler: a snapshot listed an unknown job as unchanged; not applied", "job_id", schedule.ShowKey(id))
			continue
		}
		if it.Err != nil {
			st.Rejected++
			if e.reject(id, heapCopy(it.Schedule), it.Err, how) {
				st.Changed = append(st.Changed, id)
			}
			continue
		}
		if it.Schedule.Enabled && id != "" && e.arms(id) {
			p.pauseIfEmpty(id)
		}
		if len(how.cache) >= parseCacheMax {
			clear(how.cache)
		}
		o, changed := e.reload(it.Schedule, how)
		if changed {
			st.Changed = append(st.Changed, id)
		}
		st.count(o)
	}
	e.mu.RLock()
	var gone []string
	e.jobs.all(func(id string, r *record) {
		if r.gen != how.gen {
			gone = append(gone, id)
		}
	})
	e.mu.RUnlock()
	slices.Sort(gone)
	for _, id := range gone {
		if e.remove(id, how) {
			st.Removed++
			st.Changed = append(st.Changed, id)
		}
	}
	st.finish(relisted)
	lvl := slog.LevelInfo
	if e.loaded && len(st.Changed) == 0 {
		lvl = slog.LevelDebug // a resync or a poll that found nothing
	}
	e.loaded = true
	e.log.Log(context.Background(), lvl, "scheduler: full sync applied", "added", st.Added, "replaced", st.Replaced,
		"unchanged", st.Unchanged, "disarmed", st.Disarmed, "removed", st.Removed,
		"rejected", st.Rejected, "held", st.Held, "armed", e.Len())
	return st, nil
}

// relist marks job id listed by the Sync of how, as it is (Item.Same);
// false when the engine does not know the job.
func (e *Engine) relist(id string, how apply) bool {
	sh := e.shardOf(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	r := e.load(id)
	if r == nil {
		return false
	}
	how.noteListed(r)
	r.mark(how.gen) // in place, the one field that may be (record.gen)
	if e.opts.Hooks.Applied != nil {
		e.opts.Hooks.Applied(id, Unchanged)
	}
	return true
}

// Knows reports whether the engine holds job id (armed or not, valid or
// not): whether a snapshot may list it as Item.Same.
func (e *Engine) Knows(id string) bool { return e.load(id) != nil }

// KnowsValid reports whether the engine holds a valid schedule of job id,
// armed or not: its last known good, which a refused document leaves in
// force. It is false for a job known only by a refused document.
func (e *Engine) KnowsValid(id string) bool {
	r := e.load(id)
	return r != nil && r.valid
}

// parseCacheMax bounds a Sync's parse cache: past it the cache starts
// over, so that a snapshot of distinct expressions holds no map of them
// all beside the records (which keep their parsed schedules anyway).
const parseCacheMax = 16384

// count adds one Reload outcome to the stats.
func (st *SyncStats) count(o Outcome) {
	switch o {
	case Held:
		st.Held++
	case Added:
		st.Added++
	case Replaced:
		st.Replaced++
	case Unchanged:
		st.Unchanged++
	case Disarmed:
		st.Disarmed++
	case Rejected:
		st.Rejected++
	}
}

// finish drops the second and later mentions of an id from Changed when
// the snapshot listed a job more than once (relisted), keeping the order.
// Changed is not sorted: a million ids read in the state file's order
// took most of a second to sort, at the end of a start, on its path to
// ready.
func (st *SyncStats) finish(relisted bool) {
	if !relisted {
		return
	}
	seen := make(map[string]bool, len(st.Changed))
	st.Changed = slices.DeleteFunc(st.Changed, func(id string) bool {
		if seen[id] {
			return true
		}
		seen[id] = true
		return false
	})
}

// pauser pauses, during one Sync, the shards that hold no armed job when
// the snapshot brings them one, and starts them again at its end. It does
// nothing while the engine is stopped. Its methods are called with e.life
// held.
type pauser struct {
	e       *Engine
	checked []bool // by shard index: looked at already
	paused  []*shard
}

// pauseIfEmpty stops the shard of job id if it has no armed job, the first
// time the Sync brings it one.
func (p *pauser) pauseIfEmpty(id string) {
	if !p.e.started {
		return
	}
	if p.checked == nil {
		p.checked = make([]bool, len(p.e.shards))
	}
	i := p.e.shardIndex(id)
	if p.checked[i] {
		return
	}
	p.checked[i] = true
	sh := p.e.shards[i]
	sh.mu.Lock()
	if sh.armed == 0 {
		sh.running = false
		if sh.cron != nil {
			sh.cron.Stop()
		}
		p.paused = append(p.paused, sh)
	}
	sh.mu.Unlock()
}

// resume starts the shards pauseIfEmpty stopped and returns once each has
// computed the first activation of all its entries, so that Sync returns
// with every timer armed.
func (p *pauser) resume() {
	var started []*cron.Cron
	for _, sh := range p.paused {
		sh.mu.Lock()
		sh.running = true
		if sh.cron != nil {
			sh.cron.Start()
			started = append(started, sh.cron)
		}
		sh.mu.Unlock()
	}
	for _, c := range started {
		// A running robfig engine handles Remove in its run loop, which
		// first computes the next activation of every entry and sorts
		// them. Entry id 0 is never assigned, so this removes nothing: it
		// only waits for the run loop.
		c.Remove(0)
	}
}

// List returns the status of every known job (armed, disabled, or only
// rejected), sorted by id. It holds them all at once: a pass over every
// job that needs no order ranges over All instead.
func (e *Engine) List() []Status {
	out := slices.Collect(e.All())
	slices.SortFunc(out, func(a, b Status) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// All yields the status of every known job, in no particular order, each
// computed as it is yielded: a pass over a million jobs holds one status at
// a time (and a pointer per job, taken at the start: jobs changed after it
// show as they are then, jobs added after it do not show).
func (e *Engine) All() iter.Seq[Status] {
	return func(yield func(Status) bool) {
		type kv struct {
			id string
			r  *record
		}
		e.mu.RLock()
		recs := make([]kv, 0, e.jobs.Len())
		e.jobs.all(func(id string, r *record) { recs = append(recs, kv{id, r}) })
		e.mu.RUnlock()
		now := e.now()
		for _, x := range recs {
			if cur := e.load(x.id); cur != nil {
				x.r = cur
			}
			if !yield(x.r.status(x.id, now)) {
				return
			}
		}
	}
}

// Armed yields the schedule of every armed job (Status.Armed) and the
// delay its fires carry, in no particular order, taken as All takes them
// but without computing each job's next run (only a job whose end_at has
// passed needs it, to tell whether it still fires): a walk over every job
// at start-up that needs no more than these costs a fraction of All's.
func (e *Engine) Armed() iter.Seq2[schedule.Schedule, time.Duration] {
	return func(yield func(schedule.Schedule, time.Duration) bool) {
		ids := e.armedSnapshot()
		now := e.now()
		for _, id := range ids {
			r := e.load(id)
			if !r.firesAt(id, now) {
				continue
			}
			if !yield(r.schedule(id), r.delay(id)) {
				return
			}
		}
	}
}

// ArmedIDs returns the ids of the jobs Armed yields, in no particular
// order, and the longest delay their fires carry: one list of ids, with no
// schedule made for each job, for a walk at start-up that needs no more.
func (e *Engine) ArmedIDs() (ids []string, maxDelay time.Duration) {
	ids = e.armedSnapshot()
	now := e.now()
	n := 0
	for _, id := range ids {
		r := e.load(id)
		if !r.firesAt(id, now) {
			continue
		}
		ids[n] = id
		n++
		maxDelay = max(maxDelay, r.delay(id))
	}
	clear(ids[n:])
	return ids[:n], maxDelay
}

// armedSnapshot returns the ids of the jobs armed now.
func (e *Engine) armedSnapshot() []string {
	e.mu.RLock()
	defer e.mu.RUnlock()
	ids := make([]string, 0, e.armed)
	e.jobs.all(func(id string, r *record) {
		if r.fire != nil {
			ids = append(ids, id)
		}
	})
	return ids
}

// firesAt reports whether r, the record of job id (nil: unknown), is armed
// and still fires at now: false once its end_at has passed and it has no
// next run (as Status says).
func (r *record) firesAt(id string, now time.Time) bool {
	return r != nil && r.fire != nil && !(r.life().Over(now) && r.nextRun(id, now).IsZero())
}

// Version returns a number that changes whenever the engine's jobs change:
// a job added, replaced, rejected or removed. While it stays the same,
// List returns the same jobs in the same state, except for their NextRun,
// which follows the clock; so a reader that derives something from List
// (the status page's table) may keep it until Version changes. A Version
// read before a List is never newer than that List.
func (e *Engine) Version() uint64 { return e.version.Load() }

// Get returns the status of job id, and false when the job is unknown.
func (e *Engine) Get(id string) (Status, bool) {
	r := e.load(id)
	if r == nil {
		return Status{}, false
	}
	return r.status(id, e.now()), true
}

// Reserve makes room for about n jobs in an engine that holds none, so
// that a first Sync of that many does not grow the engine's index of jobs
// step by step as it goes (at a million jobs, about a second of CPU), nor
// the list of the ids it changed (SyncStats.Changed: all of them). It
// does nothing to an engine that holds jobs, or for n <= 0; n is a hint,
// and a Sync of more or fewer jobs is applied as always.
func (e *Engine) Reserve(n int) {
	if n <= 0 {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.jobs.Len() == 0 {
		e.jobs.Reserve(n)
		e.reserved = n
	}
}

// takeReserved returns the list for the ids a first Sync changes, made
// for the room Reserve made (every job a first Sync lists is a change:
// made once, not regrown by a quarter at a time, which at a million jobs
// was four times its 16 MB in garbage), or nil; the room is then taken.
func (e *Engine) takeReserved() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := e.reserved
	e.reserved = 0
	if n == 0 || e.jobs.Len() > 0 {
		return nil
	}
	return make([]string, 0, n)
}

// Known returns the number of jobs the engine keeps: armed, disabled,
// rejected, or (Options.Arms) armed elsewhere.
func (e *Engine) Known() int {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.jobs.Len()
}

// Rejected returns the number of jobs whose latest document was refused
// (Status.LastError set), armed on their last known good or not; a
// refused document whose _id is not a job id counts as one (see
// schedule.RefusedKey).
func (e *Engine) Rejected() int {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.rejected
}

// Len returns the number of armed jobs.
func (e *Engine) Len() int {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.armed
}

func (r *record) status(id string, now time.Time) Status {
	js := r.state()
	st := Status{
		Schedule:  r.schedule(id),
		LastError: js.err,
		Armed:     r.fire != nil,
		Delay:     r.delay(id),
		Elsewhere: r.fire == nil && r.valid && r.enabled && js.ended == "",
		Ended:     js.ended,
	}
	if st.Armed || st.Elsewhere {
		st.NextRun = r.nextRun(id, now)
		if st.NextRun.IsZero() && r.life().Over(now) {
			// The entry fires no more: its end_at has passed.
			st.Armed, st.Elsewhere, st.Ended = false, false, lifetime.ReasonAfterEnd
		}
	}
	return st
}

// arms reports whether the engine arms job id (Options.Arms).
func (e *Engine) arms(id string) bool { return e.opts.Arms == nil || e.opts.Arms(id) }

// Rearm asks Options.Arms again for every valid, enabled job that has not
// ended (End): it disarms the jobs it no longer arms, arms at once those
// it now arms for which urgent reports true (every one when urgent is
// nil), and returns the others in deferred, unarmed, for ArmPaced. Each
// robfig add re-sorts the job's running shard, so arming tens of thousands
// of jobs at once takes a core for seconds; the caller defers those
// another replica fires meanwhile.
// A job Rearm arms fires from its next activation after now; the slots
// before are the caller's to decide (the daemon's hand-over). Without
// Arms it does nothing.
func (e *Engine) Rearm(urgent func(id string) bool) (armed, deferred, disarmed []string) {
	if e.opts.Arms == nil {
		return nil, nil, nil
	}
	e.life.Lock()
	defer e.life.Unlock()
	e.mu.RLock()
	ids := make([]string, 0, e.jobs.Len())
	e.jobs.all(func(id string, _ *record) { ids = append(ids, id) })
	e.mu.RUnlock()
	for _, id := range ids {
		sh := e.shardOf(id)
		sh.mu.Lock()
		if r := e.load(id); r != nil && r.valid && r.enabled && r.state().ended == "" {
			want, have := e.opts.Arms(id), r.fire != nil
			switch {
			case want && !have && urgent != nil && !urgent(id):
				deferred = append(deferred, id)
			case want && !have:
				e.armNow(sh, id, r)
				armed = append(armed, id)
			case !want && have:
				n := *r
				e.retire(sh, r, false)
				n.fire = nil
				e.store(sh, id, &n)
				disarmed = append(disarmed, id)
			}
		}
		sh.mu.Unlock()
	}
	if len(armed)+len(deferred)+len(disarmed) > 0 {
		e.log.Info("scheduler: jobs re-divided among the replicas", "armed_here", len(armed),
			"deferred_here", len(deferred), "disarmed_here", len(disarmed), "armed", e.Len())
	}
	return armed, deferred, disarmed
}

// ArmPaced arms the jobs of ids (Rearm's deferred) that Options.Arms still
// arms here and that are still valid, enabled, not ended and unarmed, in
// bursts of paceBurst within the engine's budget of robfig changes, which
// it shares with the retired queue's drain (about 5,000 a second between
// them). Before each burst it asks stop, and returns when stop
// reports true: armed are the jobs it armed, rest the ids it did not come
// to (a suffix of ids).
func (e *Engine) ArmPaced(ids []string, stop func() bool) (armed, rest []string) {
	for len(ids) > 0 {
		if stop() {
			return armed, ids
		}
		burst := ids[:min(len(ids), paceBurst)]
		ids = ids[len(burst):]
		e.retired.pace.reserve(len(burst), func() bool { return false }, nil)
		e.life.Lock()
		for _, id := range burst {
			sh := e.shardOf(id)
			sh.mu.Lock()
			if r := e.load(id); r != nil && r.valid && r.enabled && r.state().ended == "" && r.fire == nil && e.arms(id) {
				e.armNow(sh, id, r)
				armed = append(armed, id)
			}
			sh.mu.Unlock()
		}
		e.life.Unlock()
		e.retired.pace.done()
	}
	return armed, nil
}

// armNow arms job id's valid record r in its shard sh, whose lock the
// caller holds.
func (e *Engine) armNow(sh *shard, id string, r *record) {
	n := *r
	f := e.newFiring(id, &n)
	f.entry = e.timers(sh).Schedule(f, f)
	e.adds.Add(1)
	e.store(sh, id, &n)
}

// showTime formats t for the log as the CLI shows a job's times: RFC 3339
// in the job's own zone (tz), or in the engine's default zone when the job
// names none or its zone cannot be loaded.
func (e *Engine) showTime(t time.Time, tz string) string {
	loc := e.opts.Location
	if l, ok := e.zone(tz); ok {
		loc = l
	}
	return t.In(loc).Format(time.RFC3339)
}

// zone returns the location of the IANA zone name, loaded once per engine
// (schedule.LoadLocation); false when name is empty or names no zone.
func (e *Engine) zone(name string) (*time.Location, bool) {
	if name == "" {
		return nil, false
	}
	if l, ok := e.zones.Load(name); ok {
		return l.(*time.Location), true
	}
	l, err := schedule.LoadLocation(name)
	if err != nil {
		return nil, false
	}
	e.zones.Store(name, l)
	return l, true
}

// nextRun returns the first slot of an armed job not dispatched by now: the
// next activation after now-delay.
func (r *record) nextRun(id string, now time.Time) time.Time {
	return r.sched().Next(now.Add(-r.delay(id)))
}

// entry returns the robfig entry armed for job id: its entry id and the next
// activation robfig computed. For tests; it costs a snapshot of the shard.
func (e *Engine) entry(id string) (cron.EntryID, time.Time, bool) {
	r := e.load(id)
	if r == nil || r.fire == nil {
		return 0, time.Time{}, false
	}
	sh := e.shardOf(id)
	sh.mu.Lock()
	c := sh.cron
	sh.mu.Unlock()
	if c == nil {
		return 0, time.Time{}, false
	}
	en := c.Entry(r.fire.entry)
	if !en.Valid() {
		return 0, time.Time{}, false
	}
	return en.ID, en.Next, true
}

// firing is the robfig job of one armed entry, and its robfig schedule.
// Its schedule, slot state and jitter are its record's: a record stored
// with the firing keeps the timing (Reload re-arms a job whose timing
// changed) and the slot state, so they stay what the entry was armed
// with.
type firing struct {
	e  *Engine
	id string
	// rec is the job's record while the entry is live: store keeps it
	// current, so the next fire carries the fields of a Reload that left
	// the timing as it is.
	rec   atomic.Pointer[record]
	entry cron.EntryID // the entry in the job's shard; written once, under its lock
	// from is the time (Unix nanoseconds) robfig first asked for the
	// entry's next activation; 0 until then. See Engine.FiresFrom.
	from atomic.Int64
	// retired is set once the job was replaced or removed: the entry
	// neither runs nor is rescheduled, whether or not robfig has dropped
	// it yet.
	retired atomic.Bool

	mu sync.Mutex
	// planned holds the last two activations of the schedule that Next
	// handed to robfig (undelayed), the newer last, as packPlanned keeps
	// them in the engine's location; guarded by mu.
	planned [2]int64
}

// newFiring returns the robfig job for the valid record r of job id,
// firing r's schedule, and sets it as r's (r.fire), giving r slot state
// if it had none. The caller sets its entry and stores r.
func (e *Engine) newFiring(id string, r *record) *firing {
	if r.slots == nil {
		r.slots = new(slotState)
	}
	f := &firing{e: e, id: id}
	r.fire = f
	f.rec.Store(r)
	return f
}

// Next is the timer robfig runs the entry on: the activations of its
// schedule, each moved by the job's jitter delay. It remembers the
// activations it hands out, so that Run can name its slot without
// searching for it: robfig asks for the following activation right after
// starting a run, so the run's own is then one of the last two.
func (f *firing) Next(t time.Time) time.Time {
	if f.retired.Load() {
		return time.Time{} // robfig never runs an entry without a next activation
	}
	f.from.CompareAndSwap(0, t.UnixNano())
	r := f.rec.Load()
	delay := r.delay(f.id)
	n := r.sched().Next(t.Add(-delay))
	if n.IsZero() {
		return n
	}
	p := packPlanned(n, f.e.opts.Location)
	f.mu.Lock()
	f.planned[0], f.planned[1] = f.planned[1], p
	f.mu.Unlock()
	return n.Add(delay)
}

// Run computes the fire's slot and calls the fire callback, recovering
// panics so that a bad callback never kills the process. With jitter the
// slot is computed at now-delay, i.e. on the undelayed schedule.
func (f *firing) Run() {
	if f.retired.Load() {
		return
	}
	now := f.e.now()
	f.mu.Lock()
	planned := f.planned
	f.mu.Unlock()
	r := f.rec.Load()
	delay := r.delay(f.id)
	loc := f.e.opts.Location
	sched := r.sched()
	slot, last, ok := r.slots.claimAfter(sched, now.Add(-delay), unpackPlanned(planned[1], loc), unpackPlanned(planned[0], loc))
	if !ok {
		f.e.log.Warn("scheduler: fire without a slot of its own dropped",
			"job_id", f.id, "now", now)
		return
	}
	defer func() {
		if p := recover(); p != nil {
			f.e.log.Error("scheduler: fire callback panicked",
				"job_id", f.id, "slot", slot, "panic", fmt.Sprint(p))
		}
	}()
	d := schedule.Due{Schedule: r.schedule(f.id), Slot: slot, Delay: delay}
	if after, ok := f.skipped(sched, delay, slot, last); ok && f.e.opts.Stalled != nil {
		f.e.opts.Stalled(d, after)
		return
	}
	if f.e.opts.Fire != nil {
		f.e.opts.Fire(d)
	}
}

// cronLogger adapts robfig's logger to slog, keeping errors only.
type cronLogger struct{ l *slog.Logger }

func (cronLogger) Info(string, ...any) {}

func (c cronLogger) Error(err error, msg string, kv ...any) {
	c.l.Error("cron: "+msg, append([]any{"error", err}, kv...)...)
}
