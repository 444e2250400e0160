package admin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/jobhistory"
	"github.com/cronswap/cronswap/internal/members"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/internal/runstore"
	"github.com/cronswap/cronswap/resumetoken"
	"github.com/cronswap/cronswap/schedule"
	"github.com/cronswap/cronswap/scheduler"
)

// ErrNotFound is wrapped when the named schedule, lock, run or token does not exist.
var ErrNotFound = errors.New("not found")

// Store runs the command line's reads and edits on one database.
type Store struct {
	db    *mongo.Database
	now   func() time.Time
	rules Rules
}

// NewStore returns a store over db that checks schedules with the zero
// Rules (UTC, actions not checked).
func NewStore(db *mongo.Database) *Store {
	return &Store{db: db, now: time.Now}
}

// WithRules returns a copy of the store that checks the schedules it reads
// and writes with r.
func (s *Store) WithRules(r Rules) *Store {
	c := *s
	c.rules = r
	return &c
}

// records is the run-record store on s's database, the only writer of
// job_locks, job_runs and job_pauses: the CLI's and the status page's
// overrides of those go through it (their reads stay here).
func (s *Store) records() *runstore.Store {
	locks, runs := record.Collections(s.db)
	return runstore.New(locks, runs, runstore.Options{})
}

// Rules are the daemons' rules for a schedules document, as a command
// applies them away from the daemons: the same decoding and the same check
// (Check), given what the command knows of the configuration.
type Rules struct {
	// Location is the zone of the schedules that name none: the config's
	// timezone (nil: UTC).
	Location *time.Location
	// Actions, when set, is the configuration's action registry (the
	// daemons' policy): a schedule naming an action it lacks is refused
	// with a *scheduler.PolicyError. Nil when the command was given no
	// configuration: then actions are not checked.
	Actions scheduler.Policy
}

// Check decodes raw and checks it as a daemon does before arming it:
// schedule.DecodeFields, then scheduler.Check in r's zone with r's
// actions. A refusal of the document's own fields wraps
// schedule.ErrInvalid; an action r.Actions lacks is a
// *scheduler.PolicyError. The returned schedule holds the fields read
// before an error.
func (r Rules) Check(raw bson.Raw) (schedule.Schedule, error) {
	s, err := schedule.DecodeFields(raw)
	if err != nil {
		return s, err
	}
	_, err = scheduler.Check(s, r.Location, r.Actions)
	return s, err
}

// ActionsChecked reports whether r checks a schedule's action.
func (r Rules) ActionsChecked() bool { return r.Actions != nil }

// ScheduleDoc is one raw document of schedules with what the store's
// Rules made of it.
type ScheduleDoc struct {
	// ID is the job id (a rendering of the _id when it is not a valid id).
	ID string
	// Raw is the document as stored.
	Raw bson.Raw
	// Schedule is the decoded schedule; valid only when Err is nil, though
	// the fields read before the error are filled in.
	Schedule schedule.Schedule
	// Err is the document's validation error under the store's Rules, nil
	// when valid; a *scheduler.PolicyError when only its action is unknown
	// (then Schedule is complete).
	Err error
}

// Field returns a top-level string field of the raw document ("" if absent
// or not a string), to show what an invalid document holds.
func (d ScheduleDoc) Field(name string) string {
	v, err := d.Raw.LookupErr(name)
	if err != nil {
		return ""
	}
	if s, ok := v.StringValueOK(); ok {
		return s
	}
	// Other types as relaxed extended JSON: 800, not {"$numberInt":"800"}.
	js, err := bson.MarshalExtJSON(bson.D{{Key: "v", Value: v}}, false, false)
	if err != nil {
		return v.String()
	}
	return strings.TrimSuffix(strings.TrimPrefix(string(js), `{"v":`), "}")
}

func (s *Store) decodeDoc(raw bson.Raw) ScheduleDoc {
	sc, err := s.rules.Check(raw)
	return ScheduleDoc{ID: sc.ID, Raw: raw, Schedule: sc, Err: err}
}

