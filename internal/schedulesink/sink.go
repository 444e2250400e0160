// Package schedulesink turns the documents of the schedules collection into
// engine calls: it is the change-stream watcher's sink (changestream.Sink)
// for that collection, decoding and checking each document through package
// schedule and handing it to the engine (scheduler.Engine), so that a
// malformed document is refused with the job keeping its last good timer.
package schedulesink

import (
	"context"
	"errors"
	"iter"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"time"
	"unique"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/docfields"
	"github.com/cronswap/cronswap/internal/metrics"
	"github.com/cronswap/cronswap/schedule"
	"github.com/cronswap/cronswap/scheduler"
)

// Sink turns raw schedules documents into engine calls: the daemon's
// changestream.Sink for the schedules collection (benchmarks measure this
// same one). Fields are decoded and checked here, through the schedule package, so a
// malformed document becomes a Reject (last known good) instead of a
// Reload; the expression and time zone are parsed once, by the engine,
// which rejects them the same way. Each method returns once the engine
// applied the change.
type Sink struct {
	engine  *scheduler.Engine
	log     *slog.Logger
	metrics *metrics.Metrics
	// unchanged, if set, says whether a document a full read hands on is
	// the one the engine last applied for its job (WithUnchanged).
	unchanged func(bson.Raw) bool
	// recover, if set, finds the last valid versions of refused jobs the
	// engine holds no valid version of (WithRecovery).
	recover func(ids []string) map[string]Recovered
}

// Recovered is the last valid version of a refused job's document, found
// by a recovery (WithRecovery).
type Recovered struct {
	// Doc is the document.
	Doc bson.Raw
	// EditedAt is when the edit that made it was made (zero: unknown);
	// ReplacedAt when the edit that replaced it was.
	EditedAt, ReplacedAt time.Time
}

// MaxRecovered is the most refused jobs one full read looks up for their
// last valid version (WithRecovery); the others stay unarmed.
const MaxRecovered = 1000

// The lines a recovery logs, with job_id.
const (
	// MsgRecovered: the job is armed on the last valid version found.
	MsgRecovered = "refused job armed on its last valid version, recovered from the edit history"
	// MsgRecoveredRefused: the engine refused the version found (the
	// configuration changed since it was checked); the job is not armed.
	MsgRecoveredRefused = "refused job not armed: the engine refused the last valid version recovered for it"
)

// New returns the sink applying documents to engine, logging refusals to
// log and counting the reloads change events make in mx (nil counts
// nothing). Refusals are not counted here: a job refused by an event, a
// full read or a re-check alike counts once, as it enters that state,
// through the engine's Hooks.Rejected (see CountRejected).
func New(engine *scheduler.Engine, log *slog.Logger, mx *metrics.Metrics) Sink {
	if log == nil {
		log = slog.Default()
	}
	return Sink{engine: engine, log: log, metrics: mx}
}

// WithUnchanged returns the sink that, in a full read (ReplaceAll), does
// not decode a document for which unchanged reports true while the read
// hands it on — the very document the engine last applied for its job,
// byte for byte — but lists the job as it is (scheduler.Item.Same), if the
// engine knows it. unchanged is called on the goroutine that reads the
// documents, once for each, before the next is read; it must say true
// only of a document the engine was given for its job last (the edit
// history's copy of the documents follows every document the engine
// applies: history.Recorder.Unchanged).
func (s Sink) WithUnchanged(unchanged func(bson.Raw) bool) Sink {
	s.unchanged = unchanged
	return s
}

// WithRecovery returns the sink that, in a full read (ReplaceAll), notes
// the jobs whose document the engine refused while it holds no valid
// version of them (scheduler.Engine.KnowsValid; at most MaxRecovered a
// read), and once the read is applied hands their ids to recover, which
// returns the last valid version of those it finds one for. Each such job
// is armed on that version and then given its refused document again, by
// the calls an edit makes (Reload, or Reject for a document that does not
// decode): it keeps the version as its last known good, with the current
// document's error, as if the daemon had run through the bad edit. All
// of it runs on the goroutine that called ReplaceAll, before it returns;
// jobs recover returns nothing for stay unarmed. Documents listed as the
// engine has them (WithUnchanged) are not looked at.
func (s Sink) WithRecovery(recover func(ids []string) map[string]Recovered) Sink {
	s.recover = recover
	return s
}

