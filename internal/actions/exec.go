package actions

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/cronswap/cronswap/internal/childproc"
	"github.com/cronswap/cronswap/internal/scratch"
	"github.com/cronswap/cronswap/internal/secret"
	"github.com/cronswap/cronswap/jobs"
)

// DefaultTailBytes is how many bytes of each output a run record keeps: of
// an exec action's standard output and standard error (the last ones),
// of an http action's answer body (the first ones).
const DefaultTailBytes = 2048

// ExecAction runs a program from config, without a shell unless Argv names
// one, in its own process group; when ctx ends the whole group is stopped
// (SIGKILL, or SIGTERM and SIGKILL after KillGrace), and on Linux the
// program is killed (SIGKILL) when the daemon dies.
type ExecAction struct {
	Argv []string
	// TailBytes is how many bytes of each of stdout and stderr are kept
	// (the last ones); default DefaultTailBytes.
	TailBytes int
	// Env adds variables to the program's environment, ${NAME} in a value
	// read from the daemon's environment (LookupEnv) at each run. The run's
	// variables (Env) are set after them.
	Env map[string]string
	// Dir is the program's working directory; empty: the daemon's.
	Dir string
	// KillGrace is the time between SIGTERM and SIGKILL when ctx ends; 0:
	// SIGKILL at once. The fire path stops the run that much earlier
	// before its lease runs out (StopGrace).
	KillGrace time.Duration
	// CleanEnv starts the program with Env and the run's variables only.
	// Otherwise it inherits the daemon's environment without the daemon's
	// variables (EnvPrefix), those named in Withheld and those Env sets.
	CleanEnv bool
	// Withheld names the daemon's variables that hold secrets the
	// configuration uses elsewhere; never inherited.
	Withheld []string
	// LookupEnv reads the daemon's environment for ${NAME}; nil:
	// os.LookupEnv.
	LookupEnv secret.Lookup
	// Secrets redacts known secret values from the output tails; nil:
	// none.
	Secrets *secret.Redactor
}

// StopGrace implements Stopper: the kill grace.
func (a *ExecAction) StopGrace() time.Duration { return a.KillGrace }

// The runner records what an exec action printed.
var _ OutputHandler = (*ExecAction)(nil)

// ExitError is returned by ExecAction when the program failed.
type ExitError struct {
	// Code is the exit status, -1 when killed by a signal.
	Code int
	// Stderr is the tail of the program's standard error.
	Stderr string
	Err    error
}

func (e *ExitError) Error() string {
	if e.Stderr != "" {
		return fmt.Sprintf("%v (exit %d): %s", e.Err, e.Code, e.Stderr)
	}
	return fmt.Sprintf("%v (exit %d)", e.Err, e.Code)
}

func (e *ExitError) Unwrap() error { return e.Err }

// Handle implements jobs.Handler: HandleOutput without the output.
func (a *ExecAction) Handle(ctx context.Context, f jobs.Run) error {
	_, err := a.HandleOutput(ctx, f)
	return err
}

