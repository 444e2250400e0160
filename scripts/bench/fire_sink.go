package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// sink is the recording HTTP server the daemons' http action posts to. It
// records each request's arrival (its clock when the handler is entered)
// with the job id, slot and instance from the JSON body (jobs.Run), then
// holds the answer for hold, to model an action that takes that long, and
// answers 200.
type sink struct {
	srv  *http.Server
	ln   net.Listener
	hold time.Duration
	// stop ends every held request at once (the run is over).
	stop     chan struct{}
	stopOnce sync.Once
	// errs counts the server's own error records (accept errors such as
	// "too many open files", broken connections): a sink that cannot keep
	// up shows here.
	errs errCounter

	mu       sync.Mutex
	arrivals []arrival
	bad      int // requests whose body did not decode
	// perSlot holds the distinct jobs seen per slot (bursts); nil in the
	// sustained mode, which drains the arrivals instead.
	perSlot map[int64]map[string]bool
}

// fireBody is the part of the http action's JSON body the sink reads.
type fireBody struct {
	JobID       string    `json:"job_id"`
	ScheduledAt time.Time `json:"scheduled_at"`
	RunID       string    `json:"run_id"`
	InstanceID  string    `json:"instance_id"`
}

// startSink listens on a kernel-chosen loopback port. perSlot keeps the
// distinct jobs per slot (for distinct); without it the arrivals are only
// appended, for drain.
func startSink(hold time.Duration, perSlot bool) (*sink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &sink{ln: ln, hold: hold, stop: make(chan struct{})}
	if perSlot {
		s.perSlot = map[int64]map[string]bool{}
	}
	// Keep-alive connections stay open as long as the client keeps them
	// (the daemon's client decides how many it reuses); a burst of new
	// connections is accepted as fast as the accept loop runs (the listen
	// backlog is the kernel's somaxconn).
	s.srv = &http.Server{Handler: http.HandlerFunc(s.handle), ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout: 2 * time.Minute, ErrorLog: log.New(&s.errs, "", 0)}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// URL is what the daemons' http action posts to.
func (s *sink) URL() string { return "http://" + s.ln.Addr().String() + "/fire" }

func (s *sink) handle(w http.ResponseWriter, r *http.Request) {
	at := time.Now()
	var b fireBody
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err == nil {
		err = json.Unmarshal(body, &b)
	}
	if err == nil && b.JobID == "" {
		err = errors.New("no job_id")
	}
	s.mu.Lock()
	if err != nil {
		s.bad++
		s.mu.Unlock()
		http.Error(w, fmt.Sprintf("bench sink: %v", err), http.StatusBadRequest)
		return
	}
	s.arrivals = append(s.arrivals, arrival{job: b.JobID, slot: b.ScheduledAt, runID: b.RunID, instance: b.InstanceID, at: at})
	if s.perSlot != nil {
		key := b.ScheduledAt.UnixNano()
		if s.perSlot[key] == nil {
			s.perSlot[key] = map[string]bool{}
		}
		s.perSlot[key][b.JobID] = true
	}
	s.mu.Unlock()
	if s.hold > 0 {
		t := time.NewTimer(s.hold)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return
		case <-s.stop:
		}
	}
	w.WriteHeader(http.StatusOK)
}

// distinct returns how many different jobs arrived for slot.
func (s *sink) distinct(slot time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.perSlot[slot.UnixNano()])
}

// snapshot returns a copy of the arrivals so far and the count of bodies
// that did not decode.
func (s *sink) snapshot() ([]arrival, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]arrival(nil), s.arrivals...), s.bad
}

// drain returns the arrivals since the last drain and forgets them, and
// the count of bodies that did not decode so far.
func (s *sink) drain() ([]arrival, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.arrivals
	s.arrivals = nil
	return out, s.bad
}

// release answers every held request now.
func (s *sink) release() { s.stopOnce.Do(func() { close(s.stop) }) }

// close releases held requests and shuts the server down.
func (s *sink) close() {
	s.release()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		_ = s.srv.Close()
	}
}

// errCounter is an io.Writer for the server's ErrorLog: it counts the
// records and keeps the first one.
type errCounter struct {
	mu    sync.Mutex
	n     int
	first string
}

func (e *errCounter) Write(p []byte) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.n == 0 {
		e.first = strings.TrimSpace(string(p))
	}
	e.n++
	return len(p), nil
}

// get returns the count and the first record.
func (e *errCounter) get() (int, string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n, e.first
}
