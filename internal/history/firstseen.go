package history

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// OpFirstSeen is the Op of a job's first-sighting entry: one document per
// job in CollectionName, under FirstSeenID, saying when a replica's
// watcher first saw the job (see Sightings). It is not an edit: List and
// the timeline's edits leave it out.
const OpFirstSeen = "first_seen"

// How a first sighting was made (Sighting.Source).
const (
	// SourceInsert: the insert event of the job's document; At is the
	// event's time, when the document was created.
	SourceInsert = "insert"
	// SourceRead: the first full read of the collection that contained
	// the job and whose job had no sighting yet (a job that existed before
	// the deployment kept sightings, or whose insert no replica saw); the
	// job may be older than At.
	SourceRead = "read"
)

// HowSeen says for people how a sighting from source was made.
func HowSeen(source string) string {
	if source == SourceInsert {
		return "when its document was inserted"
	}
	return "by the first full read that found it; the job may be older"
}

// Fields of a first-sighting entry beyond those of an Entry (_id, job_id,
// op, at, instance, recorded_at, expire_at).
const (
	// FieldSource is SourceInsert or SourceRead.
	FieldSource = "source"
	// FieldDeletedAt is set when the job's document was deleted (the
	// delete event's time, or the full read that no longer found it);
	// expire_at is set with it.
	FieldDeletedAt = "deleted_at"
)

// firstSeenPrefix starts the _id of every first-sighting entry. An edit's
// _id is a hex resume token, which never contains "/".
const firstSeenPrefix = "first_seen/"

// FirstSeenID is the _id of job jobID's first-sighting entry.
func FirstSeenID(jobID string) string { return firstSeenPrefix + jobID }

// firstSeenRange matches the _id of every first-sighting entry ("0"
// follows "/"), so reading them all uses the _id index.
func firstSeenRange() bson.D {
	return bson.D{{Key: "$gte", Value: firstSeenPrefix}, {Key: "$lt", Value: firstSeenPrefix[:len(firstSeenPrefix)-1] + "0"}}
}

// Sighting is a job's first-sighting entry: when a replica's watcher
// first saw the job's current document. It is kept while the job exists
// (no expire_at); once the job is deleted it expires runs.retention after
// DeletedAt, and a job created again gets a new sighting.
type Sighting struct {
	// JobID is the job.
	JobID string `bson:"job_id" json:"job_id"`
	// At is when the job was first seen: its insert event's time
	// (SourceInsert), or the time of the full read that first contained it
	// (SourceRead).
	At time.Time `bson:"at" json:"at"`
	// Source is SourceInsert or SourceRead.
	Source string `bson:"source" json:"source"`
	// Instance is the replica whose write stored the sighting.
	Instance string `bson:"instance" json:"instance"`
	// RecordedAt is when that replica wrote it.
	RecordedAt time.Time `bson:"recorded_at" json:"recorded_at"`
	// DeletedAt is when the job's document was deleted; zero while it
	// exists.
	DeletedAt time.Time `bson:"deleted_at,omitempty" json:"deleted_at,omitzero"`
}

// ReadFirstSeen returns job jobID's first sighting from coll; ok is false
// when there is none (a job no replica has seen since the sightings were
// introduced, or deleted longer than the retention ago).
func ReadFirstSeen(ctx context.Context, coll *mongo.Collection, jobID string) (s Sighting, ok bool, err error) {
	err = coll.FindOne(ctx, bson.D{{Key: "_id", Value: FirstSeenID(jobID)}}).Decode(&s)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return Sighting{}, false, nil
	}
	if err != nil {
		return Sighting{}, false, fmt.Errorf("read the first sighting of job %q from %s: %w", jobID, coll.Name(), err)
	}
	s.At, s.RecordedAt = s.At.UTC(), s.RecordedAt.UTC()
	if !s.DeletedAt.IsZero() {
		s.DeletedAt = s.DeletedAt.UTC()
	}
	return s, true, nil
}

// FirstSeenLookup returns ReadFirstSeen over coll as a function, for
// callers that take the lookup as an option (the triggers sink).
func FirstSeenLookup(coll *mongo.Collection) func(ctx context.Context, jobID string) (Sighting, bool, error) {
	return func(ctx context.Context, jobID string) (Sighting, bool, error) {
		return ReadFirstSeen(ctx, coll, jobID)
	}
}

