package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// sink is the recording HTTP server the daemons' http action posts to. It
// records each request's arrival (its clock when the handler is entered)
// with the job id, slot and instance from the JSON body (jobs.Fire), then
// holds the answer for hold, to model an action that takes that long, and
// answers 200.
type sink struct {
	srv  *http.Server
	ln   net.Listener
	hold time.Duration
	// stop ends every held request at once (the run is over).
	stop     chan struct{}
	stopOnce sync.Once

	mu       sync.Mutex
	arrivals []arrival
	bad      int                       // requests whose body did not decode
	perSlot  map[int64]map[string]bool // distinct jobs seen per slot
}

// fireBody is the part of the http action's JSON body the sink reads.
type fireBody struct {
	JobID       string    `json:"job_id"`
	ScheduledAt time.Time `json:"scheduled_at"`
	InstanceID  string    `json:"instance_id"`
}

// startSink listens on a kernel-chosen loopback port.
func startSink(hold time.Duration) (*sink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &sink{ln: ln, hold: hold, stop: make(chan struct{}), perSlot: map[int64]map[string]bool{}}
	s.srv = &http.Server{Handler: http.HandlerFunc(s.handle), ReadHeaderTimeout: 10 * time.Second}
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
	s.arrivals = append(s.arrivals, arrival{job: b.JobID, slot: b.ScheduledAt, instance: b.InstanceID, at: at})
	key := b.ScheduledAt.UnixNano()
	if s.perSlot[key] == nil {
		s.perSlot[key] = map[string]bool{}
	}
	s.perSlot[key][b.JobID] = true
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
