package firepath

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cronswap/cronswap/internal/actions"
	"github.com/cronswap/cronswap/internal/faultproxy"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/internal/runstore"
	"github.com/cronswap/cronswap/internal/testmongo"
	"github.com/cronswap/cronswap/jobs"
)

// runSpan is one run of the action: who ran it, with what identity, from
// when to when, and why it stopped.
type runSpan struct {
	instance, runID string
	fence           int64
	start, end      time.Time
	cause           error
}

// A replica runs a slot; db.dropDatabase() lands mid-run; another replica,
// whose claim of the same slot was sent before the drop and held in the
// network until after it (the replica frozen across the drop), wins the
// slot again on the empty database and runs it. The two acquisitions share
// the slot's run id and fence (docs/locks.md) but not their token: the
// first holder's next renewal finds its run no longer its own and stops
// it, so the two runs overlap at most until that renewal (lock.ttl/3 and
// its answer, never past lock.ttl); the second holder's end is recorded.
// Before tokens, the stale renewals matched the new holder's records, both
// ran to their end, and the new holder could not record its own.
func TestDroppedDatabaseStaleHolderStops(t *testing.T) {
	t.Parallel()
	const ttl = MinLockTTL
	e := newFireEnv(t)
	var (
		mu    sync.Mutex
		spans []runSpan
	)
	release := make(chan struct{})
	started := make(chan string, 2)
	e.reg.Register("long", actions.Action{Handler: jobs.HandlerFunc(func(ctx context.Context, run jobs.Run) error {
		s := runSpan{instance: run.InstanceID, runID: run.RunID, fence: run.Fence, start: time.Now()}
		started <- run.InstanceID
		select {
		case <-ctx.Done():
		case <-release:
		}
		s.end, s.cause = time.Now(), context.Cause(ctx)
		mu.Lock()
		spans = append(spans, s)
		mu.Unlock()
		return ctx.Err()
	})})
	a := e.runner(t, "a", ttl)
	p, client := testmongo.ProxiedClient(t)
	locks, runs := record.Collections(client.Database(e.db.Name()))
	b := NewRunner(RunnerOptions{Registry: e.reg, InstanceID: "b", Logger: slog.New(slog.DiscardHandler), TTL: ttl,
		Store: runstore.New(locks, runs, runstore.Options{Instance: "b", Logger: slog.New(slog.DiscardHandler)})})
	t.Cleanup(func() { b.Shutdown(30 * time.Second) })

	slot := time.Now().Truncate(time.Second)
	held := p.HoldNext(faultproxy.All(faultproxy.CommandName("insert"), faultproxy.Collection(record.RunsCollection)))
	bDone := make(chan struct{})
	go func() { defer close(bDone); b.Fire(dueAt("long", slot)) }()
	<-held.Held() // b's claim is on its way, frozen
	aDone := make(chan struct{})
	go func() { defer close(aDone); a.Fire(dueAt("long", slot)) }()
	if who := <-started; who != "a" {
		t.Fatalf("%s started first, want a", who)
	}
	if err := e.db.Drop(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	held.Release() // b resumes: its claim lands on the empty database
	if who := <-started; who != "b" {
		t.Fatalf("%s started second, want b", who)
	}
	waitClosedWithin(t, aDone, 3*ttl, "the first holder's run stopped")
	close(release)
	waitClosedWithin(t, bDone, 3*ttl, "the second holder's run ended")

	mu.Lock()
	defer mu.Unlock()
	if len(spans) != 2 || spans[0].instance != "a" || spans[1].instance != "b" {
		t.Fatalf("runs %+v: want a's stopped, then b's", spans)
	}
	first, second := spans[0], spans[1]
	if first.runID != second.runID || first.fence != second.fence {
		t.Errorf("the two acquisitions ran as %s/%d and %s/%d: want one run id and fence (records dropped in between)",
			first.runID, first.fence, second.runID, second.fence)
	}
	if first.cause == nil || !strings.Contains(first.cause.Error(), "no longer this replica's") {
		t.Errorf("the first holder stopped for %v: want its renewal finding the run no longer its own", first.cause)
	}
	overlap := first.end.Sub(second.start)
	if overlap >= ttl {
		t.Errorf("the two runs overlapped %v: want less than lock.ttl (%v), the documented bound", overlap, ttl)
	}
	rec := e.run(t, record.RunID("long", slot))
	if rec.Instance != "b" || rec.Status != record.StatusSucceeded {
		t.Errorf("record %+v: want the second holder's run, succeeded", rec)
	}
	if l := e.lock(t, "long"); l.State != record.LockFree || l.LastOutcome != record.StatusSucceeded {
		t.Errorf("lock %+v: want freed by the second holder's end", l)
	}
}

// waitClosedWithin waits for ch to close, at most within.
func waitClosedWithin(t *testing.T, ch <-chan struct{}, within time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(within):
		t.Fatalf("timed out after %v waiting for %s", within, what)
	}
}
