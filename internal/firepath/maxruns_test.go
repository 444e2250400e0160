package firepath

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/actions"
	"github.com/cronswap/cronswap/internal/lifetime"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/internal/runstore"
	"github.com/cronswap/cronswap/jobs"
	"github.com/cronswap/cronswap/schedule"
)

// Three replicas race on every slot of a job that fires every second, with
// max_runs 4, under each overlap policy (the claim's three writes that
// start a slot: a lock taken, allow's slot-only write, a buffered fire
// taken). The action writes a ledger in the database: exactly 4 entries,
// never 5; the slot after them is recorded skipped as max_runs reached
// and the runners tell Ended; off-schedule runs neither count nor are
// capped.
func TestFirePathMaxRunsAcrossReplicas(t *testing.T) {
	t.Parallel()
	const maxRuns, slots = 4, 10
	for _, o := range []jobs.Overlap{jobs.OverlapAllow, jobs.OverlapSkip, jobs.OverlapBufferAll} {
		t.Run(string(o), func(t *testing.T) {
			t.Parallel()
			e := newFireEnv(t)
			ledger := e.db.Collection("ledger")
			e.reg.Register("counted", actions.Action{Handler: jobs.HandlerFunc(func(ctx context.Context, r jobs.Run) error {
				_, err := ledger.InsertOne(ctx, bson.D{{Key: "_id", Value: r.RunID}})
				return err
			}), Policy: jobs.Policy{Overlap: o}})
			var mu sync.Mutex
			var ended []string
			var replicas []*Runner
			for _, inst := range []string{"r1", "r2", "r3"} {
				r := NewRunner(RunnerOptions{Registry: e.reg, InstanceID: inst, Logger: slog.New(slog.DiscardHandler),
					Store: runstore.New(e.locks, e.runs, runstore.Options{Instance: inst, Logger: slog.New(slog.DiscardHandler)}),
					TTL:   time.Minute, Workers: 4,
					Ended: func(s schedule.Schedule, reason string) {
						mu.Lock()
						defer mu.Unlock()
						ended = append(ended, s.ID+":"+reason)
					}})
				t.Cleanup(func() { r.Shutdown(30 * time.Second) })
				replicas = append(replicas, r)
			}
			sched := schedule.Schedule{ID: "capped", Enabled: true, Job: "counted", CronExpr: "* * * * * *", MaxRuns: maxRuns}
			start := time.Now().Truncate(time.Second).Add(-30 * time.Second)
			for i := range slots {
				slot := start.Add(time.Duration(i) * time.Second)
				var wg sync.WaitGroup
				for _, r := range replicas {
					wg.Go(func() { r.Fire(schedule.Due{Schedule: sched, Slot: slot}) })
				}
				wg.Wait()
			}
			// Every slot decided (a buffered one may still be running).
			var recs []record.RunDoc
			waitFor(t, 30*time.Second, "every slot decided", func() bool {
				recs = e.runDocs(t, "capped")
				if len(recs) != slots {
					return false
				}
				for _, rec := range recs {
					if rec.Status != record.StatusSucceeded && rec.Status != record.StatusSkipped {
						return false
					}
				}
				return true
			})
			n, err := ledger.CountDocuments(testCtx(t), bson.D{})
			if err != nil {
				t.Fatal(err)
			}
			if n != maxRuns {
				t.Fatalf("the action ran %d times, want exactly max_runs %d: %+v", n, maxRuns, recs)
			}
			succeeded, capped := 0, 0
			for _, rec := range recs {
				switch {
				case rec.Status == record.StatusSucceeded:
					succeeded++
				case rec.Reason == lifetime.ReasonMaxRuns:
					capped++
				}
			}
			if succeeded != maxRuns || capped == 0 {
				t.Errorf("%d succeeded and %d skipped as %q, want %d and at least one: %+v",
					succeeded, capped, lifetime.ReasonMaxRuns, maxRuns, recs)
			}
			mu.Lock()
			if len(ended) == 0 || ended[0] != "capped:"+lifetime.ReasonMaxRuns {
				t.Errorf("Ended told %v, want capped:%s", ended, lifetime.ReasonMaxRuns)
			}
			mu.Unlock()
			var lock record.LockDoc
			if err := e.locks.FindOne(testCtx(t), bson.D{{Key: "_id", Value: "capped"}}).Decode(&lock); err != nil {
				t.Fatal(err)
			}
			if lock.Runs != maxRuns {
				t.Errorf("the lock's run count is %d, want %d", lock.Runs, maxRuns)
			}
			// A run-now past max_runs runs, and does not count.
			now := time.Now()
			res := replicas[0].RunOffSchedule(OffScheduleFire{Schedule: sched, RunID: "trigger/now",
				Slot: now.Truncate(time.Millisecond).Add(time.Millisecond), Offered: now})
			if !res.Ran || res.Status != record.StatusSucceeded {
				t.Errorf("run-now past max_runs: %+v, want run", res)
			}
			if err := e.locks.FindOne(testCtx(t), bson.D{{Key: "_id", Value: "capped"}}).Decode(&lock); err != nil {
				t.Fatal(err)
			}
			if lock.Runs != maxRuns {
				t.Errorf("after a run-now the lock's run count is %d, want still %d", lock.Runs, maxRuns)
			}
		})
	}
}
