package firepath

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/actions"
	"github.com/cronswap/cronswap/internal/notify"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/internal/runstore"
	"github.com/cronswap/cronswap/jobs"
)

func (e *fireEnv) pause(t *testing.T, job string) (record.PauseDoc, bool) {
	t.Helper()
	var p record.PauseDoc
	err := record.PausesCollectionOf(e.db).FindOne(testCtx(t), bson.D{{Key: "_id", Value: job}}).Decode(&p)
	if err != nil {
		return record.PauseDoc{}, false
	}
	return p, p.Paused()
}

// After N consecutive failed slots the job is paused with a note (and the
// pause's notification notice, in the same write); its next
// fires are not run; a resume clears it, and only failures after the
// resume count towards the next pause. A success breaks a streak.
func TestPauseAfterFailuresAndResume(t *testing.T) {
	t.Parallel()
	e := newFireEnv(t)
	var runs, fail atomic.Int32
	fail.Store(1)
	e.reg.Register("shaky", actions.Action{Handler: jobs.HandlerFunc(func(ctx context.Context, f jobs.Run) error {
		runs.Add(1)
		if fail.Load() == 1 {
			return errors.New("boom")
		}
		return nil
	}), Policy: jobs.Policy{PauseAfterFailures: 2}})
	store := runstore.New(e.locks, e.runs, runstore.Options{Instance: "r1", Logger: slog.New(slog.DiscardHandler)})
	r := NewRunner(RunnerOptions{Registry: e.reg, InstanceID: "r1", Logger: slog.New(slog.DiscardHandler), TTL: time.Minute,
		Store: store,
		Hooks: Hooks{NotRun: func(id string, slot time.Time, reason string) { e.record(&e.notRun, id+":"+reason) }}})
	t.Cleanup(func() { r.Shutdown(10 * time.Second) })
	start := time.Now().Truncate(time.Second).UTC()
	slot := func(i int) time.Time { return start.Add(time.Duration(i) * time.Second) }

	r.Fire(dueAt("shaky", slot(0))) // fails
	fail.Store(0)
	r.Fire(dueAt("shaky", slot(1))) // succeeds: the streak is broken
	fail.Store(1)
	r.Fire(dueAt("shaky", slot(2))) // fails: 1 in a row
	if _, paused := e.pause(t, "shaky"); paused {
		t.Fatal("paused after one failure in a row, want 2")
	}
	r.Fire(dueAt("shaky", slot(3))) // fails: 2 in a row → paused
	p, paused := e.pause(t, "shaky")
	if !paused || p.Failures != 2 || p.RunID != record.RunID("shaky", slot(3)) || !strings.Contains(p.Note, "boom") || p.PausedAt.IsZero() {
		t.Fatalf("after 2 failures in a row: %+v, want paused with a note", p)
	}
	if p.Notice == nil || p.Notice.Kind != notify.KindPaused || p.Notice.Note != p.Note || !p.Notice.At.Equal(p.PausedAt) {
		t.Errorf("pause document %+v (notice %+v): want the pause notice written with the pause", p, p.Notice)
	}
	before := runs.Load()
	r.Fire(dueAt("shaky", slot(4)))
	if runs.Load() != before || e.count(&e.notRun, "shaky:"+NotRunPaused) != 1 {
		t.Fatalf("a fire of the paused job: ran %d, not-run %v; want not run, reason paused", runs.Load()-before, e.notRun)
	}
	if n, err := e.runs.CountDocuments(testCtx(t), bson.D{{Key: "_id", Value: record.RunID("shaky", slot(4))}}); err != nil || n != 0 {
		t.Errorf("the paused fire has a run record (%d, %v)", n, err)
	}

	resumedAt := slot(4).Add(500 * time.Millisecond)
	ok, err := store.ResumePaused(testCtx(t), "shaky", "tester", resumedAt)
	if err != nil || !ok {
		t.Fatalf("resume: %v, %v", ok, err)
	}
	if ok, err := store.ResumePaused(testCtx(t), "shaky", "tester", resumedAt); err != nil || ok {
		t.Errorf("second resume: %v, %v; want not paused any more", ok, err)
	}
	r.Fire(dueAt("shaky", slot(5))) // runs again, fails: 1 since the resume
	if runs.Load() != before+1 {
		t.Fatalf("after the resume the fire did not run")
	}
	if _, paused := e.pause(t, "shaky"); paused {
		t.Fatal("paused again at the first failure after the resume (the failures before it counted)")
	}
	r.Fire(dueAt("shaky", slot(6))) // 2 since the resume → paused again
	if p, paused := e.pause(t, "shaky"); !paused || p.ResumedBy != "tester" || !p.ResumedAt.Equal(resumedAt) {
		t.Errorf("after 2 more failures: %+v, want paused, keeping the last resume", p)
	}
}

