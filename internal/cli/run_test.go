package cli

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cronswap/cronswap/internal/actions"
	"github.com/cronswap/cronswap/internal/config"
)

// `cronswap run` refuses to start when an exec action's program is
// missing, naming the job and the program, instead of failing at its first
// fire; it does so before it connects (the URI points nowhere).
func TestRunRefusesAMissingProgram(t *testing.T) {
	cfg := config.Default()
	cfg.Mongo.URI = "mongodb://127.0.0.1:1/"
	cfg.InstanceID = "programs-test"
	cfg.HTTP.Listen = "127.0.0.1:0"
	cfg.Jobs = map[string]actions.Definition{
		"ok":     {Exec: []string{"sh", "-c", "true"}},
		"report": {Exec: []string{"/opt/reports/bin/daily-report", "--all"}},
	}
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	err := runDaemon(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err == nil {
		t.Fatal("run accepted a job whose program does not exist")
	}
	for _, w := range []string{`job "report"`, "/opt/reports/bin/daily-report"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
}

// `cronswap run` refuses a state_file whose directory is missing, before
// it connects (the URI points nowhere); the load leaves that check to it.
func TestRunRefusesAMissingStateDirectory(t *testing.T) {
	cfg := config.Default()
	cfg.Mongo.URI = "mongodb://127.0.0.1:1/"
	cfg.InstanceID = "state-test"
	cfg.HTTP.Listen = "127.0.0.1:0"
	cfg.StateFile = filepath.Join(t.TempDir(), "missing", "state.json")
	if err := cfg.Finish(); err != nil {
		t.Fatalf("the load refused a state_file whose directory is missing here: %v", err)
	}
	// Cancelled: a run that got past the check would stop at once.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := runDaemon(ctx, cfg, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "state_file") || !strings.Contains(err.Error(), "must exist") {
		t.Fatalf("run: err = %v, want state_file's missing directory refused", err)
	}
}

// The members section of the config reaches the daemon's options: the
// membership's heartbeat and lease, and the claim grace.
func TestDaemonOptionsCarryTheMembersTiming(t *testing.T) {
	cfg, err := config.Parse("members: {heartbeat: 2s, lease: 7s, claim_grace: 3s}")
	if err != nil {
		t.Fatal(err)
	}
	o := daemonOptions(cfg, slog.New(slog.DiscardHandler))
	if o.MembersHeartbeat != 2*time.Second || o.MembersLease != 7*time.Second || o.ClaimGrace != 3*time.Second {
		t.Errorf("heartbeat %s, lease %s, claim grace %s; want 2s, 7s, 3s", o.MembersHeartbeat, o.MembersLease, o.ClaimGrace)
	}
}
