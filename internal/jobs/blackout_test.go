package jobs

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/schedule"
)

func inBlackout(job string, slot time.Time, b Blackout) FireClaim {
	return FireClaim{JobID: job, Slot: slot, Overlap: OverlapForbid, Blackout: &b}
}

// Three replicas record the same fire in a blackout window at once, and a
// fourth that does not know the window claims it as a run: the slot gets
// one record, skipped with the window's id and reason, or one run — never
// both — and nothing else. The skip does not touch the job's lock.
func TestClaimBatchBlackoutRecordsSkipOnce(t *testing.T) {
	t.Parallel()
	e := newStoreEnv(t)
	freeze := Blackout{ID: "freeze", Reason: "year-end freeze"}
	for n := range 10 {
		slot := base.Add(time.Duration(n) * time.Minute)
		var wg sync.WaitGroup
		outs := make([]ClaimOutcome, 4)
		for k, inst := range []string{"a", "b", "c"} {
			wg.Go(func() {
				outs[k] = e.replica(inst, inst+"1").claim(t, base, time.Minute, inBlackout("billing", slot, freeze))[0]
			})
		}
		wg.Go(func() { outs[3] = e.replica("d", "d1").claim(t, base, time.Minute, forbid("billing", slot))[0] })
		wg.Wait()
		won := 0
		for k, o := range outs {
			if o.Err != nil {
				t.Fatalf("slot %d replica %d: %v", n, k, o.Err)
			}
			if o.Result != AlreadyFired {
				won++
			}
		}
		if won != 1 {
			t.Fatalf("slot %d: %d claims decided the slot (%+v), want 1", n, won, outs)
		}
		rec := e.run(t, RunID("billing", slot))
		switch {
		case outs[3].Result == Acquired:
			if rec.Status != StatusRunning || rec.Instance != "d" {
				t.Fatalf("slot %d: run won by d, record %+v", n, rec)
			}
			// d ends its run, so the next slot's claims find the lock free.
			errs := e.replica("d", "d1").EndBatch(testCtx(t), []LeaseEnd{{Lease: outs[3].Lease,
				End: RunEnd{Status: StatusSucceeded, EndedAt: base}}})
			if errs[0] != nil {
				t.Fatal(errs[0])
			}
		default:
			if rec.Status != StatusSkipped || rec.BlackoutID != "freeze" || rec.Reason != "year-end freeze" ||
				!strings.Contains(rec.Error, "blackout freeze") || rec.Fence != 0 {
				t.Fatalf("slot %d: skipped record %+v, want the window's id and reason", n, rec)
			}
			for _, o := range outs[:3] {
				if o.Result == Skipped && !strings.Contains(o.Reason, "year-end freeze") {
					t.Errorf("skip reason %q does not say the window's reason", o.Reason)
				}
			}
		}
		if got := e.runDocs(t, "billing"); len(got) != n+1 {
			t.Fatalf("after slot %d: %d records, want %d", n, len(got), n+1)
		}
	}
	// The lock was left to the runs: a later slot is acquired at once.
	e.replica("a", "a1").claimOne(t, forbid("billing", base.Add(time.Hour)), base, Acquired)
}

// A slot already recorded (here a missed record of the slot, with another
// _id) is not recorded again by a blackout; a Check fire of a non-owner
// finds the owner's skip.
func TestClaimBatchBlackoutSlotAlreadyRecorded(t *testing.T) {
	t.Parallel()
	e := newStoreEnv(t)
	b := Blackout{ID: "w", Reason: "maintenance"}
	_, err := e.runs.InsertOne(testCtx(t), RunDoc{ID: MissedID("j", base), JobID: "j", ScheduledAt: base,
		Status: StatusMissed, Reason: MissedNoReplica, Count: 1, LastScheduledAt: base})
	if err != nil {
		t.Fatal(err)
	}
	e.replica("a", "a1").claimOne(t, inBlackout("j", base, b), base, AlreadyFired)
	slot := base.Add(time.Minute)
	e.replica("a", "a1").claimOne(t, inBlackout("j", slot, b), base, Skipped)
	check := inBlackout("j", slot, b)
	check.Check = true
	o := e.replica("b", "b1").claimOne(t, check, base, AlreadyFired)
	if !strings.Contains(o.Reason, "skipped") {
		t.Errorf("reason %q, want the owner's skipped record named", o.Reason)
	}
}