// Upsert implements changestream.Sink: it decodes doc and reloads the job,
// or records the document's error against the job (last known good).
func (s Sink) Upsert(doc bson.Raw) {
	sched, err := decode(doc)
	s.warnMisspellings(sched.ID, doc)
	if err != nil {
		s.reject(sched.ID, err)
		return
	}
	if o := s.engine.Reload(sched); o != scheduler.Rejected { // counted by CountRejected
		s.metrics.CountReload(reloadResult(o))
	}
}

// reloadResult names a Reload outcome that applied the schedule for the
// reloads metric.
func reloadResult(o scheduler.Outcome) string {
	if o == scheduler.Unchanged {
		return metrics.ReloadUnchanged
	}
	return metrics.ReloadApplied
}

// CountRejected returns the engine's Hooks.Rejected that counts, in mx,
// each job entering the rejected state as one reload of result rejected:
// a bad document the engine is given by a change event, by a full read
// (the start's, a resync's, every poll's) or a policy's re-check counts
// when its job was valid or unknown before, and not again while the job
// stays refused, so that a poll reading the same bad document every few
// seconds does not count it every time.
func CountRejected(mx *metrics.Metrics) func(id string) {
	return func(string) { mx.CountReload(metrics.ReloadRejected) }
}

func (s Sink) reject(id string, err error) {
	if id == "" {
		s.log.Warn("schedules document refused and not attributable to a job", "error", err)
		return
	}
	s.engine.Reject(id, err)
}

// Delete implements changestream.Sink: it disarms and forgets the job with
// this _id. For an _id that is not a job id it forgets only the refused
// document tracked under its schedule.RefusedKey, never the job whose id
// equals the _id's rendering; an _id that cannot be attributed is ignored.
func (s Sink) Delete(id bson.RawValue) {
	jobID, _ := schedule.DecodeID(id)
	if jobID == "" {
		return
	}
	if s.engine.Remove(jobID) {
		s.metrics.CountReload(metrics.ReloadRemoved)
	}
}

