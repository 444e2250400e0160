package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
	// stateFile, when set, is the config's state_file (warm restarts).
	stateFile string
	// pprof serves /debug/pprof/ (the scale bench collects garbage
	// through it before reading the live heap).
	pprof bool
	// divide sets divide_schedules (bench divide).
	divide bool
	// resyncInterval is the config's watch.resync_interval (0: none, as
	// the benches measure a replica between full reads).
	resyncInterval time.Duration
	// extra is appended to the config (top-level keys).
	extra string
	// ledger, when set, adds the action "ledger", which appends
	// "job slot instance" to this file (bench divide's kill/join phase).
	ledger string
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
	Read       int64     `json:"read"`     // full reload / warm start split, nanoseconds
	Apply      int64     `json:"apply"`
	Decode     int64     `json:"decode"`
	Engine     int64     `json:"engine"`
	HTTPListen string    `json:"http_listen"`
	Error      string    `json:"error"`
	// Collection names the watcher of a watcher's line (schedules,
	// blackouts, triggers); empty on other lines.
	Collection string `json:"collection"`
}

// schedulesWatcher reports whether a watcher's line is the schedules
// watcher's (the one the bench measures), not the blackouts' or the
// triggers' watcher's.
func (r logRecord) schedulesWatcher() bool { return r.Collection == "" || r.Collection == "schedules" }

// Log messages the bench keys on (scheduler/scheduler.go, changestream/watcher.go, daemon/).
const (
	// msgSinkReplaced is the daemon's sink (internal/schedulesink/sink.go)
	// logging the decode/engine split of a full reload or warm start,
	// just before the watcher's record of it.
	msgSinkReplaced = "schedules replaced"
	msgStarted      = "cronswap started"
	msgApplied      = "scheduler: schedule applied"
	msgFullReload   = "full reload"
	// msgArmedFromFile is the warm start (changestream/watcher.go warmStart).
	msgArmedFromFile = "armed from state file"
	// msgSightingsRecorded is logged once a full read's first sightings
	// are written: at a first start, every job's
	// (internal/history/sightings.go).
	msgSightingsRecorded = "first sightings recorded from a full read"
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
	warm     []logRecord // "armed from state file" records
	notes    []string    // records about the state file or the stored resume token
	problems []string    // warn and error records
	split    *logRecord  // the sink's latest decode/engine split, not yet matched to a reload
	sighted  time.Time   // the bench's clock at the first "first sightings recorded" record
	// lastSighted is the bench's clock at the latest such record (one a
	// full read that wrote sightings).
	lastSighted time.Time
}

// withSplit fills in rec's decode/engine split from the sink's record that
// preceded it, when rec carries none itself. The caller holds d.mu.
func (d *daemon) withSplit(rec logRecord) logRecord {
	if d.split != nil && rec.Decode == 0 && rec.Engine == 0 {
		rec.Decode, rec.Engine = d.split.Decode, d.split.Engine
	}
	d.split = nil
	return rec
}

// config returns the daemon's YAML configuration.
func (s daemonSpec) config() string {
	cfg := fmt.Sprintf(`mongo:
  uri: %q
  database: %q
instance_id: %q
http:
  listen: 127.0.0.1:0
  pprof: %t
watch:
  mode: %s
  poll_interval: %s
  resync_interval: %s
shutdown:
  grace: 5s
jobs:
  noop:
    exec: ["true"]
`, s.uri, s.database, s.instanceID, s.pprof, s.mode, s.pollInterval, s.resyncInterval)
	if s.ledger != "" {
		line := `printf '%s %s %s\n' "$CRONSWAP_JOB_ID" "$CRONSWAP_SCHEDULED_AT" "$CRONSWAP_INSTANCE_ID" >> ` + s.ledger
		cfg += fmt.Sprintf("  ledger:\n    exec: [\"sh\", \"-c\", %q]\n    timeout: 20s\n    overlap: allow\n", line)
	}
	if s.stateFile != "" {
		cfg += fmt.Sprintf("state_file: %q\n", s.stateFile)
	}
	if s.divide {
		cfg += "divide_schedules: true\n"
	}
	return cfg + s.extra
}

