package actions

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"

	"github.com/cronswap/cronswap/internal/childproc"
	"github.com/cronswap/cronswap/jobs"
)

// DefaultTailBytes is how many bytes of each of an exec action's standard
// output and standard error its run record keeps.
const DefaultTailBytes = 2048

// ExecAction runs a program from config, without a shell unless Argv names
// one, in its own process group; when ctx ends the whole group is killed,
// and on Linux the program is killed (SIGKILL) when the daemon dies.
type ExecAction struct {
	Argv []string
	// TailBytes is how many bytes of each of stdout and stderr are kept
	// (the last ones); default DefaultTailBytes.
	TailBytes int
}

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
// is an *ExitError carrying the stderr tail. When the program exits, or ctx
// ends, its whole process group is killed, so a job never leaves processes
// behind (like systemd's KillMode=control-group).
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

	// Its own process group, killed whole when ctx ends (the program and
	// everything it started), and on Linux killed by the kernel when the
	// daemon dies, however it dies (see internal/childproc).
	cmd := childproc.CommandContext(ctx, a.Argv[0], a.Argv[1:]...)
	cmd.Env = append(os.Environ(), Env(f)...)
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
	out := Output{Stdout: fileTail(stdout, n), Stderr: fileTail(stderr, n)}
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

// tempOutput creates the temporary file that takes one output stream.
func tempOutput(stream string) (*os.File, error) {
	f, err := os.CreateTemp("", "cronswap-"+stream+"-*")
	if err != nil {
		return nil, fmt.Errorf("%s file: %w", stream, err)
	}
	return f, nil
}

func removeOutput(f *os.File) {
	_ = f.Close()
	_ = os.Remove(f.Name())
}

// fileTail returns the last n bytes of f, trimmed of surrounding space: the
// one truncation rule of every output tail a run record keeps.
func fileTail(f *os.File, n int) string {
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return ""
	}
	off := max(size-int64(n), 0)
	buf := make([]byte, size-off)
	if _, err := f.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
		return ""
	}
	return string(bytes.TrimSpace(buf))
}