// Schedules returns every document of schedules, sorted by _id.
func (s *Store) Schedules(ctx context.Context) ([]ScheduleDoc, error) {
	cur, err := s.db.Collection(schedule.CollectionName).Find(ctx, bson.D{}, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", schedule.CollectionName, err)
	}
	defer cur.Close(ctx)
	out := []ScheduleDoc{}
	for cur.Next(ctx) {
		out = append(out, s.decodeDoc(append(bson.Raw(nil), cur.Current...)))
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", schedule.CollectionName, err)
	}
	return out, nil
}

// Schedule returns the document of job id.
func (s *Store) Schedule(ctx context.Context, id string) (ScheduleDoc, error) {
	raw, err := s.db.Collection(schedule.CollectionName).FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return ScheduleDoc{}, fmt.Errorf("schedule %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return ScheduleDoc{}, fmt.Errorf("read schedule %q: %w", id, err)
	}
	return s.decodeDoc(raw), nil
}

// ScheduleEdit is what `schedules set` changes. Nil fields are left as
// they are; a pointer to "" removes the field.
type ScheduleEdit struct {
	// CronExpr is the new expression, trimmed; required to create a
	// schedule.
	CronExpr *string
	Timezone *string
	Job      *string
	Category *string
	// DST is the daylight-saving mode, "shift" or "plain" (see
	// schedule.DSTMode).
	DST *string
	// Args is the new args object; nil leaves it.
	Args bson.Raw
	// By, when not empty, names who edits: written as updated_by, so the
	// edit history names them (Author.By). Empty leaves updated_by as it
	// is.
	By string
	// MustExist refuses to create the schedule: an edit of a job with no
	// document is an error wrapping ErrNotFound, even with an expression.
	MustExist bool
}

// SetResult is what SetSchedule did.
type SetResult struct {
	// Created is true when the document did not exist.
	Created bool
	// Schedule is the document as written, decoded.
	Schedule schedule.Schedule
	// Warning is the store's Rules' refusal of the schedule's action (a
	// *scheduler.PolicyError), written anyway: a Go program embedding
	// cronswap may register an action the configuration lacks. Nil when
	// the action is known or actions are not checked.
	Warning error
}

// ErrNeedsExpression is wrapped by SetSchedule when the schedule does not
// exist and the edit has no expression to create it with.
var ErrNeedsExpression = errors.New("a new schedule needs a cron expression")

// CheckedEdit is what the document of a schedule becomes under an edit,
// as CheckEdit found it.
type CheckedEdit struct {
	// Schedule is the document after the edit, decoded.
	Schedule schedule.Schedule
	// Created is true when there is no document yet: the edit creates it.
	Created bool
	// Warning is the Rules' refusal of the schedule's action (a
	// *scheduler.PolicyError): the edit may be written all the same (see
	// SetResult.Warning).
	Warning error

	set, unset bson.D
}

// CheckEdit checks the document the edit makes of the stored one (or of
// none) with the store's Rules, the daemons' own, without writing: an
// invalid result is an error wrapping schedule.ErrInvalid; a missing
// schedule and an edit without an expression is an error wrapping
// ErrNeedsExpression and ErrNotFound. SetSchedule writes what it checks.
func (s *Store) CheckEdit(ctx context.Context, id string, e ScheduleEdit) (CheckedEdit, error) {
	set := bson.D{}
	unset := bson.D{}
	if e.CronExpr != nil {
		set = append(set, bson.E{Key: schedule.FieldCronExpr, Value: *e.CronExpr})
	}
	for _, f := range []struct {
		name string
		v    *string
	}{{schedule.FieldTimezone, e.Timezone}, {schedule.FieldJob, e.Job}, {schedule.FieldCategory, e.Category}, {schedule.FieldDST, e.DST}} {
		switch {
		case f.v == nil:
		case *f.v == "":
			unset = append(unset, bson.E{Key: f.name, Value: ""})
		default:
			set = append(set, bson.E{Key: f.name, Value: *f.v})
		}
	}
	if e.Args != nil {
		set = append(set, bson.E{Key: schedule.FieldArgs, Value: e.Args})
	}

	// Check what the document will be, not only the edit: a stored time
	// zone or job applies to the new expression too.
	var old bson.Raw
	if d, err := s.Schedule(ctx, id); err == nil {
		old = d.Raw
	} else if !errors.Is(err, ErrNotFound) {
		return CheckedEdit{}, err
	}
	if old == nil && e.MustExist {
		return CheckedEdit{}, fmt.Errorf("schedule %q: %w", id, ErrNotFound)
	}
	if old == nil && e.CronExpr == nil {
		return CheckedEdit{}, fmt.Errorf("schedule %q: %w (%w)", id, ErrNeedsExpression, ErrNotFound)
	}
	merged, err := mergeDoc(id, old, set, unset)
	if err != nil {
		return CheckedEdit{}, err
	}
	c := CheckedEdit{Created: old == nil, set: set, unset: unset}
	if c.Schedule, err = s.rules.Check(merged); err != nil {
		var pe *scheduler.PolicyError
		if !errors.As(err, &pe) {
			return CheckedEdit{}, err
		}
		c.Warning = err
	}
	return c, nil
}

