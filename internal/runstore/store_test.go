package runstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/internal/testmongo"
	"github.com/cronswap/cronswap/jobs"
)

// storeEnv is a database of the test server with job_locks and job_runs.
type storeEnv struct {
	db    *mongo.Database
	locks *mongo.Collection
	runs  *mongo.Collection
}

func newStoreEnv(t testing.TB) storeEnv {
	t.Helper()
	return newStoreEnvOn(t, testmongo.Client(t))
}

func newStoreEnvOn(t testing.TB, client *mongo.Client) storeEnv {
	t.Helper()
	db := testmongo.NewDatabase(t, client)
	locks, runs := record.Collections(db)
	e := storeEnv{db: db, locks: locks, runs: runs}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := record.EnsureIndexes(ctx, e.runs); err != nil {
		t.Fatal(err)
	}
	return e
}

// replica is one claimer: a store and the instance and incarnation it
// claims as.
type replica struct {
	*Store
	inst, inc string
}

func (e storeEnv) replica(instance, incarnation string) replica {
	return replica{New(e.locks, e.runs, Options{Instance: instance, Logger: slog.New(slog.DiscardHandler)}),
		instance, incarnation}
}

func (r replica) claim(t testing.TB, now time.Time, ttl time.Duration, fires ...record.FireClaim) []record.ClaimOutcome {
	t.Helper()
	return r.ClaimBatch(testCtx(t), record.BatchClaim{Fires: fires, Instance: r.inst, Incarnation: r.inc, Now: now, TTL: ttl})
}

// claimOne claims one fire and wants result.
func (r replica) claimOne(t testing.TB, f record.FireClaim, now time.Time, want record.ClaimResult) record.ClaimOutcome {
	t.Helper()
	o := r.claim(t, now, 10*time.Second, f)[0]
	if o.Err != nil {
		t.Fatalf("claim %s at %s by %s/%s: %v", f.JobID, f.Slot.Format(time.TimeOnly), r.inst, r.inc, o.Err)
	}
	if o.Result != want {
		t.Fatalf("claim %s at %s by %s/%s = %v (%+v), want %v", f.JobID, f.Slot.Format(time.TimeOnly), r.inst, r.inc, o.Result, o, want)
	}
	return o
}

func forbid(job string, slot time.Time) record.FireClaim {
	return record.FireClaim{JobID: job, Slot: slot, Overlap: jobs.OverlapSkip}
}

func allow(job string, slot time.Time) record.FireClaim {
	return record.FireClaim{JobID: job, Slot: slot, Overlap: jobs.OverlapAllow}
}

func (e storeEnv) lock(t testing.TB, id string) record.LockDoc {
	t.Helper()
	var d record.LockDoc
	if err := e.locks.FindOne(testCtx(t), bson.D{{Key: "_id", Value: id}}).Decode(&d); err != nil {
		t.Fatalf("lock %s: %v", id, err)
	}
	return d
}

