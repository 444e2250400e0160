package daemon

import (
	"context"
	"errors"
	"io/fs"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

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
	reserved := -1
	reserve := func(n int) { reserved = n }
	if s := stateStore(Options{}, db, reserve); s != nil {
		t.Fatalf("no StateFile: got %v, want nil", s)
	}
	opts := Options{StateFile: filepath.Join(t.TempDir(), "state"), InstanceID: "a"}
	s, ok := stateStore(opts, db, reserve).(reservingStore)
	if f, isFile := s.StateStore.(*statefile.File); !ok || !isFile || f.Path() != opts.StateFile {
		t.Fatalf("StateFile set: got %#v", stateStore(opts, db, reserve))
	}

	// No file yet: nothing to make room for.
	ctx := context.Background()
	if _, err := s.Load(ctx); !errors.Is(err, fs.ErrNotExist) || reserved != -1 {
		t.Fatalf("Load without a file: %v, reserved %d; want fs.ErrNotExist and no reservation", err, reserved)
	}
	// A file of three schedules: room for three before the first is read.
	docs := func(yield func(bson.Raw, error) bool) {
		for _, id := range []string{"a", "b", "c"} {
			d, _ := bson.Marshal(bson.D{{Key: "_id", Value: id}, {Key: "cron_expr", Value: "* * * * *"}})
			if !yield(d, nil) {
				return
			}
		}
	}
	if err := s.Save(ctx, changestream.State{Token: tokenDoc(t), Docs: docs}); err != nil {
		t.Fatal(err)
	}
	st, err := s.Load(ctx)
	if err != nil || reserved != 3 || st.Documents != 3 {
		t.Fatalf("Load of three: %v, reserved %d, Documents %d; want room for 3 made at the load", err, reserved, st.Documents)
	}
	n := 0
	for _, err := range st.Docs {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 3 {
		t.Errorf("the loaded file yielded %d documents, want 3", n)
	}
}

// tokenDoc is a resume token's shape: a document with _data.
func tokenDoc(t *testing.T) bson.Raw {
	b, err := bson.Marshal(bson.D{{Key: "_data", Value: "82"}})
	if err != nil {
		t.Fatal(err)
	}
	return b
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
