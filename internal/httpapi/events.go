package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// Event names of /api/events.
const (
	// EventHello is sent once on connect: {"instance_id": ...}.
	EventHello = "hello"
	// EventSchedule: the engine applied a change of job id (armed,
	// re-armed, rejected, removed); id "" means every job (a full reload
	// that changed many).
	EventSchedule = "schedule"
	// EventRun: this replica started or ended a run of job id.
	EventRun = "run"
)

// Defaults of BrokerOptions.
const (
	DefaultEventBuffer = 64
	DefaultPing        = 15 * time.Second
)

// Event is one server-sent event.
type Event struct {
	// Name is the event field (EventSchedule, EventRun).
	Name string
	// Data is encoded as the JSON data line.
	Data any
}

// ScheduleData is the data of an EventSchedule.
type ScheduleData struct {
	ID string `json:"id"`
}

// RunData is the data of an EventRun; Status is "running" at the start,
// the run's status at its end.
type RunData struct {
	ID     string `json:"id"`
	Status string `json:"status"`
}

// BrokerOptions configures a Broker; zero fields take the defaults.
type BrokerOptions struct {
	// Buffer is how many events wait per client before it is dropped.
	Buffer int
	// Ping is the interval of the ": ping" comment lines.
	Ping time.Duration
}

// Broker fans events out to the clients of /api/events. Publish never
// blocks: a client whose buffer is full is dropped (its stream ends, and
// an EventSource reconnects). Safe for concurrent use; the zero value is
// not usable, use NewBroker.
type Broker struct {
	opts    BrokerOptions
	mu      sync.Mutex
	clients map[chan Event]struct{}
	closed  bool
}

// NewBroker returns a broker with no clients.
func NewBroker(o BrokerOptions) *Broker {
	if o.Buffer <= 0 {
		o.Buffer = DefaultEventBuffer
	}
	if o.Ping <= 0 {
		o.Ping = DefaultPing
	}
	return &Broker{opts: o, clients: map[chan Event]struct{}{}}
}

// Publish sends ev to every client without waiting; a client that cannot
// take it is dropped.
func (b *Broker) Publish(ev Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for c := range b.clients {
		select {
		case c <- ev:
		default:
			delete(b.clients, c)
			close(c)
		}
	}
}

// ScheduleChanged publishes an EventSchedule for job id.
func (b *Broker) ScheduleChanged(id string) {
	b.Publish(Event{Name: EventSchedule, Data: ScheduleData{ID: id}})
}

// RunChanged publishes an EventRun for job id.
func (b *Broker) RunChanged(id, status string) {
	b.Publish(Event{Name: EventRun, Data: RunData{ID: id, Status: status}})
}

// Clients returns how many clients are connected.
func (b *Broker) Clients() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.clients)
}

// Subscribe adds a client: it receives the events published from now on
// until cancel is called or it falls Buffer events behind (then the
// channel is closed).
func (b *Broker) Subscribe() (events <-chan Event, cancel func()) {
	c := make(chan Event, b.opts.Buffer)
	b.mu.Lock()
	if b.closed {
		close(c)
	} else {
		b.clients[c] = struct{}{}
	}
	b.mu.Unlock()
	return c, func() { b.unsubscribe(c) }
}

// Close ends every client's stream and those of clients that subscribe
// later (the HTTP server's shutdown would otherwise wait for them).
func (b *Broker) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	for c := range b.clients {
		delete(b.clients, c)
		close(c)
	}
}

func (b *Broker) unsubscribe(c chan Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.clients[c]; ok {
		delete(b.clients, c)
		close(c)
	}
}

// serve streams the events to one client until it goes away or is
// dropped.
func (b *Broker) serve(w http.ResponseWriter, r *http.Request, instanceID string) {
	fl, ok := w.(http.Flusher)
	if !ok {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "streaming unsupported"})
		return
	}
	c, cancel := b.Subscribe()
	defer cancel()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if writeEvent(w, Event{Name: EventHello, Data: map[string]string{"instance_id": instanceID}}) != nil {
		return
	}
	fl.Flush()
	ping := time.NewTicker(b.opts.Ping)
	defer ping.Stop()
	for {
		var err error
		select {
		case <-r.Context().Done():
			return
		case ev, open := <-c:
			if !open {
				return // dropped: too slow
			}
			err = writeEvent(w, ev)
		case <-ping.C:
			_, err = fmt.Fprint(w, ": ping\n\n")
		}
		if err != nil {
			return
		}
		fl.Flush()
	}
}

func writeEvent(w http.ResponseWriter, ev Event) error {
	data, err := json.Marshal(ev.Data)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev.Name, data)
	return err
}
