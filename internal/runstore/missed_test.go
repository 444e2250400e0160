package runstore

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cronswap/cronswap/internal/record"
)

// everySecond is the slot sequence of an every-second job.
func everySecond(t time.Time) time.Time { return t.Truncate(time.Second).Add(time.Second) }

// Two replicas recording the same gap write one document; the job's last
// slot moves past it, so no claim takes a slot of it any more.
func TestRecordMissedOnceAcrossReplicas(t *testing.T) {
	t.Parallel()
	e := newStoreEnv(t)
	t0 := time.Now().Add(-time.Hour).Truncate(time.Second).UTC()
	m := record.MissedRange{JobID: "tick", From: t0, To: t0.Add(99 * time.Second), Count: 100, Reason: record.MissedNoReplica}
	var wg sync.WaitGroup
	var written atomic.Int64
	for _, inst := range []string{"r1", "r2", "r3"} {
		wg.Go(func() {
			w, err := e.replica(inst, "i").RecordMissed(testCtx(t), m, everySecond, inst, time.Now())
			if err != nil {
				t.Error(err)
			}
			written.Add(int64(len(w)))
		})
	}
	wg.Wait()
	docs := e.runDocs(t, "tick")
	if len(docs) != 1 || written.Load() != 1 {
		t.Fatalf("%d documents, %d reported written: %+v, want one", len(docs), written.Load(), docs)
	}
	d := docs[0]
	if d.Status != record.StatusMissed || d.Reason != record.MissedNoReplica || d.Count != 100 || !d.ScheduledAt.Equal(m.From) ||
		!d.LastScheduledAt.Equal(m.To) || d.ID != record.MissedID("tick", m.From) || d.RecordedAt.IsZero() || d.ExpireAt.IsZero() {
		t.Fatalf("record %+v, want the range of 100 slots", d)
	}
	if l := e.lock(t, "tick"); !l.LastSlot.Equal(m.To) {
		t.Fatalf("last slot %s, want moved to %s", l.LastSlot, m.To)
	}
	// The last slot moved past the range: a late claim of a slot inside
	// it does not win the job's lock, so nothing runs.
	if o := e.replica("r1", "i1").claim(t, time.Now(), time.Minute, forbid("tick", t0.Add(50*time.Second)))[0]; o.Err != nil || o.Result == record.Acquired {
		t.Fatalf("claim of a recorded missed slot: %+v, want it not acquired", o)
	}
}

// A slot that ran inside the range is not recorded missed: the range is
// split around it, each part counting its own slots.
func TestRecordMissedSplitsAroundRuns(t *testing.T) {
	t.Parallel()
	e := newStoreEnv(t)
	s := e.replica("r1", "i1")
	t0 := time.Now().Add(-time.Hour).Truncate(time.Second).UTC()
	ran := t0.Add(3 * time.Second)
	e.replica("r2", "i2").claimOne(t, allow("tick", ran), time.Now(), record.Acquired)
	// A missed record of another replica reaching into the range, too.
	if _, err := s.RecordMissed(testCtx(t), record.MissedRange{JobID: "tick", From: t0.Add(-5 * time.Second), To: t0.Add(time.Second),
		Count: 7, Reason: record.MissedShuttingDown}, everySecond, "r3", time.Now()); err != nil {
		t.Fatal(err)
	}
	w, err := s.RecordMissed(testCtx(t), record.MissedRange{JobID: "tick", From: t0, To: t0.Add(9 * time.Second), Count: 10,
		Reason: record.MissedStartingDeadline}, everySecond, "r1", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	want := []record.MissedRange{
		{JobID: "tick", From: t0.Add(2 * time.Second), To: t0.Add(2 * time.Second), Count: 1, Reason: record.MissedStartingDeadline},
		{JobID: "tick", From: t0.Add(4 * time.Second), To: t0.Add(9 * time.Second), Count: 6, Reason: record.MissedStartingDeadline},
	}
	if fmt.Sprint(w) != fmt.Sprint(want) {
		t.Fatalf("written %v, want %v", w, want)
	}
	total := int64(0)
	for _, d := range e.runDocs(t, "tick") {
		if d.Status == record.StatusMissed {
			total += d.Count
		} else if !d.ScheduledAt.Equal(ran) {
			t.Errorf("unexpected record %+v", d)
		}
	}
	if total != 7+1+6 {
		t.Fatalf("%d slots recorded missed, want 14 (every slot of t0-5s..t0+9s but the one that ran)", total)
	}
}

// A missed record of one slot holds the same fields whichever write made
// it: RecordMissed's insert, Disown, a claimed slot's end that did not
// start, or a hand-over's claim overtaken by a later slot. None keeps a
// start or a lease (the insert once wrote a zero started_at).
func TestMissedRecordsOfEveryWriterHoldTheSameFields(t *testing.T) {
	t.Parallel()
	e := newStoreEnv(t)
	ctx := testCtx(t)
	a := e.replica("a", "a1")
	now := base.Add(10 * time.Second)
	runIDs := map[string]string{}

	if _, err := a.RecordMissed(ctx, record.MissedRange{JobID: "w-insert", From: base, To: base, Count: 1, Reason: record.MissedNoReplica},
		everySecond, "a", now); err != nil {
		t.Fatal(err)
	}
	runIDs["insert"] = record.MissedID("w-insert", base)

	disowned := a.claimOne(t, forbid("w-disown", base), base, record.Acquired)
	if err := a.Disown(ctx, []record.Lease{disowned.Lease}, record.MissedUnreachable, now); err != nil {
		t.Fatal(err)
	}
	runIDs["disown"] = disowned.Lease.RunID

	ended := a.claimOne(t, forbid("w-end", base), base, record.Acquired)
	if errs := a.EndBatch(ctx, []record.LeaseEnd{{Lease: ended.Lease,
		End: record.RunEnd{Status: record.StatusMissed, Reason: record.MissedShuttingDown, EndedAt: now}}}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	runIDs["end"] = ended.Lease.RunID

	later := base.Add(2 * time.Second)
	won := a.claimOne(t, forbid("w-claim", later), later, record.Acquired)
	if errs := a.EndBatch(ctx, []record.LeaseEnd{{Lease: won.Lease, End: record.RunEnd{Status: record.StatusSucceeded, EndedAt: later}}}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	offered := forbid("w-claim", base)
	offered.OvertakenReason = record.MissedHandOver
	a.claimOne(t, offered, later, record.Missed)
	runIDs["claim"] = record.RunID("w-claim", base)

	for writer, id := range runIDs {
		raw := e.rawRun(t, id)
		for _, key := range []string{"_id", "job_id", "scheduled_at", "instance", "fence", "status", "last_scheduled_at",
			"count", "reason", "recorded_at", "expire_at", "notice"} {
			if raw.Lookup(key).Type == 0 {
				t.Errorf("%s: missed record without %s: %s", writer, key, raw)
			}
		}
		for _, key := range []string{"started_at", "lease_until"} {
			if raw.Lookup(key).Type != 0 {
				t.Errorf("%s: missed record with %s: %s", writer, key, raw)
			}
		}
		r := e.run(t, id)
		if r.Status != record.StatusMissed || r.Count != 1 || !r.ScheduledAt.Equal(base) || !r.LastScheduledAt.Equal(base) ||
			r.RecordedAt.IsZero() || !r.ExpireAt.After(r.RecordedAt) {
			t.Errorf("%s: record %+v, want one slot missed at %s", writer, r, base)
		}
	}
}
