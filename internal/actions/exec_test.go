package actions

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cronswap/cronswap/jobs"
)

func testFire() jobs.Run {
	return jobs.Run{
		JobID:      "daily_report",
		Slot:       time.Date(2024, 3, 10, 14, 30, 0, 0, time.FixedZone("IST", 5*3600+1800)),
		RunID:      "run-0123456789abcdef",
		Fence:      42,
		InstanceID: "replica-a",
		Args:       json.RawMessage(`{"region":"eu","n":3}`),
	}
}

func TestFireEnv(t *testing.T) {
	t.Parallel()
	f := testFire()
	got := Env(context.Background(), f)
	want := []string{
		"CRONSWAP_JOB_ID=daily_report",
		"CRONSWAP_SCHEDULED_AT=2024-03-10T09:00:00Z",
		"CRONSWAP_RUN_ID=run-0123456789abcdef",
		"CRONSWAP_FENCE=42",
		"CRONSWAP_INSTANCE_ID=replica-a",
		`CRONSWAP_ARGS={"region":"eu","n":3}`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("Env() =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, args := range []json.RawMessage{nil, {}, json.RawMessage("  ")} {
		f.Args = args
		env := Env(context.Background(), f)
		if last := env[len(env)-1]; last != "CRONSWAP_ARGS={}" {
			t.Errorf("Args %q: %s, want CRONSWAP_ARGS={}", args, last)
		}
	}
}

func TestExecActionEnvironment(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "report.json")
	a := &ExecAction{Argv: helperArgv(t, out)}
	f := testFire()
	if err := a.Handle(context.Background(), f); err != nil {
		t.Fatalf("Run: %v", err)
	}
	rep := readHelperReport(t, out)
	want := map[string]string{
		"CRONSWAP_JOB_ID":       "daily_report",
		"CRONSWAP_SCHEDULED_AT": "2024-03-10T09:00:00Z",
		"CRONSWAP_RUN_ID":       "run-0123456789abcdef",
		"CRONSWAP_FENCE":        "42",
		"CRONSWAP_INSTANCE_ID":  "replica-a",
		"CRONSWAP_ARGS":         `{"region":"eu","n":3}`,
	}
	for k, v := range want {
		if got := rep.Env[k]; len(got) != 1 || got[0] != v {
			t.Errorf("%s = %q, want exactly [%q]", k, got, v)
		}
	}
	at, err := time.Parse(time.RFC3339, rep.Env["CRONSWAP_SCHEDULED_AT"][0])
	if err != nil || !at.Equal(f.Slot) || at.Location() != time.UTC {
		t.Errorf("CRONSWAP_SCHEDULED_AT %q: parsed %v (%v), want %v in UTC", rep.Env["CRONSWAP_SCHEDULED_AT"], at, err, f.Slot)
	}
	if len(rep.Argv) != 0 {
		t.Errorf("argv = %q, want none", rep.Argv)
	}
}

// A CRONSWAP_* variable already in the daemon's environment (say, cronswap
// itself started by a cron job) must not shadow the fire's value.
// Not parallel: it changes the process environment.
func TestExecActionEnvOverridesInherited(t *testing.T) {
	t.Setenv("CRONSWAP_JOB_ID", "inherited")
	t.Setenv("CRONSWAP_ARGS", `{"inherited":true}`)
	out := filepath.Join(t.TempDir(), "report.json")
	f := testFire()
	f.Args = nil
	if err := (&ExecAction{Argv: helperArgv(t, out)}).Handle(context.Background(), f); err != nil {
		t.Fatalf("Run: %v", err)
	}
	rep := readHelperReport(t, out)
	if got := rep.Env["CRONSWAP_JOB_ID"]; len(got) != 1 || got[0] != "daily_report" {
		t.Errorf("CRONSWAP_JOB_ID = %q, want [daily_report]", got)
	}
	if got := rep.Env["CRONSWAP_ARGS"]; len(got) != 1 || got[0] != "{}" {
		t.Errorf("CRONSWAP_ARGS = %q, want [{}]", got)
	}
}

