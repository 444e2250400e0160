// Package daemon builds a running cronswap instance from its configuration:
// the MongoDB client, the membership, the metrics, the fire path (runner),
// the engine, the change-stream watcher and the HTTP listener. New creates every part in
// dependency order, so no part refers to one that does not exist yet; Run
// starts them and, when its context ends, shuts them down in order.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/changestream"
	"github.com/cronswap/cronswap/internal/actions"
	"github.com/cronswap/cronswap/internal/config"
	"github.com/cronswap/cronswap/internal/firepath"
	"github.com/cronswap/cronswap/internal/history"
	"github.com/cronswap/cronswap/internal/httpapi"
	"github.com/cronswap/cronswap/internal/members"
	"github.com/cronswap/cronswap/internal/metrics"
	"github.com/cronswap/cronswap/internal/notify"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/internal/runstore"
	"github.com/cronswap/cronswap/internal/timeline"
	"github.com/cronswap/cronswap/internal/triggers"
	"github.com/cronswap/cronswap/resumetoken"
	"github.com/cronswap/cronswap/schedule"
	"github.com/cronswap/cronswap/scheduler"
)

// Connect returns a client for the configured server. It does not wait for
// the server: operations retry until it is reachable.
func Connect(cfg config.Config) (*mongo.Client, error) {
	client, err := mongo.Connect(ClientOptions(cfg))
	if err != nil {
		return nil, clientError(cfg.Mongo.URI, err)
	}
	return client, nil
}

// Daemon is one cronswap instance, built by New. Its parts are fixed once
// New returns; Run runs them until its context ends.
type Daemon struct {
	cfg config.Config
	log *slog.Logger

	client   *mongo.Client
	listener net.Listener
	members  *members.Membership
	metrics  *metrics.Metrics
	registry *actions.Registry
	runner   *firepath.Runner
	engine   *scheduler.Engine
	watcher  *changestream.Watcher
	history  *editHistory
	server   *http.Server
	// blackouts holds the blackout windows (blackouts.go).
	blackouts *blackoutWatch
	// triggers runs the requests of the triggers collection (triggers.go).
	triggers *triggerWatch

	armedAt    atomic.Int64  // unix nanoseconds of the engine's last Applied hook (see watchHooks)
	synced     chan struct{} // closed by the watcher's first full sync
	syncedOnce sync.Once
	away       chan struct{} // closed when joining the members first fails to reach the database
	awayOnce   sync.Once
	closeOnce  sync.Once

	// store is the fire path's store; decided holds what it said was
	// decided per job just before the engine started (see readDecided).
	store   *runstore.Store
	decided decidedAtStart
	// relay delivers failure notifications; nil when none is configured.
	relay *notify.Relay
	// events feeds /api/events: the watcher's applied changes and this
	// replica's run starts and ends.
	events *httpapi.Broker
	// httpToken is httpapi.EnvToken as read by New ("" when unset).
	httpToken string
}

