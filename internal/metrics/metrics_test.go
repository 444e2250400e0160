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
	m.RegisterGauges(Sources{Armed: func() int { return 7 }, TokenSavedAt: func() time.Time { return saved }})
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
	m.ObserveFireLateness(now.Add(-10*time.Millisecond), now)

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
		"cronswap_fire_lateness_seconds,count":                     1,
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
	m.ObserveFireLateness(time.Now(), time.Now())
}
