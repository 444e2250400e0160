package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/admin"
	"github.com/cronswap/cronswap/internal/triggers"
	"github.com/cronswap/cronswap/schedule"
	"github.com/cronswap/cronswap/scheduler"
)

// Operator carries out the page's actions that write, through the write
// connection. *admin.Store is one: the page's actions run the command
// line's own code (run-now, schedules pause/resume, schedules set).
type Operator interface {
	// RunNow requests a run of job id now, named by by.
	RunNow(ctx context.Context, id string, args bson.Raw, by string) (bson.ObjectID, error)
	// SetEnabled disables or enables job id, writing updated_by.
	SetEnabled(ctx context.Context, id string, enabled bool, by string) (bool, error)
	// ResumeFailurePause clears the pause of job id after failures.
	ResumeFailurePause(ctx context.Context, id, by string) (bool, error)
	// SetSchedule checks an edit with the daemons' rules and writes it.
	SetSchedule(ctx context.Context, id string, e admin.ScheduleEdit) (admin.SetResult, error)
}

// EditChecker checks an edit of a schedule without writing it, as
// Operator.SetSchedule checks it (the retime form's preview);
// *admin.Store is one.
type EditChecker interface {
	CheckEdit(ctx context.Context, id string, e admin.ScheduleEdit) (admin.CheckedEdit, error)
}

// maxWriteBody bounds the JSON body of a write.
const maxWriteBody = 64 << 10

// Session is the body of GET /api/session: who the request's token names
// and whether the page may offer its actions.
type Session struct {
	// User is the token's name ("" on a listener without tokens).
	User string `json:"user"`
	// Role is the token's role ("" on a listener without tokens).
	Role Role `json:"role"`
	// CanWrite is true when the page's actions are open to this token.
	CanWrite bool `json:"can_write"`
	// ReadOnly says why they are not; "" when they are.
	ReadOnly string `json:"read_only,omitempty"`
}

// readOnly says why id may not write, "" when it may.
func (a *api) readOnly(id identity) string {
	switch {
	case len(a.creds) == 0:
		return "read-only: no token is configured (" + EnvToken + " or http.tokens_file), and the page's actions need an operator's"
	case id.Role != RoleOperator:
		return fmt.Sprintf("read-only: the token of %s has the role %s; the page's actions need an operator's", id.Name, id.Role)
	case a.o.Operator == nil:
		reason := a.o.WritesOff
		if reason == "" {
			reason = "this daemon has no write connection (http.write_mongo_uri)"
		}
		return "read-only: " + reason
	}
	return ""
}

func (a *api) serveSession(w http.ResponseWriter, r *http.Request) {
	id := identityOf(r)
	s := Session{User: id.Name, Role: id.Role, ReadOnly: a.readOnly(id)}
	s.CanWrite = s.ReadOnly == ""
	writeJSON(w, http.StatusOK, s)
}

// sameOrigin refuses a request a page of another origin made: the
// browser's Sec-Fetch-Site, when sent, must be same-origin, and its
// Origin, when sent, this listener's host. A client that is not a browser
// sends neither.
func sameOrigin(r *http.Request) error {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" {
		return fmt.Errorf("a request from another site (Sec-Fetch-Site: %s)", site)
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return fmt.Errorf("a request from another origin (Origin: %s, this listener: %s)", o, r.Host)
		}
	}
	return nil
}

// write runs the guard of every write endpoint: an operator's token, a
// write connection, a same-origin request and a JSON body (no cross-site
// form can send one), decoded into body (nil: it must be an empty object).
// It answers the refusal itself and returns false.
func (a *api) write(w http.ResponseWriter, r *http.Request, body any) (identity, bool) {
	id := identityOf(r)
	if reason := a.readOnly(id); reason != "" {
		writeJSON(w, http.StatusForbidden, map[string]string{"error": reason})
		return id, false
	}
	if err := sameOrigin(r); err != nil {
		writeJSON(w, http.StatusForbidden, map[string]string{"error": "refused: " + err.Error()})
		return id, false
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		writeJSON(w, http.StatusUnsupportedMediaType, map[string]string{"error": "a write needs a JSON body (Content-Type: application/json)"})
		return id, false
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxWriteBody))
	dec.DisallowUnknownFields()
	if body == nil {
		body = &struct{}{}
	}
	if err := dec.Decode(body); err != nil || dec.Decode(&struct{}{}) != io.EOF {
		msg := "the body must be one JSON object"
		if err != nil {
			msg += ": " + err.Error()
		}
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": msg})
		return id, false
	}
	return id, true
}

