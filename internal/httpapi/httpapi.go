// Package httpapi serves the daemon's health, readiness, status and schedule
// views over HTTP: /healthz, /readyz, /api/status, /api/schedules,
// /api/schedules/{id}, /api/schedules/{id}/timeline, the status page's
// /api/overview, /api/schedule-rows, /api/schedules/{id}/detail and
// /api/events (server-sent events), the page's actions (POST run-now,
// enable, disable, resume, retime, for an operator's token), the OpenAPI
// document of them all at /api/openapi.json and, when configured, /metrics
// and the runtime profiles under /debug/pprof/. See docs/http.md.
package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/cronswap/cronswap/internal/members"
	"github.com/cronswap/cronswap/internal/timeline"
	"github.com/cronswap/cronswap/internal/ui"
	"github.com/cronswap/cronswap/schedule"
	"github.com/cronswap/cronswap/scheduler"
)

// Schedules is the read-only view of the engine the API serves.
type Schedules interface {
	// List returns every known job, sorted by id.
	List() []scheduler.Status
	// Get returns one job, and false when it is unknown.
	Get(id string) (scheduler.Status, bool)
	// Version changes whenever List's jobs change other than in their
	// next runs (scheduler.Engine.Version): the status page's table is
	// built again only then.
	Version() uint64
}

// Timelines builds the job timelines /api/schedules/{id}/timeline serves
// (*timeline.Reader is one).
type Timelines interface {
	// Build returns the timeline of job id over [from, to] (zero ends:
	// the defaults); errors wrap timeline.ErrBadRange or
	// timeline.ErrNotFound when the range or the job is the problem.
	Build(ctx context.Context, id string, from, to time.Time) (timeline.Timeline, error)
}

// Status is the body of /api/status.
type Status struct {
	InstanceID     string     `json:"instance_id"`
	WatchMode      string     `json:"watch_mode"`
	LastEventAt    *time.Time `json:"last_event_at"`
	TokenSavedAt   *time.Time `json:"token_saved_at"`
	FullReloads    int64      `json:"full_reloads"`
	SchedulesArmed int        `json:"schedules_armed"`
	Ready          bool       `json:"ready"`
	Reconnects     int64      `json:"reconnects"`
	Readiness
}

// Readiness says why a replica is not ready, in /api/status, /api/overview
// and /readyz; every field is empty while it is ready.
type Readiness struct {
	// NotReady is the reason in words; /readyz answers it with its 503.
	NotReady string `json:"not_ready,omitempty"`
	// Reload is the full read under way (the collection, or the state
	// file of a warm start); nil when none runs.
	Reload *Reload `json:"reload,omitempty"`
	// LastError is the error of the watcher's last failed attempt,
	// ErrorSince when it first occurred, and ErrorRepeats whether it
	// will recur until the collection, the server or the configuration
	// changes (the watcher keeps retrying at its longest backoff).
	LastError    string     `json:"last_error,omitempty"`
	ErrorSince   *time.Time `json:"error_since,omitempty"`
	ErrorRepeats bool       `json:"error_repeats,omitempty"`
}

// Reload is a full read under way.
type Reload struct {
	// Reason is the full reload's reason (startup, resync, lost_position,
	// …), or state_file for a warm start.
	Reason    string    `json:"reason"`
	StartedAt time.Time `json:"started_at"`
	// Documents and Bytes are what was read so far, DocumentsPerSecond
	// the rate since StartedAt.
	Documents          int64 `json:"documents"`
	Bytes              int64 `json:"bytes"`
	DocumentsPerSecond int64 `json:"documents_per_second"`
}

