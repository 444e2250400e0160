package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/cronswap/cronswap/internal/testmongo"
)

// buildDaemon builds the cronswap binary (without -race: this is a benchmark).
func buildDaemon(ctx context.Context, out string) error {
	root, err := testmongo.RepoRoot()
	if err != nil {
		return err
	}
	logf("building %s", out)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, ".")
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build: %w", err)
	}
	return nil
}

// daemonSpec is what one daemon run varies.
type daemonSpec struct {
	binary       string
	uri          string
	database     string
	instanceID   string
	mode         string
	pollInterval time.Duration
	logPath      string
	// onRecord sees every log record with the time the bench read it.
	onRecord func(rec logRecord, recv time.Time)
}

// logRecord is the part of the daemon's JSON log records the bench reads.
type logRecord struct {
	Time       time.Time `json:"time"`
	Level      string    `json:"level"`
	Msg        string    `json:"msg"`
	JobID      string    `json:"job_id"`
	CronExpr   string    `json:"cron_expr"`
	Outcome    string    `json:"outcome"`
	Reason     string    `json:"reason"`
	Documents  int       `json:"documents"`
	Changed    int       `json:"changed"`
	ChangedIDs []string  `json:"changed_ids"`
	Duration   int64     `json:"duration"` // slog writes durations as nanoseconds
	HTTPListen string    `json:"http_listen"`
	Error      string    `json:"error"`
}

// Log messages the bench keys on (scheduler/scheduler.go, changestream/watcher.go, internal/daemon).
const (
	msgStarted    = "cronswap started"
	msgApplied    = "scheduler: schedule applied"
	msgFullReload = "full reload"
)

// daemon is one running cronswap process.
type daemon struct {
	cmd     *exec.Cmd
	started time.Time
	addr    string
	done    chan struct{}

	mu       sync.Mutex
	waitErr  error
	reloads  []logRecord // "full reload" records (poll diffs that changed nothing are not logged)
	problems []string    // warn and error records
}

// startDaemon writes a config, starts the binary and returns once its HTTP
// listener is known (not yet ready).
func startDaemon(ctx context.Context, s daemonSpec) (*daemon, error) {
	cfg := fmt.Sprintf(`mongo:
  uri: %q
  database: %q
instance_id: %q
http:
  listen: 127.0.0.1:0
watch:
  mode: %s
  poll_interval: %s
  resync_interval: 0s
shutdown:
  grace: 5s
jobs:
  noop:
    exec: ["true"]
`, s.uri, s.database, s.instanceID, s.mode, s.pollInterval)
	cfgPath := filepath.Join(filepath.Dir(s.logPath), s.instanceID+".yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	logFile, err := os.Create(s.logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(s.binary, "run", "--config", cfgPath, "--log-format", "json", "--log-level", "info")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		logFile.Close()
		return nil, err
	}
	cmd.Stdout = logFile
	d := &daemon{cmd: cmd, done: make(chan struct{})}
	addrCh := make(chan string, 1)
	d.started = time.Now()
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", s.binary, err)
	}
	go func() {
		d.readLog(stderr, logFile, addrCh, s.onRecord)
		err := cmd.Wait()
		logFile.Close()
		d.mu.Lock()
		d.waitErr = err
		d.mu.Unlock()
		close(d.done)
	}()

	select {
	case d.addr = <-addrCh:
		return d, nil
	case <-d.done:
		return nil, fmt.Errorf("daemon %s exited before listening (%v); log: %s", s.instanceID, d.exitErr(), s.logPath)
	case <-ctx.Done():
		d.stop()
		return nil, ctx.Err()
	}
}

func (d *daemon) readLog(r io.Reader, copyTo io.Writer, addrCh chan<- string, onRecord func(logRecord, time.Time)) {
	br := bufio.NewReaderSize(r, 1<<20)
	sentAddr := false
	for {
		line, err := br.ReadBytes('\n')
		recv := time.Now()
		if len(line) > 0 {
			_, _ = copyTo.Write(line)
			var rec logRecord
			if json.Unmarshal(line, &rec) == nil {
				switch {
				case rec.Msg == msgStarted && !sentAddr:
					addrCh <- rec.HTTPListen
					sentAddr = true
				case rec.Msg == msgFullReload:
					d.mu.Lock()
					d.reloads = append(d.reloads, rec)
					d.mu.Unlock()
				}
				if rec.Level == "WARN" || rec.Level == "ERROR" {
					d.mu.Lock()
					d.problems = append(d.problems, fmt.Sprintf("%s %s %s", rec.Level, rec.Msg, rec.Error))
					d.mu.Unlock()
				}
				if onRecord != nil {
					onRecord(rec, recv)
				}
			}
		}
		if err != nil {
			return
		}
	}
}

func (d *daemon) exitErr() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.waitErr
}

// waitReady polls /readyz every 2 ms and returns the time from process start
// to the first 200.
func (d *daemon) waitReady(ctx context.Context, limit time.Duration) (time.Duration, error) {
	deadline := time.Now().Add(limit)
	client := &http.Client{Timeout: 2 * time.Second}
	url := "http://" + d.addr + "/readyz"
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return 0, err
		}
		resp, err := client.Do(req)
		now := time.Now()
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return now.Sub(d.started), nil
			}
		}
		select {
		case <-d.done:
			return 0, fmt.Errorf("daemon exited before ready: %v", d.exitErr())
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
		if now.After(deadline) {
			return 0, fmt.Errorf("daemon not ready within %s", limit)
		}
	}
}

// initialReload returns the first "full reload" record (the start-up load),
// waiting up to limit for it.
func (d *daemon) initialReload(ctx context.Context, limit time.Duration) (logRecord, error) {
	deadline := time.Now().Add(limit)
	for {
		d.mu.Lock()
		if len(d.reloads) > 0 {
			rec := d.reloads[0]
			d.mu.Unlock()
			return rec, nil
		}
		d.mu.Unlock()
		if time.Now().After(deadline) {
			return logRecord{}, errors.New("no \"full reload\" log record")
		}
		select {
		case <-ctx.Done():
			return logRecord{}, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Problems returns the warn and error records seen so far.
func (d *daemon) Problems() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.problems...)
}

// get fetches path from the daemon's HTTP listener.
func (d *daemon) get(ctx context.Context, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.addr+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return io.ReadAll(resp.Body)
}

// stop sends SIGTERM and waits up to 30 s, then kills.
func (d *daemon) stop() {
	if d == nil {
		return
	}
	select {
	case <-d.done:
		return
	default:
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.done
	}
}
