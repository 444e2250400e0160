package admin_test

import (
	"context"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/internal/admin"
	"github.com/cronswap/cronswap/internal/history"
	"github.com/cronswap/cronswap/internal/members"
	"github.com/cronswap/cronswap/internal/notify"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/internal/testmongo"
	"github.com/cronswap/cronswap/internal/triggers"
	"github.com/cronswap/cronswap/schedule"
)

func TestMain(m *testing.M) { testmongo.Main(m, nil) }

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

// The index keys are the bson names of the documents they index
// (jobs.RunDoc, history.Entry, members.Member, triggers.Doc), so the indexes cover what is written.
func TestIndexesUseDocumentFields(t *testing.T) {
	fields := func(rt reflect.Type) map[string]bool {
		tags := map[string]bool{}
		for i := range rt.NumField() {
			name, _, _ := strings.Cut(rt.Field(i).Tag.Get("bson"), ",")
			tags[name] = true
		}
		return tags
	}
	docs := map[string]map[string]bool{
		record.RunsCollection:   fields(reflect.TypeFor[record.RunDoc]()),
		history.CollectionName:  fields(reflect.TypeFor[history.Entry]()),
		members.CollectionName:  fields(reflect.TypeFor[members.Member]()),
		notify.CollectionName:   fields(reflect.TypeFor[notify.Doc]()),
		triggers.CollectionName: fields(reflect.TypeFor[triggers.Doc]()),
		record.PausesCollection: fields(reflect.TypeFor[record.PauseDoc]()),
	}
	var names []string
	for _, ix := range admin.Indexes() {
		tags, ok := docs[ix.Collection]
		if !ok {
			t.Errorf("index %s on %s, want %s, %s, %s, %s or %s", ix.Name(), ix.Collection, record.RunsCollection, history.CollectionName,
				members.CollectionName, notify.CollectionName, triggers.CollectionName)
		}
		names = append(names, ix.Collection+"."+ix.Name())
		for _, k := range ix.Model.Keys.(bson.D) {
			// A dotted key indexes a field of a sub-document.
			if top, _, _ := strings.Cut(k.Key, "."); !tags[top] {
				t.Errorf("index %s keys %q, not a field of the documents of %s", ix.Name(), k.Key, ix.Collection)
			}
		}
	}
	want := []string{record.RunsCollection + "." + admin.RunsUniqueIndex, record.RunsCollection + "." + admin.RunsTTLIndex,
		record.RunsCollection + "." + record.RunsLeaseIndex,
		history.CollectionName + "." + history.JobIndex, history.CollectionName + "." + history.TTLIndex,
		members.CollectionName + "." + members.TTLIndex,
		notify.CollectionName + "." + notify.DueIndex, notify.CollectionName + "." + notify.TTLIndex,
		notify.CollectionName + "." + notify.JobIndex, record.RunsCollection + "." + notify.OutboxIndex,
		triggers.CollectionName + "." + triggers.TTLIndex, triggers.CollectionName + "." + triggers.JobIndex,
		record.PausesCollection + "." + notify.OutboxIndex}
	if !slices.Equal(names, want) {
		t.Errorf("index names %q, want %q", names, want)
	}
}

// Init over collections that already exist (a daemon or mongosh created
// them first) adds what is missing and goes through collMod for the
// validator; the unique index then refuses a second record of a fire.
func TestInitOverExistingCollections(t *testing.T) {
	db := testmongo.NewDatabase(t, testmongo.Client(t))
	if _, err := db.Collection(schedule.CollectionName).InsertOne(ctx(t), bson.D{{Key: "_id", Value: "a"}, {Key: "cron_expr", Value: "@hourly"}}); err != nil {
		t.Fatal(err)
	}
	rep, err := admin.Init(ctx(t), db)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(rep.CreatedCollections, schedule.CollectionName) || len(rep.CreatedCollections) != len(admin.Collections())-1 || len(rep.CreatedIndexes) != len(admin.Indexes()) {
		t.Fatalf("report %+v", rep)
	}
	switch rep.Validator {
	case admin.ValidatorUpdated: // a server with collMod and validators
	case admin.ValidatorUnsupported:
		if !strings.Contains(rep.Notice, "last known good") {
			t.Errorf("notice %q does not say what still guards", rep.Notice)
		}
	default:
		t.Fatalf("validator %q over an existing collection, want updated or unsupported", rep.Validator)
	}
	again, err := admin.Init(ctx(t), db)
	if err != nil {
		t.Fatal(err)
	}
	if again.Changed() {
		t.Errorf("second Init changed something: %+v", again)
	}
	if rep.Validator == admin.ValidatorUpdated && again.Validator != admin.ValidatorUnchanged {
		t.Errorf("second Init validator %q, want unchanged", again.Validator)
	}

	runs := db.Collection(record.RunsCollection)
	slot := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
	if _, err := runs.InsertOne(ctx(t), record.RunDoc{ID: "r1", JobID: "a", ScheduledAt: slot, Status: record.StatusRunning}); err != nil {
		t.Fatal(err)
	}
	_, err = runs.InsertOne(ctx(t), record.RunDoc{ID: "r2", JobID: "a", ScheduledAt: slot, Status: record.StatusRunning})
	if !mongo.IsDuplicateKeyError(err) {
		t.Fatalf("second record of the same fire: %v, want a duplicate key error", err)
	}
}

