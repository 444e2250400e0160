// Package triggers is the triggers collection: operators' requests to run
// a job now (`db.triggers.insertOne({job_id: "daily_report"})`, `cronswap
// run-now`) or to run again the cron slots of a range that did not run
// (`cronswap backfill`). The daemons see each request through a change
// stream (Sink), run it through the fire path (firepath.Runner.RunOffSchedule)
// exactly once across replicas, and write the outcome back on the request.
// Requests are data, never code: a request names a job whose action is
// defined in the config, and hands it args as JSON.
package triggers

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"time"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/schedule"
)

// CollectionName is the collection of requests.
const CollectionName = "triggers"

// Fields of a request, written by operators.
const (
	FieldID = "_id"
	// FieldJobID names the job (a schedules _id); required.
	FieldJobID = "job_id"
	// FieldArgs, an object, replaces the schedule's args for this run.
	FieldArgs = "args"
	// FieldRequestedAt is when the run was asked for (the CLI sets it);
	// default the _id's time when it is an ObjectId, else when a daemon
	// first saw the request.
	FieldRequestedAt = "requested_at"
	// FieldRequestedBy optionally names who asked.
	FieldRequestedBy = "requested_by"
	// FieldSlot makes the request a backfill of that cron slot of the job:
	// it runs under the slot's own identity (jobs.RunID), so a slot that
	// already ran never runs again.
	FieldSlot = "slot"
)

// Fields of the outcome, written by the daemons.
const (
	FieldStatus    = "status"
	FieldRunID     = "run_id"
	FieldInstance  = "instance"
	FieldFence     = "fence"
	FieldStartedAt = "started_at"
	FieldEndedAt   = "ended_at"
	FieldError     = "error"
	// FieldReason says, with StatusBuffered, what the run waits for.
	FieldReason    = "reason"
	FieldUpdatedAt = "updated_at"
	// FieldExpireAt is set with a final status: the ended request goes
	// the runs' retention later (TTL index TTLIndex).
	FieldExpireAt = "expire_at"
)

// Statuses of a request. A request without a status is pending.
const (
	// StatusPending is how readers show a request without a status (no
	// replica has taken it yet); it is never stored.
	StatusPending = "pending"
	// StatusRunning: a replica claimed the run and started it.
	StatusRunning = "running"
	// StatusBuffered: the run waits on the job's lock (overlap buffer_one,
	// buffer_all, cancel_other: another run holds it), its record too;
	// whichever replica takes it from the lock's buffer runs it and writes
	// running, then the outcome (FieldReason says what it waits for).
	StatusBuffered = record.StatusBuffered
	// StatusRejected: the request is bad (its error says why); nothing ran.
	StatusRejected = "rejected"
	// StatusNotRun: the run could not be started (its error says why:
	// the starting deadline passed, the claim was refused).
	StatusNotRun = "not_run"
	// The run's own final statuses are copied from its record:
	// succeeded, failed, abandoned, skipped (the job's overlap policy),
	// missed (claimed too late to start).
)

// Index names; `cronswap init` and the daemon create the same indexes.
const (
	// TTLIndex is the name of the TTL index on expire_at.
	TTLIndex = "triggers_expire_at"
	// JobIndex serves the requests of one job by time (job_id,
	// requested_at descending): the run-now and backfill requests a job's
	// history lists.
	JobIndex = "triggers_job_requested_at"
)

// Limits of a request.
const (
	// MaxIDBytes bounds a string _id.
	MaxIDBytes = 200
	// RunIDPrefix starts the run id of a run-now request: RunIDPrefix and
	// the request's id. Every cron run id (jobs.RunID) ends in "@" and a
	// time, and a run-now request's id may not contain "@", so the two
	// never meet.
	RunIDPrefix = "trigger/"
	// BackfillIDPrefix starts the _id the CLI gives a backfill request:
	// BackfillIDPrefix and the slot's run id, so backfilling a range twice
	// asks for each slot once.
	BackfillIDPrefix = "backfill/"
)

// ErrInvalid is wrapped by every error about a bad request.
var ErrInvalid = errors.New("invalid trigger")

// Request is one decoded, validated request.
type Request struct {
	// ID is the _id as stored; Key is its rendering (a string _id as is,
	// an ObjectId in hex).
	ID  bson.RawValue
	Key string
	// JobID names the job.
	JobID string
	// Args is the JSON (relaxed extended JSON) of the args object; empty
	// when absent (the schedule's args apply).
	Args    string
	HasArgs bool
	// RequestedAt is when the run was asked for; zero when the request
	// does not say (nor its _id).
	RequestedAt time.Time
	RequestedBy string
	// Slot is the backfilled slot; zero for a run-now request.
	Slot time.Time
	// BeforeFirstSeen: the backfill may run a slot from before the job's
	// first sighting (FieldBeforeFirstSeen, CheckFirstSeen).
	BeforeFirstSeen bool
	// Status is the outcome so far ("" pending).
	Status string
	// RunID is the run id written by the daemon that runs it.
	RunID string
}