// Options configures the handler.
type Options struct {
	// Schedules is what /api/schedules shows; nil shows none.
	Schedules Schedules
	// Status returns the current /api/status body.
	Status func() Status
	// Ready reports readiness for /readyz.
	Ready func() bool
	// Metrics serves /metrics; nil leaves it out.
	Metrics http.Handler
	// Pprof serves the runtime profiles of net/http/pprof under
	// /debug/pprof/ (config http.pprof); false leaves them out.
	Pprof bool
	// DefaultTimezone is shown for schedules that name no zone.
	DefaultTimezone string
	// Timelines serves /api/schedules/{id}/timeline; nil answers 404.
	Timelines Timelines
	// FailurePauses returns the jobs paused after consecutive failed
	// slots, by job id, for /api/schedules; nil shows none. A read that
	// fails leaves them out of that answer.
	FailurePauses func(ctx context.Context) (map[string]FailurePause, error)
	// Location is the daemon's default zone, for the local times of jobs
	// that name none; nil is UTC.
	Location *time.Location
	// Host is this replica's host name, shown by /api/overview.
	Host string
	// Members returns the live members for /api/overview; nil shows none.
	Members func(ctx context.Context) ([]members.Member, error)
	// Records reads run records and locks for the overview, the rows and
	// the job page; nil shows none.
	Records Records
	// Events feeds /api/events; nil serves a stream with the hello event
	// only.
	Events *Broker
	// Token, when not empty, is an operator's token named EnvToken
	// (CRONSWAP_HTTP_TOKEN). With Token or Tokens, every path but
	// /healthz and /readyz requires one of them.
	Token string
	// Tokens are the named tokens of the tokens file (LoadTokens), each
	// with its role.
	Tokens []Credential
	// Operator carries out the page's actions (POST run-now, enable,
	// disable, resume, retime) for an operator's token; nil leaves the
	// page read-only, saying WritesOff.
	Operator Operator
	// WritesOff says why there is no Operator, for the page.
	WritesOff string
	// EditChecker serves the retime form's preview; nil answers 404.
	EditChecker EditChecker
	// Logger logs the page's actions; nil logs nothing.
	Logger *slog.Logger
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// api is the state of one handler built by New.
type api struct {
	o      Options
	counts countCache
	tables tableCache
	// creds are the listener's tokens (credentials(o)).
	creds []Credential
}

func (a *api) now() time.Time { return a.o.Now() }

// snapshot returns the engine's jobs and their API form, with their
// failure pauses (index i of both is the same job).
func (a *api) snapshot(ctx context.Context) ([]scheduler.Status, []Schedule) {
	list := a.o.Schedules.List()
	out := schedulesOf(list, a.o.DefaultTimezone)
	withFailurePauses(ctx, a.o.FailurePauses, out)
	return list, out
}

// schedule returns the API form of one job of the engine, with its
// failure pause and its owner among the live members (none when they
// cannot be read).
func (a *api) schedule(ctx context.Context, st scheduler.Status) Schedule {
	one := []Schedule{FromStatus(st, a.o.DefaultTimezone)}
	withFailurePauses(ctx, a.o.FailurePauses, one)
	if live, err := a.liveMembers(ctx); err == nil {
		withOwners(one, live)
	}
	return one[0]
}

// Schedule is one element of /api/schedules (and the body of
// /api/schedules/{id}): fields of the job's schedule.Schedule, then the
// engine's state of the job. Job, category and dst are left out when empty
// (dst: when the schedule has the default, "shift").
type Schedule struct {
	// ID is the job id; for a refused document whose _id is not a job id
	// (InvalidID), a rendering of that _id.
	ID string `json:"id"`
	// InvalidID is true for a refused document whose _id is not a job id
	// (not a string, or too long). Such an entry is not a job: it is kept
	// apart from the job whose id equals its rendering, and it goes away
	// when the document is deleted.
	InvalidID bool `json:"invalid_id,omitempty"`
	// CronExpr is the armed expression (or the rejected one, for a job
	// never armed).
	CronExpr string `json:"cron_expr"`
	// Timezone is the schedule's zone, or the daemon's default zone when
	// the schedule names none.
	Timezone string `json:"timezone"`
	// Enabled is the schedule's enabled flag.
	Enabled bool `json:"enabled"`
	// Armed is true while a timer for the job is armed.
	Armed bool `json:"armed"`
	// NextRun is the next slot, RFC 3339 in UTC; null when not armed.
	NextRun *string `json:"next_run"`
	// Ended says why the job fires no more although its schedule is valid
	// and enabled ("after end_at", "max_runs reached":
	// scheduler.Status.Ended); absent otherwise.
	Ended string `json:"ended,omitempty"`
	// LastError is the error of the latest rejected document, "" when none.
	LastError string `json:"last_error"`
	// Job is the schedule's job field (the action it runs; the id when
	// absent).
	Job string `json:"job,omitempty"`
	// Category is the schedule's dispatch category.
	Category string `json:"category,omitempty"`
	// DST is the schedule's daylight-saving mode when it is not the
	// default: "plain".
	DST string `json:"dst,omitempty"`
	// FailurePause is set while the job is paused after consecutive
	// failed slots (its fires are not run until `cronswap schedules
	// resume`).
	FailurePause *FailurePause `json:"failure_pause,omitempty"`
	// Owner is the instance id of the live member that owns the job
	// (members.Owner: it claims the job's fires at once, the others after
	// the claim grace); "" when no live member is known, and for a refused
	// document whose _id is not a job id.
	Owner string `json:"owner"`
	// ArmedBy names the live members that arm the job's timer when they
	// divide the schedules (members.Armers among those that do: its owner,
	// then its next owner); absent when every live member arms every job,
	// and for a refused document whose _id is not a job id.
	ArmedBy []string `json:"armed_by,omitempty"`
}

// FromStatus converts an engine status to its API form; defaultTZ is shown
// for a schedule that names no zone of its own.
func FromStatus(st scheduler.Status, defaultTZ string) Schedule {
	s := st.Schedule
	if s.Timezone == "" {
		s.Timezone = defaultTZ
	}
	id, invalidID := schedule.RefusedID(s.ID)
	out := Schedule{
		ID: id, InvalidID: invalidID, CronExpr: s.CronExpr, Timezone: s.Timezone, Enabled: s.Enabled, Job: s.Job, Category: s.Category,
		DST:   string(s.DST),
		Armed: st.Armed, LastError: st.LastError, Ended: st.Ended,
	}
	if !st.NextRun.IsZero() {
		v := st.NextRun.UTC().Format(time.RFC3339)
		out.NextRun = &v
	}
	return out
}

// New returns the HTTP handler. A nil Schedules serves an empty list, a nil
// Status a zero status, a nil Ready never ready; with a Token or Tokens
// every path but the probes requires one of them.
func New(o Options) http.Handler {
	if o.Schedules == nil {
		o.Schedules = noSchedules{}
	}
	if o.Status == nil {
		o.Status = func() Status { return Status{} }
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Events == nil {
		o.Events = NewBroker(BrokerOptions{})
	}
	a := &api{o: o, creds: credentials(o)}
	mux, _ := newMux(a)
	return authenticate(a.creds, mux)
}

// router is a ServeMux that remembers its patterns (the route test
// compares them with openapi.json).
type router struct {
	*http.ServeMux
	patterns []string
}

// HandleFunc mounts h on pattern ("METHOD /path").
func (r *router) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	r.Handle(pattern, http.HandlerFunc(h))
}

// Handle mounts h on pattern ("METHOD /path").
func (r *router) Handle(pattern string, h http.Handler) {
	r.ServeMux.Handle(pattern, h)
	r.patterns = append(r.patterns, pattern)
}

// newMux mounts every route of a; it returns the mux and its patterns.
func newMux(a *api) (http.Handler, []string) {
	o := a.o
	mux := &router{ServeMux: http.NewServeMux()}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if o.Ready == nil || !o.Ready() {
			why := "not ready"
			if o.Status != nil {
				if r := o.Status().NotReady; r != "" {
					why += ": " + r
				}
			}
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(why + "\n"))
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	mux.HandleFunc("GET /api/schedules", func(w http.ResponseWriter, r *http.Request) {
		_, out := a.snapshot(r.Context())
		if live, err := a.liveMembers(r.Context()); err == nil {
			withOwners(out, live)
		}
		writeJSON(w, http.StatusOK, out)
	})
	mux.HandleFunc("GET /api/schedules/{id}", func(w http.ResponseWriter, r *http.Request) {
		s, ok := o.Schedules.Get(r.PathValue("id"))
		if !ok {
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "no such schedule armed or rejected: " + r.PathValue("id")})
			return
		}
		writeJSON(w, http.StatusOK, a.schedule(r.Context(), s))
	})
	mux.HandleFunc("GET /api/schedules/{id}/timeline", func(w http.ResponseWriter, r *http.Request) {
		serveTimeline(w, r, o.Timelines)
	})
	mux.HandleFunc("GET /api/schedules/{id}/detail", a.serveDetail)
	mux.HandleFunc("GET /api/status", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, o.Status())
	})
	mux.HandleFunc("GET /api/overview", a.serveOverview)
	mux.HandleFunc("GET /api/schedule-rows", a.serveRows)
	mux.HandleFunc("GET /api/events", func(w http.ResponseWriter, r *http.Request) {
		o.Events.serve(w, r, o.Status().InstanceID)
	})
	mux.HandleFunc("GET /api/openapi.json", serveOpenAPI)
	// The page's actions (docs/http.md#the-pages-actions): an operator's
	// token, a write connection, same origin, a JSON body.
	mux.HandleFunc("GET /api/session", a.serveSession)
	mux.HandleFunc("GET /api/schedules/{id}/preview", a.servePreview)
	mux.HandleFunc("POST /api/schedules/{id}/run-now", a.serveRunNow)
	mux.HandleFunc("POST /api/schedules/{id}/enable", a.serveEnabled(true))
	mux.HandleFunc("POST /api/schedules/{id}/disable", a.serveEnabled(false))
	mux.HandleFunc("POST /api/schedules/{id}/resume", a.serveResume)
	mux.HandleFunc("POST /api/schedules/{id}/retime", a.serveRetime)
	// The status page (internal/ui) at /ui/; / sends a browser there.
	mux.Handle("GET /ui/", http.StripPrefix("/ui", ui.Handler()))
	mux.Handle("GET /{$}", http.RedirectHandler("/ui/", http.StatusFound))
	if o.Metrics != nil {
		mux.Handle("GET /metrics", o.Metrics)
	}
	if o.Pprof {
		handlePprof(mux)
	}
	return mux, mux.patterns
}

