package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// cli runs the cronswap binary with args (and --config cfgPath), and
// returns its stdout, stderr and exit code.
func cli(t *testing.T, cfgPath string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, append(args, "--config", cfgPath)...)
	cmd.Env = append(os.Environ(), "CRONSWAP_MONGO_URI=", "CRONSWAP_CONFIG=", "CRONSWAP_INSTANCE_ID=")
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code = 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("cronswap %q: %v", args, err)
		}
		code = ee.ExitCode()
	}
	return out.String(), errb.String(), code
}

// cliOK runs the binary and fails the test unless it exits 0.
func cliOK(t *testing.T, cfgPath string, args ...string) string {
	t.Helper()
	out, errOut, code := cli(t, cfgPath, args...)
	if code != 0 {
		t.Fatalf("cronswap %q: exit %d\nstdout:\n%s\nstderr:\n%s", args, code, out, errOut)
	}
	return out
}

// TestTokenResetForcesFullReload: after `cronswap token reset` the next
// start reloads everything (reason startup) instead of resuming.
func TestTokenResetForcesFullReload(t *testing.T) {
	uri, db := setup(t)
	cfg := writeConfig(t, daemonConfig{URI: uri, Database: db.Name()})
	cliOK(t, cfg, "init")
	insert(t, db, sched("daily_report", "0 9 * * *"))

	d := startDaemon(t, cfg)
	d.waitReady()
	waitToken(t, db)
	d.signal(syscall.SIGTERM)
	if err := d.wait(60 * time.Second); err != nil {
		t.Fatalf("daemon exit: %v", err)
	}

	var toks []struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(cliOK(t, cfg, "token", "show", "-o", "json")), &toks); err != nil || len(toks) != 1 || toks[0].ID != "e2e-1" {
		t.Fatalf("token show: %v %+v", err, toks)
	}
	if out := cliOK(t, cfg, "token", "reset"); !strings.Contains(out, "deleted the resume token of e2e-1") {
		t.Fatalf("token reset printed %q", out)
	}

	d2 := startDaemon(t, cfg)
	d2.waitReady()
	d2.waitLog("full reload at startup", func(l logLine) bool {
		return l.str("msg") == "full reload" && l.str("reason") == "startup"
	})
	d2.waitLog("no stored token", func(l logLine) bool { return strings.HasPrefix(l.str("msg"), "no stored resume token") })
	if l, ok := d2.findLog(func(l logLine) bool { return l.str("msg") == "resuming change stream from stored token" }); ok {
		t.Fatalf("resumed from a token after token reset: %v", l)
	}
	if got := d2.armedExprs()["daily_report"]; got != "0 9 * * *" {
		t.Fatalf("daily_report armed as %q after the full reload", got)
	}
}

// TestCLIEditsReachTheDaemon: schedules set/pause/resume/delete through the
// CLI re-arm the running daemon like a mongosh one-liner does.
func TestCLIEditsReachTheDaemon(t *testing.T) {
	uri, db := setup(t)
	cfg := writeConfig(t, daemonConfig{URI: uri, Database: db.Name()})
	cliOK(t, cfg, "init")
	d := startDaemon(t, cfg)
	d.waitReady()

	cliOK(t, cfg, "schedules", "set", "daily_report", "--cron", "0 9 * * 1-5", "--tz", "Asia/Seoul")
	waitFor(t, 10*time.Second, "daily_report armed", func() bool {
		s, ok := d.schedules()["daily_report"]
		return ok && s.Armed && s.CronExpr == "0 9 * * 1-5" && s.Timezone == "Asia/Seoul"
	})
	if _, errOut, code := cli(t, cfg, "schedules", "set", "daily_report", "--cron", "0 25 * * *"); code != 1 || !strings.Contains(errOut, "nothing written") {
		t.Fatalf("bad set: exit %d, %s", code, errOut)
	}
	cliOK(t, cfg, "schedules", "pause", "daily_report")
	waitFor(t, 10*time.Second, "daily_report disarmed", func() bool {
		s, ok := d.schedules()["daily_report"]
		return ok && !s.Armed && !s.Enabled
	})
	cliOK(t, cfg, "schedules", "resume", "daily_report")
	waitFor(t, 10*time.Second, "daily_report re-armed", func() bool { return d.schedules()["daily_report"].Armed })
	// The daemon's next run and the CLI's agree.
	var got struct {
		NextRun *string `json:"next_run"`
	}
	if err := json.Unmarshal([]byte(cliOK(t, cfg, "schedules", "get", "daily_report", "-o", "json")), &got); err != nil || got.NextRun == nil {
		t.Fatalf("schedules get: %v %+v", err, got)
	}
	api := d.schedules()["daily_report"].NextRun
	a, err1 := time.Parse(time.RFC3339, *got.NextRun)
	b, err2 := time.Parse(time.RFC3339, *api)
	if err1 != nil || err2 != nil || !a.Equal(b) {
		t.Fatalf("CLI next run %s, daemon %s", *got.NextRun, *api)
	}
	cliOK(t, cfg, "schedules", "delete", "daily_report")
	waitFor(t, 10*time.Second, "daily_report removed", func() bool { _, ok := d.schedules()["daily_report"]; return !ok })
}

