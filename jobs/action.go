// Package jobs owns the fire path: the named actions a schedule may run
// (exec, http, registered Go functions) and the runner that executes a fire.
// What runs is defined here, in config or code — never by a schedules
// document, which only names an action and hands it data.
package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/cronswap/cronswap/internal/config"
)

// Fire is one execution of a job for one cron slot, as handed to an action.
type Fire struct {
	JobID       string          `json:"job_id"`
	ScheduledAt time.Time       `json:"scheduled_at"`
	RunID       string          `json:"run_id"`
	Fence       int64           `json:"fence"`
	InstanceID  string          `json:"instance_id"`
	Args        json.RawMessage `json:"args"`
}

// Action runs a job. Run must return when ctx is done.
type Action interface {
	Run(ctx context.Context, f Fire) error
}

// ActionFunc adapts a Go function to Action.
type ActionFunc func(ctx context.Context, f Fire) error

// Run implements Action.
func (fn ActionFunc) Run(ctx context.Context, f Fire) error { return fn(ctx, f) }

// Spec is a registered action with its run policy.
type Spec struct {
	Action  Action
	Timeout time.Duration
	// Overlap is "forbid" or "allow".
	Overlap string
}

// Registry maps action names to actions. It is safe for concurrent use.
type Registry struct {
	mu      sync.RWMutex
	actions map[string]Spec
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{actions: map[string]Spec{}} }

// FromConfig builds a registry from the config's jobs section.
func FromConfig(jobs map[string]config.Job) (*Registry, error) {
	r := NewRegistry()
	for name, j := range jobs {
		var a Action
		switch {
		case len(j.Exec) > 0:
			a = &ExecAction{Argv: append([]string(nil), j.Exec...)}
		case j.HTTP != nil:
			a = &HTTPAction{URL: j.HTTP.URL, Method: j.HTTP.Method}
		default:
			return nil, fmt.Errorf("job %q: no action", name)
		}
		r.Register(name, Spec{Action: a, Timeout: j.Timeout, Overlap: j.Overlap})
	}
	return r, nil
}

// Register adds or replaces an action under name. Go programs embedding
// cronswap use it to run a function: r.Register("cleanup", jobs.Spec{Action: jobs.ActionFunc(fn)}).
func (r *Registry) Register(name string, s Spec) {
	if s.Overlap == "" {
		s.Overlap = "forbid"
	}
	r.mu.Lock()
	r.actions[name] = s
	r.mu.Unlock()
}

// Lookup returns the action registered under name.
func (r *Registry) Lookup(name string) (Spec, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	s, ok := r.actions[name]
	return s, ok
}

// Names lists the registered action names, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.actions))
	for n := range r.actions {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ErrUnknownAction is wrapped when a schedule names an action that is not registered.
var ErrUnknownAction = errors.New("unknown action")

// argsJSON returns the fire's args, "{}" when there are none. A schedule
// without args hands the runner an empty (possibly non-nil) Args.
func (f Fire) argsJSON() json.RawMessage {
	if len(bytes.TrimSpace(f.Args)) == 0 {
		return json.RawMessage("{}")
	}
	return f.Args
}

// Env returns the environment variables describing f (DESIGN.md, "Job actions").
func (f Fire) Env() []string {
	args := string(f.argsJSON())
	return []string{
		"CRONSWAP_JOB_ID=" + f.JobID,
		"CRONSWAP_SCHEDULED_AT=" + f.ScheduledAt.UTC().Format(time.RFC3339),
		"CRONSWAP_RUN_ID=" + f.RunID,
		"CRONSWAP_FENCE=" + strconv.FormatInt(f.Fence, 10),
		"CRONSWAP_INSTANCE_ID=" + f.InstanceID,
		"CRONSWAP_ARGS=" + args,
	}
}

// ExecAction runs a program from config, without a shell unless Argv names
// one, in its own process group; when ctx ends the whole group is killed.
type ExecAction struct {
	Argv []string
	// StderrTail is how many bytes of stderr an error keeps; default 2 KiB.
	StderrTail int
}

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

// Run implements Action. The program's standard error goes to a temporary
// file whose tail is kept for the error; standard output is discarded. When
// the program exits, or ctx ends, its whole process group is killed, so a
// job never leaves processes behind (like systemd's KillMode=control-group).
func (a *ExecAction) Run(ctx context.Context, f Fire) error {
	if len(a.Argv) == 0 {
		return errors.New("exec: empty argv")
	}
	stderr, err := os.CreateTemp("", "cronswap-stderr-*")
	if err != nil {
		return fmt.Errorf("exec %s: stderr file: %w", f.JobID, err)
	}
	defer os.Remove(stderr.Name())
	defer stderr.Close()

	cmd := exec.CommandContext(ctx, a.Argv[0], a.Argv[1:]...)
	cmd.Env = append(os.Environ(), f.Env()...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		// Kill the whole group: the program and everything it started.
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	// Files, not pipes: Wait then returns when the program exits, even if
	// children it left behind still hold the descriptors.
	cmd.Stderr = stderr
	cmd.Stdout = nil
	err = cmd.Run()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if err == nil {
		return nil
	}
	code := -1
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	}
	if ctx.Err() != nil {
		err = fmt.Errorf("%w: %w", ctx.Err(), err)
	}
	n := a.StderrTail
	if n <= 0 {
		n = 2048
	}
	return &ExitError{Code: code, Stderr: fileTail(stderr, n), Err: err}
}

// fileTail returns the last n bytes of f, trimmed of surrounding space.
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

// HTTPAction sends the fire as a JSON body; a non-2xx answer is a failure.
type HTTPAction struct {
	URL    string
	Method string
	Client *http.Client
}

// Run implements Action.
func (a *HTTPAction) Run(ctx context.Context, f Fire) error {
	// The same values as the exec environment: scheduled_at in UTC, args "{}"
	// when there are none (an empty non-nil RawMessage would not marshal).
	f.ScheduledAt = f.ScheduledAt.UTC()
	f.Args = f.argsJSON()
	body, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("http action %s: %w", f.JobID, err)
	}
	method := a.Method
	if method == "" {
		method = http.MethodPost
	}
	req, err := http.NewRequestWithContext(ctx, method, a.URL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("http action %s: %w", f.JobID, err)
	}
	req.Header.Set("Content-Type", "application/json")
	client := a.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("http action %s: %w", f.JobID, err)
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("http action %s: %s %s answered %s: %s", f.JobID, method, a.URL, resp.Status, bytes.TrimSpace(snippet))
	}
	return nil
}
