package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/schedule"
)

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// newEngine returns a started engine that is stopped when the test ends.
func newEngine(t *testing.T, opts Options) *Engine {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quiet()
	}
	e := New(opts)
	e.Start()
	t.Cleanup(func() {
		ctx := e.Stop()
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
			t.Error("fire callbacks still running 10s after Stop")
		}
	})
	return e
}

func sch(id, expr string) schedule.Schedule {
	return schedule.Schedule{ID: id, CronExpr: expr, Enabled: true}
}

type entryState struct {
	id   cron.EntryID
	next time.Time
}

func mustEntry(t *testing.T, e *Engine, id string) entryState {
	t.Helper()
	eid, next, ok := e.entry(id)
	if !ok {
		t.Fatalf("job %q has no robfig entry", id)
	}
	if next.IsZero() {
		t.Fatalf("job %q: robfig entry has no next time", id)
	}
	return entryState{eid, next}
}

func mustGet(t *testing.T, e *Engine, id string) Status {
	t.Helper()
	st, ok := e.Get(id)
	if !ok {
		t.Fatalf("job %q unknown", id)
	}
	return st
}

func expect(t *testing.T, got, want Outcome) {
	t.Helper()
	if got != want {
		t.Fatalf("outcome %s, want %s", got, want)
	}
}

// decode builds a schedules document and decodes it as the watcher does.
func decode(t *testing.T, d bson.D) (schedule.Schedule, error) {
	t.Helper()
	raw, err := bson.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return schedule.Decode(raw)
}

