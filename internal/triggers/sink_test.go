package triggers

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/internal/actions"
	"github.com/cronswap/cronswap/internal/firepath"
	"github.com/cronswap/cronswap/internal/history"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/internal/runstore"
	"github.com/cronswap/cronswap/internal/testmongo"
	"github.com/cronswap/cronswap/jobs"
	"github.com/cronswap/cronswap/schedule"
)

// env is one test database with replicas (a runner and a sink each)
// sharing it, and a registry whose actions count their runs.
type env struct {
	db       *mongo.Database
	coll     *mongo.Collection
	reg      *actions.Registry
	mu       sync.Mutex
	ran      map[string][]jobs.Run // by job
	replicas []*Sink
	runners  []*firepath.Runner // the replicas' runners, in the same order
	ttl      time.Duration      // the replicas' lock lease
	outcomes map[string]int     // the statuses the replicas' stores wrote
}

func newEnv(t *testing.T, replicas int) *env { return newEnvTTL(t, replicas, time.Minute) }

// newEnvTTL is newEnv with replicas whose lock lease is ttl.
func newEnvTTL(t *testing.T, replicas int, ttl time.Duration) *env {
	t.Helper()
	db := testmongo.NewDatabase(t, testmongo.Client(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := record.EnsureIndexes(ctx, db.Collection(record.RunsCollection)); err != nil {
		t.Fatal(err)
	}
	e := &env{db: db, coll: Collection(db), reg: actions.NewRegistry(), ran: map[string][]jobs.Run{}, ttl: ttl, outcomes: map[string]int{}}
	action := jobs.HandlerFunc(func(ctx context.Context, f jobs.Run) error {
		e.mu.Lock()
		e.ran[f.JobID] = append(e.ran[f.JobID], f)
		e.mu.Unlock()
		if strings.HasPrefix(f.JobID, "fail") {
			return context.DeadlineExceeded
		}
		return nil
	})
	for _, name := range []string{"report", "paused", "fail", "every"} {
		e.reg.Register(name, actions.Action{Handler: action})
	}
	e.reg.Register("slow", actions.Action{Handler: jobs.HandlerFunc(func(ctx context.Context, f jobs.Run) error {
		time.Sleep(300 * time.Millisecond)
		return action(ctx, f)
	})})
	for i := range replicas {
		// The first replica owns every job; the others take over after the grace.
		e.addReplica(t, string(rune('a'+i)), e.reg, i == 0)
	}
	e.schedule(t, bson.D{{Key: "_id", Value: "report"}, {Key: "cron_expr", Value: "0 9 * * *"}, {Key: "args", Value: bson.D{{Key: "k", Value: "sched"}}}})
	e.schedule(t, bson.D{{Key: "_id", Value: "paused"}, {Key: "cron_expr", Value: "0 9 * * *"}, {Key: "enabled", Value: false}})
	e.schedule(t, bson.D{{Key: "_id", Value: "fail"}, {Key: "cron_expr", Value: "0 9 * * *"}})
	e.schedule(t, bson.D{{Key: "_id", Value: "every"}, {Key: "cron_expr", Value: "0 * * * *"}})
	e.schedule(t, bson.D{{Key: "_id", Value: "noaction"}, {Key: "cron_expr", Value: "0 9 * * *"}})
	e.schedule(t, bson.D{{Key: "_id", Value: "slow"}, {Key: "cron_expr", Value: "0 * * * *"}})
	return e
}

// addReplica adds a replica running the actions of reg; owner says
// whether it owns every job.
func (e *env) addReplica(t *testing.T, inst string, reg *actions.Registry, owner bool) {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	locks, runs := record.Collections(e.db)
	records := runstore.New(locks, runs, runstore.Options{Instance: inst, Logger: log})
	store := NewStore(e.coll, runs, records, time.Hour, inst).WithOutcomes(func(status string) {
		e.mu.Lock()
		e.outcomes[status]++
		e.mu.Unlock()
	})
	r := firepath.NewRunner(firepath.RunnerOptions{Registry: reg, InstanceID: inst, Logger: log,
		Store: records, TTL: e.ttl,
		Owns: func(string) bool { return owner }, Requests: store})
	s := NewSink(Options{Runner: r, Store: store, Owns: func(string) bool { return owner },
		Schedules: Schedules(e.db.Collection(schedule.CollectionName)), FirstSeen: history.FirstSeenLookup(e.db.Collection(history.CollectionName)),
		Logger: log, BackfillInterval: 50 * time.Millisecond})
	t.Cleanup(func() { r.Shutdown(10 * time.Second); s.Close() })
	e.replicas = append(e.replicas, s)
	e.runners = append(e.runners, r)
}

func (e *env) schedule(t *testing.T, doc bson.D) {
	t.Helper()
	if _, err := e.db.Collection(schedule.CollectionName).InsertOne(context.Background(), doc); err != nil {
		t.Fatal(err)
	}
}

// insert inserts a request and hands it to every replica, as their
// change streams would.
func (e *env) insert(t *testing.T, doc bson.D) bson.RawValue {
	t.Helper()
	res, err := e.coll.InsertOne(context.Background(), doc)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := e.coll.FindOne(context.Background(), bson.D{{Key: "_id", Value: res.InsertedID}}).Raw()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range e.replicas {
		s.Upsert(raw)
	}
	return raw.Lookup("_id")
}

// final waits for the request's final status and returns the document.
func (e *env) final(t *testing.T, id bson.RawValue) bson.M {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var m bson.M
		if err := e.coll.FindOne(context.Background(), bson.D{{Key: "_id", Value: id}}).Decode(&m); err != nil {
			t.Fatal(err)
		}
		if st, _ := m[FieldStatus].(string); Final(st) {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("request %v: no final status by the deadline: %v", id, m)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// idle waits until no replica handles a request any more.
func (e *env) idle(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for _, s := range e.replicas {
		for !s.idle() {
			if time.Now().After(deadline) {
				t.Fatal("replicas still handling requests at the deadline")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func (e *env) runs(job string) []jobs.Run {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]jobs.Run(nil), e.ran[job]...)
}

// A run-now request handed to three replicas runs once, at once on the
// job's owner, with the request's args; the request records the run.
func TestRunNowOnceAcrossReplicas(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 3)
	start := time.Now()
	id := e.insert(t, bson.D{{Key: "job_id", Value: "report"}, {Key: "args", Value: bson.D{{Key: "k", Value: "now"}}}})
	m := e.final(t, id)
	key, _ := KeyOf(id)
	if m[FieldStatus] != record.StatusSucceeded || m[FieldRunID] != RunIDOf(key) || m[FieldInstance] != "a" {
		t.Fatalf("request %v: want succeeded on a under %s", m, RunIDOf(key))
	}
	// The others, after their grace, find the record and run nothing.
	e.idle(t)
	got := e.runs("report")
	if len(got) != 1 {
		t.Fatalf("ran %d times, want once", len(got))
	}
	f := got[0]
	if string(f.Args) != `{"k":"now"}` || f.RunID != RunIDOf(key) || f.Slot.Nanosecond() == 0 {
		t.Errorf("fire %+v: want the request's args, its run id, a scheduled_at off the whole second", f)
	}
	if started, ok := m[FieldStartedAt].(bson.DateTime); !ok || started.Time().Sub(start) > time.Second {
		t.Errorf("request %v: want started within 1s of the insert", m)
	}
	var rec record.RunDoc
	if err := e.db.Collection(record.RunsCollection).FindOne(context.Background(), bson.D{{Key: "_id", Value: RunIDOf(key)}}).Decode(&rec); err != nil {
		t.Fatal(err)
	}
	if rec.Status != record.StatusSucceeded || rec.JobID != "report" {
		t.Errorf("record %+v: want succeeded for report", rec)
	}
}

// A paused job runs on request too; a failing run says failed with its
// error; the owner gone, another replica runs it after the grace.
func TestRunNowPausedFailedAndTakenOver(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2)
	m := e.final(t, e.insert(t, bson.D{{Key: "_id", Value: "p1"}, {Key: "job_id", Value: "paused"}}))
	if m[FieldStatus] != record.StatusSucceeded || len(e.runs("paused")) != 1 {
		t.Errorf("paused job: %v, ran %d: want succeeded once", m, len(e.runs("paused")))
	}
	m = e.final(t, e.insert(t, bson.D{{Key: "_id", Value: "f1"}, {Key: "job_id", Value: "fail"}}))
	if m[FieldStatus] != record.StatusFailed || !strings.Contains(m[FieldError].(string), "deadline") {
		t.Errorf("failing job: %v: want failed with its error", m)
	}
	// Only the second replica sees this one: it is not the owner, so it
	// runs it after the grace.
	res, err := e.coll.InsertOne(context.Background(), bson.D{{Key: "_id", Value: "t1"}, {Key: "job_id", Value: "report"}})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := e.coll.FindOne(context.Background(), bson.D{{Key: "_id", Value: res.InsertedID}}).Raw()
	start := time.Now()
	e.replicas[1].Upsert(raw)
	m = e.final(t, raw.Lookup("_id"))
	took := time.Since(start)
	if m[FieldStatus] != record.StatusSucceeded || m[FieldInstance] != "b" || took < firepath.DefaultClaimGrace {
		t.Errorf("owner absent: %v after %v: want succeeded on b after the grace", m, took)
	}
}

// Bad requests are refused with an error written on them; none runs, and
// a good one after them still does.
func TestRunNowBadRequests(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	cases := []struct {
		doc  bson.D
		want string
	}{
		{bson.D{{Key: "_id", Value: "b1"}}, "job_id: missing"},
		{bson.D{{Key: "_id", Value: "b2"}, {Key: "job_id", Value: 7}}, "must be a string"},
		{bson.D{{Key: "_id", Value: "b3"}, {Key: "job_id", Value: "nope"}}, "no schedule"},
		{bson.D{{Key: "_id", Value: "b4"}, {Key: "job_id", Value: "report"}, {Key: "args", Value: "x"}}, "must be an object"},
		{bson.D{{Key: "_id", Value: "b@5"}, {Key: "job_id", Value: "report"}}, "may not contain"},
		{bson.D{{Key: "_id", Value: "b6"}, {Key: "job_id", Value: "report"}, {Key: "slot", Value: "yesterday"}}, "must be a date"},
		{bson.D{{Key: "_id", Value: "b7"}, {Key: "job_id", Value: "report"}, {Key: "slot", Value: time.Date(2026, 1, 1, 9, 30, 0, 0, time.UTC)}}, "not a cron slot"},
		{bson.D{{Key: "_id", Value: "b8"}, {Key: "job_id", Value: "noaction"}}, "unknown action"},
		{bson.D{{Key: "_id", Value: "b9"}, {Key: "job_id", Value: "report"}, {Key: "requested_at", Value: 5}}, "must be a date"},
		{bson.D{{Key: "_id", Value: 10}, {Key: "job_id", Value: "report"}}, "string or an ObjectId"},
		{bson.D{{Key: "_id", Value: "b11"}, {Key: "job_id", Value: "report"}, {Key: "slot", Value: time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)},
			{Key: FieldBeforeFirstSeen, Value: "yes"}}, "field before_first_seen: must be a boolean"},
	}
	for _, c := range cases {
		m := e.final(t, e.insert(t, c.doc))
		if m[FieldStatus] != StatusRejected || !strings.Contains(m[FieldError].(string), c.want) {
			t.Errorf("%v: got %v, want rejected with %q", c.doc, m, c.want)
		}
	}
	if n := len(e.runs("report")); n != 0 {
		t.Fatalf("bad requests ran %d times", n)
	}
	if m := e.final(t, e.insert(t, bson.D{{Key: "job_id", Value: "report"}})); m[FieldStatus] != record.StatusSucceeded {
		t.Errorf("good request after bad ones: %v", m)
	}
}

// Backfill requests run the slots that did not run under their own run
// ids and no slot that ran; a slot that starts a missed record of its own
// runs in its place; a full read offers pending ones oldest first.
func TestBackfillRunsOnlyUnrunSlots(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2)
	base := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	slot := func(i int) time.Time { return base.Add(time.Duration(i) * time.Hour) }
	runs := e.db.Collection(record.RunsCollection)
	ctx := context.Background()
	for _, i := range []int{1, 3} { // slots 1 and 3 ran
		if _, err := runs.InsertOne(ctx, record.RunDoc{ID: record.RunID("every", slot(i)), JobID: "every", ScheduledAt: slot(i),
			Status: record.StatusSucceeded, Fence: record.FenceOf(slot(i)), StartedAt: slot(i), EndedAt: slot(i)}); err != nil {
			t.Fatal(err)
		}
	}
	// Slot 2 was recorded missed on its own.
	if _, err := runs.InsertOne(ctx, record.RunDoc{ID: record.MissedID("every", slot(2)), JobID: "every", ScheduledAt: slot(2),
		LastScheduledAt: slot(2), Count: 1, Status: record.StatusMissed, Reason: record.MissedNoReplica}); err != nil {
		t.Fatal(err)
	}
	var docs []bson.Raw
	for i := 4; i >= 0; i-- { // inserted newest first: the full read sorts them
		id := BackfillIDPrefix + record.RunID("every", slot(i))
		if _, err := e.coll.InsertOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "job_id", Value: "every"}, {Key: "slot", Value: slot(i)}}); err != nil {
			t.Fatal(err)
		}
		raw, _ := e.coll.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Raw()
		docs = append(docs, raw)
	}
	for _, s := range e.replicas {
		s.ReplaceAll(func(yield func(bson.Raw, error) bool) {
			for _, d := range docs {
				if !yield(d, nil) {
					return
				}
			}
		})
	}
	want := map[int]string{0: record.StatusSucceeded, 1: StatusAlreadyRan, 2: record.StatusSucceeded, 3: StatusAlreadyRan, 4: record.StatusSucceeded}
	for i := range 5 {
		m := e.final(t, bson.RawValue{Type: bson.TypeString, Value: bsonString(BackfillIDPrefix + record.RunID("every", slot(i)))})
		if m[FieldStatus] != want[i] || m[FieldRunID] != record.RunID("every", slot(i)) {
			t.Errorf("slot %d: %v, want %s under %s", i, m, want[i], record.RunID("every", slot(i)))
		}
	}
	e.idle(t)
	got := e.runs("every")
	if len(got) != 3 {
		t.Fatalf("ran %d slots, want 3 (0, 2, 4): %+v", len(got), got)
	}
	at := map[string]int{}
	for k, f := range got {
		if !f.Slot.Equal(slot(0)) && !f.Slot.Equal(slot(2)) && !f.Slot.Equal(slot(4)) ||
			f.RunID != record.RunID("every", f.Slot) {
			t.Errorf("run %s at %v: want slots 0, 2, 4 under their run ids", f.RunID, f.Slot)
		}
		at[f.RunID] = k
	}
	// Offered oldest first (slot 2 goes round its missed record first).
	if at[record.RunID("every", slot(0))] > at[record.RunID("every", slot(4))] {
		t.Errorf("runs %v: want slot 0 before slot 4", at)
	}
}

