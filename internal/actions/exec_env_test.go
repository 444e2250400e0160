package actions

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// An exec action's env (with ${NAME} from the daemon's environment) and
// dir reach the program; inheriting, it gets the daemon's environment
// without the daemon's own variables (its token, the database URI) and
// without the variables the configuration reads secrets from; with
// inherit_env: false it gets its env and the run's variables only.
// Not parallel: it sets the process environment.
func TestExecActionEnvDirAndInheritance(t *testing.T) {
	t.Setenv("CRONSWAP_HTTP_TOKEN", "daemon-listener-token")
	t.Setenv("CRONSWAP_MONGO_URI", "mongodb://cron:db-pa55word@db1/")
	t.Setenv("WEBHOOK_TOKEN", "webhook-secret-value")
	t.Setenv("REPORT_SECRET", "report-secret-value")
	t.Setenv("ORDINARY", "kept")
	dir := t.TempDir()
	no := false
	for _, c := range []struct {
		name    string
		inherit *bool
	}{{"inherited", nil}, {"clean", &no}} {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "report.json")
			reg, err := Start(map[string]Definition{"report": {Exec: helperArgv(t, out),
				ExecSettings: ExecSettings{Dir: dir, InheritEnv: c.inherit,
					Env: map[string]string{"REPORT_TOKEN": "${REPORT_SECRET}", "LANG": "C.UTF-8", "ORDINARY": "set-by-env"}}}},
				Host{SecretEnv: []string{"WEBHOOK_TOKEN"}, Secrets: []string{"daemon-listener-token"}})
			if err != nil {
				t.Fatal(err)
			}
			a, _ := reg.Lookup("report")
			if err := a.Handler.Handle(context.Background(), testFire()); err != nil {
				t.Fatal(err)
			}
			rep := readHelperReport(t, out)
			if rep.Dir != dir {
				t.Errorf("working directory %q, want %q", rep.Dir, dir)
			}
			for k, want := range map[string]string{"REPORT_TOKEN": "report-secret-value", "LANG": "C.UTF-8", "ORDINARY": "set-by-env",
				"CRONSWAP_RUN_ID": "run-0123456789abcdef", "CRONSWAP_FENCE": "42"} {
				if got := rep.All[k]; len(got) != 1 || got[0] != want {
					t.Errorf("%s = %q, want [%q]", k, got, want)
				}
			}
			for _, k := range []string{"CRONSWAP_HTTP_TOKEN", "CRONSWAP_MONGO_URI", "WEBHOOK_TOKEN", "REPORT_SECRET"} {
				if v, ok := rep.All[k]; ok {
					t.Errorf("the program got %s=%q", k, v)
				}
			}
			_, hasPath := rep.All["PATH"]
			if hasPath != (c.inherit == nil) {
				t.Errorf("PATH given: %v, want %v (inherited only)", hasPath, c.inherit == nil)
			}
			if c.inherit != nil && len(rep.All) != 3+len(Env(context.Background(), testFire())) {
				t.Errorf("a clean environment holds %d variables: %v", len(rep.All), rep.All)
			}
		})
	}
}

// What a program prints of a known secret is redacted from the tails kept
// (and from the error carrying the stderr tail).
func TestExecActionRedactsSecretsFromOutput(t *testing.T) {
	t.Setenv("REPORT_SECRET", "report-secret-value")
	reg, err := Start(map[string]Definition{"leaky": {Exec: []string{"sh", "-c", `echo "token=$REPORT_TOKEN"; echo "token=$REPORT_TOKEN" >&2; exit 3`},
		ExecSettings: ExecSettings{Env: map[string]string{"REPORT_TOKEN": "${REPORT_SECRET}"}}}}, Host{})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := reg.Lookup("leaky")
	out, err := a.Handler.(OutputHandler).HandleOutput(context.Background(), testFire())
	if err == nil || out.Stdout != "token=[redacted]" || out.Stderr != "token=[redacted]" || strings.Contains(err.Error(), "report-secret") {
		t.Fatalf("output %+v, error %v", out, err)
	}
}

// kill_grace: a cancelled program gets SIGTERM first; one that traps it
// and needs 2 s to clean up gets them, one that ignores it is SIGKILLed
// (with its group) after the grace.
func TestExecActionKillGrace(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cleaned := filepath.Join(dir, "cleaned")
	started := filepath.Join(dir, "started")
	graceful := &ExecAction{KillGrace: 10 * time.Second, Argv: []string{"sh", "-c",
		`trap 'sleep 2; echo done > "$1"; exit 0' TERM; sleep 60 & touch "$2"; wait`, "sh", cleaned, started}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- graceful.Handle(ctx, testFire()) }()
	waitFor(t, 10*time.Second, "the program to start", func() bool { _, err := os.Stat(started); return err == nil })
	cancelled := time.Now()
	cancel()
	err := <-done
	took := time.Since(cancelled)
	if b, rerr := os.ReadFile(cleaned); rerr != nil || strings.TrimSpace(string(b)) != "done" {
		t.Fatalf("the trap did not finish its clean-up (%v); run ended %v after %v", rerr, err, took)
	}
	if took < 2*time.Second || !errors.Is(err, context.Canceled) {
		t.Errorf("ended after %v with %v, want after the 2 s clean-up, cancelled", took, err)
	}

	pidfile := filepath.Join(dir, "child.pid")
	stubborn := &ExecAction{KillGrace: time.Second, Argv: []string{"sh", "-c",
		`trap '' TERM; sleep 60 & echo $! > "$1.tmp" && mv "$1.tmp" "$1"; wait`, "sh", pidfile}}
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	go func() { done <- stubborn.Handle(ctx, testFire()) }()
	var child int
	waitFor(t, 10*time.Second, "the program's child", func() bool {
		b, err := os.ReadFile(pidfile)
		child, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && child > 0
	})
	cancelled = time.Now()
	cancel()
	err = <-done
	took = time.Since(cancelled)
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != -1 {
		t.Errorf("err = %v, want killed by a signal", err)
	}
	if took < time.Second || took > 30*time.Second {
		t.Errorf("a program ignoring SIGTERM ended %v after the cancel, want after the 1 s grace", took)
	}
	waitFor(t, 10*time.Second, "the group's other process to be gone", func() bool { return processGone(child) })
	_ = syscall.Kill(child, syscall.SIGKILL)
}