// SetSchedule checks the edit as CheckEdit does and then writes only the
// fields the edit sets or removes, with the stamp of Author{By: e.By}
// (updated_at; updated_by when the edit names who; no update_message).
// An invalid result is refused with an error
// wrapping schedule.ErrInvalid and nothing is written; an action the
// Rules do not know is written, with the refusal as SetResult.Warning. A
// missing schedule is created only by an edit with an expression (else an
// error wrapping ErrNeedsExpression and ErrNotFound).
func (s *Store) SetSchedule(ctx context.Context, id string, e ScheduleEdit) (SetResult, error) {
	c, err := s.CheckEdit(ctx, id, e)
	if err != nil {
		return SetResult{}, err
	}
	set, unset := Author{By: e.By}.stamp(s.now().UTC())
	set = append(append(bson.D{}, c.set...), set...)
	unset = append(append(bson.D{}, c.unset...), unset...)
	// Only an edit that can create the document upserts: one without an
	// expression must not create a schedule without one.
	ur, err := s.db.Collection(schedule.CollectionName).UpdateOne(ctx, bson.D{{Key: "_id", Value: id}}, setUnset(set, unset),
		options.UpdateOne().SetUpsert(e.CronExpr != nil && !e.MustExist))
	if err != nil {
		return SetResult{}, fmt.Errorf("write schedule %q: %w", id, err)
	}
	if ur.MatchedCount == 0 && ur.UpsertedCount == 0 {
		if e.MustExist {
			return SetResult{}, fmt.Errorf("schedule %q (deleted meanwhile): %w", id, ErrNotFound)
		}
		return SetResult{}, fmt.Errorf("schedule %q (deleted meanwhile): %w (%w)", id, ErrNeedsExpression, ErrNotFound)
	}
	return SetResult{Created: ur.UpsertedCount > 0, Schedule: c.Schedule, Warning: c.Warning}, nil
}

// mergeDoc applies $set/$unset of top-level fields to old (nil: a new
// document with _id id).
func mergeDoc(id string, old bson.Raw, set, unset bson.D) (bson.Raw, error) {
	doc := bson.D{}
	if old != nil {
		if err := bson.Unmarshal(old, &doc); err != nil {
			return nil, fmt.Errorf("schedule %q: read stored document: %w", id, err)
		}
	} else {
		doc = append(doc, bson.E{Key: "_id", Value: id})
	}
	drop := map[string]bool{}
	for _, e := range unset {
		drop[e.Key] = true
	}
	next := bson.D{}
	for _, e := range doc {
		if !drop[e.Key] {
			next = append(next, e)
		}
	}
	for _, e := range set {
		replaced := false
		for i := range next {
			if next[i].Key == e.Key {
				next[i].Value, replaced = e.Value, true
			}
		}
		if !replaced {
			next = append(next, e)
		}
	}
	raw, err := bson.Marshal(next)
	if err != nil {
		return nil, fmt.Errorf("schedule %q: %w", id, err)
	}
	return raw, nil
}

// DeleteSchedule deletes the document of job id.
func (s *Store) DeleteSchedule(ctx context.Context, id string) error {
	res, err := s.db.Collection(schedule.CollectionName).DeleteOne(ctx, bson.D{{Key: "_id", Value: id}})
	if err != nil {
		return fmt.Errorf("delete schedule %q: %w", id, err)
	}
	if res.DeletedCount == 0 {
		return fmt.Errorf("schedule %q: %w", id, ErrNotFound)
	}
	return nil
}