// bsonString is the raw value of a BSON string.
func bsonString(s string) []byte {
	_, v, _ := bson.MarshalValue(s)
	return v
}

// A replica whose config lacks the job's action (a config being rolled
// out) does not refuse a request another replica runs: owner or not, the
// request ends with the run's outcome. The lacking replica's refusal may
// come first (the run claimed later than the claim grace and a second
// after the request: a loaded machine); the run's outcome replaces it, so
// the request is waited on until it says succeeded, not until its first
// final status.
func TestRunNowActionOnSomeReplicasOnly(t *testing.T) {
	t.Parallel()
	for _, lackingOwns := range []bool{false, true} {
		e := newEnv(t, 0)
		e.addReplica(t, "has", e.reg, !lackingOwns)
		e.addReplica(t, "lacks", actions.NewRegistry(), lackingOwns)
		id := e.insert(t, bson.D{{Key: "job_id", Value: "report"}})
		e.waitStatus(t, id, record.StatusSucceeded)
		e.idle(t) // the lacking replica has decided too: its refusal did not replace the outcome
		if m := e.doc(t, id); m[FieldStatus] != record.StatusSucceeded || m[FieldInstance] != "has" || len(e.runs("report")) != 1 {
			t.Errorf("lacking replica owns=%v: %v, ran %d: want succeeded once on the replica that has the action",
				lackingOwns, m, len(e.runs("report")))
		}
	}
}

