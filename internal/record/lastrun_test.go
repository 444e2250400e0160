package record

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cronswap/cronswap/internal/testmongo"
)

// LastRun is, of a job's records, the one with the latest scheduled_at
// among those whose action started; claiming, buffered, skipped and
// missed records are passed over, and every status that ran counts.
// LastRuns gives the same answer for many jobs at once (more than it
// reads at a time), and leaves out the jobs with none.
func TestLastRunNewestRecordThatRan(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, runs := Collections(testmongo.NewDatabase(t, testmongo.Client(t)))
	if err := EnsureIndexes(ctx, runs); err != nil {
		t.Fatal(err)
	}
	base := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	notRun := []string{StatusClaiming, StatusBuffered, StatusSkipped, StatusMissed}
	var docs []any
	want := map[string]string{}
	for i, ran := range append(RanStatuses(), RanStatuses()...) {
		job := fmt.Sprintf("job-%02d", i)
		// The one that ran, then newer ones that did not.
		ranAt := base.Add(time.Duration(i) * time.Minute)
		docs = append(docs,
			RunDoc{ID: RunID(job, ranAt.Add(-time.Hour)), JobID: job, ScheduledAt: ranAt.Add(-time.Hour), Status: StatusSucceeded},
			RunDoc{ID: "trigger/" + job, JobID: job, ScheduledAt: ranAt.Add(7 * time.Millisecond), Status: ran})
		want[job] = "trigger/" + job
		for k, st := range notRun {
			at := ranAt.Add(time.Duration(k+1) * time.Second)
			docs = append(docs, RunDoc{ID: RunID(job, at), JobID: job, ScheduledAt: at, Status: st})
		}
	}
	docs = append(docs, RunDoc{ID: RunID("never", base), JobID: "never", ScheduledAt: base, Status: StatusMissed})
	if _, err := runs.InsertMany(ctx, docs); err != nil {
		t.Fatal(err)
	}
	ids := []string{"never", "nothing"}
	for job, runID := range want {
		ids = append(ids, job)
		r, ok, err := LastRun(ctx, runs, job)
		if err != nil || !ok || r.ID != runID {
			t.Errorf("LastRun(%s) = %s %v %v, want %s", job, r.ID, ok, err, runID)
		}
	}
	for _, job := range []string{"never", "nothing"} {
		if r, ok, err := LastRun(ctx, runs, job); ok || err != nil {
			t.Errorf("LastRun(%s) = %s %v %v, want none", job, r.ID, ok, err)
		}
	}
	got, err := LastRuns(ctx, runs, ids)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Errorf("LastRuns found %d jobs, want %d", len(got), len(want))
	}
	for job, runID := range want {
		if got[job].ID != runID || got[job].JobID != job {
			t.Errorf("LastRuns[%s] = %s, want %s", job, got[job].ID, runID)
		}
	}
	for _, st := range notRun {
		if Ran(st) {
			t.Errorf("Ran(%s) = true", st)
		}
	}
}
