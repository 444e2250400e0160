package config

import (
	"fmt"
	"maps"
	"net/url"
	"slices"

	"github.com/cronswap/cronswap/internal/actions"
	"github.com/cronswap/cronswap/internal/firepath"
)

// checkAction applies the rules of an action definition that depend on
// the rest of the configuration, or on the rules this package owns: an
// exec action's kill_grace fits the lease (at most a third of lock.ttl, so
// a run stopped kill_grace before its local lease deadline still has two
// renewals' worth of lease), and insecure_skip_verify only to a loopback
// host (IsLoopback).
func (c *Config) checkAction(d actions.Definition) error {
	ttl := c.Lock.TTL
	if ttl == 0 {
		ttl = firepath.DefaultLockTTL
	}
	if g := d.KillGrace; g > ttl/3 {
		return fmt.Errorf("kill_grace %s: at most a third of lock.ttl (%s, so at most %s): the run is stopped kill_grace before its lease runs out, which the renewals every ttl/3 must outlast",
			g, ttl, ttl/3)
	}
	if d.HTTP != nil && d.HTTP.TLS != nil && d.HTTP.TLS.InsecureSkipVerify {
		u, err := url.Parse(d.HTTP.URL)
		if err != nil || !IsLoopback(u.Hostname()) {
			host := ""
			if u != nil {
				host = u.Hostname()
			}
			return fmt.Errorf("http.tls.insecure_skip_verify: only to a loopback host (localhost, 127.0.0.0/8, ::1), and the url's host is %q: give http.tls.ca_file (the CA that signed the server's certificate) instead", host)
		}
	}
	return nil
}

// NotifyEnvRefs returns the environment variables the configured webhooks
// name (global and the actions' own routes), sorted: secrets the daemon
// holds, which it redacts from what runs capture and which no exec action
// inherits (actions.Host.SecretEnv).
func (c *Config) NotifyEnvRefs() []string {
	names := c.Notify.EnvRefs()
	for _, name := range slices.Sorted(maps.Keys(c.Jobs)) {
		if n := c.Jobs[name].Notify; n != nil {
			names = append(names, n.EnvRefs()...)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}