func (e storeEnv) runDocs(t testing.TB, jobID string) []record.RunDoc {
	t.Helper()
	cur, err := e.runs.Find(testCtx(t), bson.D{{Key: "job_id", Value: jobID}},
		options.Find().SetSort(bson.D{{Key: "scheduled_at", Value: 1}}))
	if err != nil {
		t.Fatal(err)
	}
	var out []record.RunDoc
	if err := cur.All(testCtx(t), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func (e storeEnv) run(t testing.TB, runID string) record.RunDoc {
	t.Helper()
	var d record.RunDoc
	if err := e.runs.FindOne(testCtx(t), bson.D{{Key: "_id", Value: runID}}).Decode(&d); err != nil {
		t.Fatalf("run %s: %v", runID, err)
	}
	return d
}

// rawRun reads a record as stored, to see which fields are there.
func (e storeEnv) rawRun(t testing.TB, runID string) bson.Raw {
	t.Helper()
	raw, err := e.runs.FindOne(testCtx(t), bson.D{{Key: "_id", Value: runID}}).Raw()
	if err != nil {
		t.Fatalf("run %s: %v", runID, err)
	}
	return raw
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// base is a fixed instant the store tests count from (second resolution,
// like cron slots).
var base = time.Date(2030, 1, 2, 3, 4, 0, 0, time.UTC)

// Two replicas claim the same batch at once: every fire is won by exactly
// one of them; the lease, the record and the lock say who and with which
// fence.
func TestClaimBatchOneWinnerAcrossReplicas(t *testing.T) {
	t.Parallel()
	e := newStoreEnv(t)
	a, b := e.replica("a", "a1"), e.replica("b", "b1")
	var fires []record.FireClaim
	for i := range 40 {
		fires = append(fires, forbid(fmt.Sprintf("f%d", i), base), allow(fmt.Sprintf("p%d", i), base))
	}
	var outs [2][]record.ClaimOutcome
	var wg sync.WaitGroup
	for k, r := range []replica{a, b} {
		wg.Go(func() { outs[k] = r.claim(t, base, 10*time.Second, fires...) })
	}
	wg.Wait()
	for i, f := range fires {
		won := 0
		for k := range 2 {
			o := outs[k][i]
			if o.Err != nil {
				t.Fatalf("%s: %v", f.JobID, o.Err)
			}
			switch o.Result {
			case record.Acquired:
				won++
				l := o.Lease
				inst := []string{"a", "b"}[k]
				if l.RunID != record.RunID(f.JobID, base) || l.Fence != base.UnixMilli() || l.Instance != inst ||
					l.Incarnation != inst+"1" || l.Overlap != f.Overlap || !l.Slot.Equal(base) {
					t.Errorf("%s: lease %+v", f.JobID, l)
				}
				r := e.run(t, l.RunID)
				if r.Status != record.StatusRunning || r.Instance != inst || r.Incarnation != inst+"1" || r.Fence != l.Fence ||
					!r.LeaseUntil.Equal(base.Add(10*time.Second)) || !r.StartedAt.Equal(base) {
					t.Errorf("%s: record %+v", f.JobID, r)
				}
				if f.Overlap == jobs.OverlapSkip {
					lk := e.lock(t, f.JobID)
					if lk.State != record.LockRunning || lk.Holder != inst || lk.Incarnation != inst+"1" || lk.RunID != l.RunID ||
						lk.Fence != l.Fence || !lk.LastSlot.Equal(base) {
						t.Errorf("%s: lock %+v", f.JobID, lk)
					}
				}
			case record.AlreadyFired:
			default:
				t.Errorf("%s: result %v", f.JobID, o.Result)
			}
		}
		if won != 1 {
			t.Errorf("%s: %d winners, want 1", f.JobID, won)
		}
	}
	// Allow jobs take no lock at the claim, but move their last slot.
	var freeAllow []record.LockDoc
	cur, err := e.locks.Find(testCtx(t), bson.D{{Key: "_id", Value: bson.D{{Key: "$regex", Value: "^p"}}}})
	if err != nil || cur.All(testCtx(t), &freeAllow) != nil {
		t.Fatal(err)
	}
	for _, l := range freeAllow {
		if l.State != record.LockFree || !l.LastSlot.Equal(base) {
			t.Errorf("allow job's lock %+v: want free with last slot %s", l, base)
		}
	}
	// The same slot again, from anyone: already fired.
	for _, r := range []replica{a, b} {
		for i, o := range r.claim(t, base.Add(time.Second), 10*time.Second, fires...) {
			if o.Result != record.AlreadyFired || o.Err != nil {
				t.Fatalf("%s again: %+v", fires[i].JobID, o)
			}
		}
	}
}

// A fire twice in one batch is answered once.
func TestClaimBatchDuplicateFireInBatch(t *testing.T) {
	t.Parallel()
	e := newStoreEnv(t)
	a := e.replica("a", "a1")
	outs := a.claim(t, base, 10*time.Second, forbid("j", base), forbid("j", base))
	if outs[0].Result != record.Acquired || outs[1].Result != record.AlreadyFired {
		t.Fatalf("outcomes %+v", outs)
	}
}

// Off-schedule fires of one job sharing a scheduled_at, each with its own
// run id, in one batch: the unique (job_id, scheduled_at) index admits one
// record, so one is acquired and every other is told the slot is taken,
// naming the record that holds it — under a policy taking the lock and
// under allow, and for a slot a missed record already holds.
func TestClaimBatchOffScheduleFiresSharingASlot(t *testing.T) {
	t.Parallel()
	e := newStoreEnv(t)
	a := e.replica("a", "a1")
	sharing := func(job string, o jobs.Overlap, slot time.Time, n int) []record.FireClaim {
		fires := make([]record.FireClaim, n)
		for i := range fires {
			fires[i] = record.FireClaim{JobID: job, Slot: slot, Overlap: o, OffSchedule: true,
				RunID: fmt.Sprintf("%s/run%02d", job, i), Fence: slot.UnixMilli()}
		}
		return fires
	}
	slot := base.Add(123 * time.Millisecond)
	for _, o := range []jobs.Overlap{jobs.OverlapAllow, jobs.OverlapSkip} {
		job := "shared-" + string(o)
		fires := sharing(job, o, slot, 20)
		won := ""
		for i, out := range a.claim(t, base, 10*time.Second, fires...) {
			switch {
			case out.Err != nil:
				t.Errorf("%s fire %d: %v", o, i, out.Err)
			case out.Result == record.Acquired && won == "":
				won = out.Lease.RunID
			case out.Result == record.AlreadyFired:
			default:
				t.Errorf("%s fire %d: %+v, want one acquired and the others already fired", o, i, out)
			}
		}
		if won == "" {
			t.Fatalf("%s: no fire acquired", o)
		}
		for i, out := range a.claim(t, base, 10*time.Second, fires...) {
			if out.Err != nil || out.Result != record.AlreadyFired || !strings.Contains(out.Reason, won) {
				t.Errorf("%s fire %d again: %+v, want already fired by %s", o, i, out, won)
			}
		}
	}
	// The slot is a missed record's (another _id): every fire is told so.
	t1 := base.Add(time.Hour)
	if _, err := e.runs.InsertOne(testCtx(t), record.RunDoc{ID: record.MissedID("m", t1), JobID: "m", ScheduledAt: t1, LastScheduledAt: t1,
		Count: 1, Status: record.StatusMissed, Reason: record.MissedNoReplica}); err != nil {
		t.Fatal(err)
	}
	for i, out := range a.claim(t, t1, 10*time.Second, sharing("m", jobs.OverlapAllow, t1, 20)...) {
		if out.Err != nil || out.Result != record.AlreadyFired || !strings.Contains(out.Reason, record.MissedID("m", t1)) {
			t.Errorf("fire %d of a missed slot: %+v, want already fired by the missed record", i, out)
		}
	}
}

// Check fires (the replica is not the job's owner) look first: a recorded
// slot is not inserted again, an unrecorded one is claimed as usual.
func TestClaimBatchCheck(t *testing.T) {
	t.Parallel()
	e := newStoreEnv(t)
	a, b := e.replica("a", "a1"), e.replica("b", "b1")
	a.claimOne(t, forbid("j", base), base, record.Acquired)
	outs := b.claim(t, base, 10*time.Second,
		record.FireClaim{JobID: "j", Slot: base, Overlap: jobs.OverlapSkip, Check: true},
		record.FireClaim{JobID: "k", Slot: base, Overlap: jobs.OverlapSkip, Check: true},
		record.FireClaim{JobID: "m", Slot: base, Overlap: jobs.OverlapAllow, Check: true})
	if outs[0].Result != record.AlreadyFired || !strings.Contains(outs[0].Reason, "running by a") {
		t.Errorf("recorded fire: %+v", outs[0])
	}
	if outs[1].Result != record.Acquired || outs[2].Result != record.Acquired {
		t.Errorf("unrecorded fires: %+v %+v", outs[1], outs[2])
	}
	// A missed record of the slot (another _id) counts as recorded too,
	// with or without Check.
	t1 := base.Add(time.Minute)
	if _, err := e.runs.InsertOne(testCtx(t), record.RunDoc{ID: record.MissedID("j", t1), JobID: "j", ScheduledAt: t1, LastScheduledAt: t1,
		Count: 1, Status: record.StatusMissed, Reason: record.MissedNoReplica}); err != nil {
		t.Fatal(err)
	}
	b.claimOne(t, record.FireClaim{JobID: "j", Slot: t1, Overlap: jobs.OverlapSkip, Check: true}, t1, record.AlreadyFired)
	b.claimOne(t, allow("j", t1), t1, record.AlreadyFired)
}

// Under forbid a fire while a live run holds the lock is skipped: its
// record says skipped with the reason, and nobody claims the slot again.
func TestClaimBatchForbidSkippedWhileHeld(t *testing.T) {
	t.Parallel()
	e := newStoreEnv(t)
	a, b := e.replica("a", "a1"), e.replica("b", "b1")
	o := a.claimOne(t, forbid("j", base), base, record.Acquired)
	t1 := base.Add(time.Second)
	sk := b.claimOne(t, forbid("j", t1), t1, record.Skipped)
	if sk.Holder != "a" || sk.HolderRunID != o.Lease.RunID || !strings.Contains(sk.Reason, "still holds the lock") {
		t.Errorf("skip %+v: want holder a, run %s", sk, o.Lease.RunID)
	}
	r := e.run(t, record.RunID("j", t1))
	if r.Status != record.StatusSkipped || r.Instance != "b" || r.Reason != sk.Reason || !r.LeaseUntil.IsZero() || r.EndedAt.IsZero() {
		t.Errorf("skipped record %+v", r)
	}
	a.claimOne(t, forbid("j", t1), t1, record.AlreadyFired)
	// The holder's own next fire is skipped too (same incarnation: the
	// run is alive in this process).
	t2 := t1.Add(time.Second)
	a.claimOne(t, forbid("j", t2), t2, record.Skipped)
	if l := e.lock(t, "j"); l.RunID != o.Lease.RunID || !l.LastSlot.Equal(base) {
		t.Errorf("lock after skips %+v: want still %s's", l, o.Lease.RunID)
	}
}

// A lock held by this instance under another incarnation is a previous
// life's: taken over at once, without waiting for its lease; other
// instances still skip.
func TestClaimBatchPreviousIncarnationTakenOver(t *testing.T) {
	t.Parallel()
	e := newStoreEnv(t)
	old, b, again := e.replica("a", "a1"), e.replica("b", "b1"), e.replica("a", "a2")
	o := old.claimOne(t, forbid("j", base), base, record.Acquired)
	t1 := base.Add(time.Second)
	b.claimOne(t, forbid("j", t1), t1, record.Skipped)
	t2 := t1.Add(time.Second)
	o2 := again.claimOne(t, forbid("j", t2), t2, record.TakenOver)
	if o2.Holder != "a" || o2.HolderRunID != o.Lease.RunID {
		t.Errorf("takeover %+v: want it to name the previous life's run %s", o2, o.Lease.RunID)
	}
	if l := e.lock(t, "j"); l.Incarnation != "a2" || l.RunID != o2.Lease.RunID || l.Fence != record.FenceOf(t2) || l.Fence <= o.Lease.Fence {
		t.Fatalf("lock %+v after the takeover", l)
	}
	// The old life's renewals find the lock gone.
	lost, err := old.RenewBatch(testCtx(t), []record.Lease{o.Lease}, t2, 10*time.Second)
	if err != nil || len(lost) != 1 {
		t.Fatalf("renew of the previous life: lost %v, %v", lost, err)
	}
}

func TestClaimBatchExpiredLeaseTakenOver(t *testing.T) {
	t.Parallel()
	e := newStoreEnv(t)
	a, b := e.replica("a", "a1"), e.replica("b", "b1")
	const ttl = 3 * time.Second
	o := a.claim(t, base, ttl, forbid("j", base))[0]
	if o.Result != record.Acquired {
		t.Fatal(o)
	}
	// Renewed, the lock stays a's.
	if lost, err := a.RenewBatch(testCtx(t), []record.Lease{o.Lease}, base.Add(2*time.Second), ttl); err != nil || len(lost) != 0 {
		t.Fatalf("renew: %v %v", lost, err)
	}
	t1 := base.Add(4 * time.Second)
	if o := b.claim(t, t1, ttl, forbid("j", t1))[0]; o.Result != record.Skipped {
		t.Fatalf("within the lease: %+v", o)
	}
	// a stops renewing; past the lease b takes over.
	t2 := base.Add(6 * time.Second)
	o2 := b.claim(t, t2, ttl, forbid("j", t2))[0]
	if o2.Result != record.TakenOver || o2.Lease.Fence != record.FenceOf(t2) || o2.Holder != "a" || o2.HolderRunID != o.Lease.RunID {
		t.Fatalf("after the lease: %+v, want taken over from a's run %s", o2, o.Lease.RunID)
	}
	if lost, err := a.RenewBatch(testCtx(t), []record.Lease{o.Lease}, t2, ttl); err != nil || len(lost) != 1 {
		t.Fatalf("late renew: lost %v, %v", lost, err)
	}
	if l := e.lock(t, "j"); l.Holder != "b" || l.RunID != o2.Lease.RunID {
		t.Fatalf("lock %+v: want b's", l)
	}
}

// A slot earlier than one already claimed for the job is skipped.
func TestClaimBatchLaterSlotClaimedFirst(t *testing.T) {
	t.Parallel()
	e := newStoreEnv(t)
	a, b := e.replica("a", "a1"), e.replica("b", "b1")
	t2 := base.Add(2 * time.Second)
	o := a.claimOne(t, forbid("j", t2), t2, record.Acquired)
	errs := a.EndBatch(testCtx(t), []record.LeaseEnd{{Lease: o.Lease, End: record.RunEnd{Status: record.StatusSucceeded, EndedAt: t2}}})
	if errs[0] != nil {
		t.Fatal(errs[0])
	}
	sk := b.claimOne(t, forbid("j", base), t2, record.Skipped)
	if !strings.Contains(sk.Reason, "later slot") {
		t.Errorf("reason %q", sk.Reason)
	}
	if r := e.run(t, record.RunID("j", base)); r.Status != record.StatusSkipped {
		t.Errorf("record %+v", r)
	}
}

// A slot a hand-over offers (a reason for being overtaken), earlier than
// one already claimed for the job, is recorded missed with that reason
// instead of skipped, under a policy that takes the lock and under allow:
// one missed record of the slot, notified, decided for the start-up gaps
// and the missed recorder, and the lock's last slot left where it was.
func TestClaimBatchOvertakenSlotRecordedMissed(t *testing.T) {
	t.Parallel()
	e := newStoreEnv(t)
	a, b := e.replica("a", "a1"), e.replica("b", "b1")
	t2 := base.Add(2 * time.Second)
	for _, mk := range []func(string, time.Time) record.FireClaim{forbid, allow} {
		job := "j-" + string(mk("", base).Overlap)
		o := a.claimOne(t, mk(job, t2), t2, record.Acquired)
		if errs := a.EndBatch(testCtx(t), []record.LeaseEnd{{Lease: o.Lease, End: record.RunEnd{Status: record.StatusSucceeded, EndedAt: t2}}}); errs[0] != nil {
			t.Fatal(errs[0])
		}
		offered := mk(job, base)
		offered.OvertakenReason = record.MissedHandOver
		m := b.claimOne(t, offered, t2, record.Missed)
		if m.Reason != record.MissedHandOver {
			t.Errorf("%s: outcome reason %q, want %q", job, m.Reason, record.MissedHandOver)
		}
		r := e.run(t, record.RunID(job, base))
		if r.Status != record.StatusMissed || r.Reason != record.MissedHandOver || r.Count != 1 ||
			!r.LastScheduledAt.Equal(base) || !strings.Contains(r.Error, "later slot") || r.Notice == nil {
			t.Errorf("%s: record %+v, want one slot missed %s, the later slot named, notified", job, r, record.MissedHandOver)
		}
		if raw := e.rawRun(t, record.RunID(job, base)); raw.Lookup("lease_until").Type != 0 || raw.Lookup("started_at").Type != 0 {
			t.Errorf("%s: the missed record keeps a lease or a start: %s", job, raw)
		}
		decided, err := b.DecidedSlots(testCtx(t), []string{job}, t2)
		if err != nil || !decided[job].Equal(t2) {
			t.Errorf("%s: decided slots %v (%v), want the later slot", job, decided, err)
		}
		if mk(job, base).Overlap.TakesLock() {
			if l := e.lock(t, job); !l.LastSlot.Equal(t2) {
				t.Errorf("%s: lock's last slot %v, want %v", job, l.LastSlot, t2)
			}
		}
		// Without a reason, the same fire of another slot is skipped.
		plain := b.claimOne(t, mk(job, base.Add(time.Second)), t2, record.Skipped)
		if r := e.run(t, record.RunID(job, base.Add(time.Second))); r.Status != record.StatusSkipped || !strings.Contains(plain.Reason, "later slot") {
			t.Errorf("%s: without a reason: %+v, record %+v; want skipped for the later slot", job, plain, r)
		}
	}
}

// Many replicas racing for one slot, and for the next one: one winner per
// slot, whatever the policy.
func TestClaimBatchConcurrentClaims(t *testing.T) {
	t.Parallel()
	e := newStoreEnv(t)
	for _, mk := range []func(string, time.Time) record.FireClaim{forbid, allow} {
		for i := range 4 {
			slot := base.Add(time.Duration(i) * time.Minute)
			var mu sync.Mutex
			var wins []record.Lease
			var wg sync.WaitGroup
			for k := range 6 {
				r := e.replica(fmt.Sprintf("r%d", k), "x")
				wg.Go(func() {
					o := r.claim(t, slot, 10*time.Second, mk("race-"+string(mk("", slot).Overlap), slot))[0]
					if o.Err != nil {
						t.Error(o.Err)
						return
					}
					if o.Result == record.Acquired {
						mu.Lock()
						wins = append(wins, o.Lease)
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			if len(wins) != 1 {
				t.Fatalf("%s slot %d: %d winners", mk("", slot).Overlap, i, len(wins))
			}
			w := e.replica(wins[0].Instance, "x")
			if errs := w.EndBatch(testCtx(t), []record.LeaseEnd{{Lease: wins[0], End: record.RunEnd{Status: record.StatusSucceeded, EndedAt: slot}}}); errs[0] != nil {
				t.Fatal(errs[0])
			}
		}
	}
}

// damagedLocks are the bad states of the state table in docs/locks.md, as an operator or
// a bug might leave them. Each must be repaired by the next claim.
func damagedLocks(now time.Time) map[string]bson.D {
	good := func(extra ...bson.E) bson.D {
		d := bson.D{
			{Key: "state", Value: "free"}, {Key: "holder", Value: ""}, {Key: "run_id", Value: ""},
			{Key: "lease_until", Value: now.Add(-time.Hour)}, {Key: "fence", Value: int64(7)},
			{Key: "last_slot", Value: now.Add(-time.Hour)}, {Key: "updated_at", Value: now},
		}
		for _, e := range extra {
			replaced := false
			for i := range d {
				if d[i].Key == e.Key {
					d[i], replaced = e, true
				}
			}
			if !replaced {
				d = append(d, e)
			}
		}
		return d
	}
	without := func(d bson.D, key string) bson.D {
		out := bson.D{}
		for _, e := range d {
			if e.Key != key {
				out = append(out, e)
			}
		}
		return out
	}
	running := func(extra ...bson.E) bson.D {
		return good(append([]bson.E{{Key: "state", Value: "running"}, {Key: "holder", Value: "ghost"},
			{Key: "run_id", Value: "ghost-run"}, {Key: "lease_until", Value: now.Add(time.Hour)}}, extra...)...)
	}
	return map[string]bson.D{
		"state_missing":         without(good(), "state"),
		"state_unknown":         good(bson.E{Key: "state", Value: "editing"}),
		"state_wrong_type":      good(bson.E{Key: "state", Value: true}),
		"fence_missing":         without(good(), "fence"),
		"fence_string":          good(bson.E{Key: "fence", Value: "seven"}),
		"fence_fraction":        good(bson.E{Key: "fence", Value: 7.5}),
		"fence_double":          good(bson.E{Key: "fence", Value: 7.0}),
		"fence_negative":        good(bson.E{Key: "fence", Value: int64(-1)}),
		"last_slot_missing":     without(good(), "last_slot"),
		"last_slot_string":      good(bson.E{Key: "last_slot", Value: "yesterday"}),
		"last_slot_far_future":  good(bson.E{Key: "last_slot", Value: now.AddDate(100, 0, 0)}),
		"running_no_holder":     running(bson.E{Key: "holder", Value: ""}),
		"running_holder_number": running(bson.E{Key: "holder", Value: int32(3)}),
		"running_no_lease":      without(running(), "lease_until"),
		"running_lease_string":  running(bson.E{Key: "lease_until", Value: "soon"}),
		"running_lease_far":     running(bson.E{Key: "lease_until", Value: now.AddDate(10, 0, 0)}),
		"running_run_id_number": running(bson.E{Key: "run_id", Value: int64(5)}),
	}
}

// Every damaged state of the table is repaired by the next claim, which
// then wins the slot; all in one batch.
func TestClaimBatchRepairsDamagedLocks(t *testing.T) {
	t.Parallel()
	e := newStoreEnv(t)
	ctx := testCtx(t)
	now := base
	a := e.replica("a", "a1")
	var fires []record.FireClaim
	for name, doc := range damagedLocks(now) {
		doc = append(bson.D{{Key: "_id", Value: name}}, doc...)
		if _, err := e.locks.InsertOne(ctx, doc); err != nil {
			t.Fatal(err)
		}
		// A running record the damaged lock may name.
		if _, err := e.runs.InsertOne(ctx, record.RunDoc{ID: "ghost-run", JobID: name, ScheduledAt: now.Add(-2 * time.Hour),
			Fence: 7, Status: record.StatusRunning, StartedAt: now.Add(-2 * time.Hour), LeaseUntil: now.Add(time.Hour)}); err != nil && !mongo.IsDuplicateKeyError(err) {
			t.Fatal(err)
		}
		fires = append(fires, forbid(name, now.Add(time.Second)))
	}
	outs := a.claim(t, now.Add(time.Second), 10*time.Second, fires...)
	for i, f := range fires {
		o := outs[i]
		if o.Err != nil || o.Result != record.Acquired {
			t.Errorf("%s: %+v, want the claim to win after the repair", f.JobID, o)
			continue
		}
		if len(o.Repaired) == 0 {
			t.Errorf("%s: no repair reported", f.JobID)
		}
		l := e.lock(t, f.JobID)
		if l.State != record.LockRunning || l.Holder != "a" || !l.LastSlot.Equal(f.Slot) || l.RepairReason == "" || l.Fence != record.FenceOf(f.Slot) {
			t.Errorf("%s: lock after repair+claim: %+v", f.JobID, l)
		}
	}
	if r := e.run(t, "ghost-run"); r.Status != record.StatusAbandoned || r.AbandonedAt.IsZero() || !r.EndedAt.IsZero() {
		t.Errorf("the run a damaged lock named: %+v, want abandoned (abandoned_at, no ended_at)", r)
	}
}

// Several replicas meeting the same damaged document at once: it is
// repaired once (compare-and-swap) and exactly one of them wins the slot.
func TestClaimBatchConcurrentRepairOneWinner(t *testing.T) {
	t.Parallel()
	e := newStoreEnv(t)
	ctx := testCtx(t)
	for i, name := range []string{"fence_string", "running_lease_far", "state_missing", "last_slot_string"} {
		id := fmt.Sprintf("c%d", i)
		doc := append(bson.D{{Key: "_id", Value: id}}, damagedLocks(base)[name]...)
		if _, err := e.locks.InsertOne(ctx, doc); err != nil {
			t.Fatal(err)
		}
		slot := base.Add(time.Second)
		var mu sync.Mutex
		wins, repairs := 0, 0
		var wg sync.WaitGroup
		for k := range 6 {
			r := e.replica(fmt.Sprintf("r%d", k), "x")
			wg.Go(func() {
				o := r.claim(t, slot, 10*time.Second, forbid(id, slot))[0]
				if o.Err != nil {
					t.Error(o.Err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				if len(o.Repaired) > 0 {
					repairs++
				}
				if o.Result == record.Acquired {
					wins++
				}
			})
		}
		wg.Wait()
		if wins != 1 || repairs != 1 {
			t.Fatalf("%s: %d winners and %d repairs, want 1 and 1", name, wins, repairs)
		}
	}
}

func TestInspectLockHealthy(t *testing.T) {
	t.Parallel()
	now := base
	for name, doc := range map[string]bson.D{
		"free":            {{Key: "state", Value: "free"}, {Key: "fence", Value: int64(0)}, {Key: "last_slot", Value: time.Time{}}},
		"free_old_holder": {{Key: "state", Value: "free"}, {Key: "holder", Value: "x"}, {Key: "fence", Value: int32(3)}, {Key: "last_slot", Value: now}},
		"running": {{Key: "state", Value: "running"}, {Key: "holder", Value: "x"}, {Key: "run_id", Value: "r"},
			{Key: "lease_until", Value: now.Add(time.Minute)}, {Key: "fence", Value: int64(4)}, {Key: "last_slot", Value: now}},
		"running_skewed_lease": {{Key: "state", Value: "running"}, {Key: "holder", Value: "x"}, {Key: "run_id", Value: "r"},
			{Key: "lease_until", Value: now.Add(10*time.Second + 30*time.Second)}, {Key: "fence", Value: int64(4)}, {Key: "last_slot", Value: now}},
	} {
		raw, err := bson.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		if v := record.InspectLock(raw, now, 10*time.Second); len(v.Damage) > 0 {
			t.Errorf("%s: damage %q, want none", name, v.Damage)
		}
	}
	for name, doc := range damagedLocks(now) {
		raw, err := bson.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		if v := record.InspectLock(raw, now, 10*time.Second); len(v.Damage) == 0 {
			t.Errorf("%s: no damage found", name)
		}
	}
}

// The claim's lock step relies on this: an upsert whose filter matches no
// document while a document with its _id exists fails, per operation of
// an unordered bulkWrite, with a duplicate key error (E11000), and the
// other operations are applied.
func TestUpsertNonMatchingFilterIsDuplicateKey(t *testing.T) {
	t.Parallel()
	e := newStoreEnv(t)
	ctx := testCtx(t)
	if _, err := e.locks.InsertOne(ctx, bson.D{{Key: "_id", Value: "x"}, {Key: "n", Value: 1}}); err != nil {
		t.Fatal(err)
	}
	_, err := e.locks.BulkWrite(ctx, []mongo.WriteModel{
		mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: "y"}, {Key: "n", Value: bson.D{{Key: "$lt", Value: 5}}}}).
			SetUpdate(bson.D{{Key: "$set", Value: bson.D{{Key: "m", Value: 1}}}}).SetUpsert(true),
		mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: "x"}, {Key: "n", Value: bson.D{{Key: "$gt", Value: 5}}}}).
			SetUpdate(bson.D{{Key: "$set", Value: bson.D{{Key: "m", Value: 1}}}}).SetUpsert(true),
		mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: "x"}, {Key: "n", Value: bson.D{{Key: "$lt", Value: 5}}}}).
			SetUpdate(bson.D{{Key: "$set", Value: bson.D{{Key: "k", Value: 1}}}}).SetUpsert(true),
	}, options.BulkWrite().SetOrdered(false))
	var bwe mongo.BulkWriteException
	if !errors.As(err, &bwe) || len(bwe.WriteErrors) != 1 || bwe.WriteErrors[0].Index != 1 || bwe.WriteErrors[0].Code != 11000 {
		t.Fatalf("bulkWrite: %v, want one E11000 at index 1", err)
	}
	if n, _ := e.locks.CountDocuments(ctx, bson.D{{Key: "_id", Value: "y"}, {Key: "m", Value: 1}}); n != 1 {
		t.Error("the upsert of a new _id was not applied")
	}
	if n, _ := e.locks.CountDocuments(ctx, bson.D{{Key: "_id", Value: "x"}, {Key: "k", Value: 1}}); n != 1 {
		t.Error("the matching update was not applied")
	}
}

