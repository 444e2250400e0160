package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/cronswap/cronswap/internal/httpapi"
)

// A job paused after consecutive failures carries failure_pause in
// /api/schedules and /api/schedules/{id}; the others do not, and a failed
// read of the pauses leaves the list served without them.
func TestSchedulesFailurePause(t *testing.T) {
	at := time.Date(2030, 1, 1, 8, 0, 0, 0, time.UTC)
	fail := false
	f := newFixture(t, func(o *httpapi.Options) {
		o.FailurePauses = func(context.Context) (map[string]httpapi.FailurePause, error) {
			if fail {
				return nil, errors.New("database gone")
			}
			return map[string]httpapi.FailurePause{"heartbeat": {PausedAt: at, Note: "paused after 3 consecutive failed slots", Failures: 3}}, nil
		}
	})
	var list []map[string]json.RawMessage
	if err := json.Unmarshal([]byte(f.get(t, "/api/schedules").body), &list); err != nil {
		t.Fatal(err)
	}
	for _, s := range list {
		var id string
		_ = json.Unmarshal(s["id"], &id)
		fp, has := s["failure_pause"]
		switch {
		case id == "heartbeat" && !has:
			t.Errorf("heartbeat: %v, want failure_pause", keys(s))
		case id == "heartbeat":
			var p httpapi.FailurePause
			if err := json.Unmarshal(fp, &p); err != nil || p.Failures != 3 || !p.PausedAt.Equal(at) || p.Note == "" {
				t.Errorf("heartbeat failure_pause %s (%v)", fp, err)
			}
		case has:
			t.Errorf("%s: failure_pause %s, want none", id, fp)
		}
	}
	var one map[string]json.RawMessage
	if err := json.Unmarshal([]byte(f.get(t, "/api/schedules/heartbeat").body), &one); err != nil || one["failure_pause"] == nil {
		t.Errorf("/api/schedules/heartbeat: %v (%v), want failure_pause", keys(one), err)
	}
	fail = true
	r := f.get(t, "/api/schedules")
	if r.code != 200 {
		t.Fatalf("with the pauses unreadable: %d", r.code)
	}
	list = nil
	if err := json.Unmarshal([]byte(r.body), &list); err != nil || len(list) != 5 {
		t.Fatalf("with the pauses unreadable: %s (%v)", r.body, err)
	}
	for _, s := range list {
		if s["failure_pause"] != nil {
			t.Errorf("with the pauses unreadable: %v", keys(s))
		}
	}
}
