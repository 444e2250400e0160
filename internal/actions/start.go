package actions

import (
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cronswap/cronswap/internal/secret"
	"github.com/cronswap/cronswap/jobs"
)

// Host is what the machine the daemon runs on gives the configured actions
// at start.
type Host struct {
	// LookupEnv reads the daemon's environment; nil: os.LookupEnv.
	LookupEnv secret.Lookup
	// Secrets are the daemon's own secret values besides the actions'
	// (its listener's token, the database password): redacted
	// from what runs capture, like the actions' own.
	Secrets []string
	// SecretEnv names the variables that hold secrets the configuration
	// uses outside the actions (the webhooks' ${NAME}): their values are
	// redacted too, and no exec action inherits them.
	SecretEnv []string
}

// starter is what Start hands each action kind's start.
type starter struct {
	lookup secret.Lookup
	// secrets is the registry's one Redactor, knowing every secret value
	// read at start; the actions add what they read later.
	secrets *secret.Redactor
	// withheld names every variable the configuration reads a secret from
	// (Host.SecretEnv and the actions' own): never inherited by a program.
	withheld []string
	// transport is the registry's shared transport, cloned for an action
	// with TLS settings.
	transport *http.Transport
}

// Start returns the registry the daemon runs: FromDefinitions, then the
// checks only the machine it runs on can answer, so that `cronswap run`
// refuses to start instead of failing at a fire: every exec program exists
// (checkPrograms) and its dir is a directory, every variable the actions
// name is set, every secret file is readable and not empty, every TLS
// file is read and a client certificate matches its key. The actions share
// one Redactor that knows every secret value read (Host.Secrets,
// Host.SecretEnv's values and the actions' own). The error names the job
// and the setting; it never holds a secret value. The commands that only
// read the configuration use FromDefinitions, which reads nothing.
func Start(defs map[string]Definition, host Host) (*Registry, error) {
	reg, err := FromDefinitions(defs)
	if err != nil {
		return nil, err
	}
	if err := checkPrograms(defs); err != nil {
		return nil, err
	}
	s := &starter{lookup: host.LookupEnv, secrets: secret.NewRedactor(host.Secrets...),
		withheld: slices.Clone(host.SecretEnv), transport: reg.client.Transport.(*http.Transport)}
	if s.lookup == nil {
		s.lookup = os.LookupEnv
	}
	for _, d := range defs {
		s.withheld = append(s.withheld, d.ExecSettings.envRefs()...)
		if d.HTTP != nil {
			s.withheld = append(s.withheld, d.HTTP.envRefs()...)
		}
	}
	slices.Sort(s.withheld)
	s.withheld = slices.Compact(s.withheld)
	for _, name := range s.withheld {
		if v, ok := s.lookup(name); ok {
			s.secrets.Add(v)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(defs)) {
		d := defs[name]
		a, _ := reg.Lookup(name)
		for _, k := range kindNames() {
			if kind := actionKinds[k]; kind.given(d) {
				if err := kind.start(d, a.Handler, s); err != nil {
					return nil, fmt.Errorf("jobs.%s: %w", name, err)
				}
			}
		}
	}
	return reg, nil
}

// startHTTP checks the http action built from d on this machine — its
// headers' variables are set and make valid values, its authorization can
// be read, its TLS files are read — and gives it its client.
func startHTTP(d Definition, h jobs.Handler, s *starter) error {
	a := h.(*HTTPAction)
	a.LookupEnv, a.Secrets = s.lookup, s.secrets
	if _, err := a.setHeaders(http.Header{}); err != nil {
		return err
	}
	if d.HTTP.TLS == nil {
		return nil
	}
	cfg, key, err := d.HTTP.TLS.config()
	if err != nil {
		return err
	}
	s.secrets.Add(key)
	t := s.transport.Clone()
	t.TLSClientConfig = cfg
	a.Client = &http.Client{Transport: t}
	return nil
}

// checkPrograms reports the first exec action, in name order, whose program
// cannot be found as exec would find it when the job fires: a name with a
// slash must be an executable file (a relative one, relative to the
// action's dir, else the current directory); a bare name must be an
// executable file in one of PATH's directories. The error names the job
// and the program. It checks the machine it runs on, so only the daemon
// calls it (Start), and not the commands that only read the configuration
// (validate, schedules, ...), which must work where the programs are not
// installed.
func checkPrograms(defs map[string]Definition) error {
	for _, name := range slices.Sorted(maps.Keys(defs)) {
		d := defs[name]
		argv := d.Exec
		if len(argv) == 0 || argv[0] == "" {
			continue // no exec action, or one Validate refuses
		}
		prog := argv[0]
		if strings.Contains(prog, "/") && !filepath.IsAbs(prog) && d.Dir != "" {
			prog = filepath.Join(d.Dir, prog)
		}
		if _, err := exec.LookPath(prog); err != nil {
			hint := "install it, or give its absolute path"
			if !strings.Contains(argv[0], "/") {
				hint = "install it in a directory of the daemon's PATH, or give its absolute path"
			}
			return fmt.Errorf("job %q: exec program %q: %w (%s, e.g. exec: [\"/usr/local/bin/report\", \"--daily\"])", name, argv[0], err, hint)
		}
	}
	return nil
}