func TestRenewBatch(t *testing.T) {
	t.Parallel()
	e := newStoreEnv(t)
	ctx := testCtx(t)
	a := e.replica("a", "a1")
	outs := a.claim(t, base, 10*time.Second, forbid("f1", base), forbid("f2", base), allow("p1", base), allow("p2", base))
	var leases []record.Lease
	for _, o := range outs {
		if o.Result != record.Acquired {
			t.Fatal(o)
		}
		leases = append(leases, o.Lease)
	}
	now := base.Add(5 * time.Second)
	lost, err := a.RenewBatch(ctx, leases, now, 10*time.Second)
	if err != nil || len(lost) != 0 {
		t.Fatalf("renew: lost %v, %v", lost, err)
	}
	for _, l := range leases {
		if r := e.run(t, l.RunID); !r.LeaseUntil.Equal(now.Add(10 * time.Second)) {
			t.Errorf("%s: record lease %v", l.JobID, r.LeaseUntil)
		}
	}
	if lk := e.lock(t, "f1"); !lk.LeaseUntil.Equal(now.Add(10 * time.Second)) {
		t.Errorf("lock lease %v", lk.LeaseUntil)
	}
	// An operator forces f1's lock free; p2's record is swept as abandoned.
	if _, err := e.locks.UpdateOne(ctx, bson.D{{Key: "_id", Value: "f1"}}, bson.D{{Key: "$set", Value: bson.D{
		{Key: "state", Value: "free"}, {Key: "holder", Value: ""}, {Key: "run_id", Value: ""}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.runs.UpdateOne(ctx, bson.D{{Key: "_id", Value: leases[3].RunID}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: record.StatusAbandoned}}}}); err != nil {
		t.Fatal(err)
	}
	lost, err = a.RenewBatch(ctx, leases, now.Add(time.Second), 10*time.Second)
	if err != nil || len(lost) != 2 || lost[0].JobID != "f1" || lost[1].JobID != "p2" {
		t.Fatalf("renew after losses: lost %+v, %v; want f1 and p2", lost, err)
	}
}

// Two acquisitions of one run id, its records dropped in between (a
// db.dropDatabase() while the second claimer was cut off): the first
// holder's renewal and end match only its own acquisition's token, so its
// renewal reports the run lost, its end lands nowhere, and the second
// holder renews and ends its own run.
func TestAcquisitionTokenAfterDroppedRecords(t *testing.T) {
	t.Parallel()
	e := newStoreEnv(t)
	ctx := testCtx(t)
	a, b := e.replica("a", "a1"), e.replica("b", "b1")
	const ttl = 10 * time.Second
	for _, fire := range []func(string, time.Time) record.FireClaim{forbid, allow} {
		job := fire("j", base).Overlap
		f := fire(string(job), base)
		oa := a.claimOne(t, f, base, record.Acquired)
		if err := e.db.Drop(ctx); err != nil {
			t.Fatal(err)
		}
		ob := b.claimOne(t, f, base.Add(time.Second), record.Acquired)
		if ob.Lease.RunID != oa.Lease.RunID || ob.Lease.Fence != oa.Lease.Fence || ob.Lease.Token == oa.Lease.Token {
			t.Fatalf("%s: second acquisition %+v after %+v: want the same run id and fence, another token", job, ob.Lease, oa.Lease)
		}
		now := base.Add(2 * time.Second)
		if lost, err := a.RenewBatch(ctx, []record.Lease{oa.Lease}, now, ttl); err != nil || len(lost) != 1 {
			t.Fatalf("%s: first holder's renewal lost %v, %v; want its lease lost", job, lost, err)
		}
		if lost, err := b.RenewBatch(ctx, []record.Lease{ob.Lease}, now, ttl); err != nil || len(lost) != 0 {
			t.Fatalf("%s: second holder's renewal lost %v, %v; want none", job, lost, err)
		}
		errs := a.EndBatch(ctx, []record.LeaseEnd{{Lease: oa.Lease, End: record.RunEnd{Status: record.StatusFailed, EndedAt: now}}})
		if !errors.Is(errs[0], record.ErrLockLost) {
			t.Fatalf("%s: first holder's end: %v, want ErrLockLost", job, errs[0])
		}
		if r := e.run(t, ob.Lease.RunID); r.Status != record.StatusRunning || r.Instance != "b" {
			t.Fatalf("%s: after the first holder's end the record is %+v: want b's, running", job, r)
		}
		if job.TakesLock() {
			if l := e.lock(t, string(job)); l.State != record.LockRunning || l.Holder != "b" || l.Claim != ob.Lease.Token {
				t.Fatalf("%s: lock %+v: want still held by b's acquisition", job, l)
			}
		}
		end := now.Add(time.Second)
		if errs := b.EndBatch(ctx, []record.LeaseEnd{{Lease: ob.Lease, End: record.RunEnd{Status: record.StatusSucceeded, EndedAt: end}}}); errs[0] != nil {
			t.Fatalf("%s: second holder's end: %v", job, errs[0])
		}
		if r := e.run(t, ob.Lease.RunID); r.Status != record.StatusSucceeded || r.Instance != "b" || !r.EndedAt.Equal(end) {
			t.Fatalf("%s: record %+v: want b's end", job, r)
		}
	}
}

func TestEndBatch(t *testing.T) {
	t.Parallel()
	e := newStoreEnv(t)
	ctx := testCtx(t)
	a, b := e.replica("a", "a1"), e.replica("b", "b1")
	const ttl = 3 * time.Second
	outs := a.claim(t, base, ttl, forbid("f", base), allow("p", base), forbid("gone", base), forbid("miss", base))
	for _, o := range outs {
		if o.Result != record.Acquired {
			t.Fatal(o)
		}
	}
	// "gone" stops renewing: swept abandoned, then its lock taken over.
	later := base.Add(10 * time.Second)
	swept, err := b.SweepExpired(ctx, later, 10)
	if err != nil || len(swept) != 4 {
		t.Fatalf("sweep: %d, %v", len(swept), err)
	}
	// Only "gone" was really abandoned: put the others back to running
	// (as if they had renewed in time).
	if _, err := e.runs.UpdateMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$ne", Value: outs[2].Lease.RunID}}}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: record.StatusRunning}}},
			{Key: "$unset", Value: bson.D{{Key: "abandoned_at", Value: ""}}}}); err != nil {
		t.Fatal(err)
	}
	t1 := later
	b.claimOne(t, forbid("gone", t1), t1, record.TakenOver)

	code := 3
	end := base.Add(12 * time.Second)
	errs := a.EndBatch(ctx, []record.LeaseEnd{
		{Lease: outs[0].Lease, End: record.RunEnd{Status: record.StatusFailed, EndedAt: end, Error: "boom", ExitCode: &code, Stdout: "o", Stderr: "e"}},
		{Lease: outs[1].Lease, End: record.RunEnd{Status: record.StatusSucceeded, EndedAt: end}},
		{Lease: outs[2].Lease, End: record.RunEnd{Status: record.StatusSucceeded, EndedAt: end}},
		{Lease: outs[3].Lease, End: record.RunEnd{Status: record.StatusMissed, EndedAt: end, Reason: record.MissedStartingDeadline}},
	})
	if errs[0] != nil || errs[1] != nil || errs[3] != nil {
		t.Fatalf("ends: %v", errs)
	}
	if !errors.Is(errs[2], record.ErrLockLost) {
		t.Fatalf("end of the abandoned run: %v, want ErrLockLost", errs[2])
	}
	if r := e.run(t, outs[0].Lease.RunID); r.Status != record.StatusFailed || !r.EndedAt.Equal(end) || r.Error != "boom" ||
		r.ExitCode == nil || *r.ExitCode != 3 || r.Stdout != "o" || r.Stderr != "e" || !r.ExpireAt.Equal(end.Add(record.DefaultRetention)) {
		t.Errorf("failed run %+v", r)
	}
	if l := e.lock(t, "f"); l.State != record.LockFree || l.RunID != "" || l.Holder != "" || l.LastOutcome != record.StatusFailed || !l.LastEndedAt.Equal(end) {
		t.Errorf("freed lock %+v", l)
	}
	if l := e.lock(t, "p"); l.State != record.LockFree || l.LastOutcome != record.StatusSucceeded || !l.LastSlot.Equal(base) {
		t.Errorf("allow job's lock %+v", l)
	}
	// The abandoned run keeps the truth: when it was abandoned, and its
	// real end as the holder saw it; the taker's lock is untouched.
	if r := e.run(t, outs[2].Lease.RunID); r.Status != record.StatusAbandoned || !r.AbandonedAt.Equal(later) ||
		!r.EndedAt.Equal(end) || r.EndStatus != record.StatusSucceeded {
		t.Errorf("abandoned run %+v", r)
	}
	if l := e.lock(t, "gone"); l.Holder != "b" || l.State != record.LockRunning {
		t.Errorf("taker's lock %+v", l)
	}
	// The missed conversion.
	raw := e.rawRun(t, outs[3].Lease.RunID)
	r := e.run(t, outs[3].Lease.RunID)
	if r.Status != record.StatusMissed || r.Reason != record.MissedStartingDeadline || r.Count != 1 || !r.LastScheduledAt.Equal(base) ||
		!r.RecordedAt.Equal(end) || raw.Lookup("started_at").Type != 0 || raw.Lookup("lease_until").Type != 0 {
		t.Errorf("missed record %+v", r)
	}
	// Ending twice: the first end stands; the second says not written.
	errs = a.EndBatch(ctx, []record.LeaseEnd{{Lease: outs[0].Lease, End: record.RunEnd{Status: record.StatusSucceeded, EndedAt: end.Add(time.Second)}}})
	if errs[0] == nil || errors.Is(errs[0], record.ErrLockLost) {
		t.Errorf("second end: %v", errs[0])
	}
	// Repeating the same end (a retry whose first answer was lost) is fine.
	errs = a.EndBatch(ctx, []record.LeaseEnd{{Lease: outs[1].Lease, End: record.RunEnd{Status: record.StatusSucceeded, EndedAt: end}}})
	if errs[0] != nil {
		t.Errorf("repeated end: %v", errs[0])
	}
}

