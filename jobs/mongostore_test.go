package jobs

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
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/testmongo"
)

// storeEnv is a database of the test server with job_locks and job_runs.
type storeEnv struct {
	db    *mongo.Database
	locks *mongo.Collection
	runs  *mongo.Collection
}

func newStoreEnv(t testing.TB) storeEnv {
	t.Helper()
	db := testmongo.NewDatabase(t, testmongo.Client(t))
	e := storeEnv{db: db, locks: db.Collection(LocksCollection), runs: db.Collection(RunsCollection)}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := EnsureIndexes(ctx, e.runs); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e storeEnv) store(instance string) *MongoStore {
	return NewMongoStore(e.locks, e.runs, MongoStoreOptions{Instance: instance, Logger: slog.New(slog.DiscardHandler)})
}

func (e storeEnv) lock(t testing.TB, id string) LockDoc {
	t.Helper()
	var d LockDoc
	if err := e.locks.FindOne(testCtx(t), bson.D{{Key: "_id", Value: id}}).Decode(&d); err != nil {
		t.Fatalf("lock %s: %v", id, err)
	}
	return d
}

func (e storeEnv) runDocs(t testing.TB, jobID string) []RunDoc {
	t.Helper()
	cur, err := e.runs.Find(testCtx(t), bson.D{{Key: "job_id", Value: jobID}},
		options.Find().SetSort(bson.D{{Key: "scheduled_at", Value: 1}}))
	if err != nil {
		t.Fatal(err)
	}
	var out []RunDoc
	if err := cur.All(testCtx(t), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func (e storeEnv) run(t testing.TB, runID string) RunDoc {
	t.Helper()
	var d RunDoc
	if err := e.runs.FindOne(testCtx(t), bson.D{{Key: "_id", Value: runID}}).Decode(&d); err != nil {
		t.Fatalf("run %s: %v", runID, err)
	}
	return d
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// base is a fixed instant the store tests count from (second resolution,
// like cron slots).
var base = time.Date(2030, 1, 2, 3, 4, 0, 0, time.UTC)

func req(job string, slot time.Time, instance string, now time.Time, overlap Overlap) ClaimRequest {
	return ClaimRequest{JobID: job, Slot: slot, Instance: instance, RunID: newRunID(), Overlap: overlap, Now: now, TTL: 10 * time.Second}
}

func mustClaim(t *testing.T, s *MongoStore, r ClaimRequest, want ClaimResult) Claim {
	t.Helper()
	c, err := s.Claim(testCtx(t), r)
	if err != nil {
		t.Fatalf("Claim(%s, %s by %s): %v", r.JobID, r.Slot.Format(time.TimeOnly), r.Instance, err)
	}
	if c.Result != want {
		t.Fatalf("Claim(%s, %s by %s) = %v (%+v), want %v", r.JobID, r.Slot.Format(time.TimeOnly), r.Instance, c.Result, c, want)
	}
	return c
}

func TestMongoStoreClaimSkipRelease(t *testing.T) {
	t.Parallel()
	e := newStoreEnv(t)
	a, b := e.store("a"), e.store("b")
	ctx := testCtx(t)
	t0 := base

	c := mustClaim(t, a, req("j", t0, "a", t0, OverlapForbid), Acquired)
	if c.Lease.Fence != 1 || c.Lease.Instance != "a" || !c.Lease.Slot.Equal(t0) {
		t.Fatalf("lease %+v, want fence 1 for a at %v", c.Lease, t0)
	}
	if err := a.StartRun(ctx, c.Lease, t0, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	// The same slot again, from anyone: already fired.
	mustClaim(t, b, req("j", t0, "b", t0.Add(time.Second), OverlapForbid), AlreadyFired)
	mustClaim(t, a, req("j", t0, "a", t0.Add(time.Second), OverlapForbid), AlreadyFired)
	// The next slot while the run holds the lock: exactly one skip.
	t1 := t0.Add(time.Second)
	sk := mustClaim(t, b, req("j", t1, "b", t1, OverlapForbid), Skipped)
	if sk.Holder != "a" || sk.HolderRunID != c.Lease.RunID {
		t.Errorf("skip names holder %q run %q, want a / %s", sk.Holder, sk.HolderRunID, c.Lease.RunID)
	}
	mustClaim(t, a, req("j", t1, "a", t1, OverlapForbid), AlreadyFired)
	if err := b.RecordSkip(ctx, "j", t1, "b", newRunID(), "held", t1); err != nil {
		t.Fatal(err)
	}
	// A second skip record for the slot is de-duplicated by the index.
	if err := a.RecordSkip(ctx, "j", t1, "a", newRunID(), "held", t1); err != nil {
		t.Fatal(err)
	}
	// Only the holder may release; then the next slot is free.
	if err := b.Release(ctx, Lease{JobID: "j", Instance: "b", Fence: 1, Overlap: OverlapForbid}, StatusSucceeded, t1); !errors.Is(err, ErrLockLost) {
		t.Fatalf("release by another instance: %v, want ErrLockLost", err)
	}
	if err := a.Release(ctx, Lease{JobID: "j", Instance: "a", Fence: 1, Overlap: OverlapForbid}, StatusSucceeded, t1); err != nil {
		t.Fatal(err)
	}
	end := t1.Add(500 * time.Millisecond)
	if err := a.FinishRun(ctx, c.Lease, RunEnd{Status: StatusSucceeded, EndedAt: end}); err != nil {
		t.Fatal(err)
	}
	l := e.lock(t, "j")
	if l.State != LockFree || l.Holder != "" || l.RunID != "" || l.LastOutcome != StatusSucceeded || !l.LastSlot.Equal(t1) || l.Fence != 1 {
		t.Fatalf("lock after release: %+v", l)
	}
	t2 := t1.Add(time.Second)
	c2 := mustClaim(t, b, req("j", t2, "b", t2, OverlapForbid), Acquired)
	if c2.Lease.Fence != 2 {
		t.Errorf("second fence %d, want 2", c2.Lease.Fence)
	}
	runs := e.runDocs(t, "j")
	if len(runs) != 2 || runs[0].Status != StatusSucceeded || !runs[0].EndedAt.Equal(end) || runs[1].Status != StatusSkipped || runs[1].Instance != "b" {
		t.Fatalf("runs: %+v", runs)
	}
	if runs[0].ExpireAt.Before(end.Add(700 * time.Hour)) {
		t.Errorf("expire_at %v: want end + retention", runs[0].ExpireAt)
	}
}

// Two lock clients whose clocks are 2 s apart claim the same slot: exactly
// one wins, whichever order they come in, and whether or not the winner has
// finished and released by the time the other (late) one claims.
func TestMongoStoreSkewedClocksOneWinner(t *testing.T) {
	t.Parallel()
	e := newStoreEnv(t)
	ctx := testCtx(t)
	fast, slow := e.store("fast"), e.store("slow")
	const skew = 2 * time.Second
	slot := base
	for i := range 20 {
		slot = slot.Add(time.Minute)
		// Real time: the slot is due; fast's clock reads 2 s later than slow's.
		slowNow := slot.Add(time.Duration(i%3) * 100 * time.Millisecond)
		fastNow := slowNow.Add(skew)
		var wg sync.WaitGroup
		results := make([]Claim, 2)
		errs := make([]error, 2)
		for k, s := range []*MongoStore{fast, slow} {
			now := []time.Time{fastNow, slowNow}[k]
			inst := []string{"fast", "slow"}[k]
			wg.Go(func() { results[k], errs[k] = s.Claim(ctx, req("skew", slot, inst, now, OverlapForbid)) })
		}
		wg.Wait()
		won := 0
		for k := range 2 {
			if errs[k] != nil {
				t.Fatalf("slot %d: %v", i, errs[k])
			}
			switch results[k].Result {
			case Acquired:
				won++
				l := results[k].Lease
				if err := []*MongoStore{fast, slow}[k].Release(ctx, l, StatusSucceeded, []time.Time{fastNow, slowNow}[k]); err != nil {
					t.Fatal(err)
				}
			case AlreadyFired:
			default:
				t.Fatalf("slot %d: result %v", i, results[k].Result)
			}
		}
		if won != 1 {
			t.Fatalf("slot %d: %d winners, want exactly 1", i, won)
		}
		// The slow replica fires the same slot again after the winner has
		// released the lock (its timer went off late): still no second run.
		mustClaim(t, slow, req("skew", slot, "slow", slowNow.Add(3*time.Second), OverlapForbid), AlreadyFired)
		mustClaim(t, fast, req("skew", slot, "fast", fastNow.Add(3*time.Second), OverlapForbid), AlreadyFired)
	}
}

// Many claimers racing for one slot: one winner per slot.
func TestMongoStoreConcurrentClaims(t *testing.T) {
	t.Parallel()
	e := newStoreEnv(t)
	ctx := testCtx(t)
	for _, overlap := range []Overlap{OverlapForbid, OverlapAllow} {
		for i := range 5 {
			slot := base.Add(time.Duration(i) * time.Minute)
			var mu sync.Mutex
			var wins []Lease
			var wg sync.WaitGroup
			for k := range 8 {
				inst := string(rune('a' + k))
				s := e.store(inst)
				wg.Go(func() {
					c, err := s.Claim(ctx, req("race", slot, inst, slot, overlap))
					if err != nil {
						t.Error(err)
						return
					}
					if c.Result == Acquired || c.Result == TakenOver {
						mu.Lock()
						wins = append(wins, c.Lease)
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			if len(wins) != 1 {
				t.Fatalf("overlap %s slot %d: %d winners", overlap, i, len(wins))
			}
			if overlap == OverlapForbid {
				if err := e.store(wins[0].Instance).Release(ctx, wins[0], StatusSucceeded, slot); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

func TestMongoStoreTakeoverAfterLease(t *testing.T) {
	t.Parallel()
	e := newStoreEnv(t)
	ctx := testCtx(t)
	a, b := e.store("a"), e.store("b")
	const ttl = 3 * time.Second
	r0 := req("j", base, "a", base, OverlapForbid)
	r0.TTL = ttl
	c := mustClaim(t, a, r0, Acquired)
	if err := a.StartRun(ctx, c.Lease, base, ttl); err != nil {
		t.Fatal(err)
	}
	// Renewed within its lease, the lock stays a's: b skips.
	if err := a.Renew(ctx, c.Lease, base.Add(2*time.Second), ttl); err != nil {
		t.Fatal(err)
	}
	r1 := req("j", base.Add(4*time.Second), "b", base.Add(4*time.Second), OverlapForbid)
	r1.TTL = ttl
	mustClaim(t, b, r1, Skipped)
	// a stops renewing (it died); past the lease b takes over.
	now := base.Add(6 * time.Second)
	r2 := req("j", now, "b", now, OverlapForbid)
	r2.TTL = ttl
	c2 := mustClaim(t, b, r2, TakenOver)
	if c2.Holder != "a" || c2.HolderRunID != c.Lease.RunID || c2.Lease.Fence != c.Lease.Fence+1 {
		t.Fatalf("takeover %+v; want holder a, run %s, fence %d", c2, c.Lease.RunID, c.Lease.Fence+1)
	}
	old := e.run(t, c.Lease.RunID)
	if old.Status != StatusAbandoned || !old.EndedAt.Equal(now) || !strings.Contains(old.Error, "taken over by b") {
		t.Fatalf("old run %+v, want abandoned at %v", old, now)
	}
	// The late holder can neither renew, release, nor close its record.
	if err := a.Renew(ctx, c.Lease, now, ttl); !errors.Is(err, ErrLockLost) {
		t.Fatalf("late renew: %v", err)
	}
	if err := a.Release(ctx, c.Lease, StatusSucceeded, now); !errors.Is(err, ErrLockLost) {
		t.Fatalf("late release: %v", err)
	}
	if err := a.FinishRun(ctx, c.Lease, RunEnd{Status: StatusSucceeded, EndedAt: now}); !errors.Is(err, ErrLockLost) {
		t.Fatalf("late finish: %v", err)
	}
	if l := e.lock(t, "j"); l.Holder != "b" || l.Fence != c2.Lease.Fence || l.State != LockRunning {
		t.Fatalf("lock %+v: want b's", l)
	}
}

// An operator's `cronswap locks release ID` forces the lock free without a
// fence check; the holder's next renewal notices.
func TestMongoStoreForcedReleaseLosesLock(t *testing.T) {
	t.Parallel()
	e := newStoreEnv(t)
	ctx := testCtx(t)
	a := e.store("a")
	c := mustClaim(t, a, req("j", base, "a", base, OverlapForbid), Acquired)
	if err := a.StartRun(ctx, c.Lease, base, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := e.locks.UpdateOne(ctx, bson.D{{Key: "_id", Value: "j"}}, bson.D{{Key: "$set", Value: bson.D{
		{Key: "state", Value: "free"}, {Key: "holder", Value: ""}, {Key: "run_id", Value: ""}, {Key: "lease_until", Value: time.Now()}}}}); err != nil {
		t.Fatal(err)
	}
	if err := a.Renew(ctx, c.Lease, base.Add(time.Second), 10*time.Second); !errors.Is(err, ErrLockLost) {
		t.Fatalf("renew after forced release: %v, want ErrLockLost", err)
	}
}

func TestMongoStoreAllowOverlapsAndSweeps(t *testing.T) {
	t.Parallel()
	e := newStoreEnv(t)
	ctx := testCtx(t)
	a, b := e.store("a"), e.store("b")
	const ttl = 3 * time.Second
	var leases []Lease
	for i := range 3 {
		slot := base.Add(time.Duration(i) * time.Second)
		r := req("par", slot, "a", slot, OverlapAllow)
		r.TTL = ttl
		c := mustClaim(t, a, r, Acquired)
		if c.Lease.Fence != int64(i+1) {
			t.Fatalf("fence %d, want %d", c.Lease.Fence, i+1)
		}
		if err := a.StartRun(ctx, c.Lease, slot, ttl); err != nil {
			t.Fatal(err)
		}
		leases = append(leases, c.Lease)
		r.Instance = "b"
		mustClaim(t, b, r, AlreadyFired)
	}
	// Run 0 keeps renewing; runs 1 and 2 die. A claim after their leases
	// marks those two abandoned and leaves run 0 alone.
	now := base.Add(10 * time.Second)
	if err := a.Renew(ctx, leases[0], now.Add(-time.Second), ttl); err != nil {
		t.Fatal(err)
	}
	r := req("par", now, "b", now, OverlapAllow)
	r.TTL = ttl
	mustClaim(t, b, r, Acquired)
	if s := e.run(t, leases[0].RunID).Status; s != StatusRunning {
		t.Errorf("renewed run: %s, want running", s)
	}
	for _, l := range leases[1:] {
		if s := e.run(t, l.RunID).Status; s != StatusAbandoned {
			t.Errorf("expired run %s: %s, want abandoned", l.RunID, s)
		}
		if err := a.Renew(ctx, l, now, ttl); !errors.Is(err, ErrLockLost) {
			t.Errorf("renewing a swept run: %v, want ErrLockLost", err)
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

func TestMongoStoreRepairsDamagedLocks(t *testing.T) {
	t.Parallel()
	e := newStoreEnv(t)
	ctx := testCtx(t)
	now := base
	s := e.store("a")
	for name, doc := range damagedLocks(now) {
		t.Run(name, func(t *testing.T) {
			doc = append(bson.D{{Key: "_id", Value: name}}, doc...)
			if _, err := e.locks.InsertOne(ctx, doc); err != nil {
				t.Fatal(err)
			}
			// A running record the damaged lock may name.
			if _, err := e.runs.InsertOne(ctx, RunDoc{ID: "ghost-run-" + name, JobID: name, ScheduledAt: now.Add(-2 * time.Hour),
				Fence: 7, Status: StatusRunning, StartedAt: now.Add(-2 * time.Hour), LeaseUntil: now.Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
			slot := now.Add(time.Second)
			c, err := s.Claim(ctx, req(name, slot, "a", slot, OverlapForbid))
			if err != nil {
				t.Fatal(err)
			}
			if c.Result != Acquired && c.Result != TakenOver {
				t.Fatalf("result %v, want the claim to win after repair", c.Result)
			}
			if len(c.Repaired) == 0 {
				t.Errorf("no repair reported")
			}
			if c.Lease.Fence <= 7 {
				t.Errorf("fence %d after repair, want > 7 (the highest fence seen)", c.Lease.Fence)
			}
			l := e.lock(t, name)
			if l.State != LockRunning || l.Holder != "a" || !l.LastSlot.Equal(slot) || l.RepairReason == "" {
				t.Errorf("lock after repair+claim: %+v", l)
			}
		})
	}
}

// A lock document that was deleted is recreated with the fence and last
// slot its job's run records imply: no fence twice, no slot re-run.
func TestMongoStoreRecreatesLockFromRuns(t *testing.T) {
	t.Parallel()
	e := newStoreEnv(t)
	ctx := testCtx(t)
	s := e.store("a")
	if _, err := e.runs.InsertOne(ctx, RunDoc{ID: "r1", JobID: "j", ScheduledAt: base, Fence: 41, Status: StatusSucceeded, StartedAt: base}); err != nil {
		t.Fatal(err)
	}
	mustClaim(t, s, req("j", base, "a", base, OverlapForbid), AlreadyFired)
	c := mustClaim(t, s, req("j", base.Add(time.Second), "a", base, OverlapForbid), Acquired)
	if c.Lease.Fence != 42 {
		t.Errorf("fence %d, want 42", c.Lease.Fence)
	}
}

func TestMongoStoreUnreachable(t *testing.T) {
	t.Parallel()
	// A port nobody listens on.
	client, err := mongo.Connect(options.Client().ApplyURI("mongodb://127.0.0.1:1/").
		SetServerSelectionTimeout(300 * time.Millisecond).SetConnectTimeout(300 * time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	db := client.Database("nowhere")
	s := NewMongoStore(db.Collection(LocksCollection), db.Collection(RunsCollection), MongoStoreOptions{Logger: slog.New(slog.DiscardHandler)})
	_, err = s.Claim(testCtx(t), req("j", base, "a", base, OverlapForbid))
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("Claim against no server: %v, want ErrUnreachable", err)
	}
	if !strings.Contains(err.Error(), "j") {
		t.Errorf("error %q does not name the job", err)
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
		if v := inspectLock(raw, now, 10*time.Second); len(v.damage) > 0 {
			t.Errorf("%s: damage %q, want none", name, v.damage)
		}
	}
	for name, doc := range damagedLocks(now) {
		raw, err := bson.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		if v := inspectLock(raw, now, 10*time.Second); len(v.damage) == 0 {
			t.Errorf("%s: no damage found", name)
		}
	}
}

// A lock this instance holds under a run it does not know (a previous life
// of the process, restarted with the same instance id) is taken over at
// once, without waiting for the lease; other instances still skip.
func TestMongoStoreReclaimsOwnLeftoverLock(t *testing.T) {
	t.Parallel()
	e := newStoreEnv(t)
	ctx := testCtx(t)
	a, b := e.store("a"), e.store("b")
	c := mustClaim(t, a, req("j", base, "a", base, OverlapForbid), Acquired)
	if err := a.StartRun(ctx, c.Lease, base, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	live := func(id string) bool { return id == c.Lease.RunID }
	gone := func(string) bool { return false }

	t1 := base.Add(time.Second)
	r := req("j", t1, "b", t1, OverlapForbid)
	r.Running = gone // b's own runs say nothing about a's lock
	mustClaim(t, b, r, Skipped)

	t2 := t1.Add(time.Second)
	r = req("j", t2, "a", t2, OverlapForbid)
	r.Running = live // the run is alive in this process: skip
	mustClaim(t, a, r, Skipped)

	t3 := t2.Add(time.Second)
	r = req("j", t3, "a", t3, OverlapForbid)
	r.Running = gone // restarted: the run is not ours any more
	c3 := mustClaim(t, a, r, TakenOver)
	if c3.HolderRunID != c.Lease.RunID || c3.Lease.Fence != c.Lease.Fence+1 {
		t.Fatalf("reclaim %+v, want previous run %s and fence %d", c3, c.Lease.RunID, c.Lease.Fence+1)
	}
	if old := e.run(t, c.Lease.RunID); old.Status != StatusAbandoned {
		t.Fatalf("left-over run %+v, want abandoned", old)
	}
	if l := e.lock(t, "j"); l.RunID != c3.Lease.RunID || l.Fence != c3.Lease.Fence || !l.LastSlot.Equal(t3) {
		t.Fatalf("lock %+v after reclaim", l)
	}
	// The old lease no longer renews or releases.
	if err := a.Renew(ctx, c.Lease, t3, 10*time.Second); !errors.Is(err, ErrLockLost) {
		t.Fatalf("renew of the left-over lease: %v", err)
	}
}

// Several replicas meeting the same damaged document at once: it is
// repaired once (compare-and-swap) and exactly one of them wins the slot.
func TestMongoStoreConcurrentRepairOneWinner(t *testing.T) {
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
		var wins []Claim
		repairs := 0
		var wg sync.WaitGroup
		for k := range 6 {
			inst := fmt.Sprintf("r%d", k)
			s := e.store(inst)
			wg.Go(func() {
				c, err := s.Claim(ctx, req(id, slot, inst, slot, OverlapForbid))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				if len(c.Repaired) > 0 {
					repairs++
				}
				if c.Result == Acquired || c.Result == TakenOver {
					wins = append(wins, c)
				}
			})
		}
		wg.Wait()
		if len(wins) != 1 || repairs != 1 {
			t.Fatalf("%s: %d winners and %d repairs, want 1 and 1", name, len(wins), repairs)
		}
		want := int64(8)
		if name == "fence_string" {
			want = 1 // nothing to trust: no number, no run records
		}
		if wins[0].Lease.Fence != want {
			t.Errorf("%s: fence %d, want %d", name, wins[0].Lease.Fence, want)
		}
	}
}
