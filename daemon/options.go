package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.opentelemetry.io/otel/trace"

	"github.com/cronswap/cronswap/changestream"
	"github.com/cronswap/cronswap/internal/firepath"
	"github.com/cronswap/cronswap/internal/notify"
	"github.com/cronswap/cronswap/internal/record"
)

// Options configure a Service. Every setting of the cronswap binary's
// config file has a field here (docs/configuration.md, "In a Go program",
// names each key's field); the zero value of a field is the key's default.
type Options struct {
	// InstanceID names this replica in locks, run records, its resume
	// token and the members collection; required, and unique among the
	// processes running against the database at once (a second live one
	// is refused by Run).
	InstanceID string
	// Logger receives the service's structured logs; nil is
	// slog.Default().
	Logger *slog.Logger
	// StartedLogAttrs are added to the "cronswap started" log line (the
	// binary adds its MongoDB URI and HTTP address).
	StartedLogAttrs []slog.Attr
	// Location is the time zone of schedules that name none (config
	// timezone); nil is UTC.
	Location *time.Location

	// WatchMode is how edits of the schedules are noticed:
	// changestream.ModeAuto (""), ModeChangeStream or ModePoll.
	WatchMode changestream.Mode
	// PollInterval is the full-diff period in poll mode; 0 is
	// changestream.DefaultPollInterval.
	PollInterval time.Duration
	// ResyncInterval is the period of the safety-net full diff while
	// streaming; 0 is changestream.DefaultResyncInterval,
	// changestream.ResyncOff disables it.
	ResyncInterval time.Duration
	// BackoffMin and BackoffMax bound the reconnect backoff; 0 is
	// changestream.DefaultBackoffMin and DefaultBackoffMax.
	BackoffMin, BackoffMax time.Duration
	// StateFile, when set, is the warm-restart file: the applied schedules
	// and their resume token, so that a restart arms every job without
	// reading the collection (docs/operations.md).
	StateFile string
	// DivideSchedules makes the replicas divide the schedules instead of
	// each arming every job: a replica arms the jobs it owns and those it
	// is second for (members.Armers: the job's next owner, armed already
	// when the owner goes), about 2/R of them with R replicas, and keeps
	// every other job's last known good in its compact decoded form. Edits
	// still reach every replica. When the live members change, each
	// re-divides (README "Several replicas"; docs/members.md). Every
	// replica of a deployment must agree on it.
	DivideSchedules bool
	// MembersHeartbeat and MembersLease time the membership: the period
	// of the member document's heartbeat (and of the read of the live
	// members), and how long after its last heartbeat a replica is still
	// live. 0 is 10 s and 30 s; the lease is raised to twice the
	// heartbeat when shorter. A dead replica's jobs wait at most the lease
	// for a new armer.
	MembersHeartbeat, MembersLease time.Duration
	// ClaimGrace is how long a replica that does not own a job waits after
	// its fire was due before claiming it (the owner claims at once); 0 is
	// 2 s.
	ClaimGrace time.Duration

	// LockTTL is the lease of a job's lock, renewed every LockTTL/3 while
	// a run lasts; past it another replica may take the lock over. 0 is 10
	// minutes; anything else must be at least 3 seconds.
	LockTTL time.Duration
	// Retention is how long run records, ended run-now and backfill
	// requests, edit history and notifications are kept; 0 is 30 days.
	Retention time.Duration
	// Workers bounds the handlers running at once in this instance; 0 is
	// no bound.
	Workers int
	// Categories bounds the handlers running at once per schedule
	// category (the schedules' category field), each at least 1; a
	// category not listed has no bound.
	Categories map[string]int
	// QueueLimit bounds the fires waiting for admission (held back by
	// Workers or Categories); 0 is 100,000.
	QueueLimit int
	// StartingDeadline is how long after its slot (plus jitter) a fire of
	// a handler without its own (jobs.Policy.StartingDeadline) may still
	// start; 0 is the time to the job's next slot, at most five minutes.
	StartingDeadline time.Duration
	// Catchup is the default catch-up window: after downtime, a job's most
	// recent missed slot younger than this runs once. 0 is off; a
	// handler's jobs.Policy.Catchup replaces it.
	Catchup time.Duration
	// ShutdownGrace is how long Run waits for running handlers once its
	// context ends before it cancels them; 0 is 30 seconds, negative
	// cancels them at once.
	ShutdownGrace time.Duration

	// Notify sends failure notifications to webhooks; the zero value sends
	// none.
	Notify Notifications

	// Registerer receives the cronswap_* metrics; nil registers them on a
	// registry of the service's own, with the Go runtime and process
	// collectors. /metrics (HTTPHandler) serves Registerer when it is also
	// a prometheus.Gatherer (a *prometheus.Registry is), else nothing.
	// Two services in one process need two registerers, or one wrapped
	// per service (prometheus.WrapRegistererWith).
	Registerer prometheus.Registerer
	// HTTPAddr is the host:port at which the program serves HTTPHandler
	// (at the root of its mux), recorded in the members collection so
	// that `cronswap schedules list` and `get` can ask this instance what
	// its engine holds; empty: none recorded.
	HTTPAddr string
	// HTTPToken, when not empty, is an operator's token: with it (or
	// HTTPTokensFile), every path of HTTPHandler but /healthz and /readyz
	// requires a token (a bearer token, or the password of HTTP basic
	// auth); the binary reads it from CRONSWAP_HTTP_TOKEN.
	HTTPToken string
	// HTTPTokensFile names a file of named tokens with their roles,
	// viewer or operator (config http.tokens_file, docs/http.md); New
	// refuses one it cannot read.
	HTTPTokensFile string
	// PageDatabase, when set, is the database the status page's actions
	// write through (run now, disable, enable, resume, retime, for an
	// operator's token): the same database as New's, on a client with
	// credentials of its own (config http.write_mongo_uri). Nil leaves the
	// page read-only. Its client stays the caller's.
	PageDatabase *mongo.Database
	// Pprof serves the Go runtime's profiles under /debug/pprof/ on
	// HTTPHandler; mount it on loopback only.
	Pprof bool
	// TracerProvider, when set, traces each fire (admission, claim, run,
	// end write), the schedule changes that armed its job, and the
	// notifications it caused (docs/operations.md, "Traces"), and hands a
	// handler its run's span in ctx; nil traces nothing, at no cost. The
	// binary builds one from the OTEL_* environment.
	TracerProvider trace.TracerProvider
}