// hostileArgs returns args JSON full of shell metacharacters, each of which
// would create a marker file in dir if it were ever interpreted by a shell.
func hostileArgs(t *testing.T, dir string) (json.RawMessage, []string) {
	t.Helper()
	var markers []string
	m := func(name string) string {
		p := filepath.Join(dir, name)
		markers = append(markers, p)
		return p
	}
	args := map[string]any{
		"subst":    "$(touch " + m("subst") + ")",
		"semi":     "; touch " + m("semi") + "; rm -rf " + filepath.Join(dir, "victim"),
		"backtick": "`touch " + m("backtick") + "`",
		"squote":   "' ; touch " + m("squote") + " ; '",
		"dquote":   `" && touch ` + m("dquote") + ` && "`,
		"pipe":     "| touch " + m("pipe"),
		"newline":  "x\ntouch " + m("newline") + "\n",
		"vars":     "$HOME ${PATH} $0 $$ \\ * ? ~ & < > # !",
		"nested":   []any{"$(touch " + m("nested") + ")", map[string]any{"k": "`touch " + m("nested2") + "`"}},
		"unicode":  "naïve – ünïcödé ✓",
	}
	raw, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	return raw, markers
}

func assertNoMarkers(t *testing.T, dir string, markers []string) {
	t.Helper()
	for _, p := range markers {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("marker %s exists (stat err %v): an injected command ran", p, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "victim")); err != nil {
		t.Errorf("victim dir removed: an injected command ran: %v", err)
	}
}

func TestExecActionArgsAreDataNotCode(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "victim"), 0o700); err != nil {
		t.Fatal(err)
	}
	raw, markers := hostileArgs(t, dir)
	f := testFire()
	f.Args = raw

	t.Run("no shell", func(t *testing.T) {
		out := filepath.Join(dir, "helper.json")
		if err := (&ExecAction{Argv: helperArgv(t, out)}).Handle(context.Background(), f); err != nil {
			t.Fatalf("Run: %v", err)
		}
		rep := readHelperReport(t, out)
		if got := rep.Env["CRONSWAP_ARGS"]; len(got) != 1 || got[0] != string(raw) {
			t.Fatalf("CRONSWAP_ARGS = %q\nwant exactly %q", got, raw)
		}
		assertNoMarkers(t, dir, markers)
	})

	// Even when the configured argv names a shell, args only arrive as the
	// value of a variable; expanding it (quoted or not) runs nothing.
	t.Run("shell expands variable", func(t *testing.T) {
		quoted := filepath.Join(dir, "quoted.out")
		unquoted := filepath.Join(dir, "unquoted.out")
		a := &ExecAction{Argv: []string{"sh", "-c",
			`printf '%s' "$CRONSWAP_ARGS" > "$1" && echo $CRONSWAP_ARGS > "$2"`,
			"sh", quoted, unquoted}}
		if err := a.Handle(context.Background(), f); err != nil {
			t.Fatalf("Run: %v", err)
		}
		got, err := os.ReadFile(quoted)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, raw) {
			t.Fatalf("program saw %q\nwant exactly %q", got, raw)
		}
		if _, err := os.Stat(unquoted); err != nil {
			t.Fatalf("unquoted output: %v", err)
		}
		assertNoMarkers(t, dir, markers)
	})
}

func TestExecActionArgvWithoutShell(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	marker := filepath.Join(dir, "marker")
	out := filepath.Join(dir, "report.json")
	extra := []string{"$HOME", "${PATH}", "a b  c", "*", "; touch " + marker, "$(touch " + marker + ")", "`touch " + marker + "`", "'\"", ""}
	if err := (&ExecAction{Argv: helperArgv(t, out, extra...)}).Handle(context.Background(), testFire()); err != nil {
		t.Fatalf("Run: %v", err)
	}
	rep := readHelperReport(t, out)
	if strings.Join(rep.Argv, "\x00") != strings.Join(extra, "\x00") || len(rep.Argv) != len(extra) {
		t.Fatalf("argv = %q\nwant exactly %q", rep.Argv, extra)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("marker exists: an argv element was interpreted by a shell")
	}
}