// TestReloadIdempotent: re-applying a document, or
// a re-saved one that differs only in updated_at, does not touch robfig; a
// changed expression replaces only that job's entry.
func TestReloadIdempotent(t *testing.T) {
	e := newEngine(t, Options{})

	doc := bson.D{{Key: "_id", Value: "daily_report"}, {Key: "cron_expr", Value: "0 9 * * *"},
		{Key: "updated_at", Value: time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC)}}
	s, err := decode(t, doc)
	if err != nil {
		t.Fatal(err)
	}
	expect(t, e.Reload(s), Added)

	others := make(map[string]entryState)
	for i := range 1000 {
		id := fmt.Sprintf("job-%04d", i)
		expect(t, e.Reload(sch(id, fmt.Sprintf("%d %d * * *", i%60, i%24))), Added)
	}
	for i := range 1000 {
		id := fmt.Sprintf("job-%04d", i)
		others[id] = mustEntry(t, e, id)
	}
	if n := e.Len(); n != 1001 {
		t.Fatalf("Len = %d, want 1001", n)
	}

	before := mustEntry(t, e, "daily_report")
	st0 := mustGet(t, e, "daily_report")
	adds, removes := e.adds.Load(), e.removes.Load()

	// The same schedule again.
	expect(t, e.Reload(s), Unchanged)
	// The document re-saved unchanged: only updated_at differs.
	doc[2].Value = time.Date(2024, 5, 2, 0, 0, 0, 0, time.UTC)
	s2, err := decode(t, doc)
	if err != nil {
		t.Fatal(err)
	}
	expect(t, e.Reload(s2), Unchanged)
	// Metadata only (category, args): still no timer change.
	s3 := s2
	s3.Category, s3.Args = "reports", `{"format":"pdf"}`
	expect(t, e.Reload(s3), Unchanged)

	if got := mustEntry(t, e, "daily_report"); got != before {
		t.Fatalf("robfig entry changed by idempotent reloads: %+v -> %+v", before, got)
	}
	if a, r := e.adds.Load(), e.removes.Load(); a != adds || r != removes {
		t.Fatalf("idempotent reloads touched robfig: %d adds, %d removes", a-adds, r-removes)
	}
	st := mustGet(t, e, "daily_report")
	if !st.NextRun.Equal(st0.NextRun) || !st.Armed || st.Category != "reports" || st.Args != `{"format":"pdf"}` ||
		!st.UpdatedAt.Equal(time.Date(2024, 5, 2, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("status after metadata reload: %+v", st)
	}

	if st.Job != "" || st.ActionName() != "daily_report" {
		t.Fatalf("job %q, action %q; want \"\", \"daily_report\"", st.Job, st.ActionName())
	}
	s3.Job = "report"
	expect(t, e.Reload(s3), Unchanged)
	if st := mustGet(t, e, "daily_report"); st.Job != "report" || st.ActionName() != "report" {
		t.Fatalf("job %q, action %q; want report, report", st.Job, st.ActionName())
	}
	if got := mustEntry(t, e, "daily_report"); got != before {
		t.Fatalf("robfig entry changed by a new action name: %+v -> %+v", before, got)
	}

	// A changed expression replaces exactly this job's entry.
	s4 := s3
	s4.CronExpr = "0 8 * * *"
	expect(t, e.Reload(s4), Replaced)
	after := mustEntry(t, e, "daily_report")
	if after.id == before.id {
		t.Fatalf("entry id %d kept after the expression changed", after.id)
	}
	if a, r := e.adds.Load(), e.removes.Load(); a != adds+1 || r != removes+1 {
		t.Fatalf("replace did %d adds, %d removes; want 1, 1", a-adds, r-removes)
	}
	if got := mustGet(t, e, "daily_report"); got.CronExpr != "0 8 * * *" || got.NextRun.UTC().Hour() != 8 {
		t.Fatalf("status after replace: %+v", got)
	}
	for id, want := range others {
		if got := mustEntry(t, e, id); got != want {
			t.Fatalf("job %s touched by another job's edit: %+v -> %+v", id, want, got)
		}
	}
	if n := e.Len(); n != 1001 {
		t.Fatalf("Len = %d, want 1001", n)
	}

	// A full sync of the same documents changes nothing either.
	items := []Item{{Schedule: s4}}
	for i := range 1000 {
		id := fmt.Sprintf("job-%04d", i)
		items = append(items, Item{Schedule: sch(id, fmt.Sprintf("%d %d * * *", i%60, i%24))})
	}
	adds, removes = e.adds.Load(), e.removes.Load()
	if got := syncItems(e, items); !sameStats(got, SyncStats{Unchanged: 1001}) {
		t.Fatalf("Sync of the same state: %+v", got)
	}
	if a, r := e.adds.Load(), e.removes.Load(); a != adds || r != removes {
		t.Fatalf("idempotent Sync touched robfig: %d adds, %d removes", a-adds, r-removes)
	}
	for id, want := range others {
		if got := mustEntry(t, e, id); got != want {
			t.Fatalf("job %s touched by Sync: %+v -> %+v", id, want, got)
		}
	}
}

