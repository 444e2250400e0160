package triggers

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/actions"
	"github.com/cronswap/cronswap/internal/firepath"
	"github.com/cronswap/cronswap/jobs"
	"github.com/cronswap/cronswap/schedule"
)

// Off-schedule fires of one job with one scheduled_at and different run
// ids, claimed together (one claim batch): the unique (job_id,
// scheduled_at) index admits one record, so one runs and every other
// learns that the slot is taken (AlreadyFired), as when they come in
// different batches. The sink never sends such fires together
// (Sink.reserveSlot); this checks the fire path through the Runner.
//
// It failed while the claim's read-back of the records after a duplicate
// key mapped each (job_id, scheduled_at) to one fire of the batch: the
// others found no record, inserted again and ended with a claim error
// ("duplicate key but no record to be read"). The store's own test is
// runstore's TestClaimBatchOffScheduleFiresSharingASlot.
func TestFirePathOffScheduleFiresSharingAScheduledAt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	e.reg.Register("same", actions.Action{Handler: jobs.HandlerFunc(func(ctx context.Context, f jobs.Run) error { return nil }),
		Policy: jobs.Policy{Overlap: jobs.OverlapAllow}})
	e.schedule(t, bson.D{{Key: "_id", Value: "same"}, {Key: "cron_expr", Value: "0 9 * * *"}})
	sched, err := Schedules(e.db.Collection(schedule.CollectionName))(context.Background(), "same")
	if err != nil {
		t.Fatal(err)
	}
	slot := time.Now().UTC().Truncate(time.Second).Add(123 * time.Millisecond)
	const n = 50
	res := make([]firepath.OffScheduleResult, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			res[i] = e.runners[0].RunOffSchedule(firepath.OffScheduleFire{Schedule: sched, RunID: RunIDOf(fmt.Sprintf("same%02d", i)),
				Slot: slot, Offered: time.Now()})
		})
	}
	wg.Wait()
	ran, taken := 0, 0
	for i, r := range res {
		switch {
		case r.Ran:
			ran++
		case r.AlreadyFired:
			taken++
		default:
			t.Errorf("fire %d: %+v, want it run or told the slot is taken", i, r)
		}
	}
	if ran != 1 || taken != n-1 {
		t.Errorf("%d ran, %d told the slot is taken: want 1 and %d", ran, taken, n-1)
	}
}