func TestDisown(t *testing.T) {
	t.Parallel()
	e := newStoreEnv(t)
	ctx := testCtx(t)
	a, b := e.replica("a", "a1"), e.replica("b", "b1")
	oa := a.claimOne(t, forbid("j", base), base, record.Acquired)
	ob := b.claimOne(t, forbid("k", base), base, record.Acquired)
	never := record.Lease{JobID: "n", Slot: base, Instance: "a", Incarnation: "a1", RunID: record.RunID("n", base), Overlap: jobs.OverlapSkip}
	// a disowns its own run, a record that is not there, and (wrongly) b's.
	stolen := ob.Lease
	stolen.Instance, stolen.Incarnation = "a", "a1"
	now := base.Add(time.Second)
	if err := a.Disown(ctx, []record.Lease{oa.Lease, never, stolen}, record.MissedUnreachable, now); err != nil {
		t.Fatal(err)
	}
	r := e.run(t, oa.Lease.RunID)
	if r.Status != record.StatusMissed || r.Reason != record.MissedUnreachable || r.Count != 1 || !r.LastScheduledAt.Equal(base) || !r.RecordedAt.Equal(now) {
		t.Errorf("disowned record %+v", r)
	}
	if l := e.lock(t, "j"); l.State != record.LockFree || l.RunID != "" || l.LastOutcome != record.StatusMissed {
		t.Errorf("disowned lock %+v", l)
	}
	if r := e.run(t, ob.Lease.RunID); r.Status != record.StatusRunning {
		t.Errorf("b's record %+v: want untouched", r)
	}
	if l := e.lock(t, "k"); l.Holder != "b" || l.State != record.LockRunning {
		t.Errorf("b's lock %+v: want untouched", l)
	}
	// The disowned slot stays decided.
	b.claimOne(t, forbid("j", base), now, record.AlreadyFired)
}

