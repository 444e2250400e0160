package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/changestream"
	"github.com/cronswap/cronswap/daemon"
	"github.com/cronswap/cronswap/internal/actions"
	"github.com/cronswap/cronswap/internal/buildinfo"
	"github.com/cronswap/cronswap/internal/config"
	"github.com/cronswap/cronswap/internal/httpapi"
	"github.com/cronswap/cronswap/internal/notify"
	"github.com/cronswap/cronswap/internal/tracing"
)

// runDaemon is `cronswap run` on the embedding API, the same path a Go
// service takes: it builds the config's actions and checks that every exec
// action's program exists, and that the webhooks' variables are set and
// state_file's directory exists, connects, listens on http.listen, creates a
// daemon.Service from the config's options, registers the actions with
// Handle, serves the service's HTTP surface and runs it until ctx ends. On
// error nothing is left open.
func runDaemon(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	runtimeLog := log.With("instance_id", cfg.InstanceID) // the Go runtime's memory settings
	setMemoryLimit(runtimeLog, memlimit.FromCgroup)
	// Only the daemon runs the actions, so only it requires their
	// programs, variables and files to be there.
	registry, err := actions.Start(cfg.Jobs, actionHost(cfg))
	if err != nil {
		return err
	}
	// The webhooks' variables, named by their config keys (daemon.New
	// checks them again, by option).
	if err := cfg.CheckNotifyEnv(os.LookupEnv); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if err := cfg.CheckStateFile(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	client, err := connect(cfg)
	if err != nil {
		return err
	}
	defer disconnect(client)
	ln, err := net.Listen("tcp", cfg.HTTP.Listen)
	if err != nil {
		return fmt.Errorf("http listen %s: %w", cfg.HTTP.Listen, err)
	}
	defer ln.Close()

	// Tracing, when the OTEL_* environment configures it; the spans
	// still buffered are exported when the daemon has stopped.
	tr, err := tracing.FromEnv(ctx, tracing.Resource{InstanceID: cfg.InstanceID, Version: buildinfo.String()})
	if err != nil {
		return fmt.Errorf("tracing: %w", err)
	}
	defer shutdownTracing(tr, log)

	opts := daemonOptions(cfg, log)
	opts.HTTPToken = os.Getenv(httpapi.EnvToken)
	opts.HTTPAddr = ln.Addr().String()
	opts.TracerProvider = tr.Provider()
	// The status page's actions write through a connection of their own.
	if uri := cfg.HTTP.WriteMongoURI; uri != "" {
		page, err := mongo.Connect(options.Client().SetAppName("cronswap-page").
			SetServerSelectionTimeout(5 * time.Second).SetConnectTimeout(5 * time.Second).ApplyURI(uri))
		if err != nil {
			return fmt.Errorf("http.write_mongo_uri: %w", clientError(uri, err))
		}
		defer disconnect(page)
		opts.PageDatabase = page.Database(cfg.Mongo.Database)
		if uri == cfg.Mongo.URI {
			log.Warn("http.write_mongo_uri is the daemon's own connection: give the page's writes credentials of their own (docs/operations.md)",
				"instance_id", cfg.InstanceID)
		}
	}
	opts.StartedLogAttrs = []slog.Attr{slog.String("mongo_uri", config.RedactURI(cfg.Mongo.URI)),
		slog.String("http_listen", ln.Addr().String()), slog.String("tracing", tracingMode(tr))}
	s, err := daemon.New(client.Database(cfg.Mongo.Database), opts)
	if err != nil {
		return err
	}
	// The config's actions are registered as a Go handler is.
	for _, name := range registry.Names() {
		a, _ := registry.Lookup(name)
		if err := s.Handle(name, a.Handler, a.Policy); err != nil {
			return err
		}
	}
	if opts.HTTPToken == "" && opts.HTTPTokensFile == "" && !config.IsLoopback(ln.Addr().String()) {
		log.Warn("the HTTP listener is not on loopback and no token protects it",
			"instance_id", cfg.InstanceID, "http_listen", ln.Addr().String(), "env", httpapi.EnvToken)
	}

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	server := &http.Server{Handler: s.HTTPHandler(), ReadHeaderTimeout: 5 * time.Second}
	httpDone := make(chan error, 1)
	go func() {
		err := server.Serve(ln)
		if !errors.Is(err, http.ErrServerClosed) {
			stop() // the daemon stops when its listener fails
		}
		httpDone <- err
	}()
	// A start that reads the whole collection weighs its heap as it goes,
	// until the target is set.
	var heapPolls *time.Ticker
	var heapTicks <-chan time.Time
	if !hasStateFile(cfg.StateFile) {
		heapPolls = time.NewTicker(heapPoll)
		heapTicks = heapPolls.C
	}
	go func() {
		lowerGCPercent(runCtx, runtimeLog, s.Firing(), heapTicks, runtimeLiveHeap)
		if heapPolls != nil {
			heapPolls.Stop()
		}
	}()
	runErr := s.Run(runCtx)
	shutdownHTTP(server, log)
	if err := <-httpDone; runErr == nil && !errors.Is(err, http.ErrServerClosed) {
		runErr = fmt.Errorf("http server: %w", err)
	}
	return runErr
}

// daemonOptions are the embedding package's options for cfg (Finished):
// every setting of the config file but the connection, the listener and
// the actions, which runDaemon handles (and the page's write connection).
func daemonOptions(cfg config.Config, log *slog.Logger) daemon.Options {
	watch := cfg.Watch.Apply(changestream.Options{})
	grace := cfg.Shutdown.Grace
	if grace == 0 {
		grace = -1 // shutdown.grace: 0 cancels running actions at once
	}
	return daemon.Options{
		InstanceID:       cfg.InstanceID,
		Logger:           log,
		Location:         cfg.Location,
		WatchMode:        watch.Mode,
		PollInterval:     watch.PollInterval,
		ResyncInterval:   watch.ResyncInterval,
		BackoffMin:       watch.BackoffMin,
		BackoffMax:       watch.BackoffMax,
		StateFile:        cfg.StateFile,
		DivideSchedules:  cfg.DivideSchedules,
		MembersHeartbeat: cfg.Members.Heartbeat,
		MembersLease:     cfg.Members.Lease,
		ClaimGrace:       cfg.Members.ClaimGrace,
		LockTTL:          cfg.Lock.TTL,
		Retention:        cfg.Runs.Retention,
		Workers:          cfg.Workers,
		Categories:       cfg.MaxRunning(),
		QueueLimit:       cfg.QueueLimit,
		StartingDeadline: cfg.StartingDeadline,
		Catchup:          cfg.Catchup,
		ShutdownGrace:    grace,
		Notify:           notifications(cfg),
		Pprof:            cfg.HTTP.Pprof,
		HTTPTokensFile:   cfg.HTTP.TokensFile,
	}
}

// notifications are the config's notify section and the actions' own
// routes (jobs.<name>.notify) in the embedding package's form.
func notifications(cfg config.Config) daemon.Notifications {
	n := cfg.Notify
	out := daemon.Notifications{Webhooks: webhooks(n.Webhooks), On: n.On, Backoff: n.Backoff, MaxBackoff: n.MaxBackoff,
		MaxAttempts: n.MaxAttempts, Timeout: n.Timeout, Poll: n.Poll, MaxAge: n.MaxAge}
	for name, def := range cfg.Jobs {
		if def.Notify == nil {
			continue
		}
		if out.Routes == nil {
			out.Routes = map[string]daemon.NotifyRoute{}
		}
		out.Routes[name] = daemon.NotifyRoute{Webhooks: webhooks(def.Notify.Webhooks), On: def.Notify.On}
	}
	return out
}

func webhooks(in []notify.Webhook) []daemon.Webhook {
	var out []daemon.Webhook
	for _, w := range in {
		out = append(out, daemon.Webhook{Name: w.Name, URL: w.URL, Method: w.Method, Headers: w.Headers})
	}
	return out
}

// tracingMode says how spans are exported: "otlp <protocol>", or "off".
func tracingMode(tr *tracing.Tracing) string {
	if tr == nil {
		return "off"
	}
	return "otlp " + tr.Protocol()
}

// shutdownTracing exports the spans still buffered, waiting a little for
// the collector.
func shutdownTracing(tr *tracing.Tracing, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tr.Shutdown(ctx); err != nil {
		log.Warn("exporting the last spans", "error", err)
	}
}

// shutdownHTTP stops the HTTP listener, waiting a little for requests in
// flight.
func shutdownHTTP(server *http.Server, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := server.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Warn("http shutdown", "error", err)
	}
}

func disconnect(client *mongo.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = client.Disconnect(ctx)
}

// actionHost is what the configured actions learn of the daemon at start:
// its own secrets (the listener's token, the database passwords) and the
// webhooks' variables, redacted from what runs capture and never inherited
// by a program.
func actionHost(cfg config.Config) actions.Host {
	return actions.Host{
		Secrets:   []string{os.Getenv(httpapi.EnvToken), config.URIPassword(cfg.Mongo.URI), config.URIPassword(cfg.HTTP.WriteMongoURI)},
		SecretEnv: cfg.NotifyEnvRefs(),
	}
}
