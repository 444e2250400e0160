// Package admin holds the database operations of cronswap's command line:
// preparing a database (collections, indexes, the schedules validator) and
// reading or editing schedules, locks, runs and resume tokens. It takes a
// *mongo.Database and never opens a client of its own.
package admin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/blackout"
	"github.com/cronswap/cronswap/internal/calendar"
	"github.com/cronswap/cronswap/internal/history"
	"github.com/cronswap/cronswap/internal/lifetime"
	"github.com/cronswap/cronswap/internal/members"
	"github.com/cronswap/cronswap/internal/notify"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/internal/triggers"
	"github.com/cronswap/cronswap/resumetoken"
	"github.com/cronswap/cronswap/schedule"
)

// Collections lists every collection cronswap uses, in the order Init
// creates them; each name is defined by the package that owns the data.
func Collections() []string {
	return []string{schedule.CollectionName, resumetoken.CollectionName, record.LocksCollection, record.RunsCollection,
		history.CollectionName, members.CollectionName, blackout.CollectionName, notify.CollectionName, triggers.CollectionName,
		record.PausesCollection, calendar.CollectionName}
}

// Index names. The daemon creates the same indexes at start with the same
// keys, options and names, so whichever runs first wins and the other is a
// no-op.
const (
	RunsUniqueIndex = record.RunsUniqueIndex
	RunsTTLIndex    = record.RunsTTLIndex
)

// Index is one index of one collection.
type Index struct {
	Collection string
	Model      mongo.IndexModel
}

// Name returns the index's name.
func (ix Index) Name() string {
	var o options.IndexOptions
	for _, set := range ix.Model.Options.List() {
		_ = set(&o)
	}
	if o.Name == nil {
		return ""
	}
	return *o.Name
}

// Indexes returns the indexes cronswap needs beyond _id: on job_runs, a
// unique (job_id, scheduled_at) so a fire is recorded at most once, and a TTL
// index on expire_at (each run document carries its own expiry: end +
// runs.retention, hence expireAfterSeconds 0); on schedule_history, (job_id,
// at descending) for one job's history and the same kind of TTL index; on
// members, a TTL index on expire_at (a dead member's document goes
// members.DefaultRetention after its lease ended); on triggers, a TTL index
// on expire_at (an ended request goes the runs' retention later).
func Indexes() []Index {
	var out []Index
	for _, m := range record.RunIndexes() {
		out = append(out, Index{Collection: record.RunsCollection, Model: m})
	}
	for _, m := range history.Indexes() {
		out = append(out, Index{Collection: history.CollectionName, Model: m})
	}
	for _, m := range members.Indexes() {
		out = append(out, Index{Collection: members.CollectionName, Model: m})
	}
	// Notifications: the relays' claims, their TTL, listing by job; on
	// job_runs, the outbox's sparse index on the notices.
	for _, m := range notify.Indexes() {
		out = append(out, Index{Collection: notify.CollectionName, Model: m})
	}
	for _, m := range notify.OutboxIndexes() {
		out = append(out, Index{Collection: record.RunsCollection, Model: m})
	}
	for _, m := range triggers.Indexes() {
		out = append(out, Index{Collection: triggers.CollectionName, Model: m})
	}
	// job_pauses is an outbox too (the pause notice).
	for _, m := range notify.OutboxIndexes() {
		out = append(out, Index{Collection: record.PausesCollection, Model: m})
	}
	return out
}

