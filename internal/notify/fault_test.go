package notify

import (
	"context"
	"testing"
	"time"

	"github.com/cronswap/cronswap/internal/faultproxy"
	"github.com/cronswap/cronswap/internal/testmongo"
)

// proxied returns two views of one database: through, whose relays reach
// it via a fault proxy, and direct, for the test's own writes and checks
// (an injected error clears the proxied client's pool, which must not fail
// a check running at that moment).
func proxied(t *testing.T) (through, direct fixture, p *faultproxy.Proxy) {
	t.Helper()
	direct = newFixture(t)
	p, client := testmongo.ProxiedClient(t)
	db := client.Database(direct.db.Name())
	return fixture{db: db, runs: db.Collection(direct.runs.Name()), notes: Collection(db)}, direct, p
}

var interrupted = faultproxy.ErrorReply{Code: 11600, CodeName: "InterruptedAtShutdown", Errmsg: "interrupted at shutdown"}

// A delivery whose outcome cannot be written at first is written when the
// database answers again, so it is not sent a second time.
func TestDeliveryRecordRetried(t *testing.T) {
	f, direct, p := proxied(t)
	s := newSink(t)
	r := f.relay("a", s, nil)
	direct.failRun(t, 1, time.Now())
	ctx := context.Background()
	for _, src := range []Source{outbox{f.runs}} {
		if err := r.move(ctx, src); err != nil {
			t.Fatal(err)
		}
	}
	p.ResetStats()
	p.FailTimes(2, faultproxy.All(faultproxy.CommandName("update"), faultproxy.Collection(CollectionName)), interrupted)
	// The refusals clear the client's pool; until the driver's monitor has
	// seen the server again, an operation can fail with the pool cleared
	// (the claim after the delivery, on a loaded machine), and the relay
	// tries the pass again, as here.
	for deadline := time.Now().Add(10 * time.Second); ; {
		err := r.deliverDue(ctx)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		t.Logf("%v; trying the pass again", err)
		time.Sleep(50 * time.Millisecond) // polling the pool's recovery, bounded by the deadline
	}
	if got := direct.byStatus(t, StatusDelivered); len(got) != 1 || got[0].Attempts != 1 {
		t.Fatalf("delivered %+v, want one after one attempt", got)
	}
	if got := s.delivered(); len(got) != 1 {
		t.Fatalf("sink saw %v", got)
	}
	if n := p.Stats().Commands["update"]; n != 3 {
		t.Fatalf("%d updates of the outcome, want 3 (two refused)", n)
	}
}

// A pass that fails (the database refused the look for notices) is tried
// again after retryPass, not after the poll period.
func TestFailedPassRetriedSoon(t *testing.T) {
	f, direct, p := proxied(t)
	s := newSink(t)
	// Twice: the driver tries a read once more by itself.
	p.FailTimes(2, faultproxy.All(faultproxy.CommandName("find"), faultproxy.Collection(f.runs.Name())), interrupted)
	direct.failRun(t, 1, time.Now())
	start(t, f.relay("a", s, func(o *Options) { o.Settings.Poll = time.Hour }))
	began := time.Now()
	waitFor(t, 3*retryPass, "the notice delivered after the failed pass", func() bool { return len(direct.byStatus(t, StatusDelivered)) == 1 })
	if took := time.Since(began); took < retryPass/2 {
		t.Fatalf("delivered after %s: the first pass did not fail", took)
	}
}
