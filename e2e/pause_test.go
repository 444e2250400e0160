package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/notify"
	"github.com/cronswap/cronswap/internal/record"
)

// pauseSink is a loopback webhook recording the notifications' kinds and
// how often each notification id came.
type pauseSink struct {
	srv  *httptest.Server
	mu   sync.Mutex
	byID map[string]notify.Payload
	seen map[string]int
}

func newPauseSink(t *testing.T) *pauseSink {
	s := &pauseSink{byID: map[string]notify.Payload{}, seen: map[string]int{}}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p notify.Payload
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		s.byID[p.NotificationID] = p
		s.seen[p.NotificationID]++
	}))
	t.Cleanup(s.srv.Close)
	return s
}

// kinds returns the payloads received of kind.
func (s *pauseSink) kinds(kind string) []notify.Payload {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []notify.Payload
	for _, p := range s.byID {
		if p.Kind == kind {
			out = append(out, p)
		}
	}
	return out
}

// Two replicas; a job whose action fails every time, with
// pause_after_failures: 2. After two failed slots the job is paused: the
// pause (and its note) shows in /api/schedules and `cronswap schedules
// list`, its next slots are recorded missed (paused) and not run; `cronswap
// schedules resume` clears it and the job runs again, and a resume with
// mongosh does the same after the next pause. Each pause is notified once
// (a webhook for paused and missed notices), the slots missed while paused
// not at all.
func TestPauseAfterFailuresAndResume(t *testing.T) {
	uri, db := setup(t)
	sink := newPauseSink(t)
	extra := fmt.Sprintf(`notify:
  webhooks:
    - name: hook
      url: %q
  on: [paused, missed]
  poll: 1s
`, sink.srv.URL+"/hook")
	out := filepath.Join(t.TempDir(), "runs.log")
	jobsYAML := fmt.Sprintf(`
  failing:
    exec: ["sh", "-c", %q]
    timeout: 20s
    pause_after_failures: 2
`, `echo "$CRONSWAP_SCHEDULED_AT" >> `+out+` && echo broken >&2 && exit 3`)
	ds := startReplicas(t, uri, db.Name(), 2, extra, jobsYAML)
	insert(t, db, bson.D{{Key: "_id", Value: "failing"}, {Key: "cron_expr", Value: "*/2 * * * * *"}, {Key: "updated_at", Value: time.Now()}})
	waitArmed(t, ds, []string{"failing"})

	waitPaused := func() record.PauseDoc {
		var p record.PauseDoc
		waitFor(t, 60*time.Second, "the job paused", func() bool {
			p = record.PauseDoc{}
			err := db.Collection(record.PausesCollection).FindOne(testCtx(t), bson.D{{Key: "_id", Value: "failing"}}).Decode(&p)
			return err == nil && p.Paused()
		})
		return p
	}
	p := waitPaused()
	if p.Failures != 2 || !strings.Contains(p.Note, "broken") && !strings.Contains(p.Note, "exit status 3") || p.RunID == "" {
		t.Errorf("pause %+v: want 2 failures, the last run and its error", p)
	}
	failed := allRuns(t, db, bson.D{{Key: "job_id", Value: "failing"}, {Key: "status", Value: record.StatusFailed}})
	if len(failed) < 2 || failed[len(failed)-1].ID != p.RunID {
		t.Errorf("failed runs %d, last %v; the pause names %s", len(failed), failed, p.RunID)
	}
	for _, d := range ds {
		waitFor(t, 10*time.Second, "failure_pause in /api/schedules", func() bool {
			s := d.schedules()["failing"]
			return s.FailurePause != nil && s.FailurePause.Failures == 2
		})
	}
	var list []map[string]any
	if err := json.Unmarshal([]byte(cliOK(t, ds[0].cfgPath, "schedules", "list", "-o", "json")), &list); err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0]["failure_pause"] == nil {
		t.Errorf("schedules list: %v, want failure_pause", list)
	}

	// While paused: the fires are not run (the replicas say so).
	last := failed[len(failed)-1].ScheduledAt.UTC()
	// (A replica that does not own the job claims a fire a second after
	// its slot: at last+6s both have dropped the slots last+2s and last+4s.)
	ds[0].waitLog("three fires of the paused job not run", func(l logLine) bool {
		at, _ := time.Parse(time.RFC3339, l.str("scheduled_at"))
		return l.str("msg") == "fire not run: the job is paused after consecutive failures" && l.str("job_id") == "failing" &&
			!at.Before(last.Add(6*time.Second))
	})

	// Resume with the CLI: the job runs again (and fails again: paused again).
	resumed := time.Now()
	if got := cliOK(t, ds[0].cfgPath, "schedules", "resume", "failing"); !strings.Contains(got, "resumed failing") {
		t.Errorf("resume: %q", got)
	}
	var after []record.RunDoc
	waitFor(t, 30*time.Second, "a run after the resume", func() bool {
		after = allRuns(t, db, bson.D{{Key: "job_id", Value: "failing"}, {Key: "status", Value: record.StatusFailed},
			{Key: "started_at", Value: bson.D{{Key: "$gt", Value: resumed}}}})
		return len(after) > 0
	})
	// The slots of the pause are on record once, missed with reason
	// paused (one range, written once the streak ended), and none ran.
	// Every slot between the pausing failure and the first run after the
	// resume: one missed slot each (ranges are written as each replica's
	// streak of dropped fires closes).
	want := int64(after[0].ScheduledAt.Sub(last)/(2*time.Second)) - 1
	var paused []record.RunDoc
	n := int64(0)
	waitFor(t, 30*time.Second, "the paused slots recorded missed", func() bool {
		paused = allRuns(t, db, bson.D{{Key: "job_id", Value: "failing"}, {Key: "status", Value: record.StatusMissed},
			{Key: "reason", Value: record.MissedPaused}})
		n = 0
		for _, m := range paused {
			n += m.Count
		}
		return n >= want
	})
	ran := attemptLinesSet(t, out)
	for _, m := range paused {
		if !m.ScheduledAt.After(last) || !m.LastScheduledAt.Before(after[0].ScheduledAt) {
			t.Errorf("missed (paused) %s .. %s, want between the pausing failure %s and the first run after the resume %s",
				m.ScheduledAt, m.LastScheduledAt, last, after[0].ScheduledAt)
		}
		for s := m.ScheduledAt; !s.After(m.LastScheduledAt); s = s.Add(2 * time.Second) {
			if ran[s.UTC().Format(time.RFC3339)] {
				t.Errorf("slot %s recorded missed (paused) but the action ran it", s.UTC().Format(time.RFC3339))
			}
		}
	}
	if n != want || want < 2 {
		for _, r := range allRuns(t, db, bson.D{{Key: "job_id", Value: "failing"}}) {
			t.Logf("record %s %s %s..%s started %s", r.ID, r.Status, r.ScheduledAt, r.LastScheduledAt, r.StartedAt)
		}
		t.Logf("last %s resumed %s after %s", last, resumed, after[0].ScheduledAt)
		t.Errorf("%d slots recorded missed (paused), want %d (at least the 2 the replicas dropped)", n, want)
	}
	p = waitPaused()
	if p.ResumedAt.Before(resumed.Add(-time.Second)) || p.ResumedBy == "" || !p.PausedAt.After(p.ResumedAt) {
		t.Errorf("paused again: %+v, want paused after the resume, keeping it", p)
	}

	// The first pause was notified, with its note and the failed run.
	waitFor(t, 30*time.Second, "the first pause notified", func() bool { return len(sink.kinds(notify.KindPaused)) >= 1 })

	// Resume with mongosh, the operator's one-liner.
	resumed = time.Now()
	mongosh(t, uri, db.Name(), `db.job_pauses.updateOne({ _id: "failing", state: "paused" }, { $set: { state: "resumed", resumed_at: new Date(), resumed_by: "mongosh" } })`)
	waitFor(t, 30*time.Second, "a run after the mongosh resume", func() bool {
		return len(allRuns(t, db, bson.D{{Key: "job_id", Value: "failing"}, {Key: "status", Value: record.StatusFailed},
			{Key: "started_at", Value: bson.D{{Key: "$gt", Value: resumed}}}})) > 0
	})
	// Two pauses, two paused notifications (once each); no missed
	// notification for the paused slots.
	waitFor(t, 30*time.Second, "the second pause notified", func() bool { return len(sink.kinds(notify.KindPaused)) >= 2 })
	for _, p := range sink.kinds(notify.KindPaused) {
		if p.JobID != "failing" || !strings.Contains(p.Note, "consecutive failed slots") || p.RunID == "" {
			t.Errorf("pause notification %+v: want the job, its note and the failed run", p)
		}
	}
	sink.mu.Lock()
	for id, n := range sink.seen {
		if n != 1 {
			t.Errorf("notification %s delivered %d times", id, n)
		}
	}
	sink.mu.Unlock()
	if n := len(sink.kinds(notify.KindPaused)); n != 2 {
		t.Errorf("%d pause notifications, want 2", n)
	}
	for _, p := range sink.kinds(notify.KindMissed) {
		if p.Reason == record.MissedPaused {
			t.Errorf("a slot missed while paused was notified: %+v", p)
		}
	}
}

// attemptLinesSet reads the slots the pause test's action appended.
func attemptLinesSet(t *testing.T, path string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	for _, l := range strings.Fields(string(b)) {
		out[l] = true
	}
	return out
}
