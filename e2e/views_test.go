package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/httpapi"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/internal/timeline"
)

// TestViewsAgreeOnOwnedJobsAndLastRun: two replicas, and every view of
// the same records says the same. Each replica's /api/overview counts, for
// each live member, the jobs /api/schedules names it the owner of, and
// `cronswap members list` counts the same — over every job, a paused one
// and one whose document is bad included, a document whose _id is not a
// job id excluded. After `cronswap run-now` of a job, its last run on
// both replicas' rows and job pages, in `cronswap schedules list` and
// `get`, and the newest run of its timeline are that run; and `cronswap
// explain` of a window lists what the job page's timeline of it lists.
func TestViewsAgreeOnOwnedJobsAndLastRun(t *testing.T) {
	uri, db := setup(t)
	var docs []bson.D
	for i := range 8 {
		docs = append(docs, append(sched(fmt.Sprintf("v-%02d", i), "0 0 3 * * *"), bson.E{Key: "job", Value: "other"}))
	}
	docs = append(docs,
		bson.D{{Key: "_id", Value: "v-paused"}, {Key: "cron_expr", Value: "0 0 3 * * *"}, {Key: "job", Value: "other"}, {Key: "enabled", Value: false}},
		bson.D{{Key: "_id", Value: "v-bad"}, {Key: "cron_expr", Value: "every now and then"}, {Key: "job", Value: "other"}},
		bson.D{{Key: "_id", Value: int32(42)}, {Key: "cron_expr", Value: "0 0 3 * * *"}, {Key: "job", Value: "other"}},
	)
	insert(t, db, docs...)
	const jobCount = 10 // v-00 … v-07, v-paused, v-bad; not _id 42
	cfg := writeConfig(t, daemonConfig{URI: uri, Database: db.Name(), InstanceID: "view-1"})
	ds := []*daemon{startDaemon(t, cfg),
		startDaemon(t, writeConfig(t, daemonConfig{URI: uri, Database: db.Name(), InstanceID: "view-2"}))}
	for _, d := range ds {
		d.waitReady()
	}
	overview := func(d *daemon) httpapi.Overview {
		var ov httpapi.Overview
		if code := d.get("/api/overview", &ov); code != http.StatusOK {
			t.Fatalf("/api/overview answered %d", code)
		}
		return ov
	}
	for _, d := range ds {
		waitFor(t, 60*time.Second, "both replicas live and every job known", func() bool {
			ov := overview(d)
			return len(ov.Members) == 2 && ov.Jobs.Total == jobCount+1
		})
	}

	// Owned jobs.
	var cliMembers []struct {
		InstanceID string `json:"instance_id"`
		Live       bool   `json:"live"`
		OwnedJobs  int    `json:"owned_jobs"`
	}
	if err := json.Unmarshal([]byte(cliOK(t, cfg, "members", "list", "-o", "json")), &cliMembers); err != nil {
		t.Fatal(err)
	}
	cliOwned := map[string]int{}
	for _, m := range cliMembers {
		if m.Live {
			cliOwned[m.InstanceID] = m.OwnedJobs
		}
	}
	for _, d := range ds {
		owners := map[string]int{}
		for _, s := range d.schedules() {
			if s.Owner != "" {
				owners[s.Owner]++
			}
		}
		sum := 0
		for _, m := range overview(d).Members {
			sum += m.OwnedJobs
			if m.OwnedJobs != cliOwned[m.InstanceID] || m.OwnedJobs != owners[m.InstanceID] {
				t.Errorf("%s's overview: %s owns %d jobs; members list says %d, /api/schedules names it the owner of %d",
					d.addr, m.InstanceID, m.OwnedJobs, cliOwned[m.InstanceID], owners[m.InstanceID])
			}
		}
		if sum != jobCount {
			t.Errorf("%s's overview: owned jobs sum to %d, want the %d jobs", d.addr, sum, jobCount)
		}
	}

	// The last run, after a run-now.
	var res struct {
		RunID  string `json:"run_id"`
		Status string `json:"status"`
	}
	if err := json.Unmarshal([]byte(cliOK(t, cfg, "run-now", "v-03", "--wait", "60s", "-o", "json")), &res); err != nil ||
		res.Status != record.StatusSucceeded {
		t.Fatalf("run-now: %v %+v", err, res)
	}
	var rec record.RunDoc
	if err := db.Collection(record.RunsCollection).FindOne(t.Context(), bson.D{{Key: "_id", Value: res.RunID}}).Decode(&rec); err != nil {
		t.Fatalf("the run-now's record %s: %v", res.RunID, err)
	}
	for _, d := range ds {
		var rows httpapi.Rows
		if code := d.get("/api/schedule-rows?q=v-03", &rows); code != http.StatusOK || len(rows.Items) != 1 {
			t.Fatalf("%s rows: %d %+v", d.addr, code, rows)
		}
		if lr := rows.Items[0].LastRun; lr == nil || lr.RunID != res.RunID || lr.Status != record.StatusSucceeded {
			t.Errorf("%s's row of v-03: last run %+v, want %s", d.addr, lr, res.RunID)
		}
		var det httpapi.Detail
		if code := d.get("/api/schedules/v-03/detail", &det); code != http.StatusOK || det.LastRun == nil || det.LastRun.RunID != res.RunID {
			t.Errorf("%s's job page of v-03: %d last run %+v, want %s", d.addr, code, det.LastRun, res.RunID)
		}
		var tl timeline.Timeline
		if code := d.get("/api/schedules/v-03/timeline?from="+url.QueryEscape("-1h"), &tl); code != http.StatusOK {
			t.Fatalf("%s timeline: %d", d.addr, code)
		}
		newest := ""
		for _, e := range tl.Entries {
			if e.Kind == timeline.KindRun {
				newest = e.RunID
			}
		}
		if newest != res.RunID {
			t.Errorf("%s's timeline of v-03: newest run %q, want %s", d.addr, newest, res.RunID)
		}
	}
	// A job's history: `cronswap explain` and the job page's timeline are
	// the same code over the same records, so one window reads the same.
	from, to := rec.ScheduledAt.Add(-time.Hour).UTC().Format(time.RFC3339), time.Now().UTC().Format(time.RFC3339)
	var explained timeline.Timeline
	if err := json.Unmarshal([]byte(cliOK(t, cfg, "explain", "v-03", "--from", from, "--to", to, "-o", "json")), &explained); err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		var served timeline.Timeline
		if code := d.get("/api/schedules/v-03/timeline?from="+url.QueryEscape(from)+"&to="+url.QueryEscape(to), &served); code != http.StatusOK {
			t.Fatalf("%s timeline: %d", d.addr, code)
		}
		a, _ := json.Marshal(explained.Entries)
		b, _ := json.Marshal(served.Entries)
		if string(a) != string(b) || len(served.Entries) == 0 {
			t.Errorf("explain v-03 %s..%s:\n%s\n%s's timeline:\n%s", from, to, a, d.addr, b)
		}
	}

	type cliView struct {
		ID         string  `json:"id"`
		LastRun    *string `json:"last_run"`
		LastStatus string  `json:"last_status"`
	}
	var one cliView
	if err := json.Unmarshal([]byte(cliOK(t, cfg, "schedules", "get", "v-03", "-o", "json")), &one); err != nil {
		t.Fatal(err)
	}
	var list []cliView
	if err := json.Unmarshal([]byte(cliOK(t, cfg, "schedules", "list", "-o", "json")), &list); err != nil {
		t.Fatal(err)
	}
	for _, v := range list {
		if v.ID == "v-03" {
			for name, got := range map[string]cliView{"get": one, "list": v} {
				at, err := time.Parse(time.RFC3339, deref(got.LastRun))
				if err != nil || !at.Equal(rec.ScheduledAt.Truncate(time.Second)) || got.LastStatus != record.StatusSucceeded {
					t.Errorf("schedules %s v-03: last run %q %s, want the run-now's %s succeeded", name, deref(got.LastRun), got.LastStatus,
						rec.ScheduledAt.UTC().Format(time.RFC3339))
				}
			}
		}
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
