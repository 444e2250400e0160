package scheduler

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/cronswap/cronswap/schedule"
)

// DefaultShards is the number of robfig engines when Options.Shards is not
// set. robfig re-sorts all entries of an engine on every add and remove, so
// the cost of one edit grows with the jobs per shard: 1024 shards keep that
// at about 100 entries with 100,000 jobs armed, for the price of one idle
// goroutine and timer per shard (see scripts/bench-engine.sh).
const DefaultShards = 1024

// FireFunc is called when job id fires for the cron slot slot (the scheduled
// activation time, not the wall-clock time of the call; see the package
// documentation). It runs in a goroutine of its own, started by robfig; a
// panic in it is recovered and logged. Engine.Stop waits for running calls.
type FireFunc func(id string, slot time.Time)

// Options configures an Engine. The zero value works: UTC, DefaultShards
// shards, no fire callback, no extra validation, slog.Default, time.Now.
type Options struct {
	// Location is the time zone of schedules that name none (nil means UTC).
	Location *time.Location
	// Shards is the number of robfig engines the jobs are spread over by a
	// hash of their id (<= 0 means DefaultShards).
	Shards int
	// Fire is called for every fire; nil drops fires.
	Fire FireFunc
	// Validate is an extra check run on every enabled schedule after its
	// expression parsed, e.g. that its action exists in the configuration. A
	// non-nil error rejects the schedule like an unparsable one. Disabled
	// schedules are not passed to it, so a job can always be paused.
	Validate func(schedule.Schedule) error
	// Logger receives the engine's logs (nil means slog.Default()).
	Logger *slog.Logger
	// Now is the clock for next-run and slot computations (nil means
	// time.Now). robfig's own timers always use the real clock.
	Now func() time.Time
	// Jitter returns the jitter bound of an enabled schedule, e.g. from its
	// action's configuration (nil, or a result <= 0, means none). A job with
	// bound b is dispatched a fixed delay in [0, b) after each of its slots;
	// the delay is derived from the job id alone (see JitterDelay), so every
	// replica delays a job by the same amount, and the fire callback still
	// receives the undelayed slot. A changed bound re-arms the job.
	Jitter func(schedule.Schedule) time.Duration
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
	// only metadata (action, category, args) and the error were updated.
	Unchanged
	// Disarmed: the job is known but not armed (enabled: false).
	Disarmed
	// Rejected: the schedule is invalid; the last known good state stays.
	Rejected
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
	default:
		return fmt.Sprintf("Outcome(%d)", int(o))
	}
}

// Item is one document of a full snapshot handed to Sync: either a decoded
// schedule, or the error that made it undecodable (then Schedule.ID is the
// job id if it could be read, else empty).
type Item struct {
	Schedule schedule.Schedule
	Err      error
}

// SyncStats counts what Sync did.
type SyncStats struct {
	// Per outcome, the number of items (Removed: of jobs absent from the
	// snapshot).
	Added, Replaced, Unchanged, Disarmed, Removed, Rejected int
	// Changed lists, sorted, the ids whose state the sync changed: timer,
	// metadata (action, category, args) or recorded error. A snapshot that
	// matches the engine yields none, even when it holds bad documents that
	// were rejected before; re-saved documents that differ only in
	// updated_at do not count either.
	Changed []string
}

// Status is the read-only view of one job, as the API shows it.
type Status struct {
	// ID is the job id.
	ID string
	// CronExpr, Timezone and Enabled are those of the last valid schedule
	// (the one armed), or of the bad document when no valid one was seen.
	CronExpr string
	Timezone string
	Enabled  bool
	// NextRun is the next activation after now; zero when not armed.
	NextRun time.Time
	// LastError is the error of the most recent rejected document for this
	// job, empty once a valid document was applied after it.
	LastError string
	// Job is the schedule's job field as written; empty means the id.
	Job string
	// Action is the name of the action the job runs: Job, or the id when
	// Job is empty.
	Action string
	// Category is the dispatch category; may be empty.
	Category string
	// Args is the JSON of the schedule's args object; empty when none.
	Args string
	// UpdatedAt is the schedule document's updated_at; informational.
	UpdatedAt time.Time
	// Armed is true while a timer for the job is armed.
	Armed bool
	// Delay is the job's jitter delay: the fire for slot NextRun is
	// dispatched at NextRun+Delay. Zero without jitter.
	Delay time.Duration
}