// A damaged pause document is logged and does not pause its job; one
// whose state is exactly "paused" does, whatever else is wrong with it.
func TestPauseDamagedDocuments(t *testing.T) {
	t.Parallel()
	e := newFireEnv(t)
	s := runstore.New(e.locks, e.runs, runstore.Options{Instance: "r1", Logger: slog.New(slog.DiscardHandler)})
	coll := record.PausesCollectionOf(e.db)
	docs := []any{
		bson.D{{Key: "_id", Value: "state_number"}, {Key: "state", Value: 7}},
		bson.D{{Key: "_id", Value: "state_unknown"}, {Key: "state", Value: "frozen"}},
		bson.D{{Key: "_id", Value: "no_state"}},
		bson.D{{Key: "_id", Value: "paused_bad_fields"}, {Key: "state", Value: "paused"}, {Key: "paused_at", Value: "yesterday"}},
		bson.D{{Key: "_id", Value: "by_hand"}, {Key: "state", Value: "paused"}},
	}
	if _, err := coll.InsertMany(testCtx(t), docs); err != nil {
		t.Fatal(err)
	}
	for job, want := range map[string]bool{"state_number": false, "state_unknown": false, "no_state": false,
		"paused_bad_fields": true, "by_hand": true, "absent": false} {
		_, paused, err := s.Paused(testCtx(t), job)
		if err != nil || paused != want {
			t.Errorf("%s: paused %v, %v; want %v", job, paused, err, want)
		}
	}
}

// Failures are counted by slot, not by attempt: a slot whose retries all
// failed counts once, and a slot still retrying not at all.
func TestPauseCountsSlotsNotAttempts(t *testing.T) {
	t.Parallel()
	e := newFireEnv(t)
	var runs atomic.Int32
	e.reg.Register("flaky", actions.Action{Handler: jobs.HandlerFunc(func(ctx context.Context, f jobs.Run) error { runs.Add(1); return errors.New("down") }), Policy: jobs.Policy{PauseAfterFailures: 2, Retry: jobs.RetryPolicy{Attempts: 2, Backoff: 100 * time.Millisecond}}})
	r := e.retryRunner(t, "r1", time.Hour, DefaultClaimGrace)
	start := time.Now().Truncate(time.Second).UTC()
	r.Fire(dueAt("flaky", start))
	if _, paused := e.pause(t, "flaky"); paused {
		t.Fatal("paused while the first slot is still retrying")
	}
	e.waitStatus(t, record.RunID("flaky", start), record.StatusFailed)
	if p, paused := e.pause(t, "flaky"); paused || runs.Load() != 2 {
		t.Fatalf("after one slot's 2 failed attempts: paused %v (%+v), %d runs; want not paused, 2 runs", paused, p, runs.Load())
	}
	r.Fire(dueAt("flaky", start.Add(time.Second)))
	e.waitStatus(t, record.RunID("flaky", start.Add(time.Second)), record.StatusFailed)
	waitFor(t, 10*time.Second, "paused after the second failed slot", func() bool {
		p, paused := e.pause(t, "flaky")
		return paused && p.Failures == 2 && p.RunID == record.RunID("flaky", start.Add(time.Second))
	})
}

// A slot not run because its job is paused is not notified (the pause is,
// once); every other missed reason is.
func TestPausedSlotsNotNotified(t *testing.T) {
	t.Parallel()
	for _, reason := range record.MissedReasons {
		_, ok := runstore.NoticeKind(record.StatusMissed, reason)
		if want := reason != record.MissedPaused; ok != want {
			t.Errorf("missed %s notified: %v, want %v", reason, ok, want)
		}
	}
}