// HandleOutput implements OutputHandler. The program's standard output and
// standard error each go to a temporary file whose tail is kept; a failure
// is an *ExitError carrying the stderr tail; both tails are redacted
// (Secrets). When the program exits, its whole process group is killed, so
// a job never leaves processes behind (like systemd's
// KillMode=control-group); when ctx ends, the group gets SIGTERM and is
// killed KillGrace later (at once without one).
func (a *ExecAction) HandleOutput(ctx context.Context, f jobs.Run) (Output, error) {
	if len(a.Argv) == 0 {
		return Output{}, fmt.Errorf("exec %s: empty argv", f.JobID)
	}
	stdout, err := tempOutput("stdout")
	if err != nil {
		return Output{}, fmt.Errorf("exec %s: %w", f.JobID, err)
	}
	defer removeOutput(stdout)
	stderr, err := tempOutput("stderr")
	if err != nil {
		return Output{}, fmt.Errorf("exec %s: %w", f.JobID, err)
	}
	defer removeOutput(stderr)

	env, err := a.environ(ctx, f)
	if err != nil {
		return Output{}, fmt.Errorf("exec %s: %w", f.JobID, err)
	}
	// Its own process group, stopped whole when ctx ends (the program and
	// everything it started), and on Linux killed by the kernel when the
	// daemon dies, however it dies (see internal/childproc).
	cmd := childproc.CommandContext(ctx, a.Argv[0], a.Argv[1:]...)
	childproc.StopGracefully(cmd, a.KillGrace)
	cmd.Env = env
	cmd.Dir = a.Dir
	// Files, not pipes: Wait then returns when the program exits, even if
	// children it left behind still hold the descriptors.
	cmd.Stdout = stdout
	cmd.Stderr = stderr
	err = childproc.Start(cmd)
	if err == nil {
		err = cmd.Wait()
	}
	_ = childproc.KillGroup(cmd) // what the program left running in its group
	n := a.TailBytes
	if n <= 0 {
		n = DefaultTailBytes
	}
	out := Output{Stdout: fileTail(stdout, n, a.Secrets), Stderr: fileTail(stderr, n, a.Secrets)}
	if err == nil {
		ok := 0
		out.ExitCode = &ok
		return out, nil
	}
	code := -1
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	}
	out.ExitCode = &code
	if ctx.Err() != nil {
		err = fmt.Errorf("%w: %w", ctx.Err(), err)
	}
	return out, &ExitError{Code: code, Stderr: out.Stderr, Err: err}
}

// tempOutput creates the temporary file that takes one output stream
// (scratch.New: on Unix it has no name, so a daemon killed mid-run leaves
// no job output on disk). removeOutput closes it.
func tempOutput(stream string) (*os.File, error) {
	f, err := scratch.New("cronswap-" + stream + "-*")
	if err != nil {
		return nil, fmt.Errorf("%s file: %w", stream, err)
	}
	return f, nil
}

// removeOutput closes f, a file from tempOutput (scratch.Close).
func removeOutput(f *os.File) { _ = scratch.Close(f) }

// fileTail returns the last n bytes of f with every known secret redacted,
// trimmed of surrounding space: the one truncation rule of every output
// tail a run record keeps. It reads as many bytes more as the longest
// secret, redacts, then cuts, so that a secret across the cut is not kept
// in part.
func fileTail(f *os.File, n int, secrets *secret.Redactor) string {
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return ""
	}
	off := max(size-int64(n+secrets.Longest()), 0)
	buf := make([]byte, size-off)
	if _, err := f.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
		return ""
	}
	text := secrets.Redact(string(buf))
	if len(text) > n {
		text = text[len(text)-n:]
	}
	return strings.TrimSpace(text)
}

// environ returns the program's environment for run f: the daemon's
// inherited variables (unless CleanEnv), then Env with ${NAME} expanded,
// then the run's variables.
func (a *ExecAction) environ(ctx context.Context, f jobs.Run) ([]string, error) {
	var env []string
	if !a.CleanEnv {
		for _, kv := range os.Environ() {
			k, _, _ := strings.Cut(kv, "=")
			if daemonVariable(k) || slices.Contains(a.Withheld, k) {
				continue
			}
			if _, set := a.Env[k]; set {
				continue
			}
			env = append(env, kv)
		}
	}
	lookup := a.LookupEnv
	if lookup == nil {
		lookup = os.LookupEnv
	}
	x := secret.NewExpander(lookup)
	for _, k := range slices.Sorted(maps.Keys(a.Env)) {
		env = append(env, k+"="+x.Expand(a.Env[k]))
	}
	if err := x.Err(); err != nil {
		return nil, fmt.Errorf("env: %w", err)
	}
	a.Secrets.Add(x.Values()...)
	return append(env, Env(ctx, f)...), nil
}