// actionDone logs a page action and answers it.
func (a *api) actionDone(w http.ResponseWriter, r *http.Request, by identity, action string, code int, body any) {
	a.log().Info("status page action", "action", action, "job_id", r.PathValue("id"), "by", by.Name)
	writeJSON(w, code, body)
}

// actionFailed answers an action the store refused: 404 for an unknown
// job, 400 for an invalid edit, 500 else.
func (a *api) actionFailed(w http.ResponseWriter, r *http.Request, action string, err error) {
	switch {
	case errors.Is(err, admin.ErrNotFound):
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no schedule " + r.PathValue("id")})
	case errors.Is(err, schedule.ErrInvalid):
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "refused, nothing written: " + err.Error()})
	default:
		a.log().Warn("status page action failed", "action", action, "job_id", r.PathValue("id"), "error", err)
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
	}
}

func (a *api) log() *slog.Logger {
	if a.o.Logger != nil {
		return a.o.Logger
	}
	return slog.New(slog.DiscardHandler)
}

// RunNowAnswer is the body of POST /api/schedules/{id}/run-now.
type RunNowAnswer struct {
	JobID     string `json:"job_id"`
	TriggerID string `json:"trigger_id"`
	RunID     string `json:"run_id"`
	By        string `json:"requested_by"`
}

func (a *api) serveRunNow(w http.ResponseWriter, r *http.Request) {
	by, ok := a.write(w, r, nil)
	if !ok {
		return
	}
	id := r.PathValue("id")
	tid, err := a.o.Operator.RunNow(r.Context(), id, nil, by.Name)
	if err != nil {
		a.actionFailed(w, r, "run-now", err)
		return
	}
	a.actionDone(w, r, by, "run-now", http.StatusAccepted,
		RunNowAnswer{JobID: id, TriggerID: tid.Hex(), RunID: triggers.RunIDOf(tid.Hex()), By: by.Name})
}

// EnabledAnswer is the body of POST /api/schedules/{id}/enable and
// /disable.
type EnabledAnswer struct {
	ID      string `json:"id"`
	Enabled bool   `json:"enabled"`
	// Changed is false when the job already was so.
	Changed bool `json:"changed"`
}

func (a *api) serveEnabled(enabled bool) http.HandlerFunc {
	action := map[bool]string{true: "enable", false: "disable"}[enabled]
	return func(w http.ResponseWriter, r *http.Request) {
		by, ok := a.write(w, r, nil)
		if !ok {
			return
		}
		id := r.PathValue("id")
		changed, err := a.o.Operator.SetEnabled(r.Context(), id, enabled, by.Name)
		if err != nil {
			a.actionFailed(w, r, action, err)
			return
		}
		a.actionDone(w, r, by, action, http.StatusOK, EnabledAnswer{ID: id, Enabled: enabled, Changed: changed})
	}
}

// ResumeAnswer is the body of POST /api/schedules/{id}/resume.
type ResumeAnswer struct {
	ID string `json:"id"`
	// Resumed is false when the job was not paused after failures.
	Resumed bool `json:"resumed"`
}

func (a *api) serveResume(w http.ResponseWriter, r *http.Request) {
	by, ok := a.write(w, r, nil)
	if !ok {
		return
	}
	id := r.PathValue("id")
	if _, known := a.o.Schedules.Get(id); !known {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no such schedule armed or rejected: " + id})
		return
	}
	resumed, err := a.o.Operator.ResumeFailurePause(r.Context(), id, by.Name)
	if err != nil {
		a.actionFailed(w, r, "resume", err)
		return
	}
	a.actionDone(w, r, by, "resume", http.StatusOK, ResumeAnswer{ID: id, Resumed: resumed})
}

// Retime is the body of POST /api/schedules/{id}/retime and the query of
// its preview: the new expression and zone, each left as it is when
// absent; a zone of "" removes the job's own (the daemon's default
// applies).
type Retime struct {
	CronExpr *string `json:"cron_expr,omitempty"`
	Timezone *string `json:"timezone,omitempty"`
}

// edit is r as the store's edit of job id's existing document, by by.
func (rt Retime) edit(by string) (admin.ScheduleEdit, error) {
	if rt.CronExpr == nil && rt.Timezone == nil {
		return admin.ScheduleEdit{}, errors.New("give cron_expr, timezone or both")
	}
	e := admin.ScheduleEdit{By: by, MustExist: true}
	if rt.CronExpr != nil {
		// Trimmed as schedules set trims it, unless too long: the
		// decoder's limit counts the white space too, and says so.
		expr := *rt.CronExpr
		if len(expr) <= schedule.MaxExprBytes {
			expr = strings.TrimSpace(expr)
		}
		e.CronExpr = &expr
	}
	if rt.Timezone != nil {
		tz := strings.TrimSpace(*rt.Timezone)
		e.Timezone = &tz
	}
	return e, nil
}