// TestLastKnownGood: a schedule that does not validate never disarms a job;
// the previous valid timer stays armed and the error is recorded.
func TestLastKnownGood(t *testing.T) {
	e := newEngine(t, Options{Policy: testPolicy{check: func(s schedule.Schedule) error {
		if s.ActionName() == "no_such_action" {
			return &schedule.Error{ID: s.ID, Field: schedule.FieldJob, Reason: "unknown action \"no_such_action\""}
		}
		return nil
	}}})
	expect(t, e.Reload(sch("a", "0 9 * * *")), Added)
	good := mustGet(t, e, "a")
	entry := mustEntry(t, e, "a")

	bad := []struct {
		name  string
		s     schedule.Schedule
		field string
	}{
		{"minute 61", sch("a", "61 * * * *"), "cron_expr"},
		{"empty", sch("a", ""), "cron_expr"},
		{"unknown zone", schedule.Schedule{ID: "a", CronExpr: "0 9 * * *", Timezone: "Mars/Base", Enabled: true}, "timezone"},
		{"never fires", sch("a", "0 0 30 2 *"), "cron_expr"},
		{"unknown action", schedule.Schedule{ID: "a", CronExpr: "0 10 * * *", Job: "no_such_action", Enabled: true}, "job"},
	}
	for _, b := range bad {
		expect(t, e.Reload(b.s), Rejected)
		st := mustGet(t, e, "a")
		if !st.Armed || st.CronExpr != "0 9 * * *" || !st.NextRun.Equal(good.NextRun) {
			t.Fatalf("%s: last known good lost: %+v", b.name, st)
		}
		if !strings.Contains(st.LastError, b.field) {
			t.Fatalf("%s: LastError %q does not name field %s", b.name, st.LastError, b.field)
		}
		if got := mustEntry(t, e, "a"); got != entry {
			t.Fatalf("%s: robfig entry changed: %+v -> %+v", b.name, entry, got)
		}
	}

	// A document that does not even decode (the watcher calls Reject).
	_, err := decode(t, bson.D{{Key: "_id", Value: "a"}, {Key: "cron_expr", Value: 42}})
	if !errors.Is(err, schedule.ErrInvalid) {
		t.Fatalf("decode: %v", err)
	}
	e.Reject("a", err)
	if st := mustGet(t, e, "a"); !st.Armed || st.CronExpr != "0 9 * * *" || !strings.Contains(st.LastError, "cron_expr") {
		t.Fatalf("after Reject: %+v", st)
	}
	if e.Len() != 1 {
		t.Fatalf("Len = %d, want 1", e.Len())
	}

	// The same good document again clears the error without re-arming.
	expect(t, e.Reload(sch("a", "0 9 * * *")), Unchanged)
	if st := mustGet(t, e, "a"); st.LastError != "" || !st.Armed {
		t.Fatalf("after the good document came back: %+v", st)
	}
	if got := mustEntry(t, e, "a"); got != entry {
		t.Fatalf("robfig entry changed: %+v -> %+v", entry, got)
	}
	// A bad one, then a fixed, different one: re-armed, error cleared.
	expect(t, e.Reload(sch("a", "61 * * * *")), Rejected)
	expect(t, e.Reload(sch("a", "0 10 * * *")), Replaced)
	if st := mustGet(t, e, "a"); st.LastError != "" || !st.Armed || st.CronExpr != "0 10 * * *" || st.NextRun.UTC().Hour() != 10 {
		t.Fatalf("after the fix: %+v", st)
	}

	// A new job whose first document is bad: not armed, error visible.
	expect(t, e.Reload(sch("b", "61 * * * *")), Rejected)
	st := mustGet(t, e, "b")
	if st.Armed || !st.NextRun.IsZero() || st.CronExpr != "61 * * * *" || !strings.Contains(st.LastError, "cron_expr") {
		t.Fatalf("new bad job: %+v", st)
	}
	if _, _, ok := e.entry("b"); ok {
		t.Fatal("new bad job has a robfig entry")
	}
	e.Reject("c", errors.New("boom"))
	if st := mustGet(t, e, "c"); st.Armed || st.LastError != "boom" {
		t.Fatalf("rejected unknown job: %+v", st)
	}
	if ids := statusIDs(e.List()); ids != "a b c" {
		t.Fatalf("List = %s", ids)
	}
	if e.Len() != 1 {
		t.Fatalf("Len = %d, want 1", e.Len())
	}
	// ... and is armed once fixed.
	expect(t, e.Reload(sch("b", "0 7 * * *")), Added)
	if st := mustGet(t, e, "b"); !st.Armed || st.LastError != "" {
		t.Fatalf("fixed new job: %+v", st)
	}
	// A schedule without an id is only logged.
	expect(t, e.Reload(sch("", "0 7 * * *")), Rejected)
	e.Reject("", errors.New("no id"))
	if ids := statusIDs(e.List()); ids != "a b c" {
		t.Fatalf("List = %s", ids)
	}
}

func statusIDs(sts []Status) string {
	ids := make([]string, len(sts))
	for i, st := range sts {
		ids[i] = st.ID
	}
	return strings.Join(ids, " ")
}