func TestExecActionEmptyArgv(t *testing.T) {
	t.Parallel()
	if err := (&ExecAction{}).Handle(context.Background(), testFire()); err == nil {
		t.Fatal("empty argv: want an error")
	}
}

func TestExecActionMissingProgram(t *testing.T) {
	t.Parallel()
	err := (&ExecAction{Argv: []string{filepath.Join(t.TempDir(), "no-such-program")}}).Handle(context.Background(), testFire())
	var ee *ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("err = %v (%T), want *ExitError", err, err)
	}
	if ee.Code == 0 {
		t.Errorf("Code = 0, want non-zero")
	}
}

func TestExecActionExitStatusAndStderrTail(t *testing.T) {
	t.Parallel()
	var full strings.Builder
	for i := 0; i < 100; i++ {
		fmt.Fprintf(&full, "line-%03d\n", i)
	}
	full.WriteString("LAST")
	const tail = 32
	a := &ExecAction{
		Argv:      []string{"sh", "-c", `i=0; while [ $i -lt 100 ]; do printf 'line-%03d\n' $i >&2; i=$((i+1)); done; printf LAST >&2; echo to-stdout; exit 7`},
		TailBytes: tail,
	}
	out, err := a.HandleOutput(context.Background(), testFire())
	var ee *ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("err = %v (%T), want *ExitError", err, err)
	}
	if ee.Code != 7 {
		t.Errorf("Code = %d, want 7", ee.Code)
	}
	s := full.String()
	want := strings.TrimSpace(s[len(s)-tail:])
	if ee.Stderr != want {
		t.Errorf("Stderr = %q, want the last %d bytes %q", ee.Stderr, tail, want)
	}
	var xe *exec.ExitError
	if !errors.As(err, &xe) {
		t.Errorf("err does not unwrap to *exec.ExitError: %v", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "exit 7") || !strings.Contains(msg, "LAST") {
		t.Errorf("Error() = %q, want exit status and stderr tail", msg)
	}
	if strings.Contains(err.Error(), "to-stdout") {
		t.Errorf("stdout leaked into the error: %q", err.Error())
	}
	if out.Stdout != "to-stdout" || out.Stderr != want {
		t.Errorf("output = %+v, want stdout %q and the stderr tail %q", out, "to-stdout", want)
	}
}

// Standard output keeps a tail by the same rule as standard error: the last
// TailBytes bytes, trimmed, on success as on failure.
func TestExecActionStdoutTail(t *testing.T) {
	t.Parallel()
	var full strings.Builder
	for i := 0; i < 100; i++ {
		fmt.Fprintf(&full, "out-%03d\n", i)
	}
	const tail = 20
	s := full.String()
	want := strings.TrimSpace(s[len(s)-tail:])
	for _, exit := range []int{0, 4} {
		a := &ExecAction{
			Argv:      []string{"sh", "-c", fmt.Sprintf(`i=0; while [ $i -lt 100 ]; do printf 'out-%%03d\n' $i; i=$((i+1)); done; exit %d`, exit)},
			TailBytes: tail,
		}
		out, err := a.HandleOutput(context.Background(), testFire())
		if (err == nil) != (exit == 0) {
			t.Fatalf("exit %d: err = %v", exit, err)
		}
		if out.Stdout != want || out.Stderr != "" {
			t.Errorf("exit %d: output %+v, want stdout %q (the last %d bytes, trimmed) and no stderr", exit, out, want, tail)
		}
	}
}