func TestSweepExpired(t *testing.T) {
	t.Parallel()
	e := newStoreEnv(t)
	ctx := testCtx(t)
	a := e.replica("a", "a1")
	var fires []record.FireClaim
	for i := range 5 {
		fires = append(fires, allow(fmt.Sprintf("p%d", i), base))
	}
	outs := a.claim(t, base, 3*time.Second, fires...)
	// p0 keeps renewing.
	if _, err := a.RenewBatch(ctx, []record.Lease{outs[0].Lease}, base.Add(8*time.Second), 3*time.Second); err != nil {
		t.Fatal(err)
	}
	now := base.Add(10 * time.Second)
	got, err := a.SweepExpired(ctx, now, 3)
	if err != nil || len(got) != 3 {
		t.Fatalf("sweep limit 3: %d, %v", len(got), err)
	}
	got2, err := a.SweepExpired(ctx, now, 3)
	if err != nil || len(got2) != 1 {
		t.Fatalf("second sweep: %d, %v", len(got2), err)
	}
	if got, _ := a.SweepExpired(ctx, now, 3); len(got) != 0 {
		t.Fatalf("third sweep found %d", len(got))
	}
	for _, o := range outs[1:] {
		raw := e.rawRun(t, o.Lease.RunID)
		r := e.run(t, o.Lease.RunID)
		if r.Status != record.StatusAbandoned || !r.AbandonedAt.Equal(now) || raw.Lookup("ended_at").Type != 0 ||
			!strings.Contains(r.Error, "lease expired") || !r.ExpireAt.Equal(now.Add(record.DefaultRetention)) {
			t.Errorf("swept %+v", r)
		}
	}
	if r := e.run(t, outs[0].Lease.RunID); r.Status != record.StatusRunning {
		t.Errorf("renewed run %+v swept", r)
	}
}

