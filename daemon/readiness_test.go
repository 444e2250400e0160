package daemon

import (
	"strings"
	"testing"
	"time"

	"github.com/cronswap/cronswap/changestream"
)

// The readiness the HTTP surface shows says what the watcher is doing: the
// full read under way with its rate, the error it keeps retrying and
// whether that error repeats, or that nothing was read yet; nothing once
// ready.
func TestReadinessSaysWhy(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 10, 0, time.UTC)
	if r := readiness(changestream.Status{Ready: true, LastError: "stale"}, now); r.NotReady != "" || r.Reload != nil {
		t.Fatalf("ready: %+v", r)
	}
	if r := readiness(changestream.Status{}, now); !strings.Contains(r.NotReady, "not read yet") {
		t.Fatalf("starting: %q", r.NotReady)
	}
	ws := changestream.Status{
		Reload:     changestream.ReloadProgress{Reason: changestream.ReasonStartup, StartedAt: now.Add(-10 * time.Second), Documents: 500_000, Bytes: 60e6},
		LastError:  "read schedules: length of read message too large",
		ErrorSince: now.Add(-time.Minute), Repeating: true,
	}
	r := readiness(ws, now)
	for _, want := range []string{"full reload (startup) under way: 500000 documents (60.0 MB) read in 10s, 50000 a second",
		"failing with the same error", "2030-01-01T12:00:10Z"[:11], "length of read message too large"} {
		if !strings.Contains(r.NotReady, want) {
			t.Errorf("reason %q lacks %q", r.NotReady, want)
		}
	}
	if r.Reload == nil || r.Reload.DocumentsPerSecond != 50_000 || !r.ErrorRepeats || r.ErrorSince == nil {
		t.Fatalf("readiness %+v", r)
	}
	ws = changestream.Status{Reload: changestream.ReloadProgress{Reason: changestream.ReasonStateFile, StartedAt: now}}
	if r := readiness(ws, now); !strings.HasPrefix(r.NotReady, "arming from the state file") {
		t.Fatalf("warm start: %q", r.NotReady)
	}
}
