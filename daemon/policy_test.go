package daemon_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/daemon"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/internal/testmongo"
	"github.com/cronswap/cronswap/jobs"
)

// A handler's policy reaches the fire path although the handler is
// registered after New built it: a failed first attempt under
// Policy.Retry is tried again as attempt 2 of the same slot, which
// succeeds; a run past Policy.Timeout has its ctx ended and is recorded
// failed.
func TestHandlerPolicyRetryAndTimeout(t *testing.T) {
	db := testmongo.NewDatabase(t, testmongo.Client(t))
	for _, d := range []bson.D{
		{{Key: "_id", Value: "flaky"}, {Key: "cron_expr", Value: "*/2 * * * * *"}},
		{{Key: "_id", Value: "slow"}, {Key: "cron_expr", Value: "*/2 * * * * *"}},
	} {
		if _, err := db.Collection("schedules").InsertOne(context.Background(), d); err != nil {
			t.Fatal(err)
		}
	}
	s, err := daemon.New(db, daemon.Options{InstanceID: "policy-test", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	attempts := map[time.Time][]int{}
	if err := s.Handle("flaky", jobs.HandlerFunc(func(_ context.Context, run jobs.Run) error {
		mu.Lock()
		defer mu.Unlock()
		attempts[run.Slot] = append(attempts[run.Slot], run.Attempt)
		if run.Attempt < 2 {
			return errors.New("the first attempt fails")
		}
		return nil
	}), jobs.Policy{Retry: jobs.RetryPolicy{Attempts: 2, Backoff: time.Second}, Overlap: jobs.OverlapAllow}); err != nil {
		t.Fatal(err)
	}
	timedOut := make(chan error, 1)
	if err := s.Handle("slow", jobs.HandlerFunc(func(ctx context.Context, _ jobs.Run) error {
		<-ctx.Done()
		select {
		case timedOut <- context.Cause(ctx):
		default:
		}
		return ctx.Err()
	}), jobs.Policy{Timeout: 500 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	var retried record.RunDoc
	waitFor(t, 30*time.Second, "a flaky slot retried to success", func() bool {
		var docs []record.RunDoc
		cur, err := db.Collection(record.RunsCollection).Find(context.Background(),
			bson.D{{Key: "job_id", Value: "flaky"}, {Key: "status", Value: record.StatusSucceeded}})
		if err != nil || cur.All(context.Background(), &docs) != nil || len(docs) == 0 {
			return false
		}
		retried = docs[0]
		return true
	})
	mu.Lock()
	got := attempts[retried.ScheduledAt.UTC()]
	mu.Unlock()
	if retried.Attempt != 2 || len(retried.Attempts) != 2 || len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Errorf("succeeded record: attempt %d, %d attempts recorded; the handler saw attempts %v; want 1 then 2", retried.Attempt, len(retried.Attempts), got)
	}

	select {
	case cause := <-timedOut:
		t.Logf("the slow handler's ctx ended: %v", cause)
		if cause == nil {
			t.Error("the timed-out run's ctx ended without a cause")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the slow handler's ctx did not end at its timeout")
	}
	waitFor(t, 30*time.Second, "the timed-out run recorded failed", func() bool {
		n, err := db.Collection(record.RunsCollection).CountDocuments(context.Background(),
			bson.D{{Key: "job_id", Value: "slow"}, {Key: "status", Value: record.StatusFailed}})
		return err == nil && n > 0
	})
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
