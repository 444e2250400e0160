// Package history records the edit history of the schedules collection:
// one document in CollectionName per applied change event (insert, update,
// replace, delete; pausing and resuming are updates of the enabled field),
// with the fields it changed, before and after.
//
// # One entry per event, on every replica alike
//
// Every replica watches the same change stream and applies the same events
// in the same order, so each computes the same entry for an event, and all
// of them write it. The entry's _id is the event's resume token (_data),
// identical on every replica and unique to the event: the first write
// wins, the others (and any replay of the event after a restart) are
// duplicate keys and change nothing.
//
// # Where "before" comes from
//
// Change events carry no pre-images here (the test server and MongoDB
// before 6.0 have none), so the Recorder keeps the documents as the
// events left them: inserts and replaces carry the whole new document; an
// update's updateDescription (the fields it set, with their values at
// write time, and the fields it removed) is applied to the document the
// Recorder holds. The updateLookup fullDocument is not used for updates:
// it is the document when the event is read, which can already include
// later edits, and differs between replicas that read at different times.
//
// # After a full reload
//
// A full reload (start-up, lost position, invalidation, resync) replaces
// the Recorder's documents with the collection as read, and events of the
// stream that was opened before that read can already be in it. Until the
// stream has caught up (Hooks.Idle: an empty round trip after the read),
// the Recorder cannot tell which events the read already includes, so it
// updates its documents from the events but records nothing. Changes a
// full reload made (edits whose events this replica never saw) are not
// recorded either: their intermediate steps are unknown, and the
// before/after each replica would compute depends on when it read the
// collection. Replicas that were streaming at the time record those events.
//
// # First sightings
//
// Beside the edits, the collection keeps one entry per job saying when a
// replica first saw it (Sighting, kept by Sightings): the job's insert
// event, or the first full read that contained it. It does not expire
// while the job exists, so a timeline or a backfill can start no earlier
// than the job, whatever the retention of the edits.
package history

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// CollectionName is the collection of the edit history.
const CollectionName = "schedule_history"

// Operations, as stored in Entry.Op (the change event's operationType).
const (
	OpInsert  = "insert"
	OpUpdate  = "update"
	OpReplace = "replace"
	OpDelete  = "delete"
)

// Index names; admin's init and the daemon create the same indexes.
const (
	// JobIndex serves "the history of one job, newest first".
	JobIndex = "schedule_history_job_at"
	// TTLIndex expires entries at their expire_at.
	TTLIndex = "schedule_history_expire_at"
)

// Entry is one applied change of one schedule.
type Entry struct {
	// ID is the change event's resume token _data: unique to the event,
	// the same on every replica.
	ID string `bson:"_id" json:"id"`
	// JobID is the schedule's _id.
	JobID string `bson:"job_id" json:"job_id"`
	// At is when the change was made: the event's wallTime, else its
	// clusterTime (whole seconds).
	At time.Time `bson:"at" json:"at"`
	// Op is OpInsert, OpUpdate, OpReplace or OpDelete.
	Op string `bson:"op" json:"op"`
	// Changes are the fields the change changed, in document order.
	Changes []Change `bson:"changes" json:"changes"`
	// UpdatedBy is the document's updated_by after the change (absent on a
	// delete and when the document has none): the edit's author.
	UpdatedBy string `bson:"updated_by,omitempty" json:"updated_by,omitempty"`
	// UpdateMessage is the document's update_message after the change
	// (absent on a delete and when the document has none): why the edit
	// was made, as `cronswap apply --message` says.
	UpdateMessage string `bson:"update_message,omitempty" json:"update_message,omitempty"`
	// Instance is the replica whose write stored the entry.
	Instance string `bson:"instance" json:"instance"`
	// RecordedAt is when that replica computed the entry.
	RecordedAt time.Time `bson:"recorded_at" json:"recorded_at"`
	// ExpireAt is when the TTL index removes the entry: At + retention.
	ExpireAt time.Time `bson:"expire_at" json:"expire_at"`
}

// Change is one field's change. A field inside an embedded document is
// named by its dotted path (args.region) when it was a document before and
// after; otherwise the whole field is one change.
type Change struct {
	// Field is the field's name or dotted path.
	Field string `bson:"field"`
	// Before is the value before the change; absent (IsZero) when the
	// field did not exist.
	Before bson.RawValue `bson:"before,omitempty"`
	// After is the value after the change; absent (IsZero) when the field
	// was removed.
	After bson.RawValue `bson:"after,omitempty"`
}

// Indexes returns the indexes of CollectionName beyond _id: (job_id, at
// descending) for one job's history, and a TTL index on expire_at (each
// entry carries its own expiry, hence expireAfterSeconds 0).
func Indexes() []mongo.IndexModel {
	return []mongo.IndexModel{
		{Keys: bson.D{{Key: "job_id", Value: 1}, {Key: "at", Value: -1}}, Options: options.Index().SetName(JobIndex)},
		{Keys: bson.D{{Key: "expire_at", Value: 1}}, Options: options.Index().SetExpireAfterSeconds(0).SetName(TTLIndex)},
	}
}

// EnsureIndexes creates Indexes on coll; existing ones are left alone.
func EnsureIndexes(ctx context.Context, coll *mongo.Collection) error {
	if _, err := coll.Indexes().CreateMany(ctx, Indexes()); err != nil {
		return fmt.Errorf("create indexes on %s: %w", coll.Name(), err)
	}
	return nil
}

// EditsOf is the filter of job jobID's edits in CollectionName: its
// entries, without its first sighting (OpFirstSeen).
func EditsOf(jobID string) bson.D {
	return bson.D{{Key: "job_id", Value: jobID}, {Key: "op", Value: bson.D{{Key: "$ne", Value: OpFirstSeen}}}}
}

// List returns the newest edits of job jobID in coll, newest first (by
// At, then by ID, which orders events of the same instant), at most limit
// (<= 0: all).
func List(ctx context.Context, coll *mongo.Collection, jobID string, limit int64) ([]Entry, error) {
	opts := options.Find().SetSort(bson.D{{Key: "at", Value: -1}, {Key: "_id", Value: -1}})
	if limit > 0 {
		opts.SetLimit(limit)
	}
	cur, err := coll.Find(ctx, EditsOf(jobID), opts)
	if err != nil {
		return nil, fmt.Errorf("read %s of job %q: %w", coll.Name(), jobID, err)
	}
	out := []Entry{}
	if err := cur.All(ctx, &out); err != nil {
		return nil, fmt.Errorf("read %s of job %q: %w", coll.Name(), jobID, err)
	}
	return out, nil
}
