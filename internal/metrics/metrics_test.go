package metrics

import (
	"net/http/httptest"
	"testing"
	"time"
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
	m.RegisterGauges(Sources{Armed: func() int { return 7 }, TokenSavedAt: func() time.Time { return saved },
		ClaimLatency: func() time.Duration { return 1500 * time.Millisecond }})
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
	families, err := m.Registry().Gather()
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
