package history

import (
	"encoding/hex"
	"iter"
	"log/slog"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/changestream"
	"github.com/cronswap/cronswap/schedule"
)

// Queue receives the entries a Recorder computes; *Writer is the real one.
type Queue interface {
	// Enqueue hands e over without blocking; false means it was dropped.
	Enqueue(e Entry) bool
}

// SightingQueue receives what a Recorder sees of jobs appearing and
// disappearing; *Sightings is the real one. No method may block.
type SightingQueue interface {
	// Inserted: job jobID's document was inserted at at.
	Inserted(jobID string, at time.Time)
	// Deleted: job jobID's document was deleted at at.
	Deleted(jobID string, at time.Time)
	// Present: the collection held exactly these jobs at at.
	Present(ids []string, at time.Time)
}

// RecorderOptions configures a Recorder.
type RecorderOptions struct {
	// Instance names this replica in Entry.Instance.
	Instance string
	// Retention is how long entries are kept (Entry.ExpireAt = At +
	// Retention); it must be positive.
	Retention time.Duration
	// Logger receives the recorder's logs (default slog.Default()).
	Logger *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Sightings, if set, is told of every insert and delete event, and of
	// the collection after each full reload once it is exact (CaughtUp,
	// or ReadIsCurrent in poll mode).
	Sightings SightingQueue
}

// Recorder turns the change events a watcher applies into history entries.
// It wraps the watcher's sink (to see full reloads) and is fed the events
// through Observe (Hooks.Event) and the stream's catching up through
// CaughtUp (Hooks.Idle). Every method is called from the watcher's
// goroutine, but Documents; none waits for the database (entries go to
// the Queue).
//
// An update event carries the new values only, so the recorder keeps a
// copy of every document — the before-image of its next edit — taken
// from each full read as it streams by and kept current by the events.
// That copy (compact: each document's values, its field names kept once
// per shape; see docStore) is the daemon's one copy of the collection's documents; the state file
// is written from it too (Documents).
type Recorder struct {
	changestream.Sink
	queue Queue
	opts  RecorderOptions

	// docs are the schedules documents as the events left them.
	docs *docStore
	// reads counts the full reads, to mark what each listed (docStore).
	reads uint32
	// exact is true once the stream caught up after the last full reload:
	// docs are then exactly the documents before the next event.
	exact bool
	// unsighted is true from a full reload until the collection it left
	// was handed to Sightings.
	unsighted bool
	// lockstep is true while docs and the sink follow the same documents:
	// from the end of a full reload the sink applied until one it failed
	// (a failed one may have stored here documents the sink never got).
	// Between the two, the watcher hands both every event (the sink an
	// update's looked-up document, which may be a later version than the
	// event's: that version's own event follows). Written on the
	// watcher's goroutine, read on the one that reads a full read.
	lockstep bool
	// listedSame is the first byte of the document a full read is handing
	// on when it is the one docs held for its key, in lockstep; nil
	// otherwise (Unchanged). Used only on the goroutine that reads the
	// full read.
	listedSame *byte
}

// NewRecorder returns a recorder wrapping sink and sending entries to q.
func NewRecorder(sink changestream.Sink, q Queue, opts RecorderOptions) *Recorder {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Recorder{Sink: sink, queue: q, opts: opts, docs: newDocStore()}
}

// ReplaceAll implements changestream.Sink: it passes the full reload on,
// copying each document as it goes by, and takes them as the documents
// from now on, not exact until the stream has caught up (see the package
// doc). A read that fails leaves the documents it read in place of the
// old ones and removes none.
func (r *Recorder) ReplaceAll(docs iter.Seq2[bson.Raw, error]) ([]string, error) {
	r.reads++
	read := r.reads
	seen := 0
	lockstep := r.lockstep
	changed, err := r.Sink.ReplaceAll(func(yield func(bson.Raw, error) bool) {
		defer func() { r.listedSame = nil }()
		for d, err := range docs {
			r.listedSame = nil
			if err == nil {
				if key := docKey(d); key != "" {
					seen++
					if r.docs.load(key, d, read) && lockstep && len(d) > 0 {
						r.listedSame = &d[0]
					}
				}
			}
			if !yield(d, err) {
				return
			}
		}
	})
	r.lockstep = err == nil
	if err != nil {
		return changed, err
	}
	r.docs.sweep(read)
	if r.exact {
		r.opts.Logger.Debug("schedule history paused until the stream catches up after a full reload", "documents", seen)
	}
	r.exact, r.unsighted = false, true
	return changed, nil
}

