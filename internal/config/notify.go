package config

import (
	"fmt"
	"maps"
	"slices"

	"github.com/cronswap/cronswap/internal/notify"
)

// NotifyRoute returns where the notices of the schedules running action
// go: the action's own notify section when it has one, else the global
// one.
func (c *Config) NotifyRoute(action string) notify.Route {
	if j, ok := c.Jobs[action]; ok && j.Notify != nil {
		return *j.Notify
	}
	return c.Notify.Route
}

// CheckNotifyEnv reports the environment variables named by a configured
// webhook (global or an action's) that lookup does not know.
func (c *Config) CheckNotifyEnv(lookup func(string) (string, bool)) error {
	if err := c.Notify.CheckEnv(lookup); err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	for _, name := range slices.Sorted(maps.Keys(c.Jobs)) {
		if n := c.Jobs[name].Notify; n != nil {
			if err := n.CheckEnv(lookup); err != nil {
				return fmt.Errorf("jobs.%s.notify: %w", name, err)
			}
		}
	}
	return nil
}
