package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cronswap/cronswap/internal/faultproxy"
)

// fireCluster is the R daemon processes of a fire-benchmark point, each
// behind its own counting wire proxy.
type fireCluster struct {
	proxies   []*faultproxy.Proxy
	daemons   []*daemon
	logs      []string
	instances []string
}

// startFireCluster starts replicas daemons on database dbName of the
// server at serverURI (each through a new proxy), their http action posting
// to sinkURL, in environment env (nil: the bench's), logs and configs in
// logDir named with tag. On an error the part already started is returned
// too: the caller stops it.
func startFireCluster(ctx context.Context, o fireSettings, serverURI, dbName, sinkURL string, replicas int, env []string, logDir, tag string) (*fireCluster, error) {
	c := &fireCluster{}
	for i := range replicas {
		upstream, ok := faultproxy.Upstream(serverURI)
		if !ok {
			return c, fmt.Errorf("cannot proxy %q: not a mongodb:// connection string", serverURI)
		}
		px, err := faultproxy.New(ctx, upstream)
		if err != nil {
			return c, err
		}
		c.proxies = append(c.proxies, px)
		id := fmt.Sprintf("bench-fire-%d", i+1)
		c.instances = append(c.instances, id)
		cfg := fireDaemonConfig{uri: px.URI(serverURI), database: dbName, instanceID: id, sinkURL: sinkURL, workers: o.workers, pprof: o.pprof,
			overlap: o.overlap}
		logPath := filepath.Join(logDir, fmt.Sprintf("%s-%s.log", id, tag))
		binary := replicaBinary(o.binary, i)
		if binary != o.binary {
			logf("replica %s runs %s", id, binary)
		}
		d, err := startFireDaemon(binary, cfg, env, logPath)
		if err != nil {
			return c, err
		}
		c.daemons = append(c.daemons, d)
		c.logs = append(c.logs, logPath)
	}
	return c, nil
}

// replicaBinary is the binary replica i (from 0) runs: -binary is one
// binary, or a comma-separated list given to the replicas in turn (two
// builds side by side under the same load).
func replicaBinary(binaries string, i int) string {
	bins := strings.Split(binaries, ",")
	return bins[i%len(bins)]
}

// waitArmed waits until every daemon is ready with n schedules armed.
func (c *fireCluster) waitArmed(ctx context.Context, n int) error {
	for _, d := range c.daemons {
		if _, err := d.waitReady(ctx, readyLimit); err != nil {
			return err
		}
		if err := d.waitArmed(ctx, n, readyLimit); err != nil {
			return err
		}
	}
	return nil
}

// commands sums the proxies' command counters per command name.
func (c *fireCluster) commands() map[string]int {
	sum := map[string]int{}
	for _, px := range c.proxies {
		for name, k := range px.Stats().Commands {
			sum[name] += k
		}
	}
	return sum
}

// exited returns an error naming the first daemon that has exited.
func (c *fireCluster) exited() error {
	for i, d := range c.daemons {
		select {
		case <-d.done:
			return fmt.Errorf("daemon %d exited during the run: %v (log: %s)", i+1, d.exitErr(), c.logs[i])
		default:
		}
	}
	return nil
}

// rss returns each daemon's resident set size in kB (VmRSS of
// /proc/<pid>/status; -1 when it cannot be read).
func (c *fireCluster) rss() []int64 {
	out := make([]int64, len(c.daemons))
	for i, d := range c.daemons {
		out[i] = -1
		if d.cmd.Process != nil {
			out[i] = vmRSS(d.cmd.Process.Pid)
		}
	}
	return out
}

// stop stops the daemons and closes the proxies; it returns the daemons'
// log problems.
func (c *fireCluster) stop() []string {
	stopAll(c.daemons)
	for _, px := range c.proxies {
		_ = px.Close()
	}
	var problems []string
	for _, path := range c.logs {
		problems = append(problems, logProblems(path)...)
	}
	return problems
}

// vmRSS reads the VmRSS line of /proc/<pid>/status, in kB (-1 when absent).
func vmRSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	return parseVMRSS(string(b))
}

// parseVMRSS finds "VmRSS:   12345 kB" in a /proc/<pid>/status text.
func parseVMRSS(status string) int64 {
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) >= 1 {
				if n, err := strconv.ParseInt(f[0], 10, 64); err == nil {
					return n
				}
			}
		}
	}
	return -1
}

// sleepUntil waits until t, returning early with an error when ctx ends
// or a daemon exits; tick runs every 200 ms (and once at the end) when
// not nil.
func (c *fireCluster) sleepUntil(ctx context.Context, t time.Time, tick func()) error {
	for {
		if tick != nil {
			tick()
		}
		if err := c.exited(); err != nil {
			return err
		}
		left := time.Until(t)
		if left <= 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(min(left, 200*time.Millisecond)):
		}
	}
}