// A skip whose insert landed but whose answer was lost is read back as
// this claim's own (same nonce), not as someone else's.
func TestClaimBatchBlackoutLostAnswerReadBack(t *testing.T) {
	t.Parallel()
	e := newStoreEnv(t)
	r := e.replica("a", "a1")
	b := BatchClaim{Fires: []FireClaim{inBlackout("j", base, Blackout{ID: "w", Reason: "r"})}, Instance: "a",
		Incarnation: "a1", Now: base, TTL: time.Minute}
	newClaimer := func() *claimer {
		c := &claimer{s: r.MongoStore, b: b, out: make([]ClaimOutcome, 1), recorded: make([]bool, 1), notSent: make([]bool, 1),
			nonce: "fixed-nonce", leases: []Lease{{JobID: "j", Slot: base, Instance: "a", Incarnation: "a1", RunID: RunID("j", base)}}}
		return c
	}
	first := newClaimer()
	first.insertSkips(testCtx(t), []int{0})
	second := newClaimer() // the same call trying again after a lost answer
	second.insertSkips(testCtx(t), []int{0})
	if o := second.out[0]; o.Err != nil || o.Result != Skipped {
		t.Fatalf("retry of a landed skip = %+v, want Skipped (its own record)", o)
	}
	other := newClaimer()
	other.nonce = "another-call"
	other.insertSkips(testCtx(t), []int{0})
	if o := other.out[0]; o.Result != AlreadyFired {
		t.Fatalf("another call's skip = %+v, want AlreadyFired", o)
	}
}

