package daemon

import (
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cronswap/cronswap/changestream"
	"github.com/cronswap/cronswap/internal/metrics"
	"github.com/cronswap/cronswap/internal/statefile"
	"github.com/cronswap/cronswap/internal/testmongo"
)

// histogramCount scrapes mx and returns the sample count of histogram name.
func histogramCount(t *testing.T, mx *metrics.Metrics, name string) uint64 {
	t.Helper()
	rec := httptest.NewRecorder()
	mx.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	samples, err := metrics.Flatten(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	n, ok := samples[name+",count"]
	if !ok {
		t.Fatalf("no histogram %s", name)
	}
	return uint64(n)
}

func TestMetricsHooksEditToArmedFallsBackToUpdatedAt(t *testing.T) {
	mx := metrics.New()
	var armedAt atomic.Int64
	h := watchHooks(mx, &armedAt)
	now := time.Now()
	// Wall time present: counted.
	h.Event(changestream.EventInfo{Op: "update", WallTime: now.Add(-time.Second), Received: now, Applied: now})
	// No wall time (older servers): the document's updated_at is used.
	h.Event(changestream.EventInfo{Op: "update", UpdatedAt: now.Add(-time.Second), Received: now, Applied: now})
	// Neither: nothing to measure from.
	h.Event(changestream.EventInfo{Op: "delete", Received: now, Applied: now})
	if n := histogramCount(t, mx, "cronswap_edit_to_armed_seconds"); n != 2 {
		t.Errorf("edit_to_armed observations = %d, want 2", n)
	}
	if n := histogramCount(t, mx, "cronswap_event_apply_seconds"); n != 3 {
		t.Errorf("event_apply observations = %d, want 3 (every event)", n)
	}
}

func TestStateStoreFromOptions(t *testing.T) {
	db := testmongo.Client(t).Database("db")
	if s := stateStore(Options{}, db); s != nil {
		t.Fatalf("no StateFile: got %v, want nil", s)
	}
	opts := Options{StateFile: "/var/lib/cronswap/state", InstanceID: "a"}
	f, ok := stateStore(opts, db).(*statefile.File)
	if !ok || f.Path() != opts.StateFile {
		t.Fatalf("StateFile set: got %#v", stateStore(opts, db))
	}
}

// Event apply ends when the engine armed the job (its Applied hook, before
// the change is logged), not when the sink call returned; an armed time
// from before the event was received (another event, a full reload) is
// not this event's.
func TestEventApplyEndsWhenTheEngineArmed(t *testing.T) {
	mx := metrics.New()
	var armedAt atomic.Int64
	h := watchHooks(mx, &armedAt)
	received := time.Now()
	returned := received.Add(50 * time.Millisecond)
	armedAt.Store(received.Add(time.Millisecond).UnixNano())
	h.Event(changestream.EventInfo{Op: "update", Received: received, Applied: returned})
	armedAt.Store(received.Add(-time.Second).UnixNano()) // stale: before this event
	h.Event(changestream.EventInfo{Op: "update", Received: received, Applied: returned})
	var sum float64
	mfs, err := mx.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "cronswap_event_apply_seconds" {
			sum = mf.GetMetric()[0].GetHistogram().GetSampleSum()
		}
	}
	if want := 0.001 + 0.050; sum < want-1e-6 || sum > want+1e-6 {
		t.Errorf("event apply sum %.6fs, want %.6fs (1 ms to the engine's arming, then 50 ms to the sink's return for the stale one)", sum, want)
	}
	if armedAt.Load() != 0 {
		t.Error("the armed time was not consumed by the event")
	}
}