// Notifications configure failure notifications (docs/notify.md): notices
// of failed, abandoned and missed runs and of paused jobs, delivered at
// least once to webhooks by one replica. The zero durations and counts are
// the defaults docs/notify.md lists.
type Notifications struct {
	// Webhooks are the sinks of every job whose handler has no route of
	// its own in Routes. A URL or header value may name environment
	// variables as ${NAME}; New refuses one that is not set.
	Webhooks []Webhook
	// On lists the notice kinds sent (failed, abandoned, missed, paused);
	// empty is all of them.
	On []string
	// Routes replaces Webhooks and On for the jobs running the named
	// handler (config jobs.<name>.notify); an entry without webhooks sends
	// nothing for them.
	Routes map[string]NotifyRoute
	// Backoff is the wait after a delivery's first failure, doubled after
	// each further one up to MaxBackoff; MaxAttempts deliveries are tried
	// before one is given up.
	Backoff, MaxBackoff time.Duration
	MaxAttempts         int
	// Timeout bounds one request to a webhook.
	Timeout time.Duration
	// Poll is the period of the look for notices written by other
	// replicas.
	Poll time.Duration
	// MaxAge is the age past which a notice not yet sent is dropped.
	MaxAge time.Duration
}

// NotifyRoute is where the notices of the jobs running one handler go.
type NotifyRoute struct {
	// Webhooks are the sinks; none sends nothing.
	Webhooks []Webhook
	// On lists the kinds sent; empty is all of them.
	On []string
}

// Webhook is one notification sink: each notice is sent to URL as a JSON
// body.
type Webhook struct {
	// Name identifies the sink in notification records; unique within a
	// route, no slashes or spaces.
	Name string
	// URL is an absolute http or https URL.
	URL string
	// Method is POST (""), PUT or PATCH.
	Method string
	// Headers are sent with every request.
	Headers map[string]string
}