// ReplaceAll implements changestream.Sink: it decodes docs (a whole
// collection, read one document at a time) and hands them to the engine's
// Sync as they come, returning the ids Sync changed; a read that fails
// ends the Sync without removing anything (see scheduler.Engine.Sync).
// Three stages overlap, each on a goroutine of its own: the read copies
// the documents into batches of decodeBatch, the decoder decodes a batch
// at a time (spread over the CPUs), and the engine applies the batch
// decoded before; so at most a few batches are held at once, and a stage
// never waits for another's work on a different batch. With WithUnchanged,
// the documents the engine already has are not decoded. It logs how many
// documents it read and decoded ("documents", "decoded") and how the
// time divided between decoding and the engine, as "decode" (the
// decoder's busy time, read waits excluded) and "engine" attributes: at
// info level when something changed, at debug level otherwise (a periodic
// resync that finds nothing).
func (s Sink) ReplaceAll(docs iter.Seq2[bson.Raw, error]) ([]string, error) {
	start := time.Now()
	raws := make(chan *rawBatch, 1)
	// rawFree and free hand the buffers a stage is done with back to the
	// stage before (a batch is a few hundred kilobytes).
	rawFree := make(chan *rawBatch, 3)
	batches := make(chan decodedBatch, 1)
	free := make(chan []scheduler.Item, 2)
	stop := make(chan struct{})
	var n int
	go func() {
		defer close(raws)
		n = readBatches(docs, s.unchanged, raws, rawFree, stop)
	}()
	// Misspelt fields are pointed out in a read that finds a document
	// changed, not in the first load of an empty engine (a cold start's,
	// where looking costs a few percent of the start's CPU at a million
	// documents: `schedules get` shows them meanwhile).
	warn := s.engine.Known() > 0
	var decode time.Duration
	var decoded int
	go func() {
		defer close(batches)
		decode, decoded = s.decodeBatches(raws, rawFree, batches, free, stop, warn)
	}()
	var engineBusy time.Duration
	var refused []scheduler.Item // jobs refused with no valid version, for recover
	notNoted := 0                // such jobs past MaxRecovered
	items := func(yield func(scheduler.Item, error) bool) {
		for b := range batches {
			if b.err != nil {
				yield(scheduler.Item{}, b.err)
				return
			}
			t := time.Now()
			for _, it := range b.items {
				if !yield(it, nil) {
					return
				}
				if s.recover != nil && !it.Same && !s.engine.KnowsValid(it.Schedule.ID) {
					if len(refused) < MaxRecovered {
						refused = append(refused, it)
					} else {
						notNoted++
					}
				}
			}
			engineBusy += time.Since(t)
			select {
			case free <- b.items:
			default:
			}
		}
	}
	st, err := s.engine.Sync(items)
	close(stop)
	for range batches { // the decoder has ended once batches is closed
	}
	for range raws { // and the read once raws is
	}
	if err != nil {
		return st.Changed, err
	}
	if notNoted > 0 {
		s.log.Warn("refused jobs with no valid version not looked up in the edit history: too many in one full read; they stay unarmed",
			"jobs", notNoted, "looked_up", len(refused))
	}
	s.recoverRefused(refused)
	lvl := slog.LevelDebug
	if len(st.Changed) > 0 {
		lvl = slog.LevelInfo
	}
	s.log.Log(context.Background(), lvl, msgSchedulesReplaced, "documents", n, "decoded", decoded, "changed", len(st.Changed),
		"decode", decode, "engine", engineBusy, "duration", time.Since(start))
	return st.Changed, nil
}

// recoverRefused asks s.recover for the last valid versions of the jobs
// of refused (items a full read applied, each refused with no valid
// version kept) and arms each job on the version found, then applies its
// refused item again as an edit would.
func (s Sink) recoverRefused(refused []scheduler.Item) {
	if len(refused) == 0 {
		return
	}
	ids := make([]string, len(refused))
	for i, it := range refused {
		ids[i] = it.Schedule.ID
	}
	found := s.recover(ids)
	for _, it := range refused {
		id := it.Schedule.ID
		v, ok := found[id]
		if !ok {
			continue
		}
		sched, err := decode(v.Doc)
		if err != nil || sched.ID != id {
			s.log.Error("recovered version of a refused job does not decode as it; not armed", "job_id", id, "error", err)
			continue
		}
		if s.engine.Reload(sched) == scheduler.Rejected {
			s.log.Warn(MsgRecoveredRefused, "job_id", id)
			continue
		}
		// The current document, refused again: the version just armed
		// stays, with this document's error.
		current := it.Err
		if current != nil {
			s.engine.Reject(id, current)
		} else {
			s.engine.Reload(it.Schedule)
			if st, ok := s.engine.Get(id); ok {
				current = errors.New(st.LastError)
			}
		}
		attrs := []any{"job_id", id, "cron_expr", sched.CronExpr, "replaced_at", v.ReplacedAt, "error", current}
		if !sched.UpdatedAt.IsZero() {
			attrs = append(attrs, "updated_at", sched.UpdatedAt)
		}
		if !v.EditedAt.IsZero() {
			attrs = append(attrs, "edited_at", v.EditedAt)
		}
		s.log.Info(MsgRecovered, attrs...)
	}
}

// MsgMisspelt is the warning logged, with job_id, field and meant, for
// each field of a schedules document that no one reads but that looks
// like one that is read (docfields.Misspellings): the field is ignored.
const MsgMisspelt = "schedule field ignored: it looks like a misspelling"

