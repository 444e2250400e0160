package metrics

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func scrape(t *testing.T, m *Metrics) map[string]float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	out, err := Flatten(rec.Body)
	if err != nil {
		t.Fatalf("metrics do not parse: %v\n%s", err, rec.Body.String())
	}
	return out
}

func TestMetricsMoveAndParse(t *testing.T) {
	saved := time.Now().Add(-3 * time.Second)
	m := New()
	if err := m.RegisterGauges(Sources{Armed: func() int { return 7 }, TokenSavedAt: func() time.Time { return saved },
		ClaimLatency: func() time.Duration { return 1500 * time.Millisecond }}); err != nil {
		t.Fatal(err)
	}
	m.CountChangeEvent("update")
	m.CountReload(ReloadApplied)
	m.CountReload(ReloadRejected)
	m.CountFullReload("startup")
	m.CountResyncDrift(2)
	m.CountReconnect()
	m.CountRun("daily_report", "succeeded")
	m.CountLockAcquisition("acquired")
	m.CountFireNotRun("database_unreachable")
	now := time.Now()
	m.ObserveEditToArmed(now.Add(-time.Millisecond), now)
	m.ObserveEditToArmed(time.Time{}, now) // unknown write time: not observed
	m.ObserveEventApply(50 * time.Microsecond)
	m.ObserveFireLateness("", now.Add(-10*time.Millisecond), now, "")
	m.ObserveClaimBatch(3, 20*time.Millisecond)
	m.ObserveClaimBatch(1000, 300*time.Millisecond)
	m.ObserveClaimBatch(0, time.Second) // an empty batch: not observed
	m.CountOwnerTakeover()
	m.CountOwnerTakeover()

	got := scrape(t, m)
	want := map[string]float64{
		"cronswap_schedules_armed":                                 7,
		"cronswap_change_events_total,operation=update":            1,
		"cronswap_reloads_total,result=applied":                    1,
		"cronswap_reloads_total,result=rejected":                   1,
		"cronswap_full_reloads_total,reason=startup":               1,
		"cronswap_resync_drift_total":                              2,
		"cronswap_stream_reconnects_total":                         1,
		"cronswap_runs_total,job_id=daily_report,status=succeeded": 1,
		"cronswap_lock_acquisitions_total,result=acquired":         1,
		"cronswap_fires_not_run_total,reason=database_unreachable": 1,
		"cronswap_edit_to_armed_seconds,count":                     1,
		"cronswap_event_apply_seconds,count":                       1,
		"cronswap_fire_lateness_seconds,category=none,count":       1,
		"cronswap_claim_batch_size,count":                          2,
		"cronswap_claim_batch_size,sum":                            1003,
		"cronswap_claim_batch_seconds,count":                       2,
		"cronswap_owner_takeovers_total":                           2,
		"cronswap_claim_latency_estimate_seconds":                  1.5,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if age := got["cronswap_resume_token_age_seconds"]; age < 3 || age > 60 {
		t.Errorf("token age %v, want about 3 s", age)
	}
	if _, ok := got["go_goroutines"]; !ok {
		t.Error("Go runtime collector missing")
	}
}

func TestNilMetricsRecordNothing(t *testing.T) {
	var m *Metrics
	m.CountChangeEvent("insert")
	m.CountReload(ReloadApplied)
	m.CountFullReload("startup")
	m.CountResyncDrift(1)
	m.CountReconnect()
	m.CountRun("j", "failed")
	m.CountLockAcquisition("held")
	m.CountFireNotRun("shutting_down")
	m.ObserveEditToArmed(time.Now(), time.Now())
	m.ObserveEventApply(time.Millisecond)
	m.ObserveFireLateness("billing", time.Now(), time.Now(), "")
	m.Preset(Known{Categories: []string{"billing"}})
	m.ObserveClaimBatch(10, time.Millisecond)
	m.CountOwnerTakeover()
}

// A claim batch lands in the size bucket of its number of fires; the
// buckets reach 100,000.
func TestClaimBatchBuckets(t *testing.T) {
	m := New()
	m.ObserveClaimBatch(1, time.Millisecond)
	m.ObserveClaimBatch(700, 40*time.Millisecond)
	m.ObserveClaimBatch(100000, 3*time.Second)
	families, err := m.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	buckets := map[string]map[float64]uint64{}
	for _, f := range families {
		switch f.GetName() {
		case "cronswap_claim_batch_size", "cronswap_claim_batch_seconds":
			got := map[float64]uint64{}
			for _, b := range f.GetMetric()[0].GetHistogram().GetBucket() {
				got[b.GetUpperBound()] = b.GetCumulativeCount()
			}
			buckets[f.GetName()] = got
		}
	}
	size := buckets["cronswap_claim_batch_size"]
	for le, want := range map[float64]uint64{1: 1, 500: 1, 1000: 2, 50000: 2, 100000: 3} {
		if got, ok := size[le]; !ok || got != want {
			t.Errorf("claim_batch_size bucket le=%g: %d (present %v), want %d", le, got, ok, want)
		}
	}
	secs := buckets["cronswap_claim_batch_seconds"]
	for le, want := range map[float64]uint64{.001: 1, .05: 2, 2.5: 2, 5: 3} {
		if got := secs[le]; got != want {
			t.Errorf("claim_batch_seconds bucket le=%g: %d, want %d", le, got, want)
		}
	}
}

// NewOn puts the metrics on the caller's registerer, without the runtime
// collectors New adds; Handler serves the caller's gatherer, or is nil
// without one; a second instance on the same registerer is refused with an
// error (not a panic), and a wrapped registerer tells two apart.
func TestNewOnRegistersOnTheCallersRegisterer(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewOn(reg, reg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.RegisterGauges(Sources{Armed: func() int { return 3 }}); err != nil {
		t.Fatal(err)
	}
	m.CountRun("report", "succeeded")
	got := scrape(t, m)
	if got["cronswap_runs_total,job_id=report,status=succeeded"] != 1 || got["cronswap_schedules_armed"] != 3 {
		t.Errorf("cronswap metrics not served from the caller's registry: %v", got)
	}
	for key := range got {
		if strings.HasPrefix(key, "go_") || strings.HasPrefix(key, "process_") {
			t.Errorf("NewOn added a runtime collector to the caller's registry: %s", key)
		}
	}

	_, err = NewOn(reg, reg)
	var already prometheus.AlreadyRegisteredError
	if !errors.As(err, &already) {
		t.Errorf("a second instance on the same registerer: err = %v, want AlreadyRegisteredError", err)
	}
	if err := m.RegisterGauges(Sources{Armed: func() int { return 3 }}); !errors.As(err, &already) {
		t.Errorf("gauges registered twice: err = %v, want AlreadyRegisteredError", err)
	}
	shared := prometheus.NewRegistry()
	for _, id := range []string{"web-1", "web-2"} {
		w, err := NewOn(prometheus.WrapRegistererWith(prometheus.Labels{"instance_id": id}, shared), shared)
		if err != nil {
			t.Fatalf("instance %s on a wrapped registerer: %v", id, err)
		}
		w.CountRun("report", "failed")
	}
	if n := seriesCount(shared, "cronswap_runs_total"); n != 2 {
		t.Errorf("two wrapped instances: %d runs_total series, want 2", n)
	}

	alone, err := NewOn(prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if alone.Handler() != nil || alone.Gatherer() != nil {
		t.Error("without a gatherer, Handler must be nil (the owner serves its registry)")
	}
}

// seriesCount is the number of series of the metric family name in g.
func seriesCount(g prometheus.Gatherer, name string) int {
	families, err := g.Gather()
	if err != nil {
		return -1
	}
	for _, f := range families {
		if f.GetName() == name {
			return len(f.GetMetric())
		}
	}
	return 0
}

// schedules_rejected reads its source at every scrape.
func TestSchedulesRejectedFollowsItsSource(t *testing.T) {
	m := New()
	n := 2
	if err := m.RegisterGauges(Sources{Rejected: func() int { return n }}); err != nil {
		t.Fatal(err)
	}
	if got := scrape(t, m)["cronswap_schedules_rejected"]; got != 2 {
		t.Fatalf("schedules_rejected = %v, want 2", got)
	}
	n = 0
	if got, ok := scrape(t, m)["cronswap_schedules_rejected"]; !ok || got != 0 {
		t.Fatalf("schedules_rejected = %v (exported %t), want 0", got, ok)
	}
}