func TestExecActionDefaultStdoutTail(t *testing.T) {
	t.Parallel()
	// 5000 bytes of 'y' then END on stdout; the default keeps the last 2 KiB.
	a := &ExecAction{Argv: []string{"sh", "-c", `i=0; while [ $i -lt 50 ]; do printf '%0100d' 0 | tr 0 y; i=$((i+1)); done; printf END`}}
	out, err := a.HandleOutput(context.Background(), testFire())
	if err != nil {
		t.Fatalf("HandleOutput: %v", err)
	}
	if DefaultTailBytes != 2048 || len(out.Stdout) != DefaultTailBytes || !strings.HasSuffix(out.Stdout, "END") || strings.Trim(out.Stdout[:2045], "y") != "" {
		t.Errorf("Stdout: len %d, suffix %q; want 2048 bytes ending in END", len(out.Stdout), out.Stdout[max(0, len(out.Stdout)-8):])
	}
}

func TestExecActionDefaultStderrTail(t *testing.T) {
	t.Parallel()
	// 5000 bytes of 'x' then END on stderr; the default keeps the last 2 KiB.
	a := &ExecAction{Argv: []string{"sh", "-c", `i=0; while [ $i -lt 50 ]; do printf '%0100d' 0 | tr 0 x >&2; i=$((i+1)); done; printf END >&2; exit 1`}}
	err := a.Handle(context.Background(), testFire())
	var ee *ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("err = %v, want *ExitError", err)
	}
	if ee.Code != 1 {
		t.Errorf("Code = %d, want 1", ee.Code)
	}
	if len(ee.Stderr) != 2048 || !strings.HasSuffix(ee.Stderr, "END") || strings.Trim(ee.Stderr[:2045], "x") != "" {
		t.Errorf("Stderr: len %d, suffix %q; want 2048 bytes ending in END", len(ee.Stderr), ee.Stderr[max(0, len(ee.Stderr)-8):])
	}
}

func TestExecActionSuccess(t *testing.T) {
	t.Parallel()
	a := &ExecAction{Argv: []string{"sh", "-c", "echo noise >&2; exit 0"}}
	if err := a.Handle(context.Background(), testFire()); err != nil {
		t.Fatalf("Run: %v", err)
	}
	out, err := a.HandleOutput(context.Background(), testFire())
	if err != nil || out.Stderr != "noise" || out.Stdout != "" {
		t.Fatalf("HandleOutput = %+v, %v; want the stderr tail of a successful run", out, err)
	}
}

// TestExecActionOutputFilesHaveNoName: while a program runs, the files
// that take its output have no name in the temporary directory, so a
// daemon killed mid-run leaves none of its jobs' output on disk; the
// output is still captured. (Not parallel: it sets TMPDIR.)
func TestExecActionOutputFilesHaveNoName(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	a := &ExecAction{Argv: []string{"sh", "-c", `ls -A "$TMPDIR"; echo listed >&2`}}
	out, err := a.HandleOutput(context.Background(), testFire())
	if err != nil {
		t.Fatalf("HandleOutput: %v", err)
	}
	if out.Stdout != "" || out.Stderr != "listed" {
		t.Fatalf("HandleOutput = %+v; want an empty listing of the temporary directory on stdout, and stderr captured", out)
	}
	if left, err := os.ReadDir(tmp); err != nil || len(left) != 0 {
		t.Fatalf("after the run the temporary directory holds %v (%v), want nothing", left, err)
	}
}

func TestExecActionLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	pidfile := filepath.Join(t.TempDir(), "sleep.pid")
	a := &ExecAction{Argv: []string{"sh", "-c", `sleep 300 & echo $! > "$1"; exit 0`, "sh", pidfile}}
	start := time.Now()
	if err := a.Handle(context.Background(), testFire()); err != nil {
		t.Fatalf("Run: %v (a background child holding stderr must not fail the run)", err)
	}
	if took := time.Since(start); took > 4*time.Second {
		t.Fatalf("Run took %s: it waited for the background child", took)
	}
	waitPIDGone(t, pidfile, 5*time.Second, "background sleep killed with the group")
}

