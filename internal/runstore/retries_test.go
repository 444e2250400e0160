package runstore

import (
	"errors"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/faultproxy"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/jobs"
)

// runsUpdate matches the update of ClaimRetry (and any update of job_runs).
var runsUpdate = faultproxy.All(faultproxy.CommandName("update"), faultproxy.Collection(record.RunsCollection))

// The claim of an attempt whose answer is lost is read back, never
// guessed: applied then cut, the attempt is this replica's; refused with a
// step-down error (not applied), it is sent again and won; a second
// replica then finds it taken. The lock follows the attempt's fence.
func TestClaimRetryAnswerLost(t *testing.T) {
	for _, tc := range []struct {
		name string
		arm  func(p *faultproxy.Proxy)
	}{
		{"applied then cut", func(p *faultproxy.Proxy) { p.CutAfterNext(runsUpdate) }},
		{"cut before", func(p *faultproxy.Proxy) { p.CutNext(runsUpdate) }},
		{"11602", func(p *faultproxy.Proxy) { p.FailNext(runsUpdate, replStateChange) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reps, e := faultReplicas(t, 2)
			slot := time.Now().Truncate(time.Second).UTC()
			id := record.RunID("job", slot)
			if _, err := e.runs.InsertOne(testCtx(t), bson.D{{Key: "_id", Value: id}, {Key: "job_id", Value: "job"},
				{Key: "scheduled_at", Value: slot}, {Key: "status", Value: record.StatusRetrying}, {Key: record.FieldAttempt, Value: 1},
				{Key: "fence", Value: record.FenceOf(slot)}, {Key: "lease_until", Value: slot}}); err != nil {
				t.Fatal(err)
			}
			if _, err := e.locks.InsertOne(testCtx(t), bson.D{{Key: "_id", Value: "job"}, {Key: "state", Value: record.LockRunning},
				{Key: "holder", Value: "gone"}, {Key: "run_id", Value: id}, {Key: "fence", Value: record.FenceOf(slot)},
				{Key: "last_slot", Value: slot}, {Key: "lease_until", Value: slot.Add(time.Hour)}}); err != nil {
				t.Fatal(err)
			}
			// Warm the connection up, so the fault hits the claim.
			if _, err := reps[0].DueRetries(testCtx(t), slot.Add(time.Second), 10); err != nil {
				t.Fatal(err)
			}
			reps[0].proxy.ResetStats()
			tc.arm(reps[0].proxy)
			claim := func(r faultReplica) (record.Lease, error) {
				return r.ClaimRetry(testCtx(t), record.RetryClaim{JobID: "job", Slot: slot, Attempt: 2, Overlap: jobs.OverlapSkip,
					Instance: r.inst, Incarnation: r.inc, Now: time.Now(), TTL: time.Minute})
			}
			l, err := claim(reps[0])
			st := reps[0].proxy.Stats()
			if st.Cuts == 0 && len(st.Injected) == 0 {
				t.Fatal("no fault hit the claim")
			}
			if err != nil || l.Attempt != 2 || l.Fence != record.FenceOf(slot)+1 || l.RunID != id {
				t.Fatalf("claim through the fault: %+v, %v; want attempt 2, fence %d", l, err, record.FenceOf(slot)+1)
			}
			if _, err := claim(reps[1]); !errors.Is(err, record.ErrRetryTaken) {
				t.Errorf("second replica: %v, want ErrRetryTaken", err)
			}
			var d record.RunDoc
			if err := e.runs.FindOne(testCtx(t), bson.D{{Key: "_id", Value: id}}).Decode(&d); err != nil {
				t.Fatal(err)
			}
			var lock record.LockDoc
			if err := e.locks.FindOne(testCtx(t), bson.D{{Key: "_id", Value: "job"}}).Decode(&lock); err != nil {
				t.Fatal(err)
			}
			if d.Status != record.StatusRunning || d.Attempt != 2 || d.Instance != reps[0].inst || d.Fence != record.FenceOf(slot)+1 ||
				lock.Holder != reps[0].inst || lock.Fence != record.FenceOf(slot)+1 || lock.RunID != id {
				t.Errorf("record %+v, lock %+v: want attempt 2 on %s with fence %d", d, lock, reps[0].inst, record.FenceOf(slot)+1)
			}
		})
	}
}