// The writes of a sighting. Each is conditional, so that replicas writing
// the same sighting, a replica that lags behind, and events replayed after
// a restart never move a sighting back to an earlier life of the job:
//
//   - seen (an insert event at t, or a full read at t that contains the
//     job): upsert of the entry unless it exists and was not deleted
//     before t. An existing live entry makes the upsert a duplicate key,
//     which counts as done: the first sighting stays.
//   - gone (a delete event at t, or a full read at t without the job):
//     sets deleted_at and expire_at on the live entry if it was seen at or
//     before t; a stale delete of an earlier life of the job matches
//     nothing.

// seenModel is the upsert of job's sighting at t from source.
func seenModel(job string, at time.Time, source, instance string, now time.Time) *mongo.UpdateOneModel {
	return mongo.NewUpdateOneModel().
		SetFilter(bson.D{{Key: "_id", Value: FirstSeenID(job)}, {Key: FieldDeletedAt, Value: bson.D{{Key: "$lt", Value: at}}}}).
		SetUpdate(bson.D{
			{Key: "$set", Value: bson.D{
				{Key: "job_id", Value: job}, {Key: "op", Value: OpFirstSeen}, {Key: "at", Value: at.UTC()},
				{Key: FieldSource, Value: source}, {Key: "instance", Value: instance}, {Key: "recorded_at", Value: now.UTC()},
			}},
			{Key: "$unset", Value: bson.D{{Key: FieldDeletedAt, Value: ""}, {Key: "expire_at", Value: ""}}},
		}).
		SetUpsert(true)
}

// goneModel marks job's live sighting deleted at t; it expires retention
// later.
func goneModel(job string, at time.Time, retention time.Duration) *mongo.UpdateOneModel {
	return mongo.NewUpdateOneModel().
		SetFilter(bson.D{{Key: "_id", Value: FirstSeenID(job)}, {Key: FieldDeletedAt, Value: bson.D{{Key: "$exists", Value: false}}},
			{Key: "at", Value: bson.D{{Key: "$lte", Value: at}}}}).
		SetUpdate(bson.D{{Key: "$set", Value: bson.D{{Key: FieldDeletedAt, Value: at.UTC()}, {Key: "expire_at", Value: at.Add(retention).UTC()}}}})
}

// readLive returns the jobs whose sighting in coll is live (not deleted),
// each with pass 0 (see Sightings.live). It reads batch sightings a reply
// and, after each reply past the first, calls rest with how long the
// reply took: at a replica's first full read there is one sighting per
// job, and the read must not take the server from the claims of the
// replicas that fire meanwhile.
func readLive(ctx context.Context, coll *mongo.Collection, batch int, rest func(context.Context, time.Duration) error) (liveSet, error) {
	cur, err := coll.Find(ctx, bson.D{{Key: "_id", Value: firstSeenRange()}, {Key: FieldDeletedAt, Value: bson.D{{Key: "$exists", Value: false}}}},
		options.Find().SetProjection(bson.D{{Key: "job_id", Value: 1}}).SetBatchSize(int32(batch)))
	if err != nil {
		return liveSet{}, fmt.Errorf("read the first sightings in %s: %w", coll.Name(), err)
	}
	defer cur.Close(ctx)
	live := newLiveSet()
	for read := 0; ; read++ {
		fetches := cur.RemainingBatchLength() == 0 && read > 0 // the reply after the find's
		began := time.Now()
		if !cur.Next(ctx) {
			break
		}
		if fetches {
			if err := rest(ctx, time.Since(began)); err != nil {
				return liveSet{}, fmt.Errorf("read the first sightings in %s: %w", coll.Name(), err)
			}
		}
		if id, ok := cur.Current.Lookup("job_id").StringValueOK(); ok {
			live.set(id, 0)
		}
	}
	if err := cur.Err(); err != nil {
		return liveSet{}, fmt.Errorf("read the first sightings in %s: %w", coll.Name(), err)
	}
	return live, nil
}