// New builds a daemon from cfg (already Finished): it checks the action
// definitions against this machine (actions.Start: programs, variables,
// secret and TLS files), creates the client (without waiting for the
// server) and listens on the HTTP address, then creates the parts in the
// order they depend on each other. Nothing runs until Run. On error nothing is left
// open.
func New(cfg config.Config, log *slog.Logger) (*Daemon, error) {
	// Only the daemon runs the actions, so only it requires their
	// programs, variables and files to be there.
	registry, err := actions.Start(cfg.Jobs, actionHost(cfg))
	if err != nil {
		return nil, err
	}
	client, err := Connect(cfg)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.HTTP.Listen)
	if err != nil {
		disconnect(client)
		return nil, fmt.Errorf("http listen %s: %w", cfg.HTTP.Listen, err)
	}
	d := &Daemon{cfg: cfg, log: log.With("instance_id", cfg.InstanceID), client: client, listener: ln, registry: registry,
		synced: make(chan struct{}), away: make(chan struct{}), events: httpapi.NewBroker(httpapi.BrokerOptions{}),
		httpToken: os.Getenv(httpapi.EnvToken)}
	db := client.Database(cfg.Mongo.Database)

	// The listener's address goes into the members document: the command
	// line asks a live daemon what its engine holds (schedules list/get).
	d.members = members.New(db, members.Options{InstanceID: cfg.InstanceID, Logger: d.log, HTTP: ln.Addr().String(),
		Unreachable: func(error) { d.awayOnce.Do(func() { close(d.away) }) }})
	d.metrics = metrics.New()
	d.blackouts = newBlackoutWatch(db, cfg, d.log)
	if d.relay, err = newRelay(cfg, db, d.Engine, d.metrics, d.log); err != nil {
		disconnect(client)
		_ = ln.Close()
		return nil, err
	}
	locks, runs := record.Collections(db)
	d.store = runstore.New(locks, runs,
		runstore.Options{Retention: cfg.Runs.Retention, Instance: cfg.InstanceID, Logger: d.log, OnNotice: d.wakeRelay})
	// The requests' outcomes: written by the sink for the runs it starts,
	// and by the runner for the run-now requests it takes from a lock's
	// buffer (whichever replica buffered them).
	requests := triggers.NewStore(triggers.Collection(db), runs, cfg.Runs.Retention, cfg.InstanceID).
		WithOutcomes(d.metrics.CountTrigger)
	d.runner = firepath.NewRunner(firepath.RunnerOptions{
		Registry:   registry,
		InstanceID: cfg.InstanceID,
		// A lock held under this instance id by another incarnation is a
		// previous life's (a second live one is refused by the membership).
		Incarnation: d.members.Self().Incarnation,
		Logger:      d.log,
		Store:       d.store,
		TTL:         cfg.Lock.TTL,
		Workers:     cfg.Workers,
		Categories:  cfg.MaxRunning(),
		Hooks:       fireHooks(d.metrics, d.events),
		QueueLimit:  cfg.QueueLimit,
		// The engine, created next, knows each job's slots; the runner
		// asks only once fires arrive, which the engine sends.
		Slots:            d.slots,
		StartingDeadline: cfg.StartingDeadline,
		CatchupWindow:    cfg.CatchupFor,
		ClaimRetry:       firepath.DefaultClaimRetry,
		// The owner of a job among the live members claims its fires at
		// once; the others after the grace (owner dead or stalled).
		Owns: d.members.Owns,
		// A fire inside a blackout window is recorded skipped, not run.
		Blackout: d.blackouts.match,
		// A retry another replica left pending runs the schedule armed here.
		Lookup:   d.lookup,
		Requests: requests,
	})
	d.triggers = newTriggerWatch(d, db, requests)
	d.engine = scheduler.New(scheduler.Options{
		Location: cfg.Location,
		// Fire lateness is observed by the fire path when a worker takes
		// the fire (fireHooks), not here.
		// Submit: a fire waiting for its claim batch holds no goroutine.
		Fire:   d.runner.Submit,
		Logger: d.log,
		// The registry is the config policy: an unknown action is refused,
		// jobs.<action>.jitter delays each slot by a fixed per-job amount.
		Policy: registry,
		// When the job was armed, before the engine logged it: the end of
		// the event-apply measure (watchHooks).
		Hooks: scheduler.Hooks{Applied: func(string, scheduler.Outcome) { d.armedAt.Store(time.Now().UnixNano()) }},
	})
	d.history = newEditHistory(db.Collection(history.CollectionName),
		eventSink{Sink: NewEngineSink(d.engine, d.log, d.metrics), events: d.events},
		cfg.InstanceID, cfg.Runs.Retention, d.log)
	hooks := d.history.hook(watchHooks(d.metrics, &d.armedAt), func() bool { return d.watcher.Status().Mode == changestream.ModePoll })
	// The engine's timers start once it holds the schedules: filling a
	// running engine costs robfig a re-sort per job (about 6x slower at
	// 100,000 jobs); an empty engine has nothing to fire meanwhile.
	// The engine's timers start (startEngine, from Run) once it holds the
	// schedules and this process holds its instance id.
	hooks.Synced = func() { d.syncedOnce.Do(func() { close(d.synced) }) }
	d.watcher = changestream.New(cfg.Watch.Apply(changestream.Options{
		ID:     cfg.InstanceID,
		Feed:   changestream.NewMongoFeed(db.Collection(schedule.CollectionName), getMoreWait(cfg)),
		Tokens: resumetoken.NewMongoStore(db.Collection(resumetoken.CollectionName)),
		Sink:   d.history.recorder,
		// Every watcher's lines name its collection (schedules,
		// blackouts, triggers).
		Logger: d.log.With("collection", schedule.CollectionName),
		Hooks:  hooks,
		State:  stateStore(cfg),
	}))
	d.metrics.RegisterGauges(metrics.Sources{
		Armed:        d.engine.Len,
		TokenSavedAt: func() time.Time { return d.watcher.Status().TokenSavedAt },
		ClaimLatency: d.runner.LatencyEstimate,
	})
	d.server = &http.Server{
		Handler: httpapi.New(httpapi.Options{
			Schedules:       d.engine,
			DefaultTimezone: cfg.Location.String(),
			Ready:           func() bool { return d.watcher.Status().Ready },
			Metrics:         d.metrics.Handler(),
			Pprof:           cfg.HTTP.Pprof,
			Status:          d.status,
			Timelines:       timeline.NewReader(db, timeline.Options{Location: cfg.Location}),
			FailurePauses:   d.failurePauses,
			Location:        cfg.Location,
			Host:            d.members.Self().Host,
			Members:         d.members.Live,
			Records:         httpapi.NewMongoRecords(db),
			Events:          d.events,
			Token:           d.httpToken,
		}),
		ReadHeaderTimeout: 5 * time.Second,
	}
	// Open event streams would hold the shutdown for its whole timeout.
	d.server.RegisterOnShutdown(d.events.Close)
	return d, nil
}

