package notify

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readconcern"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"
)

// CollectionName is the collection of the notifications: one document per
// notice and sink.
const CollectionName = "notifications"

// Notification statuses.
const (
	// StatusPending: not delivered yet (never tried, or to be tried again
	// at next_attempt_at).
	StatusPending = "pending"
	// StatusDelivered: the sink answered 2xx.
	StatusDelivered = "delivered"
	// StatusFailed: given up after MaxAttempts, or the document or its
	// sink is unusable (last_error says why).
	StatusFailed = "failed"
)

// Index names of CollectionName.
const (
	DueIndex = "status_1_next_attempt_at_1"
	TTLIndex = "expire_at_1"
	JobIndex = "job_id_1_at_1"
)

// Doc is one document of CollectionName.
type Doc struct {
	// ID is NotificationID(source, source id, kind, at, sink): the same
	// on every replica, so a notice moved twice is one document.
	ID string `bson:"_id" json:"notification_id"`
	// Kind is the notice's kind (Kinds).
	Kind  string `bson:"kind" json:"kind"`
	JobID string `bson:"job_id" json:"job_id"`
	// Sink is the webhook's name.
	Sink string `bson:"sink" json:"sink"`
	// Source and SourceID name the outbox document the notice came from
	// (for run records, SourceID is the run id).
	Source   string `bson:"source" json:"source"`
	SourceID string `bson:"source_id" json:"source_id"`
	// At is when the event happened.
	At time.Time `bson:"at" json:"at"`
	// Payload is the JSON body sent to the sink.
	Payload string `bson:"payload" json:"payload"`
	// Status is StatusPending, StatusDelivered or StatusFailed.
	Status string `bson:"status" json:"status"`
	// Attempts counts the deliveries started (claims).
	Attempts int `bson:"attempts" json:"attempts"`
	// NextAttemptAt is when the notification may be claimed next: a
	// pending one past it is due; a claim moves it to the end of its lease.
	NextAttemptAt time.Time `bson:"next_attempt_at" json:"next_attempt_at,omitzero"`
	// Holder is the instance of the last claim.
	Holder        string    `bson:"holder,omitempty" json:"holder,omitempty"`
	LastAttemptAt time.Time `bson:"last_attempt_at,omitempty" json:"last_attempt_at,omitzero"`
	// LastError is why the last delivery failed.
	LastError   string    `bson:"last_error,omitempty" json:"last_error,omitempty"`
	DeliveredAt time.Time `bson:"delivered_at,omitempty" json:"delivered_at,omitzero"`
	CreatedAt   time.Time `bson:"created_at" json:"created_at"`
	// TraceParent and TraceState are the notice's trace context (the
	// span that caused it), which each delivery's span continues.
	TraceParent string `bson:"traceparent,omitempty" json:"-"`
	TraceState  string `bson:"tracestate,omitempty" json:"-"`
	// ExpireAt drives the TTL index: set when the notification is
	// delivered or failed (the retention later); a pending one never
	// expires.
	ExpireAt time.Time `bson:"expire_at,omitempty" json:"-"`
}

// Collection returns db's notifications collection with write concern
// majority and read concern majority: a claim or a delivery acknowledged
// by a primary alone could be rolled back and the notification sent again.
func Collection(db *mongo.Database) *mongo.Collection {
	return db.Collection(CollectionName, options.Collection().
		SetWriteConcern(writeconcern.Majority()).SetReadConcern(readconcern.Majority()))
}

// Indexes returns the indexes of CollectionName beyond _id: (status,
// next_attempt_at), which the relays' claims read; a TTL index on
// expire_at; (job_id, at) for listing by job.
func Indexes() []mongo.IndexModel {
	return []mongo.IndexModel{
		{Keys: bson.D{{Key: "status", Value: 1}, {Key: "next_attempt_at", Value: 1}}, Options: options.Index().SetName(DueIndex)},
		{Keys: bson.D{{Key: "expire_at", Value: 1}}, Options: options.Index().SetExpireAfterSeconds(0).SetName(TTLIndex)},
		{Keys: bson.D{{Key: "job_id", Value: 1}, {Key: "at", Value: 1}}, Options: options.Index().SetName(JobIndex)},
	}
}

