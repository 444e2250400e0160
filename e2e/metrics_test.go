package e2e

import (
	"bytes"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/cronswap/cronswap/internal/metrics"
)

// scrapeMetrics reads /metrics through the Prometheus text parser (a parse
// error fails the test) and flattens it: "name,label=value,..." → value;
// histograms as "name,count" and "name,sum".
func (d *daemon) scrapeMetrics() map[string]float64 {
	d.t.Helper()
	resp, err := http.Get(d.url("/metrics"))
	if err != nil {
		d.t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		d.t.Fatalf("GET /metrics: status %d, %v", resp.StatusCode, err)
	}
	out, err := metrics.Flatten(bytes.NewReader(body))
	if err != nil {
		d.t.Fatalf("/metrics does not parse as Prometheus text: %v\n%s", err, body)
	}
	return out
}

// TestMetricsMoveWithEditsAndRuns checks /metrics across one edit, one bad
// edit and one run: each moves exactly the counters it should.
func TestMetricsMoveWithEditsAndRuns(t *testing.T) {
	uri, db := setup(t)
	insert(t, db, sched("daily_report", "0 9 * * *"), sched("other", "@hourly"))
	d := startDaemon(t, writeConfig(t, daemonConfig{URI: uri, Database: db.Name()}))
	d.waitReady()

	m0 := d.scrapeMetrics()
	if m0["cronswap_schedules_armed"] != 2 {
		t.Fatalf("schedules_armed = %v, want 2", m0["cronswap_schedules_armed"])
	}
	if m0["cronswap_full_reloads_total,reason=startup"] != 1 {
		t.Fatalf("full_reloads_total{startup} = %v, want 1", m0["cronswap_full_reloads_total,reason=startup"])
	}
	if _, ok := m0["go_goroutines"]; !ok {
		t.Fatal("Go runtime collector missing from /metrics")
	}

	// One edit: one update event, one applied reload, one edit-to-armed sample.
	mongosh(t, uri, db.Name(), seedOneLiner)
	waitFor(t, 10*time.Second, "edit applied", func() bool {
		return d.schedules()["daily_report"].CronExpr == "0 8 * * *"
	})
	waitFor(t, 10*time.Second, "edit counted", func() bool {
		m := d.scrapeMetrics()
		return m["cronswap_reloads_total,result=applied"] == m0["cronswap_reloads_total,result=applied"]+1
	})
	m1 := d.scrapeMetrics()
	if got := m1["cronswap_change_events_total,operation=update"]; got != 1 {
		t.Errorf("change_events_total{update} = %v, want 1", got)
	}
	if got := m1["cronswap_edit_to_armed_seconds,count"] - m0["cronswap_edit_to_armed_seconds,count"]; got != 1 {
		t.Errorf("edit_to_armed_seconds count moved by %v, want 1", got)
	}
	if got := m1["cronswap_reloads_total,result=rejected"]; got != 0 {
		t.Errorf("reloads_total{rejected} = %v before any bad edit", got)
	}

	// One bad edit: one rejection, the job stays armed on its last known good.
	mongosh(t, uri, db.Name(), `db.schedules.updateOne({ _id: "other" }, { $set: { cron_expr: "0 25 * * *", updated_at: new Date() } })`)
	waitFor(t, 10*time.Second, "bad edit counted", func() bool {
		return d.scrapeMetrics()["cronswap_reloads_total,result=rejected"] == 1
	})
	m2 := d.scrapeMetrics()
	if got := m2["cronswap_reloads_total,result=applied"]; got != m1["cronswap_reloads_total,result=applied"] {
		t.Errorf("a bad edit moved reloads_total{applied}: %v -> %v", m1["cronswap_reloads_total,result=applied"], got)
	}
	if m2["cronswap_schedules_armed"] != 2 {
		t.Errorf("schedules_armed = %v after a bad edit, want 2 (last known good)", m2["cronswap_schedules_armed"])
	}

	// One run: a job firing every second; its first run moves runs_total,
	// lock_acquisitions_total and fire_lateness_seconds.
	mongosh(t, uri, db.Name(), `db.schedules.insertOne({ _id: "heartbeat", cron_expr: "* * * * * *", updated_at: new Date() })`)
	waitFor(t, 15*time.Second, "a heartbeat run counted", func() bool {
		return d.scrapeMetrics()["cronswap_runs_total,job_id=heartbeat,status=succeeded"] >= 1
	})
	mongosh(t, uri, db.Name(), `db.schedules.deleteOne({ _id: "heartbeat" })`)
	m3 := d.scrapeMetrics()
	if m3["cronswap_lock_acquisitions_total,result=acquired"] < 1 {
		t.Errorf("lock_acquisitions_total{acquired} = %v after a run", m3["cronswap_lock_acquisitions_total,result=acquired"])
	}
	if m3["cronswap_fire_lateness_seconds,category="+metrics.CategoryNone+",count"] < 1 {
		t.Errorf("fire_lateness_seconds{category=%q} has no sample after a run of a job without a category", metrics.CategoryNone)
	}
	if got := m3["cronswap_runs_total,job_id=daily_report,status=succeeded"]; got != 0 {
		t.Errorf("runs_total for daily_report = %v; it never fired", got)
	}
	if m3["cronswap_resume_token_age_seconds"] < 0 {
		t.Errorf("resume_token_age_seconds negative: %v", m3["cronswap_resume_token_age_seconds"])
	}
}