func TestVerifyIndexes(t *testing.T) {
	t.Parallel()
	e := newStoreEnv(t)
	ctx := testCtx(t)
	a := e.replica("a", "a1")
	if re, err := a.VerifyIndexes(ctx); err != nil || re {
		t.Fatalf("all there: recreated %v, %v", re, err)
	}
	if err := e.runs.Indexes().DropOne(ctx, record.RunsUniqueIndex); err != nil {
		t.Fatal(err)
	}
	if re, err := a.VerifyIndexes(ctx); err != nil || !re {
		t.Fatalf("after dropping the unique index: recreated %v, %v", re, err)
	}
	wantIndexes(t, e.runs)
	if err := e.runs.Drop(ctx); err != nil {
		t.Fatal(err)
	}
	if re, err := a.VerifyIndexes(ctx); err != nil || !re {
		t.Fatalf("after dropping the collection: recreated %v, %v", re, err)
	}
	wantIndexes(t, e.runs)
	// The unique index is back in force: a missed record of a slot and a
	// run of it cannot both be recorded.
	if _, err := e.runs.InsertOne(ctx, record.RunDoc{ID: record.MissedID("j", base), JobID: "j", ScheduledAt: base, Status: record.StatusMissed}); err != nil {
		t.Fatal(err)
	}
	a.claimOne(t, forbid("j", base), base, record.AlreadyFired)
}

