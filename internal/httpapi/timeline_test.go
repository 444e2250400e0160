package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cronswap/cronswap/internal/httpapi"
	"github.com/cronswap/cronswap/internal/timeline"
)

// fakeTimelines answers one job, "team/job", and records what it was asked.
type fakeTimelines struct {
	mu    sync.Mutex
	asked []string
}

func (f *fakeTimelines) Build(_ context.Context, id string, from, to time.Time) (timeline.Timeline, error) {
	f.mu.Lock()
	f.asked = append(f.asked, fmt.Sprintf("%s %s %s", id, from.Format(time.RFC3339), to.Format(time.RFC3339)))
	f.mu.Unlock()
	if id != "team/job" {
		return timeline.Timeline{}, fmt.Errorf("job %q: %w", id, timeline.ErrNotFound)
	}
	return timeline.Timeline{JobID: id, From: from, To: to, Entries: []timeline.Entry{
		{Kind: timeline.KindNoRecord, At: from, Count: 1, Reason: timeline.NoRecordUnrecorded},
	}}, nil
}

// The timeline of a job is its JSON with from and to as given; a bad range
// is 400 and an unknown job 404, both with a JSON error; without a source
// the route answers 404.
func TestScheduleTimeline(t *testing.T) {
	src := &fakeTimelines{}
	f := newFixture(t, func(o *httpapi.Options) { o.Timelines = src })

	r := f.get(t, "/api/schedules/team%2Fjob/timeline?from=2026-03-01T00:00:00Z&to=2026-03-01T06:00:00%2B01:00")
	if r.code != http.StatusOK || !strings.HasPrefix(r.ctype, "application/json") {
		t.Fatalf("timeline of team/job = %d %q %s", r.code, r.ctype, r.body)
	}
	var tl timeline.Timeline
	if err := json.Unmarshal([]byte(r.body), &tl); err != nil {
		t.Fatalf("%v\n%s", err, r.body)
	}
	if tl.JobID != "team/job" || len(tl.Entries) != 1 || tl.Entries[0].Kind != "no_record" {
		t.Errorf("timeline body %s", r.body)
	}
	if want := "team/job 2026-03-01T00:00:00Z 2026-03-01T05:00:00Z"; len(src.asked) != 1 || src.asked[0] != want {
		t.Errorf("asked %q, want %q", src.asked, want)
	}

	// The defaults: to now, from a day before it.
	before := time.Now().UTC().Truncate(time.Second)
	if r := f.get(t, "/api/schedules/team%2Fjob/timeline"); r.code != http.StatusOK {
		t.Fatalf("timeline without a range = %d %s", r.code, r.body)
	}
	var id, from, to string
	fmt.Sscan(src.asked[1], &id, &from, &to)
	toT, _ := time.Parse(time.RFC3339, to)
	fromT, _ := time.Parse(time.RFC3339, from)
	if toT.Before(before) || toT.After(time.Now().Add(time.Second)) || toT.Sub(fromT) != timeline.DefaultWindow {
		t.Errorf("default range %s .. %s, want a day up to now", from, to)
	}

	for _, q := range []string{"from=yesterday", "to=2h", "from=-1h&to=-2h", "from=-40d", "from=-1h&from=-2h", "since=-1h"} {
		r := f.get(t, "/api/schedules/team%2Fjob/timeline?"+q)
		var e map[string]string
		if r.code != http.StatusBadRequest || json.Unmarshal([]byte(r.body), &e) != nil || e["error"] == "" {
			t.Errorf("?%s = %d %s, want 400 with a JSON error", q, r.code, r.body)
		}
	}
	r = f.get(t, "/api/schedules/nobody/timeline")
	var e map[string]string
	if r.code != http.StatusNotFound || json.Unmarshal([]byte(r.body), &e) != nil || !strings.Contains(e["error"], `job "nobody"`) {
		t.Errorf("timeline of an unknown job = %d %s, want 404 with a JSON error", r.code, r.body)
	}
	if r := f.do(t, http.MethodPost, "/api/schedules/team%2Fjob/timeline"); r.code != http.StatusMethodNotAllowed {
		t.Errorf("POST timeline = %d", r.code)
	}

	bare := newFixture(t, nil)
	if r := bare.get(t, "/api/schedules/team%2Fjob/timeline"); r.code != http.StatusNotFound {
		t.Errorf("timeline without a source = %d %s", r.code, r.body)
	}
}
