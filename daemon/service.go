package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.opentelemetry.io/otel/trace"

	"github.com/cronswap/cronswap/changestream"
	"github.com/cronswap/cronswap/internal/actions"
	"github.com/cronswap/cronswap/internal/firepath"
	"github.com/cronswap/cronswap/internal/httpapi"
	"github.com/cronswap/cronswap/internal/members"
	"github.com/cronswap/cronswap/internal/metrics"
	"github.com/cronswap/cronswap/internal/notify"
	"github.com/cronswap/cronswap/internal/runstore"
	"github.com/cronswap/cronswap/internal/tracecontext"
	"github.com/cronswap/cronswap/scheduler"
)

// Service is one cronswap instance running inside a Go program: the
// watchers of the schedules, blackouts and triggers collections, the
// engine, the exactly-once fire path, the membership, the edit history and
// the notification relay, on the program's own database. Create it with
// New, register handlers with Handle, then call Run.
type Service struct {
	opts Options
	db   *mongo.Database
	log  *slog.Logger

	// mu guards started: Handle may not race Run.
	mu      sync.Mutex
	started bool

	registry *actions.Registry
	members  *members.Membership
	metrics  *metrics.Metrics
	store    *runstore.Store
	runner   *firepath.Runner
	engine   *scheduler.Engine
	// policy is the engine's policy: the registry's actions and the
	// calendars; a recovered version is checked with it (recover.go).
	policy    scheduler.Policy
	gates     *handOverGates // the engine's fires of jobs being handed over wait for it (divide.go)
	watcher   *changestream.Watcher
	history   *editHistory
	blackouts *blackoutWatch // blackouts.go
	calendars *calendarWatch // calendars.go
	triggers  *triggerWatch  // triggers.go
	relay     *notify.Relay  // nil when no webhook is configured
	// events feeds /api/events: the watcher's applied changes and this
	// replica's run starts and ends.
	events *httpapi.Broker
	http   http.Handler
	// decided holds what the store said was decided per job before the
	// engine began firing (see planDecided and readDecided).
	decided decidedAtStart
	// decidedSlice is how many jobs one read of the decided slots asks
	// for (decidedReadSlice; tests make it smaller).
	decidedSlice int

	// tracer is Options.TracerProvider's (nil: tracing off); edits traces
	// the watcher's changes and what each armed (nil: off).
	tracer trace.Tracer
	edits  *editSpans

	// arrivals are the jobs a full reload after the first put in force
	// (arrival.go).
	arrivals arrivals

	armedAt    atomic.Int64  // unix nanoseconds of the engine's last Applied hook (see watchHooks)
	synced     chan struct{} // closed by the watcher's first full sync
	syncedOnce sync.Once
	firing     chan struct{} // closed once the engine fires (startEngine); see Firing
	away       chan struct{} // closed when joining the members first fails to reach the database
	awayOnce   sync.Once
}

// New builds a service on db, the database holding the schedules and the
// collections cronswap keeps beside them. It checks opts, creates the
// parts in the order they depend on each other, and starts nothing: no
// goroutine runs and nothing is read until Run.
func New(db *mongo.Database, opts Options) (*Service, error) {
	if db == nil {
		return nil, errors.New("daemon: New needs a database")
	}
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("daemon options: %w", err)
	}
	s := newService(db, opts.withDefaults())
	s.tracer = tracecontext.TracerOf(s.opts.TracerProvider)
	s.edits = newEditSpans(s.tracer)
	var err error
	if s.metrics, err = newMetrics(s.opts.Registerer); err != nil {
		return nil, err
	}
	s.members = s.newMembers()
	s.blackouts = newBlackoutWatch(db, s.opts, s.log)
	s.calendars = newCalendarWatch(db, s.opts, s.log)
	s.store = s.newStore() // its OnNotice wakes the relay built next
	s.relay = s.newRelay()
	requests := s.newRequests()
	s.runner = s.newRunner(requests)
	s.triggers = newTriggerWatch(s, requests)
	s.policy = s.calendars.policy(s.registry)
	s.engine = s.newEngine()
	s.calendars.recheck = s.engine.Recheck
	s.history = s.newHistory()
	s.watcher = s.newWatcher()
	if err := s.registerGauges(); err != nil {
		return nil, err
	}
	s.metrics.Preset(knownLabels(s.opts))
	if s.http, err = s.newHTTPHandler(); err != nil {
		return nil, err
	}
	return s, nil
}

// HTTPHandler serves the instance's HTTP surface: /api (the status API and
// its OpenAPI document), /ui (the status page), /metrics, /healthz and
// /readyz, and /debug/pprof/ with Options.Pprof. Nothing listens unless the
// program serves it, on its own server or mux (mux.Handle("/", h), or one
// mux.Handle per path prefix). Options.HTTPToken and HTTPTokensFile
// protect every path but the health checks; with Options.PageDatabase an
// operator's token may act from the status page.
func (s *Service) HTTPHandler() http.Handler { return s.http }

// Firing returns a channel that is closed once the service fires its
// schedules: it has joined the members, armed every schedule (from
// Options.StateFile or its first full read of the collection), read the
// blackout windows and calendars, and started its timers. /readyz
// answers 200 at about the same moment, a little before or after (it
// follows the schedules' change feed: the first full read done and the
// feed followed), and 503 again while the feed is down. The start's bulk
// work — the full read, arming a large collection — is done by then; what
// follows (the first sightings of the edit history, the catch-up) runs in
// the background. The channel is never closed when Run returns first.
func (s *Service) Firing() <-chan struct{} { return s.firing }

// Run runs the instance until ctx ends or a part fails, then shuts down in
// order: no new fires; running handlers get Options.ShutdownGrace, then
// their contexts end; the resume token is saved; the instance leaves the
// members collection. Before it reads or fires anything it joins the
// members: a second live process with this InstanceID is refused, and an
// instance whose membership another process takes over stops. It returns
// the failure that ended it, nil once ctx ended. Run may be called once;
// the database client stays the caller's to disconnect after it returns.
func (s *Service) Run(ctx context.Context) error {
	s.mu.Lock()
	started := s.started
	s.started = true
	s.mu.Unlock()
	if started {
		return errors.New("daemon: Run called twice")
	}
	stopBackground := s.startBackground()
	s.logStarted()
	p := s.startParts()
	err := s.shutdown(p, p.wait(ctx))
	// The edit history's queued entries and first sightings are written
	// last (for at most historyFlushTimeout): "stopped" says all is done.
	stopBackground()
	s.log.Info("stopped")
	return err
}
