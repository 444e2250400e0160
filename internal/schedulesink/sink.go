// Package schedulesink turns the documents of the schedules collection into
// engine calls: it is the change-stream watcher's sink (changestream.Sink)
// for that collection, decoding and checking each document through package
// schedule and handing it to the engine (scheduler.Engine), so that a
// malformed document is refused with the job keeping its last good timer.
package schedulesink

import (
	"context"
	"iter"
	"log/slog"
	"runtime"
	"sync"
	"time"
	"unique"

	"go.mongodb.org/mongo-driver/v2/bson"

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
}

// New returns the sink applying documents to engine, logging refusals to
// log and counting reloads in mx (nil counts nothing).
func New(engine *scheduler.Engine, log *slog.Logger, mx *metrics.Metrics) Sink {
	if log == nil {
		log = slog.Default()
	}
	return Sink{engine: engine, log: log, metrics: mx}
}

// Upsert implements changestream.Sink: it decodes doc and reloads the job,
// or records the document's error against the job (last known good).
func (s Sink) Upsert(doc bson.Raw) {
	sched, err := decode(doc)
	if err != nil {
		s.reject(sched.ID, err)
		return
	}
	s.metrics.CountReload(reloadResult(s.engine.Reload(sched)))
}

// reloadResult names a Reload outcome for the reloads metric.
func reloadResult(o scheduler.Outcome) string {
	switch o {
	case scheduler.Unchanged:
		return metrics.ReloadUnchanged
	case scheduler.Rejected:
		return metrics.ReloadRejected
	default:
		return metrics.ReloadApplied
	}
}

func (s Sink) reject(id string, err error) {
	if id == "" {
		s.log.Warn("schedules document refused and not attributable to a job", "error", err)
		return
	}
	s.engine.Reject(id, err)
	s.metrics.CountReload(metrics.ReloadRejected)
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
// Documents are decoded in batches of decodeBatch, spread over the CPUs,
// on a goroutine of their own while the engine applies the batch before
// (decoding is about a third of a reload), so at most three batches are
// held at once. It logs how the time divided between decoding and the
// engine, as "decode" (the decoder's busy time, read waits excluded) and
// "engine" attributes: at info level when something changed, at debug
// level otherwise (a periodic resync that finds nothing).
func (s Sink) ReplaceAll(docs iter.Seq2[bson.Raw, error]) ([]string, error) {
	start := time.Now()
	batches := make(chan decodedBatch, 1)
	stop := make(chan struct{})
	var n int
	var decode time.Duration
	go func() {
		defer close(batches)
		n, decode = s.decodeBatches(docs, batches, stop)
	}()
	var engineBusy time.Duration
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
			}
			engineBusy += time.Since(t)
		}
	}
	st, err := s.engine.Sync(items)
	close(stop)
	for range batches { // the decoder has ended once batches is closed
	}
	if err != nil {
		return st.Changed, err
	}
	lvl := slog.LevelDebug
	if len(st.Changed) > 0 {
		lvl = slog.LevelInfo
	}
	s.log.Log(context.Background(), lvl, msgSchedulesReplaced, "documents", n, "changed", len(st.Changed),
		"decode", decode, "engine", engineBusy, "duration", time.Since(start))
	return st.Changed, nil
}

// decodeBatch is how many documents ReplaceAll decodes at once.
const decodeBatch = 1024

// decodedBatch is one batch of decoded documents, or the read's failure.
type decodedBatch struct {
	items []scheduler.Item
	err   error
}

// decodeBatches reads docs, copies them into batches of decodeBatch,
// decodes each batch (DecodeAll) and sends its items to out, until docs
// ends, fails (the failure is sent last) or stop is closed. Documents
// that name no job are logged and left out. It returns how many documents
// it read and how long it spent decoding.
func (s Sink) decodeBatches(docs iter.Seq2[bson.Raw, error], out chan<- decodedBatch, stop <-chan struct{}) (int, time.Duration) {
	var (
		n      int
		busy   time.Duration
		buf    []byte
		ends   []int
		raws   = make([]bson.Raw, 0, decodeBatch)
		failed error
	)
	send := func(b decodedBatch) bool {
		select {
		case out <- b:
			return true
		case <-stop:
			return false
		}
	}
	flush := func() bool {
		if len(ends) == 0 {
			return true
		}
		t := time.Now()
		raws = raws[:0]
		from := 0
		for _, end := range ends {
			raws = append(raws, bson.Raw(buf[from:end:end]))
			from = end
		}
		decoded := DecodeAll(raws)
		items := decoded[:0]
		for _, it := range decoded {
			if it.Err != nil && it.Schedule.ID == "" {
				s.log.Warn("schedules document refused and not attributable to a job", "error", it.Err)
				continue
			}
			items = append(items, it)
		}
		buf, ends = buf[:0], ends[:0]
		busy += time.Since(t)
		return send(decodedBatch{items: items})
	}
	for d, err := range docs {
		if err != nil {
			failed = err
			break
		}
		n++
		buf = append(buf, d...)
		ends = append(ends, len(buf))
		if len(ends) == decodeBatch && !flush() {
			return n, busy
		}
	}
	if failed != nil {
		send(decodedBatch{err: failed})
		return n, busy
	}
	flush()
	return n, busy
}

// msgSchedulesReplaced is the message Sink.ReplaceAll logs with the
// decode/engine split of a full reload.
const msgSchedulesReplaced = "schedules replaced"

// DecodeAll decodes docs in order, spread over the available CPUs when
// there are many (decoding is about a third of a 100,000-document reload).
func DecodeAll(docs []bson.Raw) []scheduler.Item {
	out := make([]scheduler.Item, len(docs))
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
