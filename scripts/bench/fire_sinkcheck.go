package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cronswap/cronswap/internal/childproc"
)

// sinkCheckSettings are the settings of "bench fire -sink-check N".
type sinkCheckSettings struct {
	n       int // requests
	clients int // goroutines sending at once
	// pooled uses a transport that keeps up to clients idle connections
	// (reuse); otherwise the transport is http.DefaultTransport's settings,
	// as the daemon's http action uses (http.DefaultClient: 2 idle
	// connections per host, so a burst opens a new connection for nearly
	// every request).
	pooled  bool
	timeout time.Duration
}

// sinkCheckResult is what one sink check measured.
type sinkCheckResult struct {
	sent, ok, failed int
	firstErr         string
	took             time.Duration // release → the last answer
	arrival          series        // sink arrival − release
	sinkErrs         int
	sinkFirstErr     string
	sinkCPU          time.Duration // this process's CPU time during the check (the sink's server side)
}

// runSinkCheck measures the recording sink alone, without daemons or
// database: a separate process (this binary, "fire -sink-send") releases
// c.n requests with an http action's JSON body at one instant from
// c.clients goroutines (like a burst of fires from one replica), and the
// sink's arrival − release is reported as the lateness floor of the
// measurement itself, with the CPU time this process (the sink) spent per
// request. The sink must take a burst of the benchmark's size much faster
// than the daemons can produce it.
func runSinkCheck(ctx context.Context, c sinkCheckSettings) (sinkCheckResult, error) {
	var res sinkCheckResult
	sk, err := startSink(0, false)
	if err != nil {
		return res, err
	}
	defer sk.close()
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	self, err := os.Executable()
	if err != nil {
		return res, err
	}
	// The sender releases its requests at a wall-clock instant, after its
	// goroutines are up, so that its start-up is not in the measurement.
	release := time.Now().Add(time.Second).Round(time.Millisecond)
	args := []string{"fire", "-sink-send", sk.URL(), "-sink-check", strconv.Itoa(c.n), "-sink-clients", strconv.Itoa(c.clients),
		"-sink-release", strconv.FormatInt(release.UnixNano(), 10)}
	if c.pooled {
		args = append(args, "-sink-pooled")
	}
	cmd := exec.CommandContext(ctx, self, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	cpu0 := cpuTime()
	if err := childproc.Start(cmd); err != nil {
		return res, err
	}
	werr := cmd.Wait()
	res.sinkCPU = cpuTime() - cpu0
	var sent sendResult
	if err := json.Unmarshal(out.Bytes(), &sent); err != nil && werr == nil {
		werr = fmt.Errorf("sender output %q: %w", out.String(), err)
	}
	res.sent, res.ok, res.failed, res.firstErr = sent.Sent, sent.OK, sent.Failed, sent.FirstErr
	res.took = time.Duration(sent.TookNS)
	arrivals, _ := sk.drain()
	late := make([]time.Duration, len(arrivals))
	for i, a := range arrivals {
		late[i] = a.at.Sub(release)
	}
	res.arrival = newSeries("sink arrival − release", late, c.n-len(arrivals))
	res.sinkErrs, res.sinkFirstErr = sk.errs.get()
	if werr != nil {
		return res, fmt.Errorf("sender: %w", werr)
	}
	return res, ctx.Err()
}

// sendResult is what the sender process reports (JSON on stdout).
type sendResult struct {
	Sent, OK, Failed int
	FirstErr         string
	TookNS           int64 // release → the last answer
}

// sinkSend is the sender process of the sink check: n requests to url from
// clients goroutines, released at release.
func sinkSend(url string, c sinkCheckSettings, release time.Time) sendResult {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if c.pooled {
		tr.MaxIdleConns = c.clients
		tr.MaxIdleConnsPerHost = c.clients
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: c.timeout}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	slot := release.UTC().Truncate(time.Second)
	var (
		next, ok, failed atomic.Int64
		res              sendResult
		errOnce          sync.Once
		wg               sync.WaitGroup
	)
	start := make(chan struct{})
	for range c.clients {
		wg.Go(func() {
			<-start
			for {
				k := int(next.Add(1)) - 1
				if k >= c.n || ctx.Err() != nil {
					return
				}
				body, _ := json.Marshal(fireBody{JobID: fireJobID(k), ScheduledAt: slot, InstanceID: "sink-check"})
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
				if err == nil {
					req.Header.Set("Content-Type", "application/json")
					var resp *http.Response
					if resp, err = client.Do(req); err == nil {
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if resp.StatusCode != http.StatusOK {
							err = fmt.Errorf("answered %s", resp.Status)
						}
					}
				}
				if err != nil {
					failed.Add(1)
					errOnce.Do(func() { res.FirstErr = err.Error() })
					continue
				}
				ok.Add(1)
			}
		})
	}
	time.Sleep(time.Until(release))
	close(start)
	wg.Wait()
	res.TookNS = int64(time.Since(release))
	res.Sent, res.OK, res.Failed = int(min(next.Load(), int64(c.n))), int(ok.Load()), int(failed.Load())
	return res
}

// cpuTime is this process's user + system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// text describes a sink check.
func (r sinkCheckResult) text(c sinkCheckSettings) string {
	client := "http.DefaultTransport settings (2 idle connections per host, as the daemon's http action)"
	if c.pooled {
		client = fmt.Sprintf("a pool of up to %d idle connections", c.clients)
	}
	var lim syscall.Rlimit
	_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	s := fmt.Sprintf("sink check: %d requests released at once from %d goroutines of a sender process, client %s; open files limit %d\n",
		c.n, c.clients, client, lim.Cur)
	rate := 0.0
	if r.took > 0 {
		rate = float64(r.ok) / r.took.Seconds()
	}
	s += fmt.Sprintf("    answered 200: %d, failed: %d, in %s (%.0f requests/s)\n", r.ok, r.failed, r.took.Round(time.Millisecond), rate)
	if r.firstErr != "" {
		s += fmt.Sprintf("    first client error: %s\n", r.firstErr)
	}
	s += fmt.Sprintf("    arrival at the sink − release: p50 %s, p99 %s, max %s (%d recorded)\n",
		fmtLate(r.arrival.pct(50)), fmtLate(r.arrival.pct(99)), fmtLate(r.arrival.pct(100)), len(r.arrival.ms))
	if r.ok > 0 {
		s += fmt.Sprintf("    sink CPU: %s in all, %.0f µs per request (%.0f requests per CPU-second)\n",
			r.sinkCPU.Round(time.Millisecond), float64(r.sinkCPU.Microseconds())/float64(r.ok), float64(r.ok)/r.sinkCPU.Seconds())
	}
	if r.sinkErrs > 0 {
		s += fmt.Sprintf("    sink server errors: %d (first: %s)\n", r.sinkErrs, r.sinkFirstErr)
	}
	return s
}