// warnMisspellings logs MsgMisspelt for each misspelt-looking field of
// doc, the document of job id: when an event brings it, and when a full
// read into an engine that knows jobs decodes it (not when the read finds
// the document the engine already has), so a typo is pointed out once as
// it arrives.
func (s Sink) warnMisspellings(id string, doc bson.Raw) {
	for _, m := range docfields.Misspellings(doc) {
		s.log.Warn(MsgMisspelt, "job_id", schedule.ShowKey(id), "field", m.Field, "meant", m.Meant)
	}
}

// decodeBatch is how many documents ReplaceAll decodes at once.
const decodeBatch = 1024

// rawBatch is up to decodeBatch documents of a full read copied back to
// back, or the read's failure.
type rawBatch struct {
	buf  []byte
	ends []int  // end of document i in buf
	same []bool // document i is the one the engine last applied (Sink.unchanged)
	err  error
}

// decodedBatch is one batch of decoded documents, or the read's failure.
type decodedBatch struct {
	items []scheduler.Item
	err   error
}

// readBatches reads docs and copies them into batches of decodeBatch
// (taken from free when one is there), sent to out, until docs ends,
// fails (the failure is sent last, the documents of the batch it cut
// short with it dropped) or stop is closed; unchanged, if not nil, is
// asked of each document as it is read. It returns how many documents it
// read.
func readBatches(docs iter.Seq2[bson.Raw, error], unchanged func(bson.Raw) bool, out chan<- *rawBatch, free <-chan *rawBatch, stop <-chan struct{}) int {
	n := 0
	send := func(b *rawBatch) bool {
		select {
		case out <- b:
			return true
		case <-stop:
			return false
		}
	}
	var b *rawBatch
	for d, err := range docs {
		if err != nil {
			send(&rawBatch{err: err})
			return n
		}
		n++
		if b == nil {
			select {
			case b = <-free:
			default:
				b = &rawBatch{ends: make([]int, 0, decodeBatch), same: make([]bool, 0, decodeBatch)}
			}
		}
		b.buf = append(b.buf, d...)
		b.ends = append(b.ends, len(b.buf))
		b.same = append(b.same, unchanged != nil && unchanged(d))
		if len(b.ends) == decodeBatch {
			if !send(b) {
				return n
			}
			b = nil
		}
	}
	if b != nil {
		send(b)
	}
	return n
}

// decodeBatches decodes the batches in receives, in order (as DecodeAll
// does, into an item slice taken from free when one is there), hands each
// batch's buffer back on rawFree and sends its items to out, until in is
// closed, brings the read's failure (sent on last) or stop is closed.
// Documents that name no job are logged and left out. It returns how long
// it spent decoding, and how many documents it decoded (not those listed
// as the engine has them: decodeChanged).
func (s Sink) decodeBatches(in <-chan *rawBatch, rawFree chan<- *rawBatch, out chan<- decodedBatch,
	free <-chan []scheduler.Item, stop <-chan struct{}, warn bool) (busy time.Duration, decoded int) {
	send := func(b decodedBatch) bool {
		select {
		case out <- b:
			return true
		case <-stop:
			return false
		}
	}
	raws := make([]bson.Raw, 0, decodeBatch)
	for b := range in {
		if b.err != nil {
			send(decodedBatch{err: b.err})
			return busy, decoded
		}
		t := time.Now()
		raws = raws[:0]
		from := 0
		for _, end := range b.ends {
			raws = append(raws, bson.Raw(b.buf[from:end:end]))
			from = end
		}
		var reuse []scheduler.Item
		select {
		case reuse = <-free:
		default:
		}
		batch := s.decodeChanged(reuse, raws, b.same)
		items := batch[:0]
		for i, it := range batch {
			if !it.Same {
				decoded++
				if warn {
					s.warnMisspellings(it.Schedule.ID, raws[i])
				}
			}
			if it.Err != nil && it.Schedule.ID == "" {
				s.log.Warn("schedules document refused and not attributable to a job", "error", it.Err)
				continue
			}
			items = append(items, it)
		}
		// The items hold copies of what they took from the documents.
		b.buf, b.ends, b.same = b.buf[:0], b.ends[:0], b.same[:0]
		select {
		case rawFree <- b:
		default:
		}
		busy += time.Since(t)
		if !send(decodedBatch{items: items}) {
			return busy, decoded
		}
	}
	return busy, decoded
}

