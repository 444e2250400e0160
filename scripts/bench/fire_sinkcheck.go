package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
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
}

// runSinkCheck measures the recording sink alone, without daemons or
// database: n requests with an http action's JSON body are released at one
// instant from c.clients goroutines (like a burst of fires from one
// replica) and the sink's arrival − release is reported as the lateness
// floor of the measurement itself. The sink must take a burst of the
// benchmark's size much faster than the daemons can produce it.
func runSinkCheck(ctx context.Context, c sinkCheckSettings) (sinkCheckResult, error) {
	var res sinkCheckResult
	sk, err := startSink(0, false)
	if err != nil {
		return res, err
	}
	defer sk.close()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if c.pooled {
		tr.MaxIdleConns = c.clients
		tr.MaxIdleConnsPerHost = c.clients
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: c.timeout}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	slot := time.Now().UTC().Truncate(time.Second)
	var (
		next, ok, failed atomic.Int64
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
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, sk.URL(), bytes.NewReader(body))
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
					errOnce.Do(func() { res.firstErr = err.Error() })
					continue
				}
				ok.Add(1)
			}
		})
	}
	release := time.Now()
	close(start)
	wg.Wait()
	res.took = time.Since(release)
	res.sent, res.ok, res.failed = int(min(next.Load(), int64(c.n))), int(ok.Load()), int(failed.Load())
	arrivals, _ := sk.drain()
	late := make([]time.Duration, len(arrivals))
	for i, a := range arrivals {
		late[i] = a.at.Sub(release)
	}
	res.arrival = newSeries("sink arrival − release", late, c.n-len(arrivals))
	res.sinkErrs, res.sinkFirstErr = sk.errs.get()
	return res, ctx.Err()
}

// text describes a sink check.
func (r sinkCheckResult) text(c sinkCheckSettings) string {
	client := "http.DefaultTransport settings (2 idle connections per host, as the daemon's http action)"
	if c.pooled {
		client = fmt.Sprintf("a pool of up to %d idle connections", c.clients)
	}
	var lim syscall.Rlimit
	_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	s := fmt.Sprintf("sink check: %d requests released at once from %d goroutines, client %s; open files limit %d\n",
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
	if r.sinkErrs > 0 {
		s += fmt.Sprintf("    sink server errors: %d (first: %s)\n", r.sinkErrs, r.sinkFirstErr)
	}
	return s
}
