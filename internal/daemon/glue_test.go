package daemon

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/changestream"
	"github.com/cronswap/cronswap/internal/config"
	"github.com/cronswap/cronswap/internal/metrics"
	"github.com/cronswap/cronswap/internal/statefile"
	"github.com/cronswap/cronswap/schedule"
	"github.com/cronswap/cronswap/scheduler"
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

func TestStateStoreFromConfig(t *testing.T) {
	if s := stateStore(config.Config{}); s != nil {
		t.Fatalf("no state_file: got %v, want nil", s)
	}
	cfg := config.Config{StateFile: "/var/lib/cronswap/state", InstanceID: "a", Mongo: config.Mongo{Database: "db"}}
	f, ok := stateStore(cfg).(*statefile.File)
	if !ok || f.Path() != cfg.StateFile {
		t.Fatalf("state_file set: got %#v", stateStore(cfg))
	}
}

// The parallel decode gives what decoding one by one gives, in order.
func TestDecodeAllMatchesSequentialDecode(t *testing.T) {
	var docs []bson.Raw
	for i := range 2500 {
		var expr any = fmt.Sprintf("%d 9 * * *", i%60)
		if i%7 == 0 {
			expr = i // refused by type; a bad expression is the engine's to refuse
		}
		b, err := bson.Marshal(bson.D{{Key: "_id", Value: fmt.Sprintf("job%04d", i)}, {Key: "cron_expr", Value: expr}})
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, b)
	}
	got := DecodeAll(docs)
	refused := 0
	if len(got) != len(docs) {
		t.Fatalf("%d items for %d documents", len(got), len(docs))
	}
	for i, d := range docs {
		want, wantErr := schedule.DecodeFields(d)
		if got[i].Schedule != want || (got[i].Err == nil) != (wantErr == nil) {
			t.Fatalf("item %d = %+v, %v; want %+v, %v", i, got[i].Schedule, got[i].Err, want, wantErr)
		}
		if got[i].Err != nil {
			refused++
		}
	}
	if refused != (len(docs)+6)/7 {
		t.Fatalf("%d documents refused, want %d", refused, (len(docs)+6)/7)
	}
}

// The sink leaves parsing to the engine: an unparsable expression or an
// unknown zone is still refused, with the job keeping its last known good
// timer and the error naming the field.
func TestSinkRefusesBadExpressionThroughTheEngine(t *testing.T) {
	engine := scheduler.New(scheduler.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	sink := NewEngineSink(engine, nil, nil)
	doc := func(expr, tz string) bson.Raw {
		d := bson.D{{Key: "_id", Value: "j"}, {Key: "cron_expr", Value: expr}}
		if tz != "" {
			d = append(d, bson.E{Key: "timezone", Value: tz})
		}
		b, err := bson.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	sink.Upsert(doc("0 9 * * *", ""))
	for _, bad := range []struct{ expr, tz, field string }{{"0 25 * * *", "", "cron_expr"}, {"0 9 * * *", "Mars/Base", "timezone"}} {
		sink.Upsert(doc(bad.expr, bad.tz))
		st, ok := engine.Get("j")
		if !ok || !st.Armed || st.CronExpr != "0 9 * * *" || !strings.Contains(st.LastError, "field "+bad.field) {
			t.Fatalf("after %+v: %+v", bad, st)
		}
	}
}

// ReplaceAll logs how a full reload divided its time between decoding and
// the engine: at info level when something changed, at debug level when the
// snapshot matched the engine.
func TestSinkLogsTheDecodeEngineSplit(t *testing.T) {
	var buf strings.Builder
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	engine := scheduler.New(scheduler.Options{Logger: slog.New(slog.DiscardHandler)})
	sink := NewEngineSink(engine, log, nil)
	var docs []bson.Raw
	for i := range 3 {
		b, err := bson.Marshal(bson.D{{Key: "_id", Value: fmt.Sprintf("j%d", i)}, {Key: "cron_expr", Value: "0 9 * * *"}})
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, b)
	}
	if changed := sink.ReplaceAll(docs); len(changed) != 3 {
		t.Fatalf("first ReplaceAll changed %v", changed)
	}
	if changed := sink.ReplaceAll(docs); len(changed) != 0 {
		t.Fatalf("second ReplaceAll changed %v", changed)
	}
	type record struct {
		Level     string `json:"level"`
		Msg       string `json:"msg"`
		Documents int    `json:"documents"`
		Changed   int    `json:"changed"`
		Decode    *int64 `json:"decode"` // nanoseconds
		Engine    *int64 `json:"engine"`
	}
	var recs []record
	for line := range strings.Lines(buf.String()) {
		var rec record
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		if rec.Msg == msgSchedulesReplaced {
			recs = append(recs, rec)
		}
	}
	if len(recs) != 2 {
		t.Fatalf("%d %q records, want 2:\n%s", len(recs), msgSchedulesReplaced, buf.String())
	}
	for i, want := range []struct {
		level   string
		changed int
	}{{"INFO", 3}, {"DEBUG", 0}} {
		r := recs[i]
		if r.Level != want.level || r.Documents != 3 || r.Changed != want.changed || r.Decode == nil || r.Engine == nil || *r.Decode < 0 || *r.Engine <= 0 {
			t.Errorf("record %d: %+v, want level %s, 3 documents, %d changed, a decode and engine duration", i, r, want.level, want.changed)
		}
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
