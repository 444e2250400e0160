package runstore

import (
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cronswap/cronswap/internal/notify"
	"github.com/cronswap/cronswap/internal/record"
)

// Every write that records a failed, abandoned or missed run carries the
// record's notice in the same write (the end, the sweep, the missed
// conversion, Disown, RecordMissed), a succeeded one does not, and the
// store's OnNotice hook is told.
func TestNoticesWrittenWithTheOutcome(t *testing.T) {
	t.Parallel()
	e := newStoreEnv(t)
	ctx := testCtx(t)
	var woken atomic.Int64
	s := New(e.locks, e.runs, Options{Instance: "a", Logger: slog.New(slog.DiscardHandler),
		OnNotice: func() { woken.Add(1) }})
	a := replica{s, "a", "a1"}
	const ttl = 3 * time.Second
	outs := a.claim(t, base, ttl, forbid("fail", base), allow("ok", base), forbid("late", base), allow("gone", base), forbid("lost", base))
	for _, o := range outs {
		if o.Result != record.Acquired {
			t.Fatal(o)
		}
	}
	end := base.Add(time.Second)
	errs := a.EndBatch(ctx, []record.LeaseEnd{
		{Lease: outs[0].Lease, End: record.RunEnd{Status: record.StatusFailed, EndedAt: end, Error: "boom"}},
		{Lease: outs[1].Lease, End: record.RunEnd{Status: record.StatusSucceeded, EndedAt: end}},
		{Lease: outs[2].Lease, End: record.RunEnd{Status: record.StatusMissed, EndedAt: end, Reason: record.MissedStartingDeadline}},
	})
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if woken.Load() != 1 {
		t.Errorf("OnNotice called %d times after the ends, want 1", woken.Load())
	}
	if err := a.Disown(ctx, []record.Lease{outs[4].Lease}, record.MissedUnreachable, end); err != nil {
		t.Fatal(err)
	}
	swept := base.Add(10 * time.Second)
	if got, err := a.SweepExpired(ctx, swept, 10); err != nil || len(got) != 1 {
		t.Fatalf("sweep: %d, %v", len(got), err)
	}
	from := base.Add(time.Hour)
	if _, err := a.RecordMissed(ctx, record.MissedRange{JobID: "down", From: from, To: from.Add(2 * time.Second), Count: 3, Reason: record.MissedNoReplica},
		nil, "a", swept); err != nil {
		t.Fatal(err)
	}
	if woken.Load() != 4 {
		t.Errorf("OnNotice called %d times, want 4 (ends, disown, sweep, missed)", woken.Load())
	}
	want := map[string]*notify.Notice{
		outs[0].Lease.RunID:           new(notify.NewNotice(notify.KindFailed, end)),
		outs[1].Lease.RunID:           nil,
		outs[2].Lease.RunID:           new(notify.NewNotice(notify.KindMissed, end)),
		outs[3].Lease.RunID:           new(notify.NewNotice(notify.KindAbandoned, swept)),
		outs[4].Lease.RunID:           new(notify.NewNotice(notify.KindMissed, end)),
		record.MissedID("down", from): new(notify.NewNotice(notify.KindMissed, swept)),
	}
	for id, w := range want {
		got := e.run(t, id).Notice
		switch {
		case w == nil && got != nil:
			t.Errorf("%s: notice %+v, want none", id, *got)
		case w != nil && (got == nil || got.Kind != w.Kind || !got.At.Equal(w.At)):
			t.Errorf("%s: notice %+v, want %+v", id, got, *w)
		}
	}
}