// OutboxIndex is the name of the index an outbox collection needs on
// OutboxField, created by OutboxIndexes.
const OutboxIndex = "notice_kind_1"

// OutboxIndexes returns the index of an outbox collection (job_runs, a
// pause collection) that serves the relay's look for pending notices: a
// sparse index on notice.kind, which holds the few documents with a
// notice only.
func OutboxIndexes() []mongo.IndexModel {
	return []mongo.IndexModel{
		{Keys: bson.D{{Key: OutboxField + ".kind", Value: 1}}, Options: options.Index().SetSparse(true).SetName(OutboxIndex)},
	}
}

// EnsureIndexes creates Indexes on the notifications collection coll and
// OutboxIndexes on each outbox collection; existing ones are left alone.
func EnsureIndexes(ctx context.Context, coll *mongo.Collection, outboxes ...*mongo.Collection) error {
	if _, err := coll.Indexes().CreateMany(ctx, Indexes()); err != nil {
		return fmt.Errorf("create the indexes of %s: %w", coll.Name(), err)
	}
	for _, o := range outboxes {
		if _, err := o.Indexes().CreateMany(ctx, OutboxIndexes()); err != nil {
			return fmt.Errorf("create the outbox index of %s: %w", o.Name(), err)
		}
	}
	return nil
}

// ListFilter selects notifications for List; zero fields select all.
type ListFilter struct {
	Status string
	JobID  string
	// Failing selects the notifications whose last delivery failed: given
	// up, or pending with a last error.
	Failing bool
	// Limit bounds the answer (newest first); 0 is 100.
	Limit int64
}

// List returns the notifications of coll matching f, the newest event
// first.
func List(ctx context.Context, coll *mongo.Collection, f ListFilter) ([]Doc, error) {
	filter := bson.D{}
	if f.Status != "" {
		filter = append(filter, bson.E{Key: "status", Value: f.Status})
	}
	if f.JobID != "" {
		filter = append(filter, bson.E{Key: "job_id", Value: f.JobID})
	}
	if f.Failing {
		filter = append(filter, bson.E{Key: "$or", Value: bson.A{
			bson.D{{Key: "status", Value: StatusFailed}},
			bson.D{{Key: "status", Value: StatusPending}, {Key: "last_error", Value: bson.D{{Key: "$exists", Value: true}}}},
		}})
	}
	if f.Limit <= 0 {
		f.Limit = 100
	}
	cur, err := coll.Find(ctx, filter, options.Find().SetSort(bson.D{{Key: "at", Value: -1}, {Key: "_id", Value: 1}}).SetLimit(f.Limit))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", coll.Name(), err)
	}
	var raws []bson.Raw
	if err := cur.All(ctx, &raws); err != nil {
		return nil, fmt.Errorf("read %s: %w", coll.Name(), err)
	}
	out := make([]Doc, 0, len(raws))
	for _, raw := range raws {
		var d Doc
		if err := bson.Unmarshal(raw, &d); err != nil {
			// A document written by hand with wrong types is listed with
			// what could be read and why the rest could not.
			d = Doc{ID: idString(raw), Status: StatusFailed, LastError: "unreadable notification: " + err.Error()}
		}
		out = append(out, d)
	}
	return out, nil
}

// idString is the _id of raw as a string (its extended JSON when it is
// not a string).
func idString(raw bson.Raw) string {
	v, err := raw.LookupErr("_id")
	if err != nil {
		return ""
	}
	if s, ok := v.StringValueOK(); ok {
		return s
	}
	return v.String()
}

// NotificationID is the _id of the notification of the notice of kind at
// at on the document sourceID of collection source, for sink.
func NotificationID(source, sourceID, kind string, at time.Time, sink string) string {
	return source + "/" + sourceID + "/" + kind + "/" + at.UTC().Format("20060102T150405.000Z") + "/" + sink
}