// runGroupKill starts `sh -c 'sleep 300 & echo $! > PIDFILE; wait'`, ends ctx
// via end, and checks that Run returns promptly and the grandchild is gone.
func runGroupKill(t *testing.T, ctx context.Context, end func(pidfile string)) (time.Duration, error) {
	t.Helper()
	pidfile := filepath.Join(t.TempDir(), "sleep.pid")
	a := &ExecAction{Argv: []string{"sh", "-c", `sleep 300 & echo $! > "$1"; echo waiting for sleep >&2; wait`, "sh", pidfile}}

	type result struct {
		err  error
		took time.Duration
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		err := a.Handle(ctx, testFire())
		done <- result{err, time.Since(start)}
	}()
	if end != nil {
		end(pidfile)
	}
	var res result
	select {
	case res = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("Run did not return within 60s of start (the sleep is 300s)")
	}

	waitPIDGone(t, pidfile, 10*time.Second, "grandchild sleep to be gone")
	return res.took, res.err
}

// waitPIDGone reads the pid a test action wrote to pidfile, makes sure the
// process is killed at the end of the test if it is still there, and waits
// up to within for it to be gone.
func waitPIDGone(t *testing.T, pidfile string, within time.Duration, what string) {
	t.Helper()
	b, err := os.ReadFile(pidfile)
	if err != nil {
		t.Fatalf("pid file: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		t.Fatalf("pid file %q: %v", b, err)
	}
	killOnCleanup(t, pid)
	waitFor(t, within, what+" (pid "+strconv.Itoa(pid)+")", func() bool { return processGone(pid) })
}

// killOnCleanup kills pid at the end of the test if it is still there (only
// when the test failed), so a failing run leaves no 300s sleep behind.
func killOnCleanup(t *testing.T, pid int) {
	t.Cleanup(func() {
		if !processGone(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(pid, &ws, 0, nil)
		}
	})
}

func checkKilledExitError(t *testing.T, err error, want error) {
	t.Helper()
	var ee *ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("err = %v (%T), want *ExitError", err, err)
	}
	if !errors.Is(err, want) {
		t.Errorf("err = %v, want it to wrap %v", err, want)
	}
	if ee.Code == 0 {
		t.Errorf("Code = 0, want non-zero for a killed program")
	}
	if !strings.Contains(ee.Stderr, "waiting for sleep") {
		t.Errorf("Stderr = %q, want the program's stderr", ee.Stderr)
	}
}

func TestExecActionTimeoutKillsProcessGroup(t *testing.T) {
	t.Parallel()
	const timeout = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	took, err := runGroupKill(t, ctx, nil)
	checkKilledExitError(t, err, context.DeadlineExceeded)
	if took < timeout-100*time.Millisecond {
		t.Errorf("Run returned after %v, before the %v deadline", took, timeout)
	}
	// cmd.WaitDelay is 5s: returning later would mean the group was not
	// killed and Run only gave up on the grandchild holding stderr.
	if took > timeout+4*time.Second {
		t.Errorf("Run returned %v after start, want promptly after the %v deadline", took, timeout)
	}
}

func TestExecActionCancelKillsProcessGroup(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var cancelledAt time.Time
	took, err := runGroupKill(t, ctx, func(pidfile string) {
		waitFor(t, 30*time.Second, "pid file", func() bool {
			b, err := os.ReadFile(pidfile)
			return err == nil && bytes.HasSuffix(b, []byte("\n"))
		})
		cancelledAt = time.Now()
		cancel()
	})
	checkKilledExitError(t, err, context.Canceled)
	if since := time.Since(cancelledAt); since > 4*time.Second {
		t.Errorf("Run took %v (%v after cancel), want prompt return", took, since)
	}
}
