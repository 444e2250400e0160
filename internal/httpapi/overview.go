package httpapi

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/cronswap/cronswap/internal/members"
)

// CountsMaxAge is how long the overview's counts over job_runs are reused:
// no index serves them, so they are read at most this often, and only
// when /api/overview is asked.
const CountsMaxAge = 10 * time.Second

// firesWindow is how far back fires_last_hour looks.
const firesWindow = time.Hour

// Overview is the body of /api/overview.
type Overview struct {
	GeneratedAt     time.Time  `json:"generated_at"`
	InstanceID      string     `json:"instance_id"`
	Host            string     `json:"host"`
	WatchMode       string     `json:"watch_mode"`
	Ready           bool       `json:"ready"`
	LastEventAt     *time.Time `json:"last_event_at"`
	TokenSavedAt    *time.Time `json:"token_saved_at"`
	TokenAgeSeconds *float64   `json:"token_age_seconds"`
	// Members are the live members, ordered by instance id.
	Members []OverviewMember `json:"members"`
	Jobs    JobCounts        `json:"jobs"`
	// FiresLastHour counts the run records of the last hour by status.
	FiresLastHour map[string]int64 `json:"fires_last_hour"`
	// MissedLastDay is how many slots were recorded missed in the last
	// 24 hours.
	MissedLastDay int64 `json:"missed_last_day"`
	// CountsAt is when FiresLastHour and MissedLastDay were read (they
	// are reused for CountsMaxAge).
	CountsAt *time.Time `json:"counts_at"`
	Readiness
}

// OverviewMember is one live member in /api/overview.
type OverviewMember struct {
	InstanceID          string    `json:"instance_id"`
	Host                string    `json:"host"`
	PID                 int       `json:"pid"`
	Incarnation         string    `json:"incarnation"`
	HeartbeatAt         time.Time `json:"heartbeat_at"`
	HeartbeatAgeSeconds float64   `json:"heartbeat_age_seconds"`
	LeaseUntil          time.Time `json:"lease_until"`
	// ArmedJobs is how many of the jobs it arms (members.ArmedCounts:
	// its share when it divides the schedules, every job otherwise).
	ArmedJobs int `json:"armed_jobs"`
	// Divides is true when the member divides the schedules.
	Divides bool `json:"divides"`
	// OwnedJobs is how many of the jobs it owns (members.OwnedCounts
	// over every job, enabled or not: what `cronswap members list` shows).
	OwnedJobs int `json:"owned_jobs"`
	// Self is true for the replica that answered.
	Self bool `json:"self"`
}

// JobCounts counts the jobs of the engine; a job may count in several.
type JobCounts struct {
	Total    int `json:"total"`
	Armed    int `json:"armed"`
	Paused   int `json:"paused"`
	Disabled int `json:"disabled"`
	Erroring int `json:"erroring"`
}

// countCache holds the overview's last counts over job_runs.
type countCache struct {
	mu     sync.Mutex
	at     time.Time
	fires  map[string]int64
	missed int64
}

// get returns the counts, read again through rec when older than
// CountsMaxAge. Concurrent callers wait for one read.
func (c *countCache) get(ctx context.Context, rec Records, now time.Time) (map[string]int64, int64, time.Time, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && now.Sub(c.at) < CountsMaxAge {
		return c.fires, c.missed, c.at, nil
	}
	fires, err := rec.FiresSince(ctx, now.Add(-firesWindow))
	if err != nil {
		return nil, 0, time.Time{}, err
	}
	missed, err := rec.MissedSince(ctx, nil, now.Add(-missedWindow))
	if err != nil {
		return nil, 0, time.Time{}, err
	}
	var n int64
	for _, v := range missed {
		n += v
	}
	c.at, c.fires, c.missed = now, fires, n
	return fires, n, now, nil
}

// serveOverview answers GET /api/overview.
func (a *api) serveOverview(w http.ResponseWriter, r *http.Request) {
	ov, err := a.overview(r.Context())
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, ov)
}

func (a *api) overview(ctx context.Context) (Overview, error) {
	now := a.now().UTC()
	st := a.o.Status()
	t := a.tables.get(a.o.Schedules, a.o.DefaultTimezone, false)
	ov := Overview{GeneratedAt: now, InstanceID: st.InstanceID, Host: a.o.Host, WatchMode: st.WatchMode, Ready: st.Ready,
		LastEventAt: st.LastEventAt, TokenSavedAt: st.TokenSavedAt, Members: []OverviewMember{},
		Jobs: countJobs(t, t.withPauses(failurePauses(ctx, a.o.FailurePauses))), FiresLastHour: map[string]int64{},
		Readiness: st.Readiness}
	if st.TokenSavedAt != nil {
		age := now.Sub(*st.TokenSavedAt).Seconds()
		ov.TokenAgeSeconds = &age
	}
	if err := a.withMembers(ctx, &ov, t.ids, now); err != nil {
		return Overview{}, err
	}
	if a.o.Records != nil {
		fires, missed, at, err := a.counts.get(ctx, a.o.Records, now)
		if err != nil {
			return Overview{}, err
		}
		ov.FiresLastHour, ov.MissedLastDay, ov.CountsAt = fires, missed, &at
	}
	return ov, nil
}

// withMembers fills the live members of ov and how many of the jobs ids
// (jobIDs of the engine's jobs) each owns (members.OwnedCounts: the count
// `cronswap members list` shows).
func (a *api) withMembers(ctx context.Context, ov *Overview, ids []string, now time.Time) error {
	live, err := a.liveMembers(ctx)
	if err != nil {
		return err
	}
	owned, armed := members.OwnedCounts(ids, live), members.ArmedCounts(ids, live)
	for _, m := range live {
		ov.Members = append(ov.Members, OverviewMember{InstanceID: m.ID, Host: m.Host, PID: m.PID, Incarnation: m.Incarnation,
			HeartbeatAt: m.HeartbeatAt.UTC(), HeartbeatAgeSeconds: now.Sub(m.HeartbeatAt).Seconds(),
			LeaseUntil: m.LeaseUntil.UTC(), OwnedJobs: owned[m.ID], ArmedJobs: armed[m.ID], Divides: m.Divides,
			Self: m.ID == ov.InstanceID})
	}
	return nil
}

// countJobs counts the jobs of t by state, with their failure pauses
// from pauses.
func countJobs(t *jobTable, pauses paused) JobCounts {
	c := JobCounts{Total: len(t.jobs)}
	for i := range t.jobs {
		s := t.job(i, pauses)
		if s.Armed {
			c.Armed++
		}
		if s.FailurePause != nil {
			c.Paused++
		}
		if !s.Enabled {
			c.Disabled++
		}
		if s.LastError != "" {
			c.Erroring++
		}
	}
	return c
}