// The slots of one backfill run one after another: under forbid a slot is
// offered once the previous one ended, so none is skipped by the one
// before it, however long the action takes against the pacing interval.
func TestBackfillSlotsOfOneJobDoNotSkipEachOther(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	base := time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC)
	ctx := context.Background()
	var ids []string
	for i := range 4 {
		slot := base.Add(time.Duration(i) * time.Hour)
		id := BackfillIDPrefix + record.RunID("slow", slot)
		ids = append(ids, id)
		if _, err := e.coll.InsertOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "job_id", Value: "slow"}, {Key: "slot", Value: slot}}); err != nil {
			t.Fatal(err)
		}
		raw, _ := e.coll.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Raw()
		e.replicas[0].Upsert(raw)
	}
	for _, id := range ids {
		m := e.final(t, bson.RawValue{Type: bson.TypeString, Value: bsonString(id)})
		if m[FieldStatus] != record.StatusSucceeded {
			t.Errorf("%s: %v, want succeeded", id, m)
		}
	}
	got := e.runs("slow")
	if len(got) != 4 {
		t.Fatalf("ran %d slots, want 4", len(got))
	}
	for i, f := range got {
		if want := base.Add(time.Duration(i) * time.Hour); !f.Slot.Equal(want) {
			t.Errorf("run %d at %v, want %v (oldest first)", i, f.Slot, want)
		}
	}
}

