// Package httpapi serves the daemon's health, readiness, status and schedule
// views over HTTP: /healthz, /readyz, /api/status, /api/schedules,
// /api/schedules/{id} and, when configured, /metrics.
package httpapi

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/cronswap/cronswap/scheduler"
)

// Schedules is the read-only view of the engine the API serves.
type Schedules interface {
	// List returns every known job, sorted by id.
	List() []scheduler.Status
	// Get returns one job, and false when it is unknown.
	Get(id string) (scheduler.Status, bool)
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
	// DefaultTimezone is shown for schedules that name no zone.
	DefaultTimezone string
}

// Schedule is one element of /api/schedules (and the body of
// /api/schedules/{id}): fields of the job's schedule.Schedule, then the
// engine's state of the job. Job, category and dst are left out when empty
// (dst: when the schedule has the default, "shift").
type Schedule struct {
	// ID is the job id.
	ID string `json:"id"`
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
}

// FromStatus converts an engine status to its API form; defaultTZ is shown
// for a schedule that names no zone of its own.
func FromStatus(st scheduler.Status, defaultTZ string) Schedule {
	s := st.Schedule
	if s.Timezone == "" {
		s.Timezone = defaultTZ
	}
	out := Schedule{
		ID: s.ID, CronExpr: s.CronExpr, Timezone: s.Timezone, Enabled: s.Enabled, Job: s.Job, Category: s.Category,
		DST:   string(s.DST),
		Armed: st.Armed, LastError: st.LastError,
	}
	if !st.NextRun.IsZero() {
		v := st.NextRun.UTC().Format(time.RFC3339)
		out.NextRun = &v
	}
	return out
}

// New returns the HTTP handler. A nil Schedules serves an empty list, a nil
// Status a zero status, a nil Ready never ready.
func New(o Options) http.Handler {
	if o.Schedules == nil {
		o.Schedules = noSchedules{}
	}
	if o.Status == nil {
		o.Status = func() Status { return Status{} }
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if o.Ready == nil || !o.Ready() {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("not ready\n"))
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	mux.HandleFunc("GET /api/schedules", func(w http.ResponseWriter, _ *http.Request) {
		list := o.Schedules.List()
		out := make([]Schedule, 0, len(list))
		for _, s := range list {
			out = append(out, FromStatus(s, o.DefaultTimezone))
		}
		writeJSON(w, http.StatusOK, out)
	})
	mux.HandleFunc("GET /api/schedules/{id}", func(w http.ResponseWriter, r *http.Request) {
		s, ok := o.Schedules.Get(r.PathValue("id"))
		if !ok {
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "no such schedule armed or rejected: " + r.PathValue("id")})
			return
		}
		writeJSON(w, http.StatusOK, FromStatus(s, o.DefaultTimezone))
	})
	mux.HandleFunc("GET /api/status", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, o.Status())
	})
	if o.Metrics != nil {
		mux.Handle("GET /metrics", o.Metrics)
	}
	return mux
}

type noSchedules struct{}

func (noSchedules) List() []scheduler.Status            { return nil }
func (noSchedules) Get(string) (scheduler.Status, bool) { return scheduler.Status{}, false }

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
