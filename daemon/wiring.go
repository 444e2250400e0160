package daemon

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/changestream"
	"github.com/cronswap/cronswap/internal/actions"
	"github.com/cronswap/cronswap/internal/firepath"
	"github.com/cronswap/cronswap/internal/history"
	"github.com/cronswap/cronswap/internal/httpapi"
	"github.com/cronswap/cronswap/internal/members"
	"github.com/cronswap/cronswap/internal/metrics"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/internal/runstore"
	"github.com/cronswap/cronswap/internal/schedulesink"
	"github.com/cronswap/cronswap/internal/timeline"
	"github.com/cronswap/cronswap/internal/triggers"
	"github.com/cronswap/cronswap/resumetoken"
	"github.com/cronswap/cronswap/schedule"
	"github.com/cronswap/cronswap/scheduler"
)

// The constructors of New, one per part, in the order New calls them: each
// uses only the parts built before it (the runner asks the engine, built
// after it, only once fires arrive, which the engine sends).

func newService(db *mongo.Database, opts Options) *Service {
	return &Service{opts: opts, db: db, log: opts.Logger.With("instance_id", opts.InstanceID),
		registry: actions.NewRegistry(), gates: newHandOverGates(),
		synced: make(chan struct{}), firing: make(chan struct{}), away: make(chan struct{}), decided: decidedAtStart{read: make(chan struct{})},
		decidedSlice: decidedReadSlice,
		events:       httpapi.NewBroker(httpapi.BrokerOptions{})}
}

// newMetrics creates the metrics on the caller's registerer, or on a
// registry of their own with the runtime collectors.
func newMetrics(reg prometheus.Registerer) (*metrics.Metrics, error) {
	if reg == nil {
		return metrics.New(), nil
	}
	gather, _ := reg.(prometheus.Gatherer)
	return metrics.NewOn(reg, gather)
}

func (s *Service) newMembers() *members.Membership {
	return members.New(s.db, members.Options{InstanceID: s.opts.InstanceID, Logger: s.log, HTTP: s.opts.HTTPAddr,
		Divides:   s.opts.DivideSchedules,
		Heartbeat: s.opts.MembersHeartbeat, Lease: s.opts.MembersLease,
		Unreachable: func(error) { s.awayOnce.Do(func() { close(s.away) }) }})
}

func (s *Service) newStore() *runstore.Store {
	locks, runs := record.Collections(s.db)
	return runstore.New(locks, runs,
		runstore.Options{Retention: s.opts.Retention, Instance: s.opts.InstanceID, Logger: s.log, OnNotice: s.wakeRelay})
}

// newRequests is the store of the run-now and backfill requests' outcomes:
// written by the triggers sink for the runs it starts, and by the runner
// for the run-now requests it takes from a lock's buffer (whichever
// replica buffered them).
func (s *Service) newRequests() *triggers.Store {
	_, runs := record.Collections(s.db)
	return triggers.NewStore(triggers.Collection(s.db), runs, s.store, s.opts.Retention, s.opts.InstanceID).
		WithOutcomes(s.metrics.CountTrigger)
}

func (s *Service) newRunner(requests *triggers.Store) *firepath.Runner {
	return firepath.NewRunner(firepath.RunnerOptions{
		Registry:   s.registry,
		InstanceID: s.opts.InstanceID,
		// A lock held under this instance id by another incarnation is a
		// previous life's (a second live one is refused by the membership).
		Incarnation:      s.members.Self().Incarnation,
		Logger:           s.log,
		Store:            s.store,
		TTL:              s.opts.LockTTL,
		Workers:          s.opts.Workers,
		Categories:       s.opts.Categories,
		Hooks:            fireHooks(s.metrics, s.events),
		QueueLimit:       s.opts.QueueLimit,
		Slots:            s.slots,
		StartingDeadline: s.opts.StartingDeadline,
		CatchupWindow:    s.catchupFor,
		ClaimRetry:       firepath.DefaultClaimRetry,
		// The owner of a job among the live members claims its fires at
		// once; the others after the grace (owner dead or stalled).
		Owns:       s.members.Owns,
		ClaimGrace: s.opts.ClaimGrace,
		// A fire inside a blackout window is recorded skipped, not run.
		Blackout: s.blackouts.match,
		// So is a fire on a date of a calendar its schedule excludes.
		Calendars: s.calendars.match,
		// A job whose run count reached its max_runs is disarmed (the
		// engine is built after the runner, and before any fire).
		Ended: func(sch schedule.Schedule, reason string) { s.engine.End(sch.ID, sch, reason) },
		// A retry another replica left pending runs the schedule armed here.
		Lookup:   s.lookup,
		Requests: requests,
		// Each fire is a trace, linked to the schedule change that armed
		// its job.
		Tracer:  s.tracer,
		ArmedBy: s.edits.armedBy,
	})
}