// SetEnabled pauses (false) or resumes (true) job id, with the stamp of
// Author{By: by} (updated_at; updated_by when by is not empty; no
// update_message). It reports whether the document changed (false: it
// already was so).
func (s *Store) SetEnabled(ctx context.Context, id string, enabled bool, by string) (changed bool, err error) {
	coll := s.db.Collection(schedule.CollectionName)
	// Leave an already paused/resumed document (and its updated_at) alone,
	// so the daemon sees no event for a no-op.
	filter := bson.D{{Key: "_id", Value: id}}
	if enabled {
		// Anything present but true: false, and values the daemon refuses
		// (null, "yes"), which resume replaces with true.
		filter = append(filter, bson.E{Key: schedule.FieldEnabled, Value: bson.D{{Key: "$exists", Value: true}, {Key: "$ne", Value: true}}})
	} else {
		filter = append(filter, bson.E{Key: schedule.FieldEnabled, Value: bson.D{{Key: "$ne", Value: false}}})
	}
	set, unset := Author{By: by}.stamp(s.now().UTC())
	set = append(bson.D{{Key: schedule.FieldEnabled, Value: enabled}}, set...)
	res, err := coll.UpdateOne(ctx, filter, setUnset(set, unset))
	if err != nil {
		return false, fmt.Errorf("set enabled=%t on schedule %q: %w", enabled, id, err)
	}
	if res.MatchedCount > 0 {
		return true, nil
	}
	n, err := coll.CountDocuments(ctx, bson.D{{Key: "_id", Value: id}})
	if err != nil {
		return false, fmt.Errorf("read schedule %q: %w", id, err)
	}
	if n == 0 {
		return false, fmt.Errorf("schedule %q: %w", id, ErrNotFound)
	}
	return false, nil
}

// Locks returns every document of job_locks, sorted by job id.
func (s *Store) Locks(ctx context.Context) ([]record.LockDoc, error) {
	cur, err := s.db.Collection(record.LocksCollection).Find(ctx, bson.D{}, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", record.LocksCollection, err)
	}
	out := []record.LockDoc{}
	if err := cur.All(ctx, &out); err != nil {
		return nil, fmt.Errorf("read %s: %w", record.LocksCollection, err)
	}
	return out, nil
}

// Lock returns the lock of job id.
func (s *Store) Lock(ctx context.Context, id string) (record.LockDoc, error) {
	var l record.LockDoc
	err := s.db.Collection(record.LocksCollection).FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&l)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return l, fmt.Errorf("lock %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return l, fmt.Errorf("read lock %q: %w", id, err)
	}
	return l, nil
}

// ReleaseLock forces the lock of job id free, an operator's override: the
// holder notices on its next renewal and stops. It frees the lock only while
// it is still held with fence (the acquisition the operator confirmed),
// else record.ErrLockChanged.
func (s *Store) ReleaseLock(ctx context.Context, id string, fence int64) error {
	return s.records().ReleaseLock(ctx, id, fence, s.now().UTC())
}

// Runs returns the newest run records (of job id, or all when id is
// empty), newest scheduled time first, at most limit.
func (s *Store) Runs(ctx context.Context, id string, limit int64) ([]record.RunDoc, error) {
	filter := bson.D{}
	if id != "" {
		filter = bson.D{{Key: "job_id", Value: id}}
	}
	cur, err := s.db.Collection(record.RunsCollection).Find(ctx, filter, options.Find().
		SetSort(bson.D{{Key: "scheduled_at", Value: -1}, {Key: "started_at", Value: -1}}).
		SetLimit(limit))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", record.RunsCollection, err)
	}
	out := []record.RunDoc{}
	if err := cur.All(ctx, &out); err != nil {
		return nil, fmt.Errorf("read %s: %w", record.RunsCollection, err)
	}
	return out, nil
}

// Run returns the run record with id runID (the run_id of `runs list`).
func (s *Store) Run(ctx context.Context, runID string) (record.RunDoc, error) {
	var r record.RunDoc
	err := s.db.Collection(record.RunsCollection).FindOne(ctx, bson.D{{Key: "_id", Value: runID}}).Decode(&r)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return r, fmt.Errorf("run %q: %w", runID, ErrNotFound)
	}
	if err != nil {
		return r, fmt.Errorf("read run %q from %s: %w", runID, record.RunsCollection, err)
	}
	return r, nil
}