// Engine returns the daemon's engine: its read model for embedders, and a
// way for tests to reach behind the watcher's back (for instance to drop a
// job as if its change event had been missed).
func (d *Daemon) Engine() *scheduler.Engine { return d.engine }

// Watcher returns the daemon's change-stream watcher (e.g. to call Resync).
func (d *Daemon) Watcher() *changestream.Watcher { return d.watcher }

// Addr is the address the HTTP listener is bound to.
func (d *Daemon) Addr() net.Addr { return d.listener.Addr() }

// Run runs the daemon until ctx is cancelled or a part fails, then shuts
// down gracefully: no new fires, running actions get the grace period, the
// resume token is saved, the membership document is removed, the HTTP
// listener and the client are closed. Before it fires anything it joins
// the members (members.Membership.Join): a second live process with this
// instance id gets a *members.DuplicateError, and one whose membership
// another process takes over stops with a *members.TakenOverError. It
// returns the failure that ended it, nil after a cancelled ctx. Run may be
// called once.
func (d *Daemon) Run(ctx context.Context) error {
	defer d.close()
	indexCtx, stopIndexes := context.WithCancel(context.Background())
	defer stopIndexes()
	go ensureRunIndexes(indexCtx, d.client.Database(d.cfg.Mongo.Database).Collection(record.RunsCollection), d.log)
	stopHistory := d.history.run(d.log)
	defer stopHistory() // after the watcher stopped: no entry comes after it
	// The triggers stream stops after the runner's shutdown (deferred).
	defer d.triggers.start(d.synced)()

	httpDone := make(chan error, 1)
	go func() { httpDone <- d.server.Serve(d.listener) }()
	if d.httpToken == "" && !config.IsLoopback(d.listener.Addr().String()) {
		d.log.Warn("the HTTP listener is not on loopback and no token protects it",
			"http_listen", d.listener.Addr().String(), "env", httpapi.EnvToken)
	}
	d.log.Info("cronswap started", "mongo_uri", config.RedactURI(d.cfg.Mongo.URI), "database", d.cfg.Mongo.Database,
		"http_listen", d.listener.Addr().String(), "watch_mode", d.watcher.Status().Mode, "actions", d.registry.Names(),
		"incarnation", d.members.Self().Incarnation)

	// Nothing is read or fired before this process holds its instance id:
	// a second live process with the same id is refused by Join. The one
	// exception is a database that cannot be reached yet: then the watcher
	// starts too, so that it retries, logs its reconnects and answers
	// /readyz as ever, while the engine still waits for the join.
	memberCtx, stopMember := context.WithCancel(context.Background())
	defer stopMember()
	joined := make(chan struct{})
	memberDone := make(chan error, 1)
	go func() {
		if err := d.members.Join(memberCtx); err != nil {
			memberDone <- err
			return
		}
		close(joined)
		memberDone <- d.members.Run(memberCtx)
	}()
	isJoined := func() bool {
		select {
		case <-joined:
			return true
		default:
			return false
		}
	}

	watchCtx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	watchDone := make(chan error, 1)
	go func() {
		select {
		case <-joined:
		case <-d.away:
		case <-watchCtx.Done():
			watchDone <- nil
			return
		}
		watchDone <- d.watcher.Run(watchCtx)
	}()
	blackoutsDone := d.blackouts.start(watchCtx, joined, d.away)
	starterDone := make(chan struct{})
	go func() {
		defer close(starterDone)
		d.startEngine(watchCtx, joined)
	}()
	relayStarted := make(chan func(), 1)
	go func() {
		// Notifications are delivered once this process holds its id.
		select {
		case <-joined:
			relayStarted <- d.runRelay()
		case <-watchCtx.Done():
			relayStarted <- func() {}
		}
	}()
	catchUpDone := make(chan struct{})
	go func() {
		defer close(catchUpDone)
		runCatchUp(watchCtx, d.engine, func() bool { return isJoined() && d.watcher.Status().Ready && d.blackouts.ready() }, d.cfg.CatchupFor,
			func(due schedule.Due) { d.runner.FireCatchUp(due, d.cfg.CatchupFor(due.Schedule.ActionName())) },
			d.log, d.recordStartupGaps)
	}()

	var runErr error
	select {
	case <-ctx.Done():
	case err := <-watchDone:
		runErr = err
		watchDone <- nil
	case err := <-httpDone:
		runErr = fmt.Errorf("http server: %w", err)
	case err := <-memberDone:
		// Refused (another live process has this instance id) or taken
		// over by one.
		runErr = err
		memberDone <- nil
	}

	d.log.Info("shutting down", "grace", d.cfg.Shutdown.Grace)
	stopWatch()
	<-starterDone // the engine is not started after this point
	d.engine.Stop()
	if !d.runner.Shutdown(d.cfg.Shutdown.Grace) {
		d.log.Warn("some actions were cancelled at the end of the grace period")
	}
	<-catchUpDone
	<-blackoutsDone
	// After the last ends were written: their notices are moved (and
	// delivered) here when there is time, else by another replica.
	(<-relayStarted)()
	if err := <-watchDone; err != nil && runErr == nil {
		runErr = err
	}
	stopMember()
	// After stopMember an error is the cancellation itself, unless another
	// process took the instance id meanwhile.
	if err := <-memberDone; runErr == nil && members.IsDuplicate(err) {
		runErr = err
	}
	// Removing the document (when this process holds it) shows the others
	// at once that this member is gone.
	if isJoined() {
		lctx, cancelLeave := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancelLeave()
		if err := d.members.Leave(lctx); err != nil {
			d.log.Warn("leaving the members", "error", err)
		}
	}
	d.shutdownHTTP()
	d.log.Info("stopped")
	return runErr
}