func wantIndexes(t *testing.T, runs *mongo.Collection) {
	t.Helper()
	specs, err := runs.Indexes().ListSpecifications(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, s := range specs {
		have[s.Name] = true
		if s.Name == record.RunsUniqueIndex && (s.Unique == nil || !*s.Unique) {
			t.Errorf("%s is not unique", s.Name)
		}
	}
	for _, n := range []string{record.RunsUniqueIndex, record.RunsTTLIndex, record.RunsLeaseIndex} {
		if !have[n] {
			t.Errorf("index %s missing (have %v)", n, have)
		}
	}
}

func TestClaimBatchUnreachable(t *testing.T) {
	t.Parallel()
	// A port nobody listens on.
	client, err := mongo.Connect(options.Client().ApplyURI("mongodb://127.0.0.1:1/").
		SetServerSelectionTimeout(200 * time.Millisecond).SetConnectTimeout(200 * time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	locks, runs := record.Collections(client.Database("nowhere"))
	s := New(locks, runs, Options{Logger: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	outs := s.ClaimBatch(ctx, record.BatchClaim{Fires: []record.FireClaim{forbid("j", base), {JobID: "k", Slot: base, Check: true}},
		Instance: "a", Incarnation: "a1", Now: base, TTL: time.Second})
	for _, o := range outs {
		if !errors.Is(o.Err, record.ErrUnreachable) || errors.Is(o.Err, record.ErrOutcomeUnknown) {
			t.Errorf("claim against no server: %v, want ErrUnreachable (nothing sent, so not ErrOutcomeUnknown)", o.Err)
		}
	}
	if !strings.Contains(outs[0].Err.Error(), "j") {
		t.Errorf("error %q does not name the job", outs[0].Err)
	}
}

// commandCounter counts the commands a client sends on the fire path's
// collections.
type commandCounter struct {
	mu   sync.Mutex
	cmds []string
}

func (c *commandCounter) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		coll, _ := e.Command.Index(0).Value().StringValueOK()
		if coll == record.LocksCollection || coll == record.RunsCollection {
			c.mu.Lock()
			c.cmds = append(c.cmds, e.CommandName+" "+coll)
			c.mu.Unlock()
		}
	}}
}

func (c *commandCounter) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.cmds
	c.cmds = nil
	return out
}

// A batch of N owner fires costs a constant number of commands: forbid
// jobs with free locks 2 (insertMany + bulkWrite), allow jobs 1; renewing
// and ending them one per collection.
func TestClaimBatchCommandCount(t *testing.T) {
	t.Parallel()
	var cc commandCounter
	client, err := mongo.Connect(options.Client().ApplyURI(testmongo.Shared(t).URI).SetMonitor(cc.monitor()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	e := newStoreEnvOn(t, client)
	a := e.replica("a", "a1")
	const n = 1000
	for _, mk := range []func(string, time.Time) record.FireClaim{forbid, allow} {
		fires := make([]record.FireClaim, n)
		for i := range fires {
			fires[i] = mk(fmt.Sprintf("%s%d", mk("", base).Overlap, i), base)
		}
		cc.take()
		outs := a.claim(t, base, 10*time.Second, fires...)
		cmds := cc.take()
		leases := make([]record.Lease, n)
		ends := make([]record.LeaseEnd, n)
		for i, o := range outs {
			if o.Result != record.Acquired {
				t.Fatalf("%s: %+v", fires[i].JobID, o)
			}
			leases[i] = o.Lease
			ends[i] = record.LeaseEnd{Lease: o.Lease, End: record.RunEnd{Status: record.StatusSucceeded, EndedAt: base.Add(time.Second)}}
		}
		// The insert and one bulk on the locks, for either policy (allow
		// moves the job's last slot); forbid then sets its records from
		// claiming to running.
		wantClaim := 2
		if fires[0].Overlap == jobs.OverlapSkip {
			wantClaim = 3
		}
		t.Logf("%s: claim of %d fires: %v", fires[0].Overlap, n, cmds)
		if len(cmds) != wantClaim {
			t.Errorf("%s: claim of %d fires took %d commands %v, want %d", fires[0].Overlap, n, len(cmds), cmds, wantClaim)
		}
		want := 2
		if fires[0].Overlap == jobs.OverlapAllow {
			want = 1
		}
		if lost, err := a.RenewBatch(testCtx(t), leases, base.Add(time.Second), 10*time.Second); err != nil || len(lost) > 0 {
			t.Fatal(lost, err)
		}
		if cmds := cc.take(); len(cmds) != want {
			t.Errorf("%s: renew took %v, want %d commands", fires[0].Overlap, cmds, want)
		}
		for _, err := range a.EndBatch(testCtx(t), ends) {
			if err != nil {
				t.Fatal(err)
			}
		}
		if cmds := cc.take(); len(cmds) != 2 {
			t.Errorf("%s: end took %v, want 2 commands", fires[0].Overlap, cmds)
		}
	}
}