// Engine arms and re-arms cron timers for jobs. Its methods are safe for
// concurrent use.
type Engine struct {
	opts   Options
	log    *slog.Logger
	shards []*shard

	mu    sync.RWMutex
	jobs  map[string]*record // guarded by mu; records are never modified once stored
	armed int                // guarded by mu

	// life serialises Start, Stop and Sync; started is guarded by it.
	life    sync.Mutex
	started bool

	// robfig operations, for tests proving that idempotent reloads do not
	// touch robfig.
	adds, removes atomic.Int64

	// retired holds robfig entries waiting to be removed (see retire).
	retired retiredQueue
}

// retiredQueue is the robfig entries of replaced or removed jobs still to
// be taken out of their shards. One goroutine drains it while it is not
// empty and exits when it is, so no goroutine outlives the work and a burst
// of edits costs one goroutine, not one per edit.
type retiredQueue struct {
	mu       sync.Mutex
	idle     sync.Cond // signalled when draining stops; uses mu
	pending  []retiredEntry
	draining bool
}

type retiredEntry struct {
	sh *shard
	id cron.EntryID
}

// add queues one entry, starting the drainer if none runs.
func (q *retiredQueue) add(sh *shard, id cron.EntryID) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.pending = append(q.pending, retiredEntry{sh, id})
	if !q.draining {
		q.draining = true
		go q.drain()
	}
}

func (q *retiredQueue) drain() {
	for {
		q.mu.Lock()
		batch := q.pending
		q.pending = nil
		if len(batch) == 0 {
			q.draining = false
			q.idle.Broadcast()
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
		for _, r := range batch {
			r.sh.cron.Remove(r.id)
		}
	}
}

// wait returns once every queued entry has been removed.
func (q *retiredQueue) wait() {
	q.mu.Lock()
	defer q.mu.Unlock()
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
	mu   sync.Mutex
	cron *cron.Cron
	// armed counts the shard's robfig entries; guarded by mu.
	armed int
}

// record is the engine's state of one job. Invariant: entry != 0 exactly
// when valid && cur.Enabled.
type record struct {
	// cur is the last valid schedule, or the latest bad one while no valid
	// schedule was ever applied.
	cur   schedule.Schedule
	valid bool
	sched cron.Schedule // parsed cur; nil unless valid
	entry cron.EntryID  // robfig entry in the job's shard; 0 when not armed
	fire  *firing       // the robfig job of entry; nil when not armed
	err   string        // last error, empty when the latest document was applied
	slots *slotState    // shared by all entries the job ever had
	// jitter is the jitter bound cur was armed with (part of its timing)
	// and delay the resulting dispatch delay; zero without jitter.
	jitter, delay time.Duration
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
		jobs: make(map[string]*record),
	}
	e.retired.idle.L = &e.retired.mu
	cl := cronLogger{opts.Logger}
	for range opts.Shards {
		e.shards = append(e.shards, &shard{cron: cron.New(
			cron.WithLocation(opts.Location),
			cron.WithLogger(cl),
		)})
	}
	return e
}