// RetimeAnswer is the body of POST /api/schedules/{id}/retime.
type RetimeAnswer struct {
	ID       string `json:"id"`
	CronExpr string `json:"cron_expr"`
	// Timezone is the job's zone after the edit ("" for the daemon's
	// default).
	Timezone string `json:"timezone"`
	// Warning is set when the daemons will not arm the job (an action
	// their config lacks); the edit is written all the same, as
	// schedules set writes it.
	Warning string `json:"warning,omitempty"`
}

func (a *api) serveRetime(w http.ResponseWriter, r *http.Request) {
	var rt Retime
	by, ok := a.write(w, r, &rt)
	if !ok {
		return
	}
	e, err := rt.edit(by.Name)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	id := r.PathValue("id")
	res, err := a.o.Operator.SetSchedule(r.Context(), id, e)
	if err != nil {
		a.actionFailed(w, r, "retime", err)
		return
	}
	out := RetimeAnswer{ID: id, CronExpr: res.Schedule.CronExpr, Timezone: res.Schedule.Timezone}
	if res.Warning != nil {
		out.Warning = res.Warning.Error()
	}
	a.actionDone(w, r, by, "retime", http.StatusOK, out)
}

// Preview is the body of GET /api/schedules/{id}/preview: what the job's
// schedule would be with the edit, checked with the daemons' rules, and
// its next runs; nothing is written.
type Preview struct {
	// Valid is false when the daemons would refuse the edit (Error says
	// why); the job then keeps its current timing.
	Valid bool   `json:"valid"`
	Error string `json:"error,omitempty"`
	// Warning is set when only the job's action is unknown to the
	// daemons' config: written, but not armed.
	Warning  string `json:"warning,omitempty"`
	CronExpr string `json:"cron_expr"`
	// Timezone is the zone the expression runs in: the job's own or the
	// daemon's default.
	Timezone string    `json:"timezone"`
	NextRuns []NextRun `json:"next_runs"`
}

func (a *api) servePreview(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if a.o.EditChecker == nil {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "previews are not served by this listener"})
		return
	}
	var rt Retime
	for name, vs := range r.URL.Query() {
		v := vs[0]
		switch {
		case len(vs) > 1:
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "parameter " + name + " given more than once"})
			return
		case name == "cron_expr":
			rt.CronExpr = &v
		case name == "timezone":
			rt.Timezone = &v
		default:
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "unknown parameter " + name + " (want cron_expr and timezone)"})
			return
		}
	}
	e, err := rt.edit("")
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	c, err := a.o.EditChecker.CheckEdit(r.Context(), id, e)
	p := Preview{NextRuns: []NextRun{}}
	switch {
	case errors.Is(err, admin.ErrNotFound):
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no schedule " + id})
		return
	case errors.Is(err, schedule.ErrInvalid):
		p.Error = err.Error()
		if e.CronExpr != nil {
			p.CronExpr = *e.CronExpr
		}
		if e.Timezone != nil {
			p.Timezone = *e.Timezone
		}
		writeJSON(w, http.StatusOK, p)
		return
	case err != nil:
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	}
	p.Valid, p.CronExpr = true, c.Schedule.CronExpr
	loc := zoneOf(c.Schedule.Timezone, a.o.Location)
	p.Timezone = loc.String()
	if c.Warning != nil {
		p.Warning = c.Warning.Error()
	}
	if sched, err := scheduler.Check(c.Schedule, a.o.Location, nil); err == nil && c.Schedule.Enabled {
		p.NextRuns = nextRuns(sched, loc, a.now(), upcomingCount)
	}
	writeJSON(w, http.StatusOK, p)
}

// nextRuns lists the next n fires of sched after from, in loc, as
// schedule.Upcoming marks them.
func nextRuns(sched cron.Schedule, loc *time.Location, from time.Time, n int) []NextRun {
	out := []NextRun{}
	for _, f := range schedule.Upcoming(sched, from.In(loc), n) {
		out = append(out, NextRun{At: f.At.UTC(), AtLocal: f.At.In(loc).Format(time.RFC3339),
			Shifted: f.Shifted, Repeat: f.Repeat, Note: f.Note})
	}
	return out
}