// withDefaults returns o with its unset fields that every part reads the
// same way set: logger, location, shutdown grace and retention (every
// record the daemon writes, run records, requests, edits, notifications,
// expires after the one retention).
func (o Options) withDefaults() Options {
	if o.Retention <= 0 {
		o.Retention = record.DefaultRetention
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Location == nil {
		o.Location = time.UTC
	}
	if o.ShutdownGrace == 0 {
		o.ShutdownGrace = firepath.DefaultShutdownGrace
	}
	if o.ShutdownGrace < 0 {
		o.ShutdownGrace = 0
	}
	return o
}

// validate refuses what the parts cannot run with, naming the field.
func (o Options) validate() error {
	var errs []error
	if o.InstanceID == "" {
		errs = append(errs, errors.New("InstanceID is empty: name this replica (unique among the live ones)"))
	}
	if _, err := changestream.ParseMode(string(o.WatchMode)); err != nil {
		errs = append(errs, fmt.Errorf("WatchMode: %w", err))
	}
	if o.LockTTL < 0 || (o.LockTTL > 0 && o.LockTTL < firepath.MinLockTTL) {
		errs = append(errs, fmt.Errorf("LockTTL %s: want 0 (the default %s) or at least %s", o.LockTTL, firepath.DefaultLockTTL, firepath.MinLockTTL))
	}
	for name, n := range o.Categories {
		if n < 1 {
			errs = append(errs, fmt.Errorf("Categories[%q] %d: want at least 1 (leave the category out for no bound)", name, n))
		}
	}
	for field, v := range map[string]time.Duration{"PollInterval": o.PollInterval, "BackoffMin": o.BackoffMin,
		"BackoffMax": o.BackoffMax, "Retention": o.Retention, "StartingDeadline": o.StartingDeadline, "Catchup": o.Catchup} {
		if v < 0 {
			errs = append(errs, fmt.Errorf("%s %s: must not be negative", field, v))
		}
	}
	for field, v := range map[string]int{"Workers": o.Workers, "QueueLimit": o.QueueLimit} {
		if v < 0 {
			errs = append(errs, fmt.Errorf("%s %d: must not be negative", field, v))
		}
	}
	n := o.Notify.settings()
	if err := n.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("Notify: %w", err))
	} else if err := n.CheckEnv(os.LookupEnv); err != nil {
		errs = append(errs, fmt.Errorf("Notify: %w", err))
	}
	for name, r := range o.Notify.Routes {
		route := r.route()
		if err := route.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("Notify.Routes[%q]: %w", name, err))
		} else if err := route.CheckEnv(os.LookupEnv); err != nil {
			errs = append(errs, fmt.Errorf("Notify.Routes[%q]: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// watch returns base with the watch settings of o.
func (o Options) watch(base changestream.Options) changestream.Options {
	base.Mode = o.WatchMode
	base.PollInterval = o.PollInterval
	base.ResyncInterval = o.ResyncInterval
	base.BackoffMin, base.BackoffMax = o.BackoffMin, o.BackoffMax
	return base
}

// notifies reports whether any webhook is configured, globally or for a
// handler: without one no relay runs.
func (n Notifications) notifies() bool {
	if len(n.Webhooks) > 0 {
		return true
	}
	for _, r := range n.Routes {
		if len(r.Webhooks) > 0 {
			return true
		}
	}
	return false
}

// settings is n in the relay's form.
func (n Notifications) settings() notify.Settings {
	return notify.Settings{Route: NotifyRoute{Webhooks: n.Webhooks, On: n.On}.route(),
		Backoff: n.Backoff, MaxBackoff: n.MaxBackoff, MaxAttempts: n.MaxAttempts,
		Timeout: n.Timeout, Poll: n.Poll, MaxAge: n.MaxAge}
}

// routeFor is the route of the jobs running handler name.
func (n Notifications) routeFor(name string) notify.Route {
	if r, ok := n.Routes[name]; ok {
		return r.route()
	}
	return NotifyRoute{Webhooks: n.Webhooks, On: n.On}.route()
}

// route is r in the relay's form.
func (r NotifyRoute) route() notify.Route {
	out := notify.Route{On: r.On}
	for _, w := range r.Webhooks {
		out.Webhooks = append(out.Webhooks, notify.Webhook{Name: w.Name, URL: w.URL, Method: w.Method, Headers: w.Headers})
	}
	return out
}