// Against no server a blackout skip is not decided: ErrUnreachable, never
// ErrOutcomeUnknown (a skip record that landed unseen is correct as it is).
func TestClaimBatchBlackoutUnreachable(t *testing.T) {
	t.Parallel()
	client, err := mongo.Connect(options.Client().ApplyURI("mongodb://127.0.0.1:1/").
		SetServerSelectionTimeout(200 * time.Millisecond).SetConnectTimeout(200 * time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	locks, runs := Collections(client.Database("nowhere"))
	s := NewMongoStore(locks, runs, MongoStoreOptions{Logger: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	o := s.ClaimBatch(ctx, BatchClaim{Fires: []FireClaim{inBlackout("j", base, Blackout{ID: "w", Reason: "r"})},
		Instance: "a", Incarnation: "a1", Now: base, TTL: time.Second})[0]
	if !errors.Is(o.Err, ErrUnreachable) || errors.Is(o.Err, ErrOutcomeUnknown) || !strings.Contains(o.Err.Error(), "j") {
		t.Fatalf("blackout skip against no server: %v, want ErrUnreachable naming the job", o.Err)
	}
}

// Three replicas fire a job every second for a while; a window covers some
// of its slots for category billing only. The slots inside are recorded
// skipped once each with the window's reason and never run; the others
// run once; a job of another category is not touched. A fire inside the
// window does not wait for admission (here: the only worker is busy).
func TestFirePathBlackoutSkipsInsideWindow(t *testing.T) {
	t.Parallel()
	e := newFireEnv(t)
	var ran sync.Map
	var runs atomic.Int64
	e.reg.Register("billing_job", Spec{Action: ActionFunc(func(ctx context.Context, f Fire) error {
		runs.Add(1)
		if _, dup := ran.LoadOrStore(f.RunID, true); dup {
			t.Errorf("%s ran twice", f.RunID)
		}
		return nil
	}), Overlap: OverlapAllow})
	// Slots just past, so that no replica waits for them to come.
	start := time.Now().Truncate(time.Second).Add(-20 * time.Second)
	from, to := start.Add(3*time.Second), start.Add(6*time.Second)
	window := func(jobID, category string, slot time.Time) (Blackout, bool) {
		if category == "billing" && !slot.Before(from) && slot.Before(to) {
			return Blackout{ID: "freeze", Reason: "year-end freeze"}, true
		}
		return Blackout{}, false
	}
	var replicas []*Runner
	for _, inst := range []string{"r1", "r2", "r3"} {
		r := NewRunner(RunnerOptions{Registry: e.reg, InstanceID: inst, Logger: slog.New(slog.DiscardHandler),
			Store: NewMongoStore(e.locks, e.runs, MongoStoreOptions{Instance: inst, Logger: slog.New(slog.DiscardHandler)}),
			TTL:   time.Minute, Blackout: window, Owns: func(string) bool { return inst == "r1" }, ClaimGrace: 20 * time.Millisecond,
			Hooks: Hooks{RunEnded: func(id, status string) { e.record(&e.ended, id+":"+status) }}})
		t.Cleanup(func() { r.Shutdown(30 * time.Second) })
		replicas = append(replicas, r)
	}
	due := func(id, category string, slot time.Time) schedule.Due {
		d := dueAt(id, slot)
		d.Schedule.Category = category
		d.Schedule.Job = "billing_job"
		return d
	}
	const slots = 9
	for i := range slots {
		// Slot by slot, as the engine fires them (a slot older than one
		// already claimed is not run).
		slot := start.Add(time.Duration(i) * time.Second)
		var wg sync.WaitGroup
		for _, r := range replicas {
			wg.Go(func() { r.Fire(due("billing", "billing", slot)) })
			wg.Go(func() { r.Fire(due("reports", "reports", slot)) })
		}
		wg.Wait()
	}
	recs := e.runDocs(t, "billing")
	if len(recs) != slots {
		t.Fatalf("billing: %d records, want %d: %+v", len(recs), slots, recs)
	}
	for _, rec := range recs {
		inside := !rec.ScheduledAt.Before(from) && rec.ScheduledAt.Before(to)
		switch {
		case inside && (rec.Status != StatusSkipped || rec.BlackoutID != "freeze" || rec.Reason != "year-end freeze"):
			t.Errorf("slot %s inside the window: %+v, want skipped by freeze", rec.ScheduledAt, rec)
		case !inside && rec.Status != StatusSucceeded:
			t.Errorf("slot %s outside the window: %+v, want succeeded", rec.ScheduledAt, rec)
		}
	}
	if got := len(e.runDocs(t, "reports")); got != slots {
		t.Errorf("reports (another category): %d records, want %d runs", got, slots)
	}
	if n := runs.Load(); n != 2*slots-3 {
		t.Errorf("%d actions ran, want %d (the 3 slots of billing inside the window not)", n, 2*slots-3)
	}
	if n := e.count(&e.ended, "billing:skipped"); n != 3 {
		t.Errorf("%d skipped ends reported, want 3", n)
	}
}

// A fire in a blackout window is recorded at once even while the gate is
// full: it runs nothing, so it does not wait for a worker.
func TestFirePathBlackoutDoesNotWaitForAdmission(t *testing.T) {
	t.Parallel()
	e := newFireEnv(t)
	release := make(chan struct{})
	started := make(chan struct{})
	e.reg.Register("busy", Spec{Action: ActionFunc(func(ctx context.Context, f Fire) error {
		close(started)
		<-release
		return nil
	}), Overlap: OverlapAllow})
	e.reg.Register("quiet", Spec{Action: ActionFunc(func(ctx context.Context, f Fire) error { return nil })})
	r := NewRunner(RunnerOptions{Registry: e.reg, InstanceID: "r1", Logger: slog.New(slog.DiscardHandler), Workers: 1,
		Store: NewMongoStore(e.locks, e.runs, MongoStoreOptions{Instance: "r1", Logger: slog.New(slog.DiscardHandler)}),
		TTL:   time.Minute, StartingDeadline: time.Minute,
		Blackout: func(jobID, _ string, _ time.Time) (Blackout, bool) {
			return Blackout{ID: "w", Reason: "r"}, jobID == "quiet"
		}})
	t.Cleanup(func() { close(release); r.Shutdown(30 * time.Second) })
	slot := time.Now().Truncate(time.Second)
	go r.Fire(dueAt("busy", slot))
	<-started
	done := make(chan struct{})
	go func() { defer close(done); r.Fire(dueAt("quiet", slot)) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the blackout fire waited for the busy worker")
	}
	if rec := e.run(t, RunID("quiet", slot)); rec.Status != StatusSkipped || rec.BlackoutID != "w" {
		t.Fatalf("record %+v, want skipped by w", rec)
	}
	var raw bson.Raw
	raw, _ = e.runs.FindOne(testCtx(t), bson.D{{Key: FieldBlackoutID, Value: "w"}}).Raw()
	if raw == nil {
		t.Fatalf("no record found by %s", FieldBlackoutID)
	}
}
