package e2e

import (
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// With state_file set, a restarted daemon arms from the file without
// reading the collection, then applies the edits made while it was down.
func TestWarmRestartFromStateFile(t *testing.T) {
	uri, db := setup(t)
	insert(t, db, sched("daily_report", "0 9 * * *"), sched("heartbeat", "@hourly"))
	stateFile := filepath.Join(t.TempDir(), "cronswap.state")
	cfg := writeConfig(t, daemonConfig{URI: uri, Database: db.Name(), Extra: fmt.Sprintf("state_file: %q", stateFile)})
	d := startDaemon(t, cfg)
	d.waitReady()
	mongosh(t, uri, db.Name(), seedOneLiner)
	waitFor(t, 10*time.Second, "edit applied", func() bool { return d.schedules()["daily_report"].CronExpr == "0 8 * * *" })
	d.signal(syscall.SIGTERM)
	if err := d.wait(30 * time.Second); err != nil {
		t.Fatalf("graceful stop: %v", err)
	}

	editWhileDown(t, db, 1)
	d2 := startDaemon(t, cfg)
	d2.waitReady()
	checkEditsWhileDown(t, d2, db, 1)
	l := d2.waitLog("warm start log", func(l logLine) bool { return l.str("msg") == "armed from state file" })
	if n, _ := l["documents"].(float64); n != 2 {
		t.Fatalf("armed from state file with %v documents, want 2: %v", l["documents"], l)
	}
	// (The blackouts and triggers watchers read their small collections at
	// every start: only the schedules one restarts warm.)
	if l, ok := d2.findLog(func(l logLine) bool { return l.str("msg") == "full reload" && l.str("collection") == "schedules" }); ok {
		t.Fatalf("a warm restart read the collection: %v", l)
	}
	if _, ok := d2.findLog(func(l logLine) bool {
		return l.str("msg") == "armed from state file" && l.str("collection") == "schedules"
	}); !ok {
		t.Fatal("the warm start's log line does not name the schedules collection")
	}
}