// startEngine starts the engine's timers once the watcher has made it equal
// to the collection (filling a running engine costs robfig a re-sort per
// job, about 6x slower at 100,000 jobs; an empty engine has nothing to fire
// meanwhile) and this process holds its instance id (joined is closed). It
// returns without starting it when ctx ends first.
func (d *Daemon) startEngine(ctx context.Context, joined <-chan struct{}) {
	for _, ready := range []<-chan struct{}{joined, d.synced, d.blackouts.synced} {
		select {
		case <-ready:
		case <-ctx.Done():
			return
		}
	}
	// What was decided is read before this engine can decide anything, so
	// that the start-up gaps are the real ones.
	d.readDecided()
	d.engine.Start()
}

// shutdownHTTP stops the HTTP listener, waiting a little for requests in
// flight.
func (d *Daemon) shutdownHTTP() {
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := d.server.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		d.log.Warn("http shutdown", "error", err)
	}
}

// Close releases what New opened (the listener and the client) for a
// daemon that will not Run; Run closes them itself. It is idempotent.
func (d *Daemon) Close() { d.close() }

func (d *Daemon) close() {
	d.closeOnce.Do(func() {
		_ = d.listener.Close()
		disconnect(d.client)
	})
}

// Run builds a daemon from cfg and runs it until ctx is cancelled (see
// Daemon.Run). It returns an error when the daemon cannot start or a part
// fails.
func Run(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	d, err := New(cfg, log)
	if err != nil {
		return err
	}
	return d.Run(ctx)
}