// decodeChanged is decodeInto but for the documents same marks (the ones
// the engine last applied), which it lists as the jobs they are
// (scheduler.Item.Same) when the engine knows the job, decoding only their
// _id.
func (s Sink) decodeChanged(out []scheduler.Item, docs []bson.Raw, same []bool) []scheduler.Item {
	if !slices.Contains(same, true) {
		return decodeInto(out, docs)
	}
	if cap(out) < len(docs) {
		out = make([]scheduler.Item, 0, len(docs))
	}
	out = out[:len(docs)]
	var changed []int // the documents to decode, by index
	for i, d := range docs {
		out[i] = scheduler.Item{}
		if same[i] {
			if id, err := schedule.DecodeID(d.Lookup("_id")); err == nil && s.engine.Knows(id) {
				out[i] = scheduler.Item{Schedule: schedule.Schedule{ID: id}, Same: true}
				continue
			}
		}
		changed = append(changed, i)
	}
	// Spread over the CPUs as DecodeAll does, when there are many.
	todo := make([]bson.Raw, len(changed))
	for k, i := range changed {
		todo[k] = docs[i]
	}
	for k, it := range decodeInto(nil, todo) {
		out[changed[k]] = it
	}
	return out
}

// msgSchedulesReplaced is the message Sink.ReplaceAll logs with the
// decode/engine split of a full reload.
const msgSchedulesReplaced = "schedules replaced"

// DecodeAll decodes docs in order, spread over the available CPUs when
// there are many (decoding is about a third of a 100,000-document reload).
func DecodeAll(docs []bson.Raw) []scheduler.Item { return decodeInto(nil, docs) }

// decodeInto is DecodeAll writing into out's array when it has room.
func decodeInto(out []scheduler.Item, docs []bson.Raw) []scheduler.Item {
	if cap(out) >= len(docs) {
		out = out[:len(docs)]
	} else {
		out = make([]scheduler.Item, len(docs))
	}
	workers := min(runtime.GOMAXPROCS(0), len(docs)/parallelDecodeMin)
	if workers < 2 {
		for i, d := range docs {
			out[i].Schedule, out[i].Err = decode(d)
		}
		return out
	}
	var wg sync.WaitGroup
	chunk := (len(docs) + workers - 1) / workers
	for lo := 0; lo < len(docs); lo += chunk {
		hi := min(lo+chunk, len(docs))
		wg.Go(func() {
			for i := lo; i < hi; i++ {
				out[i].Schedule, out[i].Err = decode(docs[i])
			}
		})
	}
	wg.Wait()
	return out
}

// decode is schedule.DecodeFields with the fields many jobs repeat (the
// expression, the zone, the action, the category) interned: the engine
// keeps every job's schedule, and with these shared a replica holding a
// million jobs keeps one copy of each distinct value instead of one a job
// (about 40 bytes a job with per-customer schedules in twenty zones).
func decode(doc bson.Raw) (schedule.Schedule, error) {
	s, err := schedule.DecodeFields(doc)
	if err == nil {
		s.CronExpr, s.Timezone, s.Job, s.Category = intern(s.CronExpr), intern(s.Timezone), intern(s.Job), intern(s.Category)
	}
	return s, err
}

// intern returns the canonical copy of v (unique.Make): equal strings
// decoded from many documents share one allocation.
func intern(v string) string {
	if v == "" {
		return v
	}
	return unique.Make(v).Value()
}

// parallelDecodeMin is the least number of documents per decoding goroutine.
const parallelDecodeMin = 1000