func TestEnabledAndRemove(t *testing.T) {
	e := newEngine(t, Options{Shards: 1})
	expect(t, e.Reload(sch("a", "0 9 * * *")), Added)

	off := sch("a", "0 9 * * *")
	off.Enabled = false
	expect(t, e.Reload(off), Disarmed)
	st := mustGet(t, e, "a")
	if st.Armed || st.Enabled || !st.NextRun.IsZero() || st.CronExpr != "0 9 * * *" {
		t.Fatalf("disabled: %+v", st)
	}
	if _, _, ok := e.entry("a"); ok || e.Len() != 0 || settledEntries(e, 0) != 0 {
		t.Fatal("disabled job still has a robfig entry")
	}
	expect(t, e.Reload(off), Unchanged)
	// A bad document for a disabled job keeps it disabled.
	expect(t, e.Reload(sch("a", "61 * * * *")), Rejected)
	if st := mustGet(t, e, "a"); st.Armed || st.Enabled || st.LastError == "" {
		t.Fatalf("disabled + bad: %+v", st)
	}

	expect(t, e.Reload(sch("a", "0 9 * * *")), Added)
	if st := mustGet(t, e, "a"); !st.Armed || !st.Enabled || st.NextRun.IsZero() || st.LastError != "" {
		t.Fatalf("re-enabled: %+v", st)
	}
	mustEntry(t, e, "a")

	// A new job that starts disabled is visible but not armed.
	off.ID = "b"
	expect(t, e.Reload(off), Disarmed)
	if st := mustGet(t, e, "b"); st.Armed || st.Enabled {
		t.Fatalf("new disabled job: %+v", st)
	}

	if !e.Remove("a") {
		t.Fatal("Remove(a) = false")
	}
	if _, ok := e.Get("a"); ok {
		t.Fatal("removed job still visible")
	}
	if settledEntries(e, 0) != 0 || e.Len() != 0 {
		t.Fatal("removed job still armed")
	}
	if e.Remove("a") {
		t.Fatal("second Remove(a) = true")
	}
	// Remove forgets a rejected-only job and its error too.
	e.Reject("c", errors.New("bad"))
	if !e.Remove("c") {
		t.Fatal("Remove(c) = false")
	}
	if _, ok := e.Get("c"); ok {
		t.Fatal("removed rejected job still visible")
	}
	if ids := statusIDs(e.List()); ids != "b" {
		t.Fatalf("List = %q", ids)
	}
}