// A backfill request inserted by hand (as with mongosh) of a slot before
// the job's first sighting is refused by the daemons' own check, with the
// sighting's time in its error; the same request with before_first_seen:
// true runs, as does a slot after the sighting.
func TestBackfillBeforeTheFirstSightingIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2)
	base := time.Now().UTC().Truncate(time.Hour).Add(-3 * time.Hour)
	slot := func(i int) time.Time { return base.Add(time.Duration(i) * time.Hour) }
	seen := slot(1).Add(1500 * time.Millisecond)
	if _, err := e.db.Collection(history.CollectionName).InsertOne(context.Background(), bson.D{
		{Key: "_id", Value: history.FirstSeenID("every")}, {Key: "job_id", Value: "every"}, {Key: "op", Value: history.OpFirstSeen},
		{Key: "at", Value: seen}, {Key: "source", Value: history.SourceInsert}}); err != nil {
		t.Fatal(err)
	}
	req := func(id string, i int, extra ...bson.E) bson.M {
		d := append(bson.D{{Key: "_id", Value: id}, {Key: "job_id", Value: "every"}, {Key: "slot", Value: slot(i)}}, extra...)
		return e.final(t, e.insert(t, d))
	}
	for _, i := range []int{0, 1} {
		m := req(fmt.Sprintf("before-%d", i), i)
		if m[FieldStatus] != StatusRejected || !strings.Contains(m[FieldError].(string), "first seen at "+seen.Format("2006-01-02T15:04:05.000Z07:00")) {
			t.Errorf("slot %d, before the sighting: %v, want rejected naming the sighting", i, m)
		}
	}
	if got := e.runs("every"); len(got) != 0 {
		t.Fatalf("slots before the sighting ran: %+v", got)
	}
	if m := req("flagged", 0, bson.E{Key: FieldBeforeFirstSeen, Value: true}); m[FieldStatus] != record.StatusSucceeded {
		t.Errorf("slot 0 with %s: %v, want succeeded", FieldBeforeFirstSeen, m)
	}
	if m := req("after", 2); m[FieldStatus] != record.StatusSucceeded {
		t.Errorf("slot 2, after the sighting: %v, want succeeded", m)
	}
	e.idle(t)
	if got := e.runs("every"); len(got) != 2 {
		t.Errorf("ran %d slots, want 2 (0 with the flag, and 2)", len(got))
	}
}