func (s *Service) newEngine() *scheduler.Engine {
	return scheduler.New(scheduler.Options{
		Location: s.opts.Location,
		// Submit: a fire waiting for its claim batch holds no goroutine.
		// Fire lateness is observed by the fire path when a worker takes
		// the fire (fireHooks), not here. A fire of a job being handed
		// over waits for the hand-over's offers first (divide.go).
		Fire:   s.fireArmed,
		Logger: s.log,
		// The registry is the handlers' policy: a schedule naming no
		// registered handler, or excluding a calendar not in force, is
		// refused, a handler's jitter delays each
		// slot by a fixed per-job amount.
		Policy: s.policy,
		Hooks: scheduler.Hooks{
			// When the job was armed, before the engine logged it: the
			// end of the event-apply measure (watchHooks).
			Applied: func(id string, o scheduler.Outcome) {
				s.armedAt.Store(time.Now().UnixNano())
				s.edits.applied(id, o)
				if o == scheduler.Added {
					s.arrivals.applied(id) // a late arrival, in a full reload after the first (arrival.go)
				}
			},
			// A job whose document becomes refused counts once in
			// reloads_total{result="rejected"}, by an event or a full
			// read alike (a poll reading it again counts nothing).
			Rejected: schedulesink.CountRejected(s.metrics),
		},
		// Dividing the schedules: this replica arms the jobs it owns and
		// those it is second for among the live members (divide.go).
		Arms: s.armsFunc(),
		// A fire after a stall of this process: the slots its timer
		// skipped are offered or recorded missed first (stall.go).
		Stalled: s.fireAfterStall,
	})
}

func (s *Service) newHistory() *editHistory {
	// A full read does not decode again the documents the recorder (which
	// wraps this sink) holds unchanged: the engine was given them last.
	unchanged := func(doc bson.Raw) bool { return s.history.recorder.Unchanged(doc) }
	// A full read arms a refused job the engine has no valid version of
	// on the last valid one the edit history holds (recover.go). It runs
	// inside the read's ReplaceAll, on the watcher's goroutine, so no
	// event of the job is applied meanwhile: the events after it win.
	engine := schedulesink.New(s.engine, s.log, s.metrics).WithUnchanged(unchanged).WithRecovery(s.recoverLastValid)
	return newEditHistory(s.db.Collection(history.CollectionName),
		arrivalSink{Sink: eventSink{Sink: s.edits.sink(engine), events: s.events}, s: s},
		s.opts.InstanceID, s.opts.Retention, s.log)
}

func (s *Service) newWatcher() *changestream.Watcher {
	hooks := s.history.hook(watchHooks(s.metrics, &s.armedAt),
		func() bool { return s.watcher.Status().Mode == changestream.ModePoll })
	// The engine's timers start (startEngine) once it holds the schedules
	// and this process holds its instance id.
	hooks.Synced = func() { s.syncedOnce.Do(func() { close(s.synced) }) }
	return changestream.New(s.opts.watch(changestream.Options{
		ID:     s.opts.InstanceID,
		Feed:   s.schedulesFeed(),
		Tokens: resumetoken.NewMongoStore(s.db.Collection(resumetoken.CollectionName)),
		Sink:   s.history.recorder,
		// Every watcher's lines name its collection (schedules,
		// blackouts, triggers).
		Logger: s.log.With("collection", schedule.CollectionName),
		Hooks:  hooks,
		State:  stateStore(s.opts, s.db, s.reserve),
		// The state file holds the documents the edit history keeps
		// (the before-images of the next edits): one copy of them.
		StateDocs: s.history.recorder.Documents,
	}))
}

// schedulesFeed is the schedules' change stream and full reads; the first
// full read of a start makes room for the collection's documents
// (reservingFeed).
func (s *Service) schedulesFeed() changestream.Feed {
	coll := s.db.Collection(schedule.CollectionName)
	return &reservingFeed{
		Feed:    changestream.NewMongoFeed(coll, getMoreWait(s.opts.ResyncInterval)),
		coll:    coll,
		empty:   func() bool { return s.engine.Known() == 0 },
		reserve: s.reserve,
		log:     s.log,
	}
}

func (s *Service) registerGauges() error {
	return s.metrics.RegisterGauges(metrics.Sources{
		Armed:        s.engine.Len,
		Known:        s.engine.Known,
		Rejected:     s.engine.Rejected,
		TokenSavedAt: func() time.Time { return s.watcher.Status().TokenSavedAt },
		ClaimLatency: s.runner.LatencyEstimate,
		WatchState:   func() string { return watchState(s.watcher.Status()) },
		LiveMembers:  func() int { return len(s.members.LiveView()) },
		HeartbeatAge: s.members.HeartbeatAge,
	})
}

func (s *Service) newHTTPHandler() (http.Handler, error) {
	o := httpapi.Options{
		Schedules:       s.engine,
		DefaultTimezone: s.opts.Location.String(),
		Ready:           func() bool { return s.watcher.Status().Ready },
		Metrics:         s.metrics.Handler(),
		Pprof:           s.opts.Pprof,
		Status:          s.status,
		Timelines:       timeline.NewReader(s.db, timeline.Options{Location: s.opts.Location}),
		FailurePauses:   s.failurePauses,
		Location:        s.opts.Location,
		Host:            s.members.Self().Host,
		Members:         s.members.Live,
		Records:         httpapi.NewMongoRecords(s.db),
		Events:          s.events,
	}
	if err := s.pageOptions(&o); err != nil {
		return nil, err
	}
	return httpapi.New(o), nil
}

// getMoreWait is how long an idle change stream's getMore waits on the
// server: changestream.DefaultMaxAwait, but no longer than a configured
// resync interval, since a resync (and the drift report after it) runs
// between two round trips of the stream.
func getMoreWait(resync time.Duration) time.Duration {
	if resync > 0 && resync < changestream.DefaultMaxAwait {
		return resync
	}
	return changestream.DefaultMaxAwait
}
