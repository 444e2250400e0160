package metrics

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cronswap/cronswap/internal/firepath"
)

// Lateness is labelled by the schedule's category when the config names
// it, none without one, other for any other: documents cannot grow the
// label's values.
func TestFireLatenessCategoryIsBounded(t *testing.T) {
	m := New()
	m.Preset(Known{Categories: []string{"billing", "reports"}})
	now := time.Now()
	m.ObserveFireLateness("billing", now.Add(-2*time.Second), now, "")
	m.ObserveFireLateness("billing", now.Add(-time.Second), now, "")
	m.ObserveFireLateness("", now, now, "")
	for i := range 50 {
		m.ObserveFireLateness("adhoc-"+strings.Repeat("x", i), now, now, "")
	}
	got := scrape(t, m)
	for k, want := range map[string]float64{
		"cronswap_fire_lateness_seconds,category=billing,count": 2,
		"cronswap_fire_lateness_seconds,category=billing,sum":   3,
		"cronswap_fire_lateness_seconds,category=reports,count": 0,
		"cronswap_fire_lateness_seconds,category=none,count":    1,
		"cronswap_fire_lateness_seconds,category=other,count":   50,
	} {
		if v, ok := got[k]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", k, v, ok, want)
		}
	}
	n := 0
	for k := range got {
		if strings.HasPrefix(k, "cronswap_fire_lateness_seconds,") && strings.HasSuffix(k, ",count") {
			n++
		}
	}
	if n != 4 {
		t.Errorf("%d category series, want 4 (billing, reports, none, other)", n)
	}
}

// Every known reason's series is exported at 0 before anything happened,
// so that increase() sees the first miss of a freshly started replica.
func TestPresetExportsEveryReasonFromTheStart(t *testing.T) {
	m := New()
	m.Preset(Known{MissedReasons: []string{"no_replica_running", "queue_full"}, NotRunReasons: []string{"shutting_down"},
		SkipReasons: []string{"overlap", "blackout"}, ClaimResults: []string{"taken_over"},
		NotificationSinks: []string{"ops"}, FullReloadReasons: []string{"lost_position"}})
	got := scrape(t, m)
	for _, k := range []string{
		"cronswap_missed_slots_total,reason=no_replica_running",
		"cronswap_missed_slots_total,reason=queue_full",
		"cronswap_fires_not_run_total,reason=shutting_down",
		"cronswap_fires_skipped_total,reason=overlap",
		"cronswap_fires_skipped_total,reason=blackout",
		"cronswap_lock_acquisitions_total,result=taken_over",
		"cronswap_full_reloads_total,reason=lost_position",
		"cronswap_reloads_total,result=rejected",
		"cronswap_notifications_total,result=delivered,sink=ops",
		"cronswap_notifications_total,result=failed,sink=ops",
		"cronswap_notifications_total,result=given_up,sink=ops",
	} {
		if v, ok := got[k]; !ok || v != 0 {
			t.Errorf("%s = %v (present %v), want 0 from the start", k, v, ok)
		}
	}
	m.CountMissedSlots("queue_full", 3)
	if v := scrape(t, m)["cronswap_missed_slots_total,reason=queue_full"]; v != 3 {
		t.Errorf("missed_slots_total{queue_full} = %v after 3, want 3", v)
	}
}

// The gauges an alert needs: the watcher's state (one series per state,
// 1 for the current one), the live members, the heartbeat's age.
func TestAlertGauges(t *testing.T) {
	m := New()
	state := WatchLost
	if err := m.RegisterGauges(Sources{
		WatchState:   func() string { return state },
		LiveMembers:  func() int { return 3 },
		HeartbeatAge: func() time.Duration { return 2500 * time.Millisecond },
	}); err != nil {
		t.Fatal(err)
	}
	for _, cur := range []string{WatchLost, WatchStreaming, WatchPolling} {
		state = cur
		got := scrape(t, m)
		for _, s := range WatchStates {
			want := 0.0
			if s == cur {
				want = 1
			}
			if v, ok := got["cronswap_watch_state,state="+s]; !ok || v != want {
				t.Errorf("in state %s: watch_state{state=%s} = %v (present %v), want %v", cur, s, v, ok, want)
			}
		}
		if got["cronswap_members_live"] != 3 || got["cronswap_heartbeat_age_seconds"] != 2.5 {
			t.Errorf("members_live %v, heartbeat_age_seconds %v; want 3 and 2.5", got["cronswap_members_live"], got["cronswap_heartbeat_age_seconds"])
		}
	}
}

// A traced fire's lateness is its bucket's exemplar, with its trace id,
// in the OpenMetrics format a scrape asks for; the plain text format has
// no exemplar and parses as before.
func TestLatenessExemplarsInOpenMetrics(t *testing.T) {
	m := New()
	now := time.Now()
	m.ObserveFireLateness("", now.Add(-300*time.Millisecond), now, "4bf92f3577b34da6a3ce929d0e0e4736")
	m.ObserveFireLateness("", now.Add(-time.Millisecond), now, "")
	get := func(accept string) string {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/metrics", nil)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		m.Handler().ServeHTTP(rec, req)
		return rec.Body.String()
	}
	om := get("application/openmetrics-text; version=1.0.0; charset=utf-8")
	want := `cronswap_fire_lateness_seconds_bucket{category="none",le="0.5"} 2 # {trace_id="4bf92f3577b34da6a3ce929d0e0e4736"} 0.3`
	if !strings.Contains(om, want) {
		t.Errorf("OpenMetrics lacks the exemplar line\n%s\nin\n%s", want, om)
	}
	plain := get("")
	if strings.Contains(plain, "trace_id") || strings.Contains(plain, "# EOF") {
		t.Errorf("the plain text format carries OpenMetrics:\n%s", plain)
	}
	if got := scrape(t, m)["cronswap_fire_lateness_seconds,category=none,count"]; got != 2 {
		t.Errorf("count %v, want 2", got)
	}
}

// The help text of a counter labelled by a fire path hook's values lists
// exactly those values, in the order they are defined.
func TestHelpListsEveryLabelValue(t *testing.T) {
	m := New()
	m.Preset(Known{NotRunReasons: firepath.NotRunReasons, SkipReasons: firepath.SkipReasons, ClaimResults: firepath.ClaimedResults()})
	families, err := m.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	help := map[string]string{}
	for _, f := range families {
		help[f.GetName()] = f.GetHelp()
	}
	for name, values := range map[string][]string{
		"cronswap_lock_acquisitions_total": firepath.ClaimedResults(),
		"cronswap_fires_not_run_total":     firepath.NotRunReasons,
		"cronswap_fires_skipped_total":     firepath.SkipReasons,
	} {
		want := "(" + strings.Join(values, ", ") + ")"
		if !strings.Contains(help[name], want) {
			t.Errorf("%s help %q: want it to list %s", name, help[name], want)
		}
	}
}