// Unchanged reports whether doc, which the full read in progress is
// handing on to the wrapped sink (called from the sink's ReplaceAll,
// while it reads doc), is byte for byte the document the recorder held
// for its key, with the recorder and the sink following the same
// documents (no full reload failed since the last one ended, every event
// since handed to both): then the sink was given doc last for that key,
// once the events before the read were applied, and may keep what it made
// of it. It is false for any other document, copies of doc included.
func (r *Recorder) Unchanged(doc bson.Raw) bool {
	return len(doc) > 0 && r.listedSame == &doc[0]
}

// Reserve makes room for about n documents in a recorder that holds
// none, so that a first full read of that many (a warm start's state
// file, whose count is known before it is read) does not grow the copy
// step by step as it goes. It is a hint: it does nothing to the shards
// that hold documents, and a read of more or fewer is kept as always.
func (r *Recorder) Reserve(n int) { r.docs.reserve(n) }

// Documents lists the documents the recorder holds (as the events left
// them), one at a time, each valid until the next: the state file's
// documents (changestream.Options.StateDocs). It may run on any goroutine
// while the watcher's goroutine calls the recorder; it lists every event
// applied before it was called.
func (r *Recorder) Documents() iter.Seq[bson.Raw] { return r.docs.all() }

// Document returns a copy of the document the recorder holds for job id
// (as the last full read and the events since left it), nil when it holds
// none. Like Documents, it may run on any goroutine.
func (r *Recorder) Document(id string) bson.Raw { return r.docs.get(id) }

// docKey is the key of a document in docStore: schedule.DecodeID of its
// _id; "" when it has none that can be attributed.
func docKey(doc bson.Raw) string {
	v, err := doc.LookupErr("_id")
	if err != nil {
		return ""
	}
	key, _ := schedule.DecodeID(v)
	return key
}

// CaughtUp tells the recorder that the stream applied every event
// committed before now (Hooks.Idle): its documents are exact from here on.
func (r *Recorder) CaughtUp() {
	r.sight()
	if r.exact {
		return
	}
	r.exact = true
	r.opts.Logger.Debug("schedule history recording: stream caught up")
}

// ReadIsCurrent tells the recorder that the last full reload is the
// collection as it is now, with no stream behind it whose events it may
// already hold (poll mode: Hooks.FullReload). Edits are still not
// recorded (a poll sees no events), but the jobs it holds are sighted.
func (r *Recorder) ReadIsCurrent() { r.sight() }

// sight hands the collection the last full reload left, with the events
// applied since, to Sightings, once per full reload.
func (r *Recorder) sight() {
	if !r.unsighted || r.opts.Sightings == nil {
		return
	}
	r.unsighted = false
	r.opts.Sightings.Present(r.docs.jobIDs(), r.opts.Now())
}

// Observe takes one applied change event (Hooks.Event): it updates the
// recorder's copy of the document and, when that copy was exact, queues
// the entry for the change (none when nothing but _id, updated_at,
// updated_by or update_message changed).
func (r *Recorder) Observe(ev changestream.EventInfo) {
	e, ok := r.observe(ev.Event)
	if !ok {
		return
	}
	if !r.queue.Enqueue(e) {
		r.opts.Logger.Warn("schedule history queue full; entry dropped", "job_id", e.JobID, "history_id", e.ID, "op", e.Op)
	}
}