// SchedulesValidator returns the $jsonSchema validator of the schedules
// collection: what a document must look like for the server to accept it.
// It mirrors the types schedule.Decode checks (null counts as absent, as
// there, except for enabled, which must be a boolean when present) and the
// values of dst ("shift" or "plain"), and refuses an "@every" period that
// is not whole seconds or is zero (schedule.EveryExprPattern and
// EveryValidPattern) and a cron_expr of white space only, so a mongosh
// typo like `cron_expr: 0800`, `cron_expr: " "`,
// `@every -5m`, `enabled: null` or `dst: "plian"` is refused at write time;
// so are a lifetime date that is not a date, a max_runs below 1 and an
// exclude that is not an array of names.
// Whether the expression parses is still the daemon's check (last known good).
func SchedulesValidator() bson.D {
	str := func(maxLen int) bson.D {
		return bson.D{{Key: "bsonType", Value: "string"}, {Key: "minLength", Value: int32(1)}, {Key: "maxLength", Value: int32(maxLen)}}
	}
	optional := func(types ...string) bson.D {
		a := bson.A{}
		for _, t := range append(types, "null") {
			a = append(a, t)
		}
		return bson.D{{Key: "bsonType", Value: a}}
	}
	return bson.D{{Key: "$jsonSchema", Value: bson.D{
		{Key: "bsonType", Value: "object"},
		{Key: "required", Value: bson.A{schedule.FieldID, schedule.FieldCronExpr}},
		{Key: "properties", Value: bson.D{
			{Key: schedule.FieldID, Value: str(schedule.MaxIDBytes)},
			// At most MaxExprBytes as written (white space included, as the
			// decoder counts), not white space only.
			{Key: schedule.FieldCronExpr, Value: append(str(schedule.MaxExprBytes), bson.E{Key: "pattern", Value: `\S`},
				bson.E{Key: "anyOf", Value: bson.A{
					bson.D{{Key: "not", Value: bson.D{{Key: "pattern", Value: schedule.EveryExprPattern}}}},
					bson.D{{Key: "pattern", Value: schedule.EveryValidPattern}},
				}})},
			{Key: schedule.FieldEnabled, Value: bson.D{{Key: "bsonType", Value: "bool"}}},
			{Key: schedule.FieldTimezone, Value: optional("string")},
			{Key: schedule.FieldJob, Value: optional("string")},
			{Key: schedule.FieldCategory, Value: optional("string")},
			{Key: schedule.FieldArgs, Value: optional("object")},
			{Key: schedule.FieldUpdatedBy, Value: optional("string")},
			{Key: schedule.FieldUpdateMessage, Value: optional("string")},
			{Key: schedule.FieldDST, Value: bson.D{{Key: "enum", Value: bson.A{string(schedule.DSTShift), string(schedule.DSTPlain), nil}}}},
			// The lifetime (package lifetime): dates, and a count of at
			// least 1 (whether it is whole is the decoder's check).
			{Key: lifetime.FieldStartAt, Value: optional("date")},
			{Key: lifetime.FieldEndAt, Value: optional("date")},
			{Key: lifetime.FieldPausedUntil, Value: optional("date")},
			{Key: lifetime.FieldMaxRuns, Value: append(optional("int", "long", "double"), bson.E{Key: "minimum", Value: int32(1)})},
			// Calendar names (whether each exists is the daemon's check).
			{Key: schedule.FieldExclude, Value: append(optional("array"),
				bson.E{Key: "items", Value: bson.D{{Key: "bsonType", Value: "string"}, {Key: "minLength", Value: int32(1)}}})},
		}},
	}}}
}

// Validator outcomes reported by Init.
const (
	ValidatorCreated     = "created"     // schedules was created with the validator
	ValidatorUpdated     = "updated"     // collMod installed or replaced it
	ValidatorUnchanged   = "unchanged"   // already in place
	ValidatorUnsupported = "unsupported" // the server has no validators (or no collMod)
)

// InitReport says what Init did. A second Init on the same database reports
// nothing created and the validator unchanged (or unsupported).
type InitReport struct {
	Database string `json:"database"`
	// CreatedCollections are the collections Init created; the others existed.
	CreatedCollections []string `json:"created_collections"`
	// CreatedIndexes are "collection.name" of the indexes Init created.
	CreatedIndexes []string `json:"created_indexes"`
	// Validator is one of the Validator* outcomes.
	Validator string `json:"validator"`
	// Notice explains an unsupported validator; empty otherwise.
	Notice string `json:"notice,omitempty"`
}

// Changed reports whether Init changed anything.
func (r InitReport) Changed() bool {
	return len(r.CreatedCollections) > 0 || len(r.CreatedIndexes) > 0 ||
		r.Validator == ValidatorCreated || r.Validator == ValidatorUpdated
}

// Server error codes Init handles.
const (
	codeNamespaceExists = 48
	codeCommandNotFound = 59
	codeInvalidOptions  = 72
)

// Init prepares db for cronswap: it creates the missing collections, the
// indexes of Indexes() and the schedules validator (validationAction
// error). It is idempotent and safe to run on every deploy, also while
// daemons run. Where the server has no document validation (it refuses
// collMod, or accepts the validator and drops it), Init reports
// ValidatorUnsupported with a notice and carries on.
func Init(ctx context.Context, db *mongo.Database) (InitReport, error) {
	rep := InitReport{Database: db.Name(), CreatedCollections: []string{}, CreatedIndexes: []string{}}
	existing, err := db.ListCollectionNames(ctx, bson.D{})
	if err != nil {
		return rep, fmt.Errorf("list collections of %s: %w", db.Name(), err)
	}
	validator := SchedulesValidator()
	for _, name := range Collections() {
		if slices.Contains(existing, name) {
			continue
		}
		cmd := bson.D{{Key: "create", Value: name}}
		if name == schedule.CollectionName {
			cmd = append(cmd, bson.E{Key: "validator", Value: validator},
				bson.E{Key: "validationLevel", Value: "strict"},
				bson.E{Key: "validationAction", Value: "error"})
		}
		err := db.RunCommand(ctx, cmd).Err()
		if hasCode(err, codeNamespaceExists) {
			continue // created meanwhile (a daemon, another init)
		}
		if err != nil {
			return rep, fmt.Errorf("create collection %s: %w", name, err)
		}
		rep.CreatedCollections = append(rep.CreatedCollections, name)
	}

	for _, ix := range Indexes() {
		created, err := ensureIndex(ctx, db.Collection(ix.Collection), ix)
		if err != nil {
			return rep, err
		}
		if created {
			rep.CreatedIndexes = append(rep.CreatedIndexes, ix.Collection+"."+ix.Name())
		}
	}

	rep.Validator, err = ensureValidator(ctx, db, validator, slices.Contains(rep.CreatedCollections, schedule.CollectionName))
	if err != nil {
		return rep, err
	}
	if rep.Validator == ValidatorUnsupported {
		rep.Notice = "this server does not support document validation (collMod/$jsonSchema): " +
			"schedules has no validator, so a typo like `cron_expr: 0800` is not refused at write time; " +
			"the daemon still refuses such documents and keeps the last valid timer armed (last known good)"
	}
	return rep, nil
}

