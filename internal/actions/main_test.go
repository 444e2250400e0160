package actions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cronswap/cronswap/jobs"
)

// helperArg as os.Args[1] turns the test binary into a small program that
// records what it was started with: os.Args[2] is the output file, the rest
// of argv and the CRONSWAP_* environment are written there as JSON. This
// lets the exec tests see the exact bytes a program receives.
const helperArg = "cronswap-jobs-test-helper"

type helperReport struct {
	Argv []string `json:"argv"`
	// Env holds every CRONSWAP_* variable, all values in order of appearance
	// (more than one value would mean a duplicated variable).
	Env map[string][]string `json:"env"`
	// All holds every variable of the environment, all values.
	All map[string][]string `json:"all"`
	// Dir is the working directory.
	Dir string `json:"dir"`
}

// parentArg as os.Args[1] turns the test binary into a parent that runs
// one ExecAction: a shell that writes its pid to os.Args[2] and then execs
// `sleep 60` (same pid). The parent blocks until it is killed; the tests
// kill it to see what becomes of the child.
const parentArg = "cronswap-jobs-test-parent"

func TestMain(m *testing.M) {
	if len(os.Args) >= 3 && os.Args[1] == helperArg {
		os.Exit(helperMain(os.Args[2], os.Args[3:]))
	}
	if len(os.Args) >= 3 && os.Args[1] == parentArg {
		os.Exit(parentMain(os.Args[2]))
	}
	setSubreaper()
	// The helper is this test binary; under -race it would otherwise sleep
	// 1s at exit (atexit_sleep_ms) on every exec.
	if _, ok := os.LookupEnv("GORACE"); !ok {
		_ = os.Setenv("GORACE", "atexit_sleep_ms=0")
	}
	os.Exit(m.Run())
}

func parentMain(pidfile string) int {
	a := &ExecAction{Argv: []string{"sh", "-c", `echo $$ > "$1.tmp" && mv "$1.tmp" "$1" && exec sleep 60`, "sh", pidfile}}
	if err := a.Handle(context.Background(), jobs.Run{JobID: "orphan_test"}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func helperMain(out string, argv []string) int {
	rep := helperReport{Argv: argv, Env: map[string][]string{}, All: map[string][]string{}}
	rep.Dir, _ = os.Getwd()
	if rep.Argv == nil {
		rep.Argv = []string{}
	}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		rep.All[k] = append(rep.All[k], v)
		if strings.HasPrefix(k, "CRONSWAP_") {
			rep.Env[k] = append(rep.Env[k], v)
		}
	}
	b, err := json.Marshal(rep)
	if err != nil {
		return 3
	}
	if err := os.WriteFile(out, b, 0o600); err != nil {
		return 4
	}
	return 0
}

// helperArgv returns the argv that runs the helper writing to out.
func helperArgv(t *testing.T, out string, extra ...string) []string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("os.Executable: %v", err)
	}
	return append([]string{exe, helperArg, out}, extra...)
}

func readHelperReport(t *testing.T, path string) helperReport {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("helper report: %v", err)
	}
	var rep helperReport
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("helper report %q: %v", b, err)
	}
	return rep
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// processGone reports whether pid no longer exists. Orphans are reparented
// to the test process (see setSubreaper), so it reaps pid first if it can.
func processGone(pid int) bool {
	var ws syscall.WaitStatus
	_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}