func TestSync(t *testing.T) {
	e := newEngine(t, Options{})
	for _, id := range []string{"a", "b", "c", "d"} {
		expect(t, e.Reload(sch(id, "0 1 * * *")), Added)
	}
	e.Reject("z", errors.New("bad z"))
	entryA, entryC := mustEntry(t, e, "a"), mustEntry(t, e, "c")

	disabled := sch("f", "0 3 * * *")
	disabled.Enabled = false
	items := []Item{
		{Schedule: sch("a", "0 1 * * *")},                              // unchanged
		{Schedule: sch("b", "0 2 * * *")},                              // replaced
		{Schedule: schedule.Schedule{ID: "c"}, Err: errors.New("bad")}, // rejected, stays armed
		{Schedule: sch("e", "0 1 * * *")},                              // added
		{Schedule: disabled},                                           // disarmed
		{Schedule: sch("g", "61 * * * *")},                             // rejected, new
		{Err: errors.New("document without a readable _id")},           // rejected, logged only
		// d and z are gone: removed
	}
	got := syncItems(e, items)
	want := SyncStats{Added: 1, Replaced: 1, Unchanged: 1, Disarmed: 1, Removed: 2, Rejected: 3,
		Changed: []string{"b", "c", "e", "f", "g", "d", "z"}} // the snapshot's order, then the removed
	if !sameStats(got, want) {
		t.Fatalf("Sync = %+v, want %+v", got, want)
	}
	if ids := statusIDs(e.List()); ids != "a b c e f g" {
		t.Fatalf("List = %q", ids)
	}
	if mustEntry(t, e, "a") != entryA || mustEntry(t, e, "c") != entryC {
		t.Fatal("unchanged or rejected job re-armed by Sync")
	}
	if st := mustGet(t, e, "c"); !st.Armed || st.LastError != "bad" || st.CronExpr != "0 1 * * *" {
		t.Fatalf("c: %+v", st)
	}
	if st := mustGet(t, e, "g"); st.Armed || st.LastError == "" {
		t.Fatalf("g: %+v", st)
	}
	if st := mustGet(t, e, "b"); st.CronExpr != "0 2 * * *" || !st.Armed {
		t.Fatalf("b: %+v", st)
	}
	if n := e.Len(); n != 4 { // a b c e
		t.Fatalf("Len = %d, want 4", n)
	}
	if n := robfigEntries(e); n != 4 {
		t.Fatalf("robfig holds %d entries, want 4", n)
	}
	// The same snapshot again (as a periodic resync sees it) changes nothing,
	// although it still holds bad documents.
	if got := syncItems(e, items); !sameStats(got, SyncStats{Unchanged: 4, Rejected: 3}) {
		t.Fatalf("second Sync = %+v", got)
	}
	// A metadata-only change or a cleared error is a change; updated_at is not.
	a := sch("a", "0 1 * * *")
	a.Category, a.UpdatedAt = "x", time.Now()
	items[0].Schedule = a
	items[2] = Item{Schedule: sch("c", "0 1 * * *")}
	e5 := sch("e", "0 1 * * *")
	e5.UpdatedAt = time.Now()
	items[3].Schedule = e5
	if got := syncItems(e, items); !sameStats(got, SyncStats{Unchanged: 5, Rejected: 2, Changed: []string{"a", "c"}}) {
		t.Fatalf("third Sync = %+v", got)
	}
	if got := syncItems(e, nil); !sameStats(got, SyncStats{Removed: 6, Changed: []string{"a", "b", "c", "e", "f", "g"}}) {
		t.Fatalf("Sync(nil) = %+v", got)
	}
	if e.Len() != 0 || robfigEntries(e) != 0 || len(e.List()) != 0 {
		t.Fatal("Sync(nil) left jobs behind")
	}
}

func sameStats(a, b SyncStats) bool {
	return slices.Equal(a.Changed, b.Changed) &&
		a.Added == b.Added && a.Replaced == b.Replaced && a.Unchanged == b.Unchanged &&
		a.Disarmed == b.Disarmed && a.Removed == b.Removed && a.Rejected == b.Rejected
}

// settledEntries waits until the robfig removals handed off by Reload and
// Remove are done and counts shard i's robfig entries.
func settledEntries(e *Engine, i int) int {
	e.retired.wait()
	return shardEntries(e.shards[i])
}

// shardEntries counts the robfig entries of sh, 0 when its robfig engine
// was never made.
func shardEntries(sh *shard) int {
	sh.mu.Lock()
	c := sh.cron
	sh.mu.Unlock()
	if c == nil {
		return 0
	}
	return len(c.Entries())
}

func robfigEntries(e *Engine) int {
	e.retired.wait()
	n := 0
	for _, sh := range e.shards {
		n += shardEntries(sh)
	}
	return n
}

type fire struct {
	id         string
	slot, wall time.Time
}