// Backfill reports whether r asks for a cron slot of the job.
func (r Request) Backfill() bool { return !r.Slot.IsZero() }

// Final reports whether a request's status is an outcome: nothing more
// happens to it.
func Final(status string) bool {
	return status != "" && status != StatusRunning && status != StatusBuffered
}

func invalid(key, field, format string, a ...any) error {
	msg := fmt.Sprintf(format, a...)
	if field != "" {
		msg = "field " + field + ": " + msg
	}
	if key != "" {
		return fmt.Errorf("%w %s: %s", ErrInvalid, key, msg)
	}
	return fmt.Errorf("%w: %s", ErrInvalid, msg)
}

// KeyOf renders a request's _id: a string as is, an ObjectId in hex; ok is
// false for any other type.
func KeyOf(id bson.RawValue) (string, bool) {
	if s, ok := id.StringValueOK(); ok {
		return s, true
	}
	if oid, ok := id.ObjectIDOK(); ok {
		return oid.Hex(), true
	}
	return "", false
}

// Decode reads and validates a request document. The returned Request has
// ID and Key filled in whenever they could be read, also on error, so the
// error can be written back on the document.
func Decode(raw bson.Raw) (r Request, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = invalid(r.Key, "", "malformed document: %v", p)
		}
	}()
	if err := raw.Validate(); err != nil {
		return r, invalid("", "", "malformed BSON: %v", err)
	}
	id, lerr := raw.LookupErr(FieldID)
	if lerr != nil {
		return r, invalid("", FieldID, "missing")
	}
	r.ID = id
	key, ok := KeyOf(id)
	if !ok {
		return r, invalid(id.String(), FieldID, "must be a string or an ObjectId, not %s", id.Type)
	}
	r.Key = key
	if st, err := raw.LookupErr(FieldStatus); err == nil {
		s, ok := st.StringValueOK()
		if !ok && st.Type != bson.TypeNull {
			return r, invalid(key, FieldStatus, "must be a string (written by the daemon), not %s", st.Type)
		}
		r.Status = s
	}
	if v, err := raw.LookupErr(FieldRunID); err == nil {
		r.RunID, _ = v.StringValueOK()
	}
	if len(key) > MaxIDBytes || !utf8.ValidString(key) || key == "" {
		return r, invalid(key, FieldID, "must be a non-empty UTF-8 string of at most %d bytes", MaxIDBytes)
	}
	v, lerr := raw.LookupErr(FieldJobID)
	if lerr != nil {
		return r, invalid(key, FieldJobID, "missing: name the job to run, e.g. {job_id: \"daily_report\"}")
	}
	job, ok := v.StringValueOK()
	if !ok {
		return r, invalid(key, FieldJobID, "must be a string (a schedules _id), not %s", v.Type)
	}
	if _, err := schedule.DecodeID(v); err != nil {
		return r, invalid(key, FieldJobID, "%v", err)
	}
	r.JobID = job
	if v, err := raw.LookupErr(FieldArgs); err == nil {
		switch v.Type {
		case bson.TypeEmbeddedDocument:
			doc, _ := v.DocumentOK()
			js, err := bson.MarshalExtJSON(doc, false, false)
			if err != nil {
				return r, invalid(key, FieldArgs, "cannot be turned into JSON: %v", err)
			}
			if len(js) > schedule.MaxArgsJSONBytes {
				return r, invalid(key, FieldArgs, "is %d bytes as JSON, more than the %d an action can be handed", len(js), schedule.MaxArgsJSONBytes)
			}
			r.Args, r.HasArgs = string(js), true
		case bson.TypeNull:
		default:
			return r, invalid(key, FieldArgs, "must be an object, not %s", v.Type)
		}
	}
	if v, err := raw.LookupErr(FieldRequestedAt); err == nil && v.Type != bson.TypeNull {
		t, ok := v.TimeOK()
		if !ok {
			return r, invalid(key, FieldRequestedAt, "must be a date, not %s", v.Type)
		}
		r.RequestedAt = t.UTC()
	} else if oid, ok := id.ObjectIDOK(); ok {
		r.RequestedAt = oid.Timestamp().UTC()
	}
	if v, err := raw.LookupErr(FieldRequestedBy); err == nil && v.Type != bson.TypeNull {
		s, ok := v.StringValueOK()
		if !ok {
			return r, invalid(key, FieldRequestedBy, "must be a string, not %s", v.Type)
		}
		r.RequestedBy = s
	}
	if v, err := raw.LookupErr(FieldSlot); err == nil && v.Type != bson.TypeNull {
		t, ok := v.TimeOK()
		if !ok {
			return r, invalid(key, FieldSlot, "must be a date (a cron slot of the job), not %s", v.Type)
		}
		r.Slot = t.UTC()
	}
	if v, err := raw.LookupErr(FieldBeforeFirstSeen); err == nil && v.Type != bson.TypeNull {
		b, ok := v.BooleanOK()
		if !ok {
			return r, invalid(key, FieldBeforeFirstSeen, "must be a boolean, not %s", v.Type)
		}
		r.BeforeFirstSeen = b
	}
	if !r.Backfill() && strings.Contains(key, "@") {
		return r, invalid(key, FieldID, "may not contain \"@\" (cron run ids do)")
	}
	return r, nil
}

