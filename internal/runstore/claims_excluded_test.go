package runstore

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/jobs"
)

func inBlackout(job string, slot time.Time, b record.Exclusion) record.FireClaim {
	return record.FireClaim{JobID: job, Slot: slot, Overlap: jobs.OverlapSkip, Exclusion: &b}
}

// Three replicas record the same fire in a blackout window at once, and a
// fourth that does not know the window claims it as a run: the slot gets
// one record, skipped with the window's id and reason, or one run — never
// both — and nothing else. The skip does not touch the job's lock.
func TestClaimBatchBlackoutRecordsSkipOnce(t *testing.T) {
	t.Parallel()
	e := newStoreEnv(t)
	freeze := record.BlackoutExclusion("freeze", "year-end freeze")
	for n := range 10 {
		slot := base.Add(time.Duration(n) * time.Minute)
		var wg sync.WaitGroup
		outs := make([]record.ClaimOutcome, 4)
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
			if o.Result != record.AlreadyFired {
				won++
			}
		}
		if won != 1 {
			t.Fatalf("slot %d: %d claims decided the slot (%+v), want 1", n, won, outs)
		}
		rec := e.run(t, record.RunID("billing", slot))
		switch {
		case outs[3].Result == record.Acquired:
			if rec.Status != record.StatusRunning || rec.Instance != "d" {
				t.Fatalf("slot %d: run won by d, record %+v", n, rec)
			}
			// d ends its run, so the next slot's claims find the lock free.
			errs := e.replica("d", "d1").EndBatch(testCtx(t), []record.LeaseEnd{{Lease: outs[3].Lease,
				End: record.RunEnd{Status: record.StatusSucceeded, EndedAt: base}}})
			if errs[0] != nil {
				t.Fatal(errs[0])
			}
		default:
			if rec.Status != record.StatusSkipped || rec.BlackoutID != "freeze" || rec.Reason != "year-end freeze" ||
				!strings.Contains(rec.Error, "blackout freeze") || rec.Fence != 0 {
				t.Fatalf("slot %d: skipped record %+v, want the window's id and reason", n, rec)
			}
			for _, o := range outs[:3] {
				if o.Result == record.Skipped && !strings.Contains(o.Reason, "year-end freeze") {
					t.Errorf("skip reason %q does not say the window's reason", o.Reason)
				}
			}
		}
		if got := e.runDocs(t, "billing"); len(got) != n+1 {
			t.Fatalf("after slot %d: %d records, want %d", n, len(got), n+1)
		}
	}
	// The lock was left to the runs: a later slot is acquired at once.
	e.replica("a", "a1").claimOne(t, forbid("billing", base.Add(time.Hour)), base, record.Acquired)
}

// A slot already recorded (here a missed record of the slot, with another
// _id) is not recorded again by a blackout; a Check fire of a non-owner
// finds the owner's skip.
func TestClaimBatchBlackoutSlotAlreadyRecorded(t *testing.T) {
	t.Parallel()
	e := newStoreEnv(t)
	b := record.BlackoutExclusion("w", "maintenance")
	_, err := e.runs.InsertOne(testCtx(t), record.RunDoc{ID: record.MissedID("j", base), JobID: "j", ScheduledAt: base,
		Status: record.StatusMissed, Reason: record.MissedNoReplica, Count: 1, LastScheduledAt: base})
	if err != nil {
		t.Fatal(err)
	}
	e.replica("a", "a1").claimOne(t, inBlackout("j", base, b), base, record.AlreadyFired)
	slot := base.Add(time.Minute)
	e.replica("a", "a1").claimOne(t, inBlackout("j", slot, b), base, record.Skipped)
	check := inBlackout("j", slot, b)
	check.Check = true
	o := e.replica("b", "b1").claimOne(t, check, base, record.AlreadyFired)
	if !strings.Contains(o.Reason, "skipped") {
		t.Errorf("reason %q, want the owner's skipped record named", o.Reason)
	}
}

// A skip whose insert landed but whose answer was lost is read back as
// this claim's own (same token), not as someone else's.
func TestClaimBatchBlackoutLostAnswerReadBack(t *testing.T) {
	t.Parallel()
	e := newStoreEnv(t)
	r := e.replica("a", "a1")
	b := record.BatchClaim{Fires: []record.FireClaim{inBlackout("j", base, record.BlackoutExclusion("w", "r"))}, Instance: "a",
		Incarnation: "a1", Now: base, TTL: time.Minute}
	newClaimer := func(token string) *claimer {
		c := &claimer{s: r.Store, b: b, out: make([]record.ClaimOutcome, 1), recorded: make([]bool, 1), notSent: make([]bool, 1),
			nonce: "fixed-nonce", leases: []record.Lease{{JobID: "j", Slot: base, Instance: "a", Incarnation: "a1",
				RunID: record.RunID("j", base), Token: token}}}
		return c
	}
	first := newClaimer("fixed-nonce.0")
	first.insertSkips(testCtx(t), []int{0})
	second := newClaimer("fixed-nonce.0") // the same call trying again after a lost answer
	second.insertSkips(testCtx(t), []int{0})
	if o := second.out[0]; o.Err != nil || o.Result != record.Skipped {
		t.Fatalf("retry of a landed skip = %+v, want Skipped (its own record)", o)
	}
	other := newClaimer("another-call.0")
	other.insertSkips(testCtx(t), []int{0})
	if o := other.out[0]; o.Result != record.AlreadyFired {
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
	locks, runs := record.Collections(client.Database("nowhere"))
	s := New(locks, runs, Options{Logger: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	o := s.ClaimBatch(ctx, record.BatchClaim{Fires: []record.FireClaim{inBlackout("j", base, record.BlackoutExclusion("w", "r"))},
		Instance: "a", Incarnation: "a1", Now: base, TTL: time.Second})[0]
	if !errors.Is(o.Err, record.ErrUnreachable) || errors.Is(o.Err, record.ErrOutcomeUnknown) || !strings.Contains(o.Err.Error(), "j") {
		t.Fatalf("blackout skip against no server: %v, want ErrUnreachable naming the job", o.Err)
	}
}