// TestFire runs a real every-second job: its slots are whole seconds,
// strictly increasing and never after the wall time of the callback.
func TestFire(t *testing.T) {
	fires := make(chan fire, 100)
	var once sync.Once
	e := newEngine(t, Options{Fire: func(d schedule.Due) {
		wall := time.Now()
		fires <- fire{d.Schedule.ID, d.Slot, wall}
		once.Do(func() { panic("a fire callback panics") }) // must not kill the process
	}})
	expect(t, e.Reload(sch("tick", "* * * * * *")), Added)

	var got []fire
	deadline := time.After(15 * time.Second)
	for len(got) < 3 {
		select {
		case f := <-fires:
			got = append(got, f)
		case <-deadline:
			t.Fatalf("only %d fires within 15s", len(got))
		}
	}
	for i, f := range got {
		if f.id != "tick" {
			t.Fatalf("fire for %q", f.id)
		}
		if f.slot.Nanosecond() != 0 {
			t.Fatalf("slot %s is not a whole second", f.slot)
		}
		if f.slot.After(f.wall) {
			t.Fatalf("slot %s after the wall time %s of the fire", f.slot, f.wall)
		}
		if i > 0 && !f.slot.After(got[i-1].slot) {
			t.Fatalf("slots not strictly increasing: %s then %s", got[i-1].slot, f.slot)
		}
	}

	// Stop waits for running callbacks; afterwards nothing fires.
	block, started := make(chan struct{}), make(chan struct{})
	e2 := New(Options{Logger: quiet(), Fire: func(schedule.Due) {
		select {
		case started <- struct{}{}:
		default:
		}
		<-block
	}})
	e2.Reload(sch("slow", "* * * * * *")) // loaded before Start
	e2.Start()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("slow job never fired")
	}
	ctx := e2.Stop()
	select {
	case <-ctx.Done():
		t.Fatal("Stop did not wait for the running callback")
	default:
	}
	close(block)
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Stop context not done after the callback returned")
	}
}

// TestConcurrent hammers one engine from many goroutines (run with -race)
// and then checks that no robfig entry leaked or went missing.
func TestConcurrent(t *testing.T) {
	var fired sync.Map
	e := newEngine(t, Options{Shards: 4, Fire: func(d schedule.Due) { fired.Store(d.Schedule.ID, d.Slot) }})
	exprs := []string{"* * * * * *", "*/2 * * * * *", "0 9 * * *", "@every 1s", "61 * * * *", "", "@hourly"}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for i := 0; i < 3000 && ctx.Err() == nil; i++ {
				id := fmt.Sprintf("j%02d", r.IntN(40))
				switch op := r.IntN(20); {
				case op < 10:
					s := sch(id, exprs[r.IntN(len(exprs))])
					s.Enabled = r.IntN(5) != 0
					s.Category = fmt.Sprint(r.IntN(3))
					e.Reload(s)
				case op < 12:
					e.Remove(id)
				case op < 13:
					e.Reject(id, errors.New("bad"))
				case op < 14 && w == 0:
					syncItems(e, []Item{{Schedule: sch(id, "* * * * * *")}, {Schedule: sch("j00", "0 9 * * *")}})
				case op < 17:
					for _, st := range e.List() {
						if st.Armed && st.NextRun.IsZero() {
							t.Errorf("armed job %s without next run", st.ID)
						}
					}
				default:
					e.Get(id)
					e.Len()
				}
			}
		})
	}
	wg.Wait()

	armed := 0
	for _, st := range e.List() {
		if st.Armed {
			armed++
			mustEntry(t, e, st.ID)
		} else if _, _, ok := e.entry(st.ID); ok {
			t.Errorf("job %s not armed but has an entry", st.ID)
		}
	}
	if armed != e.Len() {
		t.Fatalf("List shows %d armed, Len says %d", armed, e.Len())
	}
	if n := robfigEntries(e); n != armed {
		t.Fatalf("robfig holds %d entries, %d jobs armed", n, armed)
	}
}

func TestOutcomeString(t *testing.T) {
	for o, want := range map[Outcome]string{Added: "added", Replaced: "replaced", Unchanged: "unchanged",
		Disarmed: "disarmed", Rejected: "rejected", 0: "Outcome(0)"} {
		if o.String() != want {
			t.Errorf("%d.String() = %q, want %q", int(o), o.String(), want)
		}
	}
}

