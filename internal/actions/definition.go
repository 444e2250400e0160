package actions

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/cronswap/cronswap/internal/notify"
	"github.com/cronswap/cronswap/jobs"
)

// Definition is one named action as the configuration defines it: the
// settings of exactly one kind of action and the action's run policy.
// internal/config decodes each entry of the YAML jobs section straight into
// it (the yaml tags are the file's keys); FromDefinitions turns definitions
// into a registry.
type Definition struct {
	// Exec configures an exec action: the program and its arguments, run
	// without a shell unless they name one. ExecSettings hold the rest of
	// its settings, keys of the action itself.
	Exec         []string `yaml:"exec"`
	ExecSettings `yaml:",inline"`
	// HTTP configures an http action.
	HTTP *HTTPSettings `yaml:"http"`
	// Timeout bounds each run; 0 is none.
	Timeout time.Duration `yaml:"timeout"`
	// Overlap is the overlap policy; empty means DefaultOverlap.
	Overlap jobs.Overlap `yaml:"overlap"`
	// Catchup, when set, overrides the configuration's default catch-up
	// window for the schedules running this action. The daemon's catch-up
	// at start reads it; the runner does not.
	Catchup *time.Duration `yaml:"catchup"`
	// Jitter bounds a fixed per-job delay after each slot (the slot's
	// identity stays the undelayed time); 0 is none.
	Jitter time.Duration `yaml:"jitter"`
	// StartingDeadline is how long after its slot (plus jitter) a fire may
	// still start; a fire that cannot start by then is not run and is
	// recorded missed. 0 means the configuration's default (see
	// RunnerOptions.StartingDeadline).
	StartingDeadline time.Duration `yaml:"starting_deadline"`
	// Retry tries a failed run again as further attempts of its slot
	// (attempts, backoff, max_backoff); absent: no retry.
	Retry *jobs.RetryPolicy `yaml:"retry"`
	// PauseAfterFailures, when positive, pauses the job after that many
	// consecutive failed slots, until `cronswap schedules resume`; 0: never.
	PauseAfterFailures int `yaml:"pause_after_failures"`
	// Notify, when set, replaces the configuration's notification route
	// (its webhooks and kinds) for the schedules running this action; an
	// empty webhooks list sends none.
	Notify *notify.Route `yaml:"notify"`
}

// actionKind is one kind of action: which settings of a Definition select
// it, and how they are checked and turned into an Action.
type actionKind struct {
	// usage names the kind's settings in errors.
	usage string
	// given reports whether d holds settings of this kind.
	given func(d Definition) bool
	// build checks the kind's settings in d and returns the action; its
	// error says what is wrong with them.
	build func(d Definition) (jobs.Handler, error)
	// start checks what only the daemon's machine can tell about the
	// action build returned for d, and readies it to run there (Start).
	start func(d Definition, h jobs.Handler, s *starter) error
}

// actionKinds is the table of action kinds, keyed by the Definition key
// that selects each. A new kind adds its settings field to Definition, its
// Action type, and one entry here.
var actionKinds = map[string]actionKind{
	"exec": {
		usage: "exec (an argv list)",
		given: func(d Definition) bool { return d.Exec != nil },
		build: func(d Definition) (jobs.Handler, error) {
			switch {
			case len(d.Exec) == 0:
				return nil, errors.New("exec is empty: give the program and its arguments")
			case d.Exec[0] == "":
				return nil, errors.New("exec[0] (the program) is empty")
			}
			return d.ExecSettings.action(d.Exec)
		},
		start: startExec,
	},
	"http": {
		usage: "http (url, method)",
		given: func(d Definition) bool { return d.HTTP != nil },
		build: func(d Definition) (jobs.Handler, error) {
			if keys := d.ExecSettings.given(); len(keys) > 0 {
				return nil, fmt.Errorf("%s: exec settings, and this action is http (headers go in http.headers)", strings.Join(keys, ", "))
			}
			return d.HTTP.action()
		},
		start: startHTTP,
	},
}

// kindNames returns the action kinds' keys, sorted.
func kindNames() []string {
	names := make([]string, 0, len(actionKinds))
	for k := range actionKinds {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// Action checks d and returns the action it defines. Its error says what
// is wrong without naming the job: callers add the name.
func (d Definition) Action() (Action, error) {
	var given []string
	for _, k := range kindNames() {
		if actionKinds[k].given(d) {
			given = append(given, k)
		}
	}
	switch len(given) {
	case 0:
		usages := make([]string, 0, len(actionKinds))
		for _, k := range kindNames() {
			usages = append(usages, actionKinds[k].usage)
		}
		return Action{}, fmt.Errorf("no action: give %s", strings.Join(usages, " or "))
	case 1:
	default:
		return Action{}, fmt.Errorf("give one kind of action, not %s", strings.Join(given, " and "))
	}
	action, err := actionKinds[given[0]].build(d)
	if err != nil {
		return Action{}, err
	}
	var retry jobs.RetryPolicy
	if d.Retry != nil {
		retry = *d.Retry
	}
	policy, err := CheckPolicy(jobs.Policy{Timeout: d.Timeout, Overlap: d.Overlap, Jitter: d.Jitter, StartingDeadline: d.StartingDeadline,
		Catchup: d.Catchup, Retry: retry, PauseAfterFailures: d.PauseAfterFailures})
	if err != nil {
		return Action{}, err
	}
	return Action{Handler: action, Policy: policy}, nil
}

// CheckPolicy checks a run policy — a configured action's, or a Go
// handler's (daemon.Service.Handle) — and returns it with its overlap
// policy resolved (empty: the default; forbid: skip). Its error names the
// setting as the config file does, without naming the job.
func CheckPolicy(p jobs.Policy) (jobs.Policy, error) {
	switch {
	case p.Timeout < 0:
		return p, fmt.Errorf("timeout %s: must not be negative", p.Timeout)
	case p.Catchup != nil && *p.Catchup < 0:
		return p, fmt.Errorf("catchup %s: must be 0 (off) or positive", *p.Catchup)
	case p.Jitter < 0:
		return p, fmt.Errorf("jitter %s: must not be negative", p.Jitter)
	case p.StartingDeadline < 0:
		return p, fmt.Errorf("starting_deadline %s: must be positive (or 0 for the default)", p.StartingDeadline)
	}
	overlap, err := jobs.ParseOverlap(string(p.Overlap))
	if err != nil {
		return p, err
	}
	p.Overlap = overlap
	if err := p.Retry.Validate(); err != nil {
		return p, err
	}
	if p.PauseAfterFailures < 0 {
		return p, fmt.Errorf("pause_after_failures %d: must be 0 (never) or positive", p.PauseAfterFailures)
	}
	return p, nil
}

// Validate reports what is wrong with d (nil when it defines an action),
// without naming the job.
func (d Definition) Validate() error {
	_, err := d.Action()
	return err
}