// LastRun returns the last run of job id (record.LastRun, as the daemon's
// status page shows it); ok is false when there is none.
func (s *Store) LastRun(ctx context.Context, id string) (r record.RunDoc, ok bool, err error) {
	return record.LastRun(ctx, s.db.Collection(record.RunsCollection), id)
}

// Token is one stored resume token.
type Token struct {
	ID        string
	Token     bson.Raw
	UpdatedAt time.Time
}

// Tokens returns the stored resume tokens (only watcher id's when id is
// not empty), sorted by id.
func (s *Store) Tokens(ctx context.Context, id string) ([]Token, error) {
	filter := bson.D{}
	if id != "" {
		filter = bson.D{{Key: "_id", Value: id}}
	}
	cur, err := s.db.Collection(resumetoken.CollectionName).Find(ctx, filter, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", resumetoken.CollectionName, err)
	}
	defer cur.Close(ctx)
	out := []Token{}
	for cur.Next(ctx) {
		t := Token{}
		if v, err := cur.Current.LookupErr("_id"); err == nil {
			if str, ok := v.StringValueOK(); ok {
				t.ID = str
			} else {
				t.ID = v.String()
			}
		}
		if v, err := cur.Current.LookupErr("token"); err == nil {
			if doc, ok := v.DocumentOK(); ok {
				t.Token = append(bson.Raw(nil), doc...)
			}
		}
		if v, err := cur.Current.LookupErr("updated_at"); err == nil && v.Type == bson.TypeDateTime {
			t.UpdatedAt = v.Time().UTC()
		}
		out = append(out, t)
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", resumetoken.CollectionName, err)
	}
	return out, nil
}

// ResetTokens deletes the resume token of watcher id, or all of them when
// id is empty, and returns how many it deleted. A daemon whose token is gone
// does a full reload on its next start.
func (s *Store) ResetTokens(ctx context.Context, id string) (int64, error) {
	filter := bson.D{}
	if id != "" {
		filter = bson.D{{Key: "_id", Value: id}}
	}
	res, err := s.db.Collection(resumetoken.CollectionName).DeleteMany(ctx, filter)
	if err != nil {
		return 0, fmt.Errorf("delete from %s: %w", resumetoken.CollectionName, err)
	}
	return res.DeletedCount, nil
}

// History returns the newest items of job id's history, newest first, at
// most limit: the edits of its schedule and the operations recorded
// elsewhere (see jobhistory.List).
func (s *Store) History(ctx context.Context, id string, limit int) ([]jobhistory.Item, error) {
	return jobhistory.List(ctx, s.db, id, limit)
}

// JobIDs returns the id of every job: the _id of every schedules
// document that is a job id (schedule.DecodeID), enabled or not, valid or
// not — the jobs whose owners members.OwnedCounts counts, as the daemon's
// overview does over its engine. It reads only the ids: about 30 bytes a
// schedule on the wire, 3 MB for 100,000.
func (s *Store) JobIDs(ctx context.Context) ([]string, error) {
	cur, err := s.db.Collection(schedule.CollectionName).Find(ctx, bson.D{},
		options.Find().SetProjection(bson.D{{Key: schedule.FieldID, Value: 1}}).SetBatchSize(10000))
	if err != nil {
		return nil, fmt.Errorf("read the ids of %s: %w", schedule.CollectionName, err)
	}
	defer cur.Close(context.WithoutCancel(ctx))
	var ids []string
	for cur.Next(ctx) {
		if id, err := schedule.DecodeID(cur.Current.Lookup(schedule.FieldID)); err == nil {
			ids = append(ids, id)
		}
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("read the ids of %s: %w", schedule.CollectionName, err)
	}
	return ids, nil
}

// Members returns every document of members (live or not), sorted by
// instance id, and when they were read.
func (s *Store) Members(ctx context.Context) ([]members.Member, time.Time, error) {
	ms, err := members.List(ctx, s.db)
	return ms, s.now(), err
}
