// Package notify delivers failure notifications through an outbox.
//
// # The outbox
//
// A notice is never sent by the code that decides a failure. It is written
// into the very document whose write records the event, in the same
// update: a run record that ends failed, is marked abandoned or is recorded
// missed carries an OutboxField sub-document ({kind, at, note?}) set by the
// update that writes its status, and a pause document carries one set by
// the write that pauses the job (PauseNotice). Either the event and its
// notice are written together, or neither is.
//
// # The relay
//
// A Relay on every replica moves notices out of the outbox documents into
// the notifications collection (CollectionName), one document per notice
// and sink whose _id is derived from the outbox document, the kind, the
// notice's time and the sink, so moving twice writes nothing new; then it
// removes the notice from the outbox document. It delivers each pending
// notification after claiming it: a findOneAndUpdate that hides the
// document from the other relays for the claim lease (next_attempt_at is
// moved to now plus the lease) and counts the attempt, so one replica
// delivers each at a time. A delivery that fails is tried again after an
// exponential backoff; one whose relay died is claimed again when the lease
// passes. Delivery is at least once: a relay that dies after the sink
// answered and before it recorded the answer leaves the notification to be
// sent again, with the same id (the X-Cronswap-Notification-Id header and
// the notification_id of the body), by which a receiver de-duplicates.
package notify

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// OutboxField is the field of an outbox document (a run record, a pause
// document) that holds its pending Notice until the relay has moved it to
// the notifications collection.
const OutboxField = "notice"

// NoticeErrorField is set on an outbox document whose notice could not be
// read (wrong types), with what is wrong; the bad notice is removed so it
// is not read again.
const NoticeErrorField = "notice_error"

// Source is an outbox collection, one whose documents carry notices
// (OutboxField): the relay reads the notices through it and has it clear
// those it dealt with. The code that owns the collection's writes
// implements it (the run records' store for job_runs and job_pauses), so
// the relay writes no outbox document itself.
type Source interface {
	// Name is the collection's name: the notifications' Doc.Source.
	Name() string
	// Notices returns up to limit documents that carry a notice
	// (PendingNotices). Its errors name the collection.
	Notices(ctx context.Context, limit int64) ([]bson.Raw, error)
	// ClearNotices applies clears (Clear.Update) in one write. Its errors
	// name the collection.
	ClearNotices(ctx context.Context, clears []Clear) error
}

// PendingNotices is the filter of the outbox documents that carry a
// notice, which the sparse OutboxIndex serves.
func PendingNotices() bson.D {
	return bson.D{{Key: OutboxField + ".kind", Value: bson.D{{Key: "$exists", Value: true}}}}
}

// Clear is what becomes of one outbox document's notice once the relay
// dealt with it: removed, only while the document still carries that same
// notice (a newer one written meanwhile stays); or, when it could not be
// read (Bad), removed with why under NoticeErrorField.
type Clear struct {
	// ID is the outbox document's _id.
	ID bson.RawValue
	// Notice is the notice moved (its Kind and At identify it).
	Notice Notice
	// Bad, when not empty, says why the notice could not be read.
	Bad string
}

// Update returns the conditional update of c's document that applies c.
func (c Clear) Update() (filter, update bson.D) {
	if c.Bad != "" {
		return bson.D{{Key: "_id", Value: c.ID}},
			bson.D{{Key: "$set", Value: bson.D{{Key: NoticeErrorField, Value: c.Bad}}},
				{Key: "$unset", Value: bson.D{{Key: OutboxField, Value: ""}}}}
	}
	return bson.D{{Key: "_id", Value: c.ID}, {Key: OutboxField + ".kind", Value: c.Notice.Kind}, {Key: OutboxField + ".at", Value: c.Notice.At}},
		bson.D{{Key: "$unset", Value: bson.D{{Key: OutboxField, Value: ""}}}}
}

// Notice kinds: what happened.
const (
	// KindFailed: a run ended failed.
	KindFailed = "failed"
	// KindAbandoned: a run was marked abandoned (its holder stopped
	// renewing, or it was cancelled).
	KindAbandoned = "abandoned"
	// KindMissed: slots were recorded missed (not run).
	KindMissed = "missed"
	// KindPaused: a job was paused (after consecutive failures).
	KindPaused = "paused"
)

// Kinds lists every notice kind, the values a route's on list may name.
var Kinds = []string{KindFailed, KindAbandoned, KindMissed, KindPaused}

// Notice is the outbox entry written with an event, under OutboxField.
type Notice struct {
	// Kind is one of Kinds.
	Kind string `bson:"kind"`
	// At is when the event was written (millisecond precision, as stored).
	At time.Time `bson:"at"`
	// Note is a free text added to the notification (the pause note).
	Note string `bson:"note,omitempty"`
	// TraceParent and TraceState are the W3C trace context of the span
	// that caused the event (a traced fire's), when tracing is on: the
	// deliveries' spans continue that trace.
	TraceParent string `bson:"traceparent,omitempty"`
	TraceState  string `bson:"tracestate,omitempty"`
}

// NewNotice returns the notice of an event of kind at at (at truncated to
// the millisecond, as a BSON date stores it).
func NewNotice(kind string, at time.Time) Notice {
	return Notice{Kind: kind, At: at.UTC().Truncate(time.Millisecond)}
}

// Outbox returns the OutboxField element of an event of kind at at, for
// the $set (or the inserted document) of the write that records the event.
func Outbox(kind string, at time.Time) bson.E {
	return bson.E{Key: OutboxField, Value: NewNotice(kind, at)}
}

// TracedOutbox is Outbox for an event caused in the trace whose W3C
// context is traceparent and tracestate (Outbox when traceparent is "").
func TracedOutbox(kind string, at time.Time, traceparent, tracestate string) bson.E {
	n := NewNotice(kind, at)
	n.TraceParent, n.TraceState = traceparent, tracestate
	return bson.E{Key: OutboxField, Value: n}
}

// PauseNotice returns the OutboxField element to add to the $set of the
// write that pauses a job (on the document holding the pause state), so
// that the pause and its notification are one write: at is the pause time,
// note the pause's note. The outbox document must carry the job's id in a
// job_id field (or be keyed by it) and its collection must be one of the
// relay's sources.
func PauseNotice(at time.Time, note string) bson.E {
	n := NewNotice(KindPaused, at)
	n.Note = note
	return bson.E{Key: OutboxField, Value: n}
}