// Start starts the timers of all shards. Jobs may be loaded before or after.
func (e *Engine) Start() {
	e.life.Lock()
	defer e.life.Unlock()
	e.started = true
	for _, sh := range e.shards {
		sh.cron.Start()
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
	ctxs := make([]context.Context, len(e.shards))
	for i, sh := range e.shards {
		ctxs[i] = sh.cron.Stop()
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
// Options.Jitter gives a positive bound.
func (e *Engine) jitterOf(s schedule.Schedule) time.Duration {
	if !s.Enabled || e.opts.Jitter == nil {
		return 0
	}
	return max(0, e.opts.Jitter(s))
}

func (e *Engine) load(id string) *record {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.jobs[id]
}

// store replaces the record of id (nil deletes it) and keeps the armed
// counts. The caller holds the lock of sh, the job's shard.
func (e *Engine) store(sh *shard, id string, r *record) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if old := e.jobs[id]; old != nil && old.entry != 0 {
		e.armed--
		sh.armed--
	}
	if r == nil {
		delete(e.jobs, id)
		return
	}
	if r.entry != 0 {
		e.armed++
		sh.armed++
	}
	e.jobs[id] = r
}

// parseKey is what a parsed expression depends on besides the engine's
// default zone.
type parseKey struct{ expr, tz string }

// parseCache maps expressions already parsed by one Sync to their schedule.
// Parsed schedules are immutable, so jobs with the same expression can
// share one.
type parseCache map[parseKey]cron.Schedule

// check parses s in the engine's default zone, reusing cache when it holds
// the expression (nil means no cache), and runs Options.Validate on it.
func (e *Engine) check(s schedule.Schedule, cache parseCache) (cron.Schedule, error) {
	key := parseKey{s.CronExpr, s.Timezone}
	sched, ok := cache[key]
	if !ok {
		var err error
		if sched, err = s.Parse(e.opts.Location); err != nil {
			return nil, err
		}
		if cache != nil {
			cache[key] = sched
		}
	}
	if s.Enabled && e.opts.Validate != nil {
		if err := e.opts.Validate(s); err != nil {
			return nil, err
		}
	}
	return sched, nil
}

// Reload applies one schedule. It is idempotent: applying the same timing
// again leaves the robfig entry untouched (Unchanged). A changed timing
// replaces only this job's entry. enabled: false disarms the job but keeps it
// visible. An invalid schedule is Rejected and the job keeps its last known
// good timer (see Reject).
func (e *Engine) Reload(s schedule.Schedule) Outcome {
	o, _ := e.reload(s, slog.LevelInfo, nil, nil)
	return o
}

// ReloadTimed is Reload, also returning when the job's new state took
// effect: the instant its timer was armed (or disarmed, or found unchanged),
// before the change was logged. It is zero for a rejected schedule.
func (e *Engine) ReloadTimed(s schedule.Schedule) (Outcome, time.Time) {
	var at time.Time
	o, _ := e.reload(s, slog.LevelInfo, nil, &at)
	return o, at
}

// retire disarms the robfig entry of a replaced or removed job. The entry's
// job is marked retired first, so from here on it neither runs nor asks
// robfig for another activation. Taking it out of robfig's list can then
// wait: while robfig runs, Remove is a hand-off to the shard's run loop that
// blocks until the loop comes round, and an edit should not wait for that
// (the issue-5 target is event received → armed ≤ 1 ms at p99), so the
// entry goes to the engine's retired queue. inline removes it before
// returning instead: Sync uses it, so that robfig's lists match the engine's
// jobs when Sync returns. The caller holds sh.mu.
func (e *Engine) retire(sh *shard, old *record, inline bool) {
	if old.fire != nil {
		old.fire.retired.Store(true)
	}
	e.removes.Add(1)
	if inline {
		sh.cron.Remove(old.entry)
		return
	}
	e.retired.add(sh, old.entry)
}

// reload is Reload logging a successful change at level lvl and parsing
// through cache (may be nil). It also reports whether the job's state changed
// (see SyncStats.Changed).
// When at is not nil, it receives the instant the new state took effect.
func (e *Engine) reload(s schedule.Schedule, lvl slog.Level, cache parseCache, at *time.Time) (Outcome, bool) {
	if s.ID == "" {
		e.log.Warn("scheduler: schedule without job id ignored", "cron_expr", s.CronExpr)
		return Rejected, false
	}
	jitter := e.jitterOf(s)

	sh := e.shardOf(s.ID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	old := e.load(s.ID)

	if old != nil && old.valid && old.cur.Timing() == s.Timing() && old.jitter == jitter {
		// The same timing parses to the same schedule: only the extra
		// validation (the action may have changed) is left to do.
		if s.Enabled && e.opts.Validate != nil {
			if err := e.opts.Validate(s); err != nil {
				return Rejected, e.rejectLocked(s.ID, old, &s, err)
			}
		}
		r := *old
		r.cur, r.err = s, ""
		e.store(sh, s.ID, &r)
		if at != nil {
			*at = time.Now()
		}
		if old.err != "" {
			e.log.Log(context.Background(), lvl, "scheduler: schedule valid again, error cleared",
				"job_id", s.ID, "cron_expr", s.CronExpr)
		} else if e.log.Enabled(context.Background(), slog.LevelDebug) {
			e.log.Debug("scheduler: schedule unchanged", "job_id", s.ID, "cron_expr", s.CronExpr)
		}
		return Unchanged, old.err != "" || !sameMetadata(old.cur, s)
	}
	sched, err := e.check(s, cache)
	if err != nil {
		return Rejected, e.rejectLocked(s.ID, old, &s, err)
	}

	r := &record{cur: s, valid: true, sched: sched, jitter: jitter, delay: JitterDelay(s.ID, jitter)}
	if old != nil {
		r.slots = old.slots
	}
	if r.slots == nil {
		r.slots = new(slotState)
	}
	wasArmed := old != nil && old.entry != 0
	outcome := Disarmed
	if s.Enabled {
		// Arm the new entry first: with the shard's run loop waiting,
		// this hand-off returns at once; the old entry is retired after.
		f := &firing{e: e, id: s.ID, sched: sched, delay: r.delay, slots: r.slots}
		if wasArmed && old.fire != nil {
			old.fire.retired.Store(true) // never two live entries for one job
		}
		r.entry, r.fire = sh.cron.Schedule(f, f), f
		e.adds.Add(1)
		outcome = Added
		if wasArmed {
			outcome = Replaced
		}
	}
	if wasArmed {
		e.retire(sh, old, cache != nil) // only Sync passes a cache: it removes inline
	}
	e.store(sh, s.ID, r)
	if at != nil {
		*at = time.Now()
	}

	if ctx := context.Background(); e.log.Enabled(ctx, lvl) {
		attrs := []slog.Attr{slog.String("job_id", s.ID), slog.String("cron_expr", s.CronExpr),
			slog.String("outcome", outcome.String())}
		if s.Timezone != "" {
			attrs = append(attrs, slog.String("timezone", s.Timezone))
		}
		if r.entry != 0 {
			attrs = append(attrs, slog.Time("next_run", r.nextRun(e.now())))
			if r.delay > 0 {
				attrs = append(attrs, slog.Duration("jitter_delay", r.delay))
			}
		}
		e.log.LogAttrs(ctx, lvl, "scheduler: schedule applied", attrs...)
	}
	return outcome, true
}

// sameMetadata reports whether a and b agree on everything but timing and
// updated_at.
func sameMetadata(a, b schedule.Schedule) bool {
	return a.ID == b.ID && a.Job == b.Job && a.Category == b.Category && a.Args == b.Args
}

// Reject records err as the last error of job id after a bad document for
// it, keeping its last known good timer armed. For a job not seen before
// the error is recorded with the job not armed. An empty id is only logged.
func (e *Engine) Reject(id string, err error) {
	if err == nil {
		err = errors.New("rejected without a reason")
	}
	e.reject(id, nil, err)
}

// reject is Reject with the rejected schedule, when known. It reports
// whether the job's state changed.
func (e *Engine) reject(id string, bad *schedule.Schedule, err error) bool {
	if id == "" {
		e.log.Warn("scheduler: bad schedule without job id ignored", "error", err)
		return false
	}
	sh := e.shardOf(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return e.rejectLocked(id, e.load(id), bad, err)
}

// rejectLocked records err for id; bad is the rejected schedule when known.
// It reports whether the job's state changed. The caller holds the job's
// shard lock.
func (e *Engine) rejectLocked(id string, old *record, bad *schedule.Schedule, err error) bool {
	var r record
	switch {
	case old != nil && (old.valid || bad == nil):
		r = *old // the last known good stays, armed or not
	case bad != nil:
		r = record{cur: *bad}
	default:
		r = record{cur: schedule.Schedule{ID: id}}
	}
	if old != nil {
		r.slots = old.slots
	}
	r.err = err.Error()
	e.store(e.shardOf(id), id, &r)
	changed := old == nil || old.err != r.err || old.cur != r.cur
	lvl := slog.LevelWarn
	if !changed {
		lvl = slog.LevelDebug // the same rejection again, e.g. by a periodic resync
	}
	e.log.Log(context.Background(), lvl, "scheduler: schedule rejected, last known good kept",
		"job_id", id, "error", err, "armed", r.entry != 0)
	return changed
}

// Remove disarms job id and forgets it, including its last error and slot
// memory. It reports whether the job was known.
func (e *Engine) Remove(id string) bool {
	return e.remove(id, false, nil)
}

// RemoveTimed is Remove, also returning when the job was disarmed and
// forgotten, before that was logged; zero when the job was not known.
func (e *Engine) RemoveTimed(id string) (bool, time.Time) {
	var at time.Time
	known := e.remove(id, false, &at)
	return known, at
}

// remove is Remove, taking the robfig entry out before returning when
// inline is set (see retire); at, when not nil, receives the instant the job
// was gone.
func (e *Engine) remove(id string, inline bool, at *time.Time) bool {
	sh := e.shardOf(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	old := e.load(id)
	if old == nil {
		return false
	}
	if old.entry != 0 {
		e.retire(sh, old, inline)
	}
	e.store(sh, id, nil)
	if at != nil {
		*at = time.Now()
	}
	e.log.Info("scheduler: schedule removed", "job_id", id)
	return true
}

// Sync applies a full snapshot of the schedules: every item is applied as by
// Reload (or Reject when it carries an error), and every known job whose id
// is absent from items is removed. Per-job changes are logged at debug level
// (rejections still as warnings), the totals at info level. Sync is meant to be called by the single
// goroutine that also calls Reload and Remove: a job reloaded concurrently
// with a Sync that does not list it may be removed again.
//
// Shards that hold no armed job and receive one from the snapshot (all of
// them on the first Sync of a large fleet) are paused while Sync runs: robfig
// then appends entries without sorting, and sorts each shard once when it is
// started again, and Sync returns once they have computed the first
// activation of their entries. A paused shard has no timer that could be
// missed; the jobs added to it are armed as of the end of Sync.
func (e *Engine) Sync(items []Item) SyncStats {
	e.life.Lock()
	defer e.life.Unlock()
	defer e.resume(e.pauseEmpty(items))
	var st SyncStats
	cache := make(parseCache)
	seen := make(map[string]struct{}, len(items))
	for _, it := range items {
		id := it.Schedule.ID
		if id != "" {
			seen[id] = struct{}{}
		}
		if it.Err != nil {
			st.Rejected++
			if e.reject(id, &it.Schedule, it.Err) {
				st.Changed = append(st.Changed, id)
			}
			continue
		}
		o, changed := e.reload(it.Schedule, slog.LevelDebug, cache, nil)
		if changed {
			st.Changed = append(st.Changed, id)
		}
		switch o {
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
	e.mu.RLock()
	var gone []string
	for id := range e.jobs {
		if _, ok := seen[id]; !ok {
			gone = append(gone, id)
		}
	}
	e.mu.RUnlock()
	for _, id := range gone {
		if e.remove(id, true, nil) {
			st.Removed++
			st.Changed = append(st.Changed, id)
		}
	}
	slices.Sort(st.Changed)
	st.Changed = slices.Compact(st.Changed)
	e.log.Info("scheduler: full sync applied", "added", st.Added, "replaced", st.Replaced,
		"unchanged", st.Unchanged, "disarmed", st.Disarmed, "removed", st.Removed,
		"rejected", st.Rejected, "armed", e.Len())
	return st
}

// pauseEmpty stops the robfig engine of every shard that has no armed job
// and is due to receive one of items, and returns those shards. It does
// nothing while the engine is stopped. The caller holds e.life.
func (e *Engine) pauseEmpty(items []Item) []*shard {
	if !e.started {
		return nil
	}
	want := make([]bool, len(e.shards))
	for _, it := range items {
		if it.Err == nil && it.Schedule.Enabled && it.Schedule.ID != "" {
			want[e.shardIndex(it.Schedule.ID)] = true
		}
	}
	var paused []*shard
	for i, sh := range e.shards {
		if !want[i] {
			continue
		}
		sh.mu.Lock()
		if sh.armed == 0 {
			sh.cron.Stop()
			paused = append(paused, sh)
		}
		sh.mu.Unlock()
	}
	return paused
}

// resume starts the shards pauseEmpty stopped and returns once each has
// computed the first activation of all its entries, so that Sync returns
// with every timer armed. The caller holds e.life.
func (e *Engine) resume(paused []*shard) {
	for _, sh := range paused {
		sh.cron.Start()
	}
	for _, sh := range paused {
		// A running robfig engine handles Remove in its run loop, which
		// first computes the next activation of every entry and sorts
		// them. Entry id 0 is never assigned, so this removes nothing: it
		// only waits for the run loop.
		sh.cron.Remove(0)
	}
}

// List returns the status of every known job (armed, disabled, or only
// rejected), sorted by id.
func (e *Engine) List() []Status {
	type kv struct {
		id string
		r  *record
	}
	e.mu.RLock()
	recs := make([]kv, 0, len(e.jobs))
	for id, r := range e.jobs {
		recs = append(recs, kv{id, r})
	}
	e.mu.RUnlock()
	slices.SortFunc(recs, func(a, b kv) int { return strings.Compare(a.id, b.id) })
	now := e.now()
	out := make([]Status, len(recs))
	for i, x := range recs {
		out[i] = x.r.status(x.id, now)
	}
	return out
}

// Get returns the status of job id, and false when the job is unknown.
func (e *Engine) Get(id string) (Status, bool) {
	r := e.load(id)
	if r == nil {
		return Status{}, false
	}
	return r.status(id, e.now()), true
}

// Len returns the number of armed jobs.
func (e *Engine) Len() int {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.armed
}

func (r *record) status(id string, now time.Time) Status {
	st := Status{
		ID:        id,
		CronExpr:  r.cur.CronExpr,
		Timezone:  r.cur.Timezone,
		Enabled:   r.cur.Enabled,
		LastError: r.err,
		Job:       r.cur.Job,
		Action:    r.cur.ActionName(),
		Category:  r.cur.Category,
		Args:      r.cur.Args,
		UpdatedAt: r.cur.UpdatedAt,
		Armed:     r.entry != 0,
		Delay:     r.delay,
	}
	if st.Action == "" {
		st.Action = id
	}
	if r.entry != 0 {
		st.NextRun = r.nextRun(now)
	}
	return st
}

// nextRun returns the first slot of an armed job not dispatched by now: the
// next activation after now-delay.
func (r *record) nextRun(now time.Time) time.Time {
	return r.sched.Next(now.Add(-r.delay))
}

// entry returns the robfig entry armed for job id: its entry id and the next
// activation robfig computed. For tests; it costs a snapshot of the shard.
func (e *Engine) entry(id string) (cron.EntryID, time.Time, bool) {
	r := e.load(id)
	if r == nil || r.entry == 0 {
		return 0, time.Time{}, false
	}
	en := e.shardOf(id).cron.Entry(r.entry)
	if !en.Valid() {
		return 0, time.Time{}, false
	}
	return en.ID, en.Next, true
}

// firing is the robfig job of one armed entry, and its robfig schedule.
type firing struct {
	e     *Engine
	id    string
	sched cron.Schedule // undelayed
	delay time.Duration // jitter delay; robfig runs the job this long after each slot
	slots *slotState
	// retired is set once the job was replaced or removed: the entry
	// neither runs nor is rescheduled, whether or not robfig has dropped
	// it yet.
	retired atomic.Bool

	mu sync.Mutex
	// planned holds the last two activations of sched that Next handed to
	// robfig (undelayed), the newer last; guarded by mu.
	planned [2]time.Time
}

// Next is the timer robfig runs the entry on: the activations of sched,
// each moved delay later. It remembers the activations it hands out, so that
// Run can name its slot without searching for it: robfig asks for the
// following activation right after starting a run, so the run's own is then
// one of the last two.
func (f *firing) Next(t time.Time) time.Time {
	if f.retired.Load() {
		return time.Time{} // robfig never runs an entry without a next activation
	}
	n := f.sched.Next(t.Add(-f.delay))
	if n.IsZero() {
		return n
	}
	f.mu.Lock()
	f.planned[0], f.planned[1] = f.planned[1], n
	f.mu.Unlock()
	return n.Add(f.delay)
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
	slot, ok := f.slots.claim(f.sched, now.Add(-f.delay), planned[1], planned[0])
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
	if f.e.opts.Fire != nil {
		f.e.opts.Fire(f.id, slot)
	}
}

// cronLogger adapts robfig's logger to slog, keeping errors only.
type cronLogger struct{ l *slog.Logger }

func (cronLogger) Info(string, ...any) {}

func (c cronLogger) Error(err error, msg string, kv ...any) {
	c.l.Error("cron: "+msg, append([]any{"error", err}, kv...)...)
}