// Several Inits at once (replicas deploying together) all succeed.
func TestInitConcurrent(t *testing.T) {
	db := testmongo.NewDatabase(t, testmongo.Client(t))
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { _, errs[i] = admin.Init(ctx(t), db) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Init %d: %v", i, err)
		}
	}
	names, err := db.ListCollectionNames(ctx(t), bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range admin.Collections() {
		if !slices.Contains(names, c) {
			t.Errorf("collection %s missing after concurrent Inits", c)
		}
	}
	rep, err := admin.Init(ctx(t), db)
	if err != nil || rep.Changed() {
		t.Errorf("Init after concurrent Inits: %+v, %v", rep, err)
	}
}

// The validator refuses what the decoder refuses: enabled must be a boolean
// when present (null is not "absent" there), while the other optional
// fields may be null.
func TestSchedulesValidatorEnabledIsBooleanOnly(t *testing.T) {
	schema := admin.SchedulesValidator()[0].Value.(bson.D)
	var props bson.D
	for _, e := range schema {
		if e.Key == "properties" {
			props = e.Value.(bson.D)
		}
	}
	types := map[string]any{}
	for _, p := range props {
		for _, e := range p.Value.(bson.D) {
			if e.Key == "bsonType" {
				types[p.Key] = e.Value
			}
		}
	}
	if got := types[schedule.FieldEnabled]; got != "bool" {
		t.Errorf("enabled bsonType %v, want only \"bool\" (no null)", got)
	}
	for _, f := range []string{schedule.FieldTimezone, schedule.FieldJob, schedule.FieldCategory, schedule.FieldArgs} {
		a, _ := types[f].(bson.A)
		if !slices.Contains(a, any("null")) {
			t.Errorf("%s bsonType %v, want null allowed (absent)", f, types[f])
		}
	}
}

// The validator's cron_expr rule refuses the "@every" periods the decoder
// refuses for being negative, zero, fractional or shorter than a second, and
// accepts ordinary expressions: its anyOf/not/pattern clauses are evaluated
// here as a server would (the bundled test server does not enforce
// validators).
func TestSchedulesValidatorRefusesBadEveryPeriods(t *testing.T) {
	schema := admin.SchedulesValidator()[0].Value.(bson.D)
	var rule bson.D
	for _, e := range schema {
		if e.Key == "properties" {
			for _, p := range e.Value.(bson.D) {
				if p.Key == schedule.FieldCronExpr {
					rule = p.Value.(bson.D)
				}
			}
		}
	}
	var matches func(clause bson.D, s string) bool
	matches = func(clause bson.D, s string) bool {
		ok := true
		for _, e := range clause {
			switch e.Key {
			case "pattern":
				ok = ok && regexp.MustCompile(e.Value.(string)).MatchString(s)
			case "not":
				ok = ok && !matches(e.Value.(bson.D), s)
			case "anyOf":
				found := false
				for _, c := range e.Value.(bson.A) {
					found = found || matches(c.(bson.D), s)
				}
				ok = ok && found
			}
		}
		return ok
	}
	if len(rule) == 0 || !slices.ContainsFunc(rule, func(e bson.E) bool { return e.Key == "anyOf" }) {
		t.Fatalf("cron_expr rule %v has no anyOf clause for @every", rule)
	}
	for _, bad := range []string{"   ", "\t", "@every -5s", "@every 0s", "@every 1ns", "@every 1.5s", "@every 500ms", "@every -5m"} {
		if matches(rule, bad) {
			t.Errorf("cron_expr %q passes the validator", bad)
		}
	}
	for _, good := range []string{"0 9 * * *", "*/5 * * * * *", "@hourly", "@every 30s", "@every 1h30m", "CRON_TZ=Asia/Seoul @every 5m"} {
		if !matches(rule, good) {
			t.Errorf("cron_expr %q refused by the validator", good)
		}
	}
}