// handlePprof mounts net/http/pprof's handlers on mux (not on
// http.DefaultServeMux, which the package's init fills).
func handlePprof(mux *router) {
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
}

// serveTimeline answers GET /api/schedules/{id}/timeline?from=&to= with
// the JSON of timeline.Timeline: from and to as `cronswap explain` takes
// them (RFC 3339, now, or relative like -2h), 400 for a bad range, 404 for
// a job nothing is known about.
func serveTimeline(w http.ResponseWriter, r *http.Request, tls Timelines) {
	id := r.PathValue("id")
	if tls == nil {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "timelines are not served by this listener"})
		return
	}
	q := r.URL.Query()
	for name, vs := range q {
		if (name == "from" || name == "to") && len(vs) > 1 {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": name + " given more than once"})
			return
		}
		if name != "from" && name != "to" {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "unknown parameter " + name + " (want from and to)"})
			return
		}
	}
	from, to, err := timeline.ParseWindow(q.Get("from"), q.Get("to"), time.Now())
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	tl, err := tls.Build(r.Context(), id, from, to)
	switch {
	case errors.Is(err, timeline.ErrBadRange):
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
	case errors.Is(err, timeline.ErrNotFound):
		writeJSON(w, http.StatusNotFound, map[string]string{"error": err.Error()})
	case err != nil:
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
	default:
		writeJSON(w, http.StatusOK, tl)
	}
}

type noSchedules struct{}

func (noSchedules) List() []scheduler.Status            { return nil }
func (noSchedules) Get(string) (scheduler.Status, bool) { return scheduler.Status{}, false }
func (noSchedules) Version() uint64                     { return 0 }

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
