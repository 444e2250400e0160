package actions

import (
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/cronswap/cronswap/internal/secret"
	"github.com/cronswap/cronswap/jobs"
)

// ExecSettings are an exec action's settings besides its argv: keys of the
// action itself (jobs.<name>.env, .dir, .kill_grace, .inherit_env).
type ExecSettings struct {
	// Env adds variables to the program's environment. A value may name
	// the daemon's variables as ${NAME} (package secret's rule: refused at
	// start when unset). Names starting with EnvPrefix are the daemon's.
	Env map[string]string `yaml:"env"`
	// Dir is the program's working directory; empty: the daemon's. A
	// relative program path (exec[0] with a slash) is relative to it.
	Dir string `yaml:"dir"`
	// KillGrace is how long a program that is being stopped (its
	// timeout, its lease, cancel_other, shutdown) has between SIGTERM to
	// its process group and SIGKILL; 0 (the default): SIGKILL at once.
	// The run is stopped that much before its local lease deadline, so
	// it never outlives its lease; at most a third of lock.ttl.
	KillGrace time.Duration `yaml:"kill_grace"`
	// InheritEnv false starts the program with Env and the run's
	// variables only; absent or true, it also inherits the daemon's
	// environment, without the daemon's variables (EnvPrefix) and the
	// variables the configuration names as secrets.
	InheritEnv *bool `yaml:"inherit_env"`
}

// given lists the keys of s that are set.
func (s ExecSettings) given() []string {
	var keys []string
	if s.Env != nil {
		keys = append(keys, "env")
	}
	if s.Dir != "" {
		keys = append(keys, "dir")
	}
	if s.KillGrace != 0 {
		keys = append(keys, "kill_grace")
	}
	if s.InheritEnv != nil {
		keys = append(keys, "inherit_env")
	}
	return keys
}

// envName is a name an exec action's env may set.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// action checks s and returns the exec action running argv with it.
func (s ExecSettings) action(argv []string) (*ExecAction, error) {
	for _, k := range slices.Sorted(maps.Keys(s.Env)) {
		v := s.Env[k]
		switch {
		case !envName.MatchString(k):
			return nil, fmt.Errorf("env: %q is not a variable name: letters, digits and _, not starting with a digit (e.g. env: {REPORT_LANG: C.UTF-8})", k)
		case daemonVariable(k):
			return nil, fmt.Errorf("env.%s: %s variables are the daemon's (the run's %sJOB_ID, ..., its own settings and secrets)", k, EnvPrefix, EnvPrefix)
		case strings.ContainsRune(v, 0):
			return nil, fmt.Errorf("env.%s: the value holds a NUL byte", k)
		}
		if err := secret.CheckSyntax(v); err != nil {
			return nil, fmt.Errorf("env.%s: %w", k, err)
		}
		for _, ref := range secret.Refs(v) {
			if daemonVariable(ref) {
				return nil, fmt.Errorf("env.%s: ${%s}: the daemon's own variables never reach a program", k, ref)
			}
		}
	}
	if s.KillGrace < 0 {
		return nil, fmt.Errorf("kill_grace %s: must be 0 (SIGKILL at once) or positive", s.KillGrace)
	}
	if strings.ContainsRune(s.Dir, 0) {
		return nil, fmt.Errorf("dir %q holds a NUL byte", s.Dir)
	}
	return &ExecAction{Argv: slices.Clone(argv), Env: s.Env, Dir: s.Dir, KillGrace: s.KillGrace,
		CleanEnv: s.InheritEnv != nil && !*s.InheritEnv}, nil
}

// envRefs lists the variables s names (${NAME} in env values).
func (s ExecSettings) envRefs() []string {
	var names []string
	for _, v := range s.Env {
		names = append(names, secret.Refs(v)...)
	}
	return names
}

// startExec checks the exec action built from d on this machine — its
// dir is a directory, every variable its env names is set — and hands
// it the daemon's secrets (its program is checked by checkPrograms).
func startExec(d Definition, h jobs.Handler, s *starter) error {
	a := h.(*ExecAction)
	if a.Dir != "" {
		st, err := os.Stat(a.Dir)
		if err != nil {
			return fmt.Errorf("dir: %w (the program's working directory must exist when cronswap run starts)", err)
		}
		if !st.IsDir() {
			return fmt.Errorf("dir %s: not a directory", a.Dir)
		}
	}
	x := secret.NewExpander(s.lookup)
	for _, k := range slices.Sorted(maps.Keys(a.Env)) {
		x.Expand(a.Env[k])
		if err := x.Err(); err != nil {
			return fmt.Errorf("env.%s: %w", k, err)
		}
	}
	a.LookupEnv = s.lookup
	a.Secrets = s.secrets
	a.Withheld = s.withheld
	return nil
}