// ensureIndex creates ix unless an index of that name already exists.
func ensureIndex(ctx context.Context, coll *mongo.Collection, ix Index) (bool, error) {
	names, err := indexNames(ctx, coll)
	if err != nil {
		return false, err
	}
	if slices.Contains(names, ix.Name()) {
		return false, nil
	}
	if _, err := coll.Indexes().CreateOne(ctx, ix.Model); err != nil {
		return false, fmt.Errorf("create index %s on %s: %w", ix.Name(), coll.Name(), err)
	}
	return true, nil
}

func indexNames(ctx context.Context, coll *mongo.Collection) ([]string, error) {
	cur, err := coll.Indexes().List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list indexes of %s: %w", coll.Name(), err)
	}
	var specs []struct {
		Name string `bson:"name"`
	}
	if err := cur.All(ctx, &specs); err != nil {
		return nil, fmt.Errorf("list indexes of %s: %w", coll.Name(), err)
	}
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.Name
	}
	return names, nil
}

// ensureValidator makes the server's validator of schedules equal to want.
// justCreated says Init created the collection with it a moment ago.
func ensureValidator(ctx context.Context, db *mongo.Database, want bson.D, justCreated bool) (string, error) {
	have, action, err := currentValidator(ctx, db)
	if err != nil {
		return "", err
	}
	wantRaw, err := bson.Marshal(want)
	if err != nil {
		return "", fmt.Errorf("schedules validator: %w", err)
	}
	if bytes.Equal(have, wantRaw) && action == "error" {
		if justCreated {
			return ValidatorCreated, nil
		}
		return ValidatorUnchanged, nil
	}
	err = db.RunCommand(ctx, bson.D{
		{Key: "collMod", Value: schedule.CollectionName},
		{Key: "validator", Value: want},
		{Key: "validationLevel", Value: "strict"},
		{Key: "validationAction", Value: "error"},
	}).Err()
	if hasCode(err, codeCommandNotFound) || hasCode(err, codeInvalidOptions) {
		return ValidatorUnsupported, nil
	}
	if err != nil {
		return "", fmt.Errorf("set the validator of %s: %w", schedule.CollectionName, err)
	}
	// Some servers answer ok and keep nothing: believe only what they show.
	have, _, err = currentValidator(ctx, db)
	if err != nil {
		return "", err
	}
	if !bytes.Equal(have, wantRaw) {
		return ValidatorUnsupported, nil
	}
	return ValidatorUpdated, nil
}

// currentValidator returns the validator and validationAction the server
// reports for schedules (nil and "" when none).
func currentValidator(ctx context.Context, db *mongo.Database) (bson.Raw, string, error) {
	specs, err := db.ListCollectionSpecifications(ctx, bson.D{{Key: "name", Value: schedule.CollectionName}})
	if err != nil {
		return nil, "", fmt.Errorf("read the options of %s: %w", schedule.CollectionName, err)
	}
	if len(specs) == 0 {
		return nil, "", fmt.Errorf("read the options of %s: the collection does not exist", schedule.CollectionName)
	}
	opts := specs[0].Options
	var validator bson.Raw
	if v, err := opts.LookupErr("validator"); err == nil && v.Type == bson.TypeEmbeddedDocument {
		validator = v.Document()
	}
	action := ""
	if v, err := opts.LookupErr("validationAction"); err == nil && v.Type == bson.TypeString {
		action = v.StringValue()
	} else if validator != nil {
		action = "error" // the server's default
	}
	return validator, action, nil
}

func hasCode(err error, code int) bool {
	if err == nil {
		return false
	}
	var se mongo.ServerError
	return errors.As(err, &se) && se.HasErrorCode(code)
}