// startDaemon writes a config, starts the binary and returns once its HTTP
// listener is known (not yet ready).
func startDaemon(ctx context.Context, s daemonSpec) (*daemon, error) {
	cfg := s.config()
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
				case rec.Msg == msgSinkReplaced:
					d.mu.Lock()
					d.split = &rec
					d.mu.Unlock()
				case rec.Msg == msgFullReload && rec.schedulesWatcher():
					d.mu.Lock()
					d.reloads = append(d.reloads, d.withSplit(rec))
					d.mu.Unlock()
				case rec.Msg == msgArmedFromFile && rec.schedulesWatcher():
					d.mu.Lock()
					d.warm = append(d.warm, d.withSplit(rec))
					d.mu.Unlock()
				case rec.Msg == msgSightingsRecorded:
					d.mu.Lock()
					if d.sighted.IsZero() {
						d.sighted = recv
					}
					d.lastSighted = recv
					d.mu.Unlock()
				case isStateNote(rec.Msg):
					d.mu.Lock()
					d.notes = append(d.notes, rec.Msg)
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
	return d.firstRecord(ctx, limit, msgFullReload, func() []logRecord { return d.reloads })
}

// armedFromFile returns the first "armed from state file" record, waiting
// up to limit for it.
func (d *daemon) armedFromFile(ctx context.Context, limit time.Duration) (logRecord, error) {
	return d.firstRecord(ctx, limit, msgArmedFromFile, func() []logRecord { return d.warm })
}

// resyncReason is the reason a periodic full read logs
// (changestream.ReasonResync).
const resyncReason = "resync"

// reloadsFor waits up to limit for k "full reload" records of reason and
// returns those seen (fewer, with an error, when the limit passed first).
func (d *daemon) reloadsFor(ctx context.Context, limit time.Duration, reason string, k int) ([]logRecord, error) {
	deadline := time.Now().Add(limit)
	for {
		var got []logRecord
		d.mu.Lock()
		for _, r := range d.reloads {
			if r.Reason == reason {
				got = append(got, r)
			}
		}
		d.mu.Unlock()
		if len(got) >= k {
			return got[:k], nil
		}
		if time.Now().After(deadline) {
			return got, fmt.Errorf("%d of %d %q full reloads within %s", len(got), k, reason, limit)
		}
		select {
		case <-ctx.Done():
			return got, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// firstRecord waits up to limit for list (read under d.mu) to hold a record.
func (d *daemon) firstRecord(ctx context.Context, limit time.Duration, msg string, list func() []logRecord) (logRecord, error) {
	deadline := time.Now().Add(limit)
	for {
		d.mu.Lock()
		if l := list(); len(l) > 0 {
			rec := l[0]
			d.mu.Unlock()
			return rec, nil
		}
		d.mu.Unlock()
		if time.Now().After(deadline) {
			return logRecord{}, fmt.Errorf("no %q log record within %s", msg, limit)
		}
		select {
		case <-ctx.Done():
			return logRecord{}, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Reloads returns the "full reload" records seen so far.
func (d *daemon) Reloads() []logRecord {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]logRecord(nil), d.reloads...)
}

// Notes returns the messages of records about the state file or the stored
// resume token seen so far (they say why a start was warm or not).
func (d *daemon) Notes() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.notes...)
}

// isStateNote reports whether msg is a watcher record about the state file
// or the stored resume token, other than the warm start itself.
func isStateNote(msg string) bool {
	return msg != msgArmedFromFile &&
		(strings.Contains(msg, "state file") || strings.Contains(msg, "resume token") || strings.Contains(msg, "from stored token"))
}

// Problems returns the warn and error records seen so far.
func (d *daemon) Problems() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.problems...)
}

// get fetches path from the daemon's HTTP listener.
func (d *daemon) get(ctx context.Context, path string) ([]byte, error) {
	return d.getWithin(ctx, path, 10*time.Second)
}

// getWithin is get with a timeout of its own.
func (d *daemon) getWithin(ctx context.Context, path string, timeout time.Duration) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.addr+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := (&http.Client{Timeout: timeout}).Do(req)
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
	_, _ = d.shutdown(30 * time.Second)
}

// shutdown sends SIGTERM, as a service manager would, and waits up to limit
// for the process to exit, then kills it. It returns how long the exit took
// after the signal, and an error unless the process exited by itself with
// status 0 (the clean shutdown that flushes the token and the state file).
func (d *daemon) shutdown(limit time.Duration) (time.Duration, error) {
	select {
	case <-d.done:
		return 0, fmt.Errorf("daemon had already exited: %v", d.exitErr())
	default:
	}
	start := time.Now()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return 0, fmt.Errorf("SIGTERM: %w", err)
	}
	select {
	case <-d.done:
	case <-time.After(limit):
		_ = d.cmd.Process.Kill()
		<-d.done
		return time.Since(start), fmt.Errorf("daemon did not exit within %s of SIGTERM; killed", limit)
	}
	took := time.Since(start)
	if err := d.exitErr(); err != nil {
		return took, fmt.Errorf("daemon exited with %w after SIGTERM", err)
	}
	return took, nil
}