// TestCLIShowsTheErrorsTheDaemonsSee: the README's `schedules set x --job
// nosuchaction` is written with a warning naming the action, and `schedules
// list`, `get` and their -o json show the error the daemon sees — from the
// running daemon (asked over HTTP at the address in its members document,
// even when the command's own config knows no actions), and after it
// stopped from checking the document with the daemons' config.
func TestCLIShowsTheErrorsTheDaemonsSee(t *testing.T) {
	uri, db := setup(t)
	cfg := writeConfig(t, daemonConfig{URI: uri, Database: db.Name()})
	// A config for the command line alone: no actions to check with.
	bare := filepath.Join(t.TempDir(), "cli.yaml")
	if err := os.WriteFile(bare, []byte(fmt.Sprintf("mongo: {uri: %q, database: %q}\n", uri, db.Name())), 0o600); err != nil {
		t.Fatal(err)
	}
	const unknown = `unknown action "nosuchaction"`
	d := startDaemon(t, cfg)
	d.waitReady()

	out, errOut, code := cli(t, cfg, "schedules", "set", "x", "--cron", "0 2 * * *", "--job", "nosuchaction")
	if code != 0 || !strings.Contains(errOut, "warning: ") || !strings.Contains(errOut, unknown) || !strings.Contains(out, "created x") {
		t.Fatalf("set with an unknown action: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
	waitFor(t, 10*time.Second, "the daemon refusing x", func() bool {
		s, ok := d.schedules()["x"]
		return ok && !s.Armed && strings.Contains(s.LastError, unknown)
	})
	apiErr := d.schedules()["x"].LastError

	type view struct {
		ID             string   `json:"id"`
		Error          string   `json:"error"`
		NextRun        *string  `json:"next_run"`
		CheckedBy      []string `json:"checked_by"`
		ActionsChecked bool     `json:"actions_checked"`
	}
	check := func(when, config string, wantErr string, wantBy []string) {
		t.Helper()
		out, errOut, code := cli(t, config, "schedules", "list")
		if code != 0 || !strings.Contains(out, wantErr) {
			t.Errorf("%s: list: exit %d, want %q in\n%s", when, code, wantErr, out)
		}
		if len(wantBy) > 0 && !strings.Contains(errOut, "as the live daemons see them: "+strings.Join(wantBy, ", ")) ||
			len(wantBy) == 0 && !strings.Contains(errOut, "no live daemon answered") {
			t.Errorf("%s: list does not say which view it shows: %q", when, errOut)
		}
		if out := cliOK(t, config, "schedules", "get", "x"); !strings.Contains(out, "error: ") || !strings.Contains(out, wantErr) {
			t.Errorf("%s: get x:\n%s", when, out)
		}
		var list []view
		if err := json.Unmarshal([]byte(cliOK(t, config, "schedules", "list", "-o", "json")), &list); err != nil || len(list) != 1 {
			t.Fatalf("%s: list -o json: %v %+v", when, err, list)
		}
		var one view
		if err := json.Unmarshal([]byte(cliOK(t, config, "schedules", "get", "x", "-o", "json")), &one); err != nil {
			t.Fatal(err)
		}
		for _, v := range []view{list[0], one} {
			if v.ID != "x" || v.Error != wantErr || v.NextRun != nil || !v.ActionsChecked || strings.Join(v.CheckedBy, ",") != strings.Join(wantBy, ",") {
				t.Errorf("%s: -o json %+v, want error %q, no next run, checked by %v", when, v, wantErr, wantBy)
			}
		}
	}
	// The daemon's view, with and without actions in the command's config.
	check("daemon running, bare config", bare, apiErr, []string{"e2e-1"})
	check("daemon running, daemon's config", cfg, apiErr, []string{"e2e-1"})

	d.signal(syscall.SIGTERM)
	if err := d.wait(60 * time.Second); err != nil {
		t.Fatalf("daemon exit: %v", err)
	}
	// No daemon: the command checks the document with the daemons' config.
	check("no daemon, daemon's config", cfg, apiErr, nil)
}