// A replaced or removed job's robfig entry may linger until its removal
// goroutine has run; retired, it must neither run nor ask for another
// activation meanwhile.
func TestRetiredEntryNeverRuns(t *testing.T) {
	var fired atomic.Int64
	// Not started: robfig's timers never call Run here, only the test does,
	// so an every-second job cannot fire on its own between the calls.
	e := New(Options{Shards: 1, Logger: quiet(), Fire: func(schedule.Due) { fired.Add(1) }})
	expect(t, e.Reload(sch("a", "* * * * * *")), Added)
	old := e.load("a").fire
	expect(t, e.Reload(sch("a", "0 9 1 1 *")), Replaced)
	if !old.retired.Load() {
		t.Fatal("the replaced entry's job is not retired")
	}
	if n := old.Next(time.Now()); !n.IsZero() {
		t.Fatalf("retired entry asks for another activation at %v", n)
	}
	old.Run()
	if fired.Load() != 0 {
		t.Fatal("retired entry ran the fire callback")
	}
	cur := e.load("a").fire
	// The same call on a live every-second entry does fire, so the check
	// above can fail.
	expect(t, e.Reload(sch("b", "* * * * * *")), Added)
	e.load("b").fire.Run()
	if fired.Load() != 1 {
		t.Fatalf("live entry's Run fired %d times, want 1", fired.Load())
	}
	if cur == nil || cur.retired.Load() {
		t.Fatal("the new entry is retired")
	}
	if !e.Remove("a") || !cur.retired.Load() {
		t.Fatal("Remove did not retire the entry")
	}
	e.Remove("b")
	if n := settledEntries(e, 0); n != 0 {
		t.Fatalf("%d robfig entries left after the removals settled", n)
	}
}

// Reload and Remove have taken effect when they return: the status read
// right after shows the new state, a rejected schedule leaves the last
// known good, and a second Remove finds nothing.
func TestReloadAndRemoveTakeEffectOnReturn(t *testing.T) {
	e := newEngine(t, Options{Shards: 4})
	off := sch("a", "0 8 * * *")
	off.Enabled = false
	for _, step := range []struct {
		s     schedule.Schedule
		want  Outcome
		armed bool
	}{{sch("a", "0 9 * * *"), Added, true}, {sch("a", "0 9 * * *"), Unchanged, true},
		{sch("a", "0 8 * * *"), Replaced, true}, {off, Disarmed, false}} {
		expect(t, e.Reload(step.s), step.want)
		if st := mustGet(t, e, "a"); st.Armed != step.armed || st.CronExpr != step.s.CronExpr || st.Enabled != step.s.Enabled {
			t.Fatalf("%s: status %+v right after Reload", step.want, st)
		}
	}
	expect(t, e.Reload(sch("a", "0 25 * * *")), Rejected)
	if st := mustGet(t, e, "a"); st.CronExpr != "0 8 * * *" || st.LastError == "" {
		t.Fatalf("bad schedule: status %+v, want the last known good with an error", st)
	}
	if !e.Remove("a") {
		t.Fatal("Remove(a) = false")
	}
	if _, ok := e.Get("a"); ok {
		t.Fatal("job a still known right after Remove")
	}
	if e.Remove("a") {
		t.Fatal("second Remove(a) = true")
	}
}

// testPolicy is a Policy made of two optional functions (nil: no check, no
// jitter).
type testPolicy struct {
	check  func(schedule.Schedule) error
	jitter func(schedule.Schedule) time.Duration
}

func (p testPolicy) Check(s schedule.Schedule) error {
	if p.check == nil {
		return nil
	}
	return p.check(s)
}

func (p testPolicy) Jitter(s schedule.Schedule) time.Duration {
	if p.jitter == nil {
		return 0
	}
	return p.jitter(s)
}