// RunIDOf is the run id of run-now request key.
func RunIDOf(key string) string { return RunIDPrefix + key }

// RunSlot is the scheduled_at of the run of a run-now request asked for at
// t (the time the daemon saw it when t is zero): t to the millisecond,
// moved off a whole second (every cron slot is one) by an offset taken from
// the request's key, so that no cron slot's record and few other requests
// of the job share it; bump (0, 1, ...) moves it further, past records
// that had it, by a step of 1 to slotStepMax ms also taken from the key
// (never onto a whole second), so that requests of the job asked for in
// the same millisecond part at their first bump.
func RunSlot(key string, t time.Time, bump int) time.Time {
	t = t.UTC().Truncate(time.Millisecond)
	if t.Nanosecond() == 0 {
		h := fnv.New32a()
		_, _ = h.Write([]byte(key))
		t = t.Add(time.Duration(1+h.Sum32()%999) * time.Millisecond)
	}
	h := fnv.New32()
	_, _ = h.Write([]byte(key))
	step := time.Duration(1+h.Sum32()%slotStepMax) * time.Millisecond
	for range bump {
		t = t.Add(step)
		if t.Nanosecond() == 0 {
			t = t.Add(time.Millisecond)
		}
	}
	return t
}

// slotStepMax is the largest step, in milliseconds, by which RunSlot
// moves a run-now request's scheduled_at past another record.
const slotStepMax = 31

// Indexes returns the indexes of CollectionName beyond _id: a TTL index on
// expire_at, which a request gets with its final status (pending and
// running requests never expire), and JobIndex.
func Indexes() []mongo.IndexModel {
	return []mongo.IndexModel{
		{Keys: bson.D{{Key: FieldExpireAt, Value: 1}}, Options: options.Index().SetExpireAfterSeconds(0).SetName(TTLIndex)},
		{Keys: bson.D{{Key: FieldJobID, Value: 1}, {Key: FieldRequestedAt, Value: -1}}, Options: options.Index().SetName(JobIndex)},
	}
}

// Doc is a request as stored, every field named: what operators write
// (JobID, Args, RequestedAt, RequestedBy, Slot) and what the daemons write
// back (the rest). The sink decodes requests leniently (Decode) so that a
// bad one gets its error written on it; Doc is for readers.
type Doc struct {
	ID          any       `bson:"_id" json:"trigger_id"`
	JobID       string    `bson:"job_id" json:"job_id"`
	Args        bson.M    `bson:"args,omitempty" json:"args,omitempty"`
	RequestedAt time.Time `bson:"requested_at,omitempty" json:"requested_at,omitzero"`
	RequestedBy string    `bson:"requested_by,omitempty" json:"requested_by,omitempty"`
	Slot        time.Time `bson:"slot,omitempty" json:"slot,omitzero"`
	Status      string    `bson:"status,omitempty" json:"status,omitempty"`
	RunID       string    `bson:"run_id,omitempty" json:"run_id,omitempty"`
	Instance    string    `bson:"instance,omitempty" json:"instance,omitempty"`
	Fence       int64     `bson:"fence,omitempty" json:"fence,omitempty"`
	StartedAt   time.Time `bson:"started_at,omitempty" json:"started_at,omitzero"`
	EndedAt     time.Time `bson:"ended_at,omitempty" json:"ended_at,omitzero"`
	Error       string    `bson:"error,omitempty" json:"error,omitempty"`
	Reason      string    `bson:"reason,omitempty" json:"reason,omitempty"`
	UpdatedAt   time.Time `bson:"updated_at,omitempty" json:"updated_at,omitzero"`
	ExpireAt    time.Time `bson:"expire_at,omitempty" json:"-"`
}

// EnsureIndexes creates Indexes on coll; existing ones are left alone.
func EnsureIndexes(ctx context.Context, coll *mongo.Collection) error {
	if _, err := coll.Indexes().CreateMany(ctx, Indexes()); err != nil {
		return fmt.Errorf("create the indexes of %s: %w", coll.Name(), err)
	}
	return nil
}
