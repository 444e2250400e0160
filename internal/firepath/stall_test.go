package firepath

import (
	"context"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/actions"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/jobs"
)

// The stall watch sees a gap between its notes longer than stallThreshold
// as a stall: an end seen during it, or right after it, is one the process
// may have seen late.
func TestStallWatch(t *testing.T) {
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	w := &stallWatch{last: t0}
	w.note(t0.Add(stallTick))
	if _, stalled := w.endedAfter(t0.Add(stallTick + 50*time.Millisecond)); stalled {
		t.Fatal("a stall seen while the process ran")
	}
	// Frozen from t0+tick for 5 s: an end seen before the watch's next
	// note is one seen after the stall.
	resumed := t0.Add(stallTick + 5*time.Second)
	if from, stalled := w.endedAfter(resumed); !stalled || !from.Equal(t0.Add(stallTick)) {
		t.Fatalf("end seen on resuming, before the watch's note: stalled %v from %v, want from %v", stalled, from, t0.Add(stallTick))
	}
	// The watch noted the stall first.
	w.note(resumed)
	if from, stalled := w.endedAfter(resumed.Add(10 * time.Millisecond)); !stalled || !from.Equal(t0.Add(stallTick)) {
		t.Fatalf("end seen right after the watch's note: stalled %v from %v, want from %v", stalled, from, t0.Add(stallTick))
	}
	// Long after the stall, running normally again.
	later := resumed
	for range 20 {
		later = later.Add(stallTick)
		w.note(later)
	}
	if _, stalled := w.endedAfter(later.Add(10 * time.Millisecond)); stalled {
		t.Fatal("a stall long past still marks ends")
	}
}

// stalledBefore is a stall source that says every end was seen after a
// stall that began ago before it.
type stalledBefore time.Duration

func (s stalledBefore) endedAfter(now time.Time) (time.Time, bool) {
	return now.Add(-time.Duration(s)), true
}

// A holder whose process stalled (frozen, paused) while its action ended
// sees the end only when it runs again: the record says so — end_observed
// with ended_after, the bound the action ended after — instead of passing
// the moment it looked for the moment the action ended. Also on a record
// another replica marked abandoned meanwhile, next to the abandonment.
func TestEndObservedAfterAStall(t *testing.T) {
	t.Parallel()
	e := newFireEnv(t)
	release := make(chan struct{})
	e.reg.Register("quick", actions.Action{Handler: jobs.HandlerFunc(func(context.Context, jobs.Run) error { return nil })})
	e.reg.Register("frozen", actions.Action{Handler: jobs.HandlerFunc(func(ctx context.Context, _ jobs.Run) error {
		<-release
		return nil
	})})
	r := e.runner(t, "a", time.Minute)
	r.stalls = stalledBefore(5 * time.Second)
	slot := time.Now().Truncate(time.Second)

	r.Fire(dueAt("quick", slot))
	d := e.run(t, record.RunID("quick", slot))
	if d.Status != record.StatusSucceeded || !d.EndObserved || d.EndedAfter.IsZero() ||
		d.EndedAfter.After(d.EndedAt) || d.EndedAfter.Before(d.StartedAt) {
		t.Fatalf("record %+v: want succeeded, end observed, ended after a bound between its start and ended_at", d)
	}

	done := make(chan struct{})
	go func() { defer close(done); r.Fire(dueAt("frozen", slot)) }()
	id := record.RunID("frozen", slot)
	e.waitStatus(t, id, record.StatusRunning)
	// Another replica's sweep, the holder's lease past.
	abandonedAt := time.Now()
	if _, err := e.runs.UpdateOne(testCtx(t), bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$set", Value: bson.D{
		{Key: "status", Value: record.StatusAbandoned}, {Key: "abandoned_at", Value: abandonedAt}}}}); err != nil {
		t.Fatal(err)
	}
	close(release)
	<-done
	d = e.run(t, id)
	if d.Status != record.StatusAbandoned || d.EndStatus != record.StatusSucceeded || !d.EndObserved ||
		d.EndedAfter.IsZero() || d.EndedAfter.After(d.EndedAt) {
		t.Fatalf("abandoned record %+v: want the holder's observed end next to the abandonment, with its bound", d)
	}
}