// status is the /api/status view of this instance.
func (d *Daemon) status() httpapi.Status {
	ws := d.watcher.Status()
	return httpapi.Status{
		InstanceID:     d.cfg.InstanceID,
		WatchMode:      string(ws.Mode),
		LastEventAt:    timePtr(ws.LastEventAt),
		TokenSavedAt:   timePtr(ws.TokenSavedAt),
		FullReloads:    ws.FullReloads,
		SchedulesArmed: d.engine.Len(),
		Ready:          ws.Ready,
		Reconnects:     ws.Reconnects,
	}
}

// watchHooks reports the watcher's events, full reloads, reconnects and
// resync drift (jobs whose event was missed) as metrics. An event counts as
// applied when the engine armed (or disarmed) the job, as armedAt says
// (set by the engine's Applied hook, before the change is logged), and
// otherwise when the sink call returned.
func watchHooks(mx *metrics.Metrics, armedAt *atomic.Int64) changestream.Hooks {
	return changestream.Hooks{
		Event: func(ev changestream.EventInfo) {
			mx.CountChangeEvent(ev.Op)
			written := ev.WallTime
			if written.IsZero() {
				written = ev.UpdatedAt // servers without wallTime
			}
			applied := ev.Applied
			if at := time.Unix(0, armedAt.Swap(0)); !at.Before(ev.Received) && at.Before(ev.Applied) {
				applied = at
			}
			mx.ObserveEditToArmed(written, applied)
			mx.ObserveEventApply(applied.Sub(ev.Received))
		},
		FullReload: func(reason string, _ []string) { mx.CountFullReload(reason) },
		Reconnect:  func(int, time.Duration, error) { mx.CountReconnect() },
		Drift:      func(ids []string) { mx.CountResyncDrift(len(ids)) },
	}
}

// getMoreWait is how long an idle change stream's getMore waits on the
// server: changestream.DefaultMaxAwait, but no longer than a configured
// resync interval, since a resync (and the drift report after it) runs
// between two round trips of the stream.
func getMoreWait(cfg config.Config) time.Duration {
	if ri := cfg.Watch.ResyncInterval; ri != nil && *ri > 0 && *ri < changestream.DefaultMaxAwait {
		return *ri
	}
	return changestream.DefaultMaxAwait
}

func disconnect(client *mongo.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = client.Disconnect(ctx)
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// actionHost is what the configured actions learn of the daemon at start:
// its own secrets (the listener's token, the database password)
// and the webhooks' variables, redacted from what runs capture and never
// inherited by a program.
func actionHost(cfg config.Config) actions.Host {
	return actions.Host{
		Secrets:   []string{os.Getenv(httpapi.EnvToken), config.URIPassword(cfg.Mongo.URI)},
		SecretEnv: cfg.NotifyEnvRefs(),
	}
}