// observe is Observe without the queue: the entry, and whether there is one.
func (r *Recorder) observe(ev bson.Raw) (Entry, bool) {
	op, _ := ev.Lookup("operationType").StringValueOK()
	if op != OpInsert && op != OpUpdate && op != OpReplace && op != OpDelete {
		return Entry{}, false
	}
	key := eventDocKey(ev)
	if key == "" {
		return Entry{}, false // no _id to attribute the event to
	}
	// Only a job's document (a string _id) has a history; the others are
	// kept for the state file.
	jobID := key
	if _, refused := schedule.RefusedID(key); refused {
		jobID = ""
	}
	now := r.opts.Now()
	if r.opts.Sightings != nil && jobID != "" {
		// Whether exact or not: an insert or a delete is one whatever the
		// replica read before it, and the writes are conditional on time.
		switch op {
		case OpInsert:
			r.opts.Sightings.Inserted(jobID, eventTime(ev, now))
		case OpDelete:
			r.opts.Sightings.Deleted(jobID, eventTime(ev, now))
		}
	}
	before := r.docs.get(key)
	var after bson.Raw
	switch op {
	case OpInsert, OpReplace:
		after = copyDoc(ev, "fullDocument")
	case OpUpdate:
		desc, err := ev.LookupErr("updateDescription")
		if err == nil && desc.Type == bson.TypeEmbeddedDocument {
			next, err := ApplyUpdate(before, desc.Document())
			if err != nil {
				r.opts.Logger.Warn("schedule history: cannot apply an update event; taking the looked-up document",
					"job_id", jobID, "error", err)
				after = copyDoc(ev, "fullDocument")
			} else {
				after = next
			}
		} else {
			after = copyDoc(ev, "fullDocument") // a server without updateDescription
		}
	}
	if after == nil {
		r.docs.remove(key)
	} else {
		r.docs.put(key, after, r.reads)
	}
	if !r.exact || jobID == "" {
		return Entry{}, false
	}
	id := eventKey(ev)
	if id == "" {
		r.opts.Logger.Warn("schedule history: change event without a resume token; not recorded", "job_id", jobID, "op", op)
		return Entry{}, false
	}
	changes := Diff(before, after)
	if len(changes) == 0 && (op == OpUpdate || op == OpReplace) {
		return Entry{}, false
	}
	at := eventTime(ev, now)
	e := Entry{ID: id, JobID: jobID, At: at, Op: op, Changes: changes, Instance: r.opts.Instance,
		RecordedAt: now.UTC(), ExpireAt: at.Add(r.opts.Retention)}
	if after != nil {
		e.UpdatedBy, _ = after.Lookup(schedule.FieldUpdatedBy).StringValueOK()
		e.UpdateMessage, _ = after.Lookup(schedule.FieldUpdateMessage).StringValueOK()
	}
	if e.Changes == nil {
		e.Changes = []Change{}
	}
	return e, true
}

// eventDocKey is the docStore key of the event's document: DecodeID of
// its _id (documentKey._id, else fullDocument._id); "" when it has none
// that can be attributed.
func eventDocKey(ev bson.Raw) string {
	v, err := ev.LookupErr("documentKey", "_id")
	if err != nil {
		v, err = ev.LookupErr("fullDocument", "_id")
	}
	if err != nil {
		return ""
	}
	key, _ := schedule.DecodeID(v)
	return key
}

// eventKey is the event's resume token _data: a hex string on MongoDB 4.2+
// and the test server; binary _data (older servers) is hex-encoded.
func eventKey(ev bson.Raw) string {
	v, err := ev.LookupErr("_id", "_data")
	if err != nil {
		return ""
	}
	if s, ok := v.StringValueOK(); ok {
		return s
	}
	if _, b, ok := v.BinaryOK(); ok {
		return hex.EncodeToString(b)
	}
	return ""
}

// eventTime is the event's wallTime, else its clusterTime, else now.
func eventTime(ev bson.Raw, now time.Time) time.Time {
	if v, err := ev.LookupErr("wallTime"); err == nil && v.Type == bson.TypeDateTime {
		return v.Time().UTC()
	}
	if v, err := ev.LookupErr("clusterTime"); err == nil && v.Type == bson.TypeTimestamp {
		t, _ := v.Timestamp()
		return time.Unix(int64(t), 0).UTC()
	}
	return now.UTC()
}

// copyDoc returns a copy of the embedded document ev.key (nil if absent or
// not a document): the stream reuses the event's buffer.
func copyDoc(ev bson.Raw, key string) bson.Raw {
	v, err := ev.LookupErr(key)
	if err != nil || v.Type != bson.TypeEmbeddedDocument {
		return nil
	}
	return append(bson.Raw(nil), v.Document()...)
}