// Version changes with every change of the jobs List returns (added,
// re-timed, disabled, rejected, removed, synced), and while it stays the
// same, List returns the same jobs in the same state but for their next
// runs: the status page keeps what it derived from List until then.
func TestVersionFollowsTheJobs(t *testing.T) {
	var clock atomic.Int64 // Unix seconds; the engine's timers never fire in this test
	clock.Store(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).Unix())
	e := New(Options{Shards: 1, Logger: quiet(), Now: func() time.Time { return time.Unix(clock.Load(), 0) }})
	withoutNext := func() []Status {
		list := e.List()
		for i := range list {
			list[i].NextRun = time.Time{}
		}
		return list
	}
	v, list := e.Version(), withoutNext()
	changed := func(what string) {
		t.Helper()
		nv, nl := e.Version(), withoutNext()
		if nv == v {
			t.Errorf("%s: Version stayed %d", what, v)
		}
		if reflect.DeepEqual(nl, list) {
			t.Errorf("%s: List did not change", what)
		}
		v, list = nv, nl
	}
	expect(t, e.Reload(sch("a", "0 9 * * *")), Added)
	changed("added")
	expect(t, e.Reload(sch("a", "0 10 * * *")), Replaced)
	changed("re-timed")
	off := sch("a", "0 10 * * *")
	off.Enabled = false
	expect(t, e.Reload(off), Disarmed)
	changed("disabled")
	e.Reject("a", errors.New("bad document"))
	changed("rejected")
	e.Remove("a")
	changed("removed")
	syncItems(e, []Item{{Schedule: sch("b", "@every 1s")}, {Schedule: sch("c", "0 9 * * *")}})
	changed("synced")

	// Time passes; b's next run moves, nothing else does.
	first := mustGet(t, e, "b").NextRun
	clock.Add(10)
	if next := mustGet(t, e, "b").NextRun; !next.After(first) {
		t.Fatalf("b's next run %s after 10 s, was %s", next, first)
	}
	if e.Version() != v || !reflect.DeepEqual(withoutNext(), list) {
		t.Errorf("the clock alone changed Version (%d → %d) or List", v, e.Version())
	}
}

// A rejection says "last known good kept" only when there is one: a job
// whose first document is refused is logged as not armed, with no valid
// version known; once it had a valid one, a refusal keeps it.
func TestRejectLogSaysWhetherALastKnownGoodIsKept(t *testing.T) {
	var buf syncBuffer
	e := newEngine(t, Options{Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
	bad := errors.New("bad expression")
	msgs := func() []string {
		var out []string
		for l := range strings.Lines(buf.String()) {
			var rec struct {
				Msg   string `json:"msg"`
				JobID string `json:"job_id"`
				Armed *bool  `json:"armed"`
			}
			if err := json.Unmarshal([]byte(l), &rec); err != nil {
				t.Fatal(err)
			}
			if rec.Armed != nil {
				out = append(out, fmt.Sprintf("%s %s armed=%v", rec.JobID, rec.Msg, *rec.Armed))
			}
		}
		return out
	}
	e.Reject("fresh", bad)
	e.Reload(sch("good", "0 9 * * *"))
	e.Reject("good", bad)
	want := []string{
		"fresh scheduler: schedule rejected, not armed: no valid version of the job is known armed=false",
		"good scheduler: schedule rejected, last known good kept armed=true",
	}
	if got := msgs(); !slices.Equal(got, want) {
		t.Errorf("rejection lines %q, want %q", got, want)
	}
}

// KnowsValid tells a job kept on its last known good from one known only
// by a refused document.
func TestKnowsValid(t *testing.T) {
	e := newEngine(t, Options{})
	e.Reject("fresh", errors.New("bad"))
	e.Reload(sch("good", "0 9 * * *"))
	e.Reject("good", errors.New("bad"))
	if e.KnowsValid("fresh") || !e.KnowsValid("good") || e.KnowsValid("unknown") {
		t.Errorf("KnowsValid: fresh %v, good %v, unknown %v; want false, true, false",
			e.KnowsValid("fresh"), e.KnowsValid("good"), e.KnowsValid("unknown"))
	}
}
