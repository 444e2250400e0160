// Package daemon wires the parts of a running cronswap instance together:
// the MongoDB client, the engine, the watcher, the job runner and the HTTP
// listener, and shuts them down in order.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/changestream"
	"github.com/cronswap/cronswap/internal/config"
	"github.com/cronswap/cronswap/internal/httpapi"
	"github.com/cronswap/cronswap/internal/metrics"
	"github.com/cronswap/cronswap/jobs"
	"github.com/cronswap/cronswap/resumetoken"
	"github.com/cronswap/cronswap/schedule"
	"github.com/cronswap/cronswap/scheduler"
)

// Collection names of the daemon's data in MongoDB.
const (
	SchedulesCollection = schedule.CollectionName
	TokensCollection    = resumetoken.CollectionName
	LocksCollection     = "job_locks"
	RunsCollection      = "job_runs"
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

// Run runs the daemon until ctx is cancelled, then shuts down gracefully:
// no new fires, running actions get the grace period, the resume token is
// saved. It returns an error only when the daemon cannot start.
func Run(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	return RunWith(ctx, cfg, log, Options{})
}

// RunWith is Run with extras for tests and embedders (see Options).
func RunWith(ctx context.Context, cfg config.Config, log *slog.Logger, opts Options) error {
	log = log.With("instance_id", cfg.InstanceID)
	registry, err := jobs.FromConfig(cfg.Jobs)
	if err != nil {
		return err
	}
	client, err := Connect(cfg)
	if err != nil {
		return err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = client.Disconnect(dctx)
	}()
	db := client.Database(cfg.Mongo.Database)

	ln, err := net.Listen("tcp", cfg.HTTP.Listen)
	if err != nil {
		return fmt.Errorf("http listen %s: %w", cfg.HTTP.Listen, err)
	}

	var (
		engine  *scheduler.Engine
		watcher *changestream.Watcher
	)
	mx := metrics.New(metrics.Sources{
		Armed:        func() int { return engine.Len() },
		TokenSavedAt: func() time.Time { return watcher.Status().TokenSavedAt },
	})
	runs := db.Collection(jobs.RunsCollection)
	indexCtx, stopIndexes := context.WithCancel(context.Background())
	defer stopIndexes()
	go ensureRunIndexes(indexCtx, runs, log)
	runner := jobs.NewRunner(jobs.RunnerOptions{
		Registry:   registry,
		InstanceID: cfg.InstanceID,
		Logger:     log,
		Resolve: func(id string) (jobs.Target, bool) {
			st, ok := engine.Get(id)
			if !ok || !st.Armed {
				return jobs.Target{}, false
			}
			return jobs.Target{Action: st.ActionName(), Args: []byte(st.Args), Category: st.Category}, true
		},
		Store: jobs.NewMongoStore(db.Collection(jobs.LocksCollection), runs,
			jobs.MongoStoreOptions{Retention: cfg.Runs.Retention, Instance: cfg.InstanceID, Logger: log}),
		TTL:     cfg.Lock.TTL,
		Workers: cfg.Workers,
		Hooks: fireHooks(mx, func(id string) time.Duration {
			st, _ := engine.Get(id)
			return st.Delay
		}),
	})
	// The runner still takes (id, slot) and resolves the schedule itself.
	fire := func(d schedule.Due) { runner.Fire(d.Schedule.ID, d.Slot) }
	engine = scheduler.New(scheduler.Options{
		Location: cfg.Location,
		// Fire lateness is observed by the fire path when a worker takes
		// the fire (fireHooks), not here.
		Fire:   fire,
		Logger: log,
		Policy: configPolicy{registry: registry, jobs: cfg.Jobs},
	})

	if opts.Engine != nil {
		opts.Engine(engine)
	}

	// The engine's timers start once it holds the schedules: filling a
	// running engine costs robfig a re-sort per job (about 6x slower at
	// 100,000 jobs); an empty engine has nothing to fire meanwhile.
	var startEngine sync.Once
	hooks := metricsHooks(mx)
	hooks.Synced = func() { startEngine.Do(engine.Start) }
	watcher = changestream.New(changestream.Options{
		ID:             cfg.InstanceID,
		Feed:           changestream.NewMongoFeed(db.Collection(SchedulesCollection), time.Second),
		Tokens:         resumetoken.NewMongoStore(db.Collection(TokensCollection)),
		Sink:           watcherSink{NewEngineSink(engine, log, mx)},
		Logger:         log,
		Mode:           cfg.Watch.Mode,
		PollInterval:   cfg.Watch.PollInterval,
		ResyncInterval: cfg.Watch.ResyncInterval,
		BackoffMin:     cfg.Watch.BackoffMin,
		BackoffMax:     cfg.Watch.BackoffMax,
		Hooks:          hooks,
		State:          stateStore(cfg),
	})

	srv := &http.Server{
		Handler: httpapi.New(httpapi.Options{
			Schedules:       engine,
			DefaultTimezone: cfg.Location.String(),
			Ready:           func() bool { return watcher.Status().Ready },
			Metrics:         mx.Handler(),
			Status: func() httpapi.Status {
				ws := watcher.Status()
				return httpapi.Status{
					InstanceID:     cfg.InstanceID,
					WatchMode:      ws.Mode,
					LastEventAt:    timePtr(ws.LastEventAt),
					TokenSavedAt:   timePtr(ws.TokenSavedAt),
					FullReloads:    ws.FullReloads,
					SchedulesArmed: engine.Len(),
					Ready:          ws.Ready,
					Reconnects:     ws.Reconnects,
				}
			},
		}),
		ReadHeaderTimeout: 5 * time.Second,
	}
	httpDone := make(chan error, 1)
	go func() { httpDone <- srv.Serve(ln) }()
	log.Info("cronswap started", "mongo_uri", config.RedactURI(cfg.Mongo.URI), "database", cfg.Mongo.Database,
		"http_listen", ln.Addr().String(), "watch_mode", cfg.Watch.Mode, "actions", registry.Names())

	watchCtx, stopWatch := context.WithCancel(context.Background())
	watchDone := make(chan error, 1)
	go func() { watchDone <- watcher.Run(watchCtx) }()
	catchUpDone := make(chan struct{})
	go func() {
		defer close(catchUpDone)
		runCatchUp(watchCtx, engine, func() bool { return watcher.Status().Ready }, cfg.CatchupFor, fire, log)
	}()

	var runErr error
	select {
	case <-ctx.Done():
	case err := <-watchDone:
		runErr = err
		watchDone <- nil
	case err := <-httpDone:
		runErr = fmt.Errorf("http server: %w", err)
		httpDone <- nil
	}

	log.Info("shutting down", "grace", cfg.Shutdown.Grace)
	engine.Stop()
	if !runner.Shutdown(cfg.Shutdown.Grace) {
		log.Warn("some actions were cancelled at the end of the grace period")
	}
	stopWatch()
	<-catchUpDone
	if err := <-watchDone; err != nil && runErr == nil {
		runErr = err
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Warn("http shutdown", "error", err)
	}
	log.Info("stopped")
	return runErr
}

// metricsHooks reports the watcher's events, full reloads, reconnects and
// resync drift (jobs whose event was missed) as metrics.
func metricsHooks(mx *metrics.Metrics) changestream.Hooks {
	return changestream.Hooks{
		Event: func(ev changestream.EventInfo) {
			mx.CountChangeEvent(ev.Op)
			written := ev.WallTime
			if written.IsZero() {
				written = ev.UpdatedAt // servers without wallTime
			}
			mx.ObserveEditToArmed(written, ev.Applied)
			mx.ObserveEventApply(ev.Applied.Sub(ev.Received))
		},
		FullReload: func(reason string, _ []string) { mx.CountFullReload(reason) },
		Reconnect:  func(int, time.Duration, error) { mx.CountReconnect() },
		Drift:      func(ids []string) { mx.CountResyncDrift(len(ids)) },
	}
}

// configPolicy is the engine's Policy from the configuration: an enabled
// schedule must name a configured action, and its jitter bound is that
// action's jobs.<action>.jitter.
type configPolicy struct {
	registry *jobs.Registry
	jobs     map[string]config.Job
}

// Check refuses a schedule whose action is not configured.
func (p configPolicy) Check(s schedule.Schedule) error {
	if _, ok := p.registry.Lookup(s.ActionName()); !ok {
		return &schedule.Error{ID: s.ID, Field: schedule.FieldJob,
			Reason: fmt.Sprintf("unknown action %q: not in the config's jobs (known: %v)", s.ActionName(), p.registry.Names())}
	}
	return nil
}

// Jitter is the configured jitter bound of the schedule's action.
func (p configPolicy) Jitter(s schedule.Schedule) time.Duration { return p.jobs[s.ActionName()].Jitter }

// watcherSink is EngineSink as the watcher's Sink, whose Upsert and Delete
// return when the change took effect; the zero time they return means
// "when the call returned".
type watcherSink struct{ EngineSink }

func (s watcherSink) Upsert(doc bson.Raw) time.Time     { s.EngineSink.Upsert(doc); return time.Time{} }
func (s watcherSink) Delete(id bson.RawValue) time.Time { s.EngineSink.Delete(id); return time.Time{} }

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
