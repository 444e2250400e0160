package httpapi

import (
	"net/http"
	"time"

	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/scheduler"
)

// upcomingCount is how many next runs the job page lists.
const upcomingCount = 10

// Detail is the body of /api/schedules/{id}/detail.
type Detail struct {
	Schedule     Schedule  `json:"schedule"`
	Status       string    `json:"status"`
	NextRunLocal *string   `json:"next_run_local"`
	NextRuns     []NextRun `json:"next_runs"`
	Lock         *Lock     `json:"lock"`
	LastRun      *LastRun  `json:"last_run"`
}

// NextRun is one upcoming fire of a job (schedule.Upcoming).
type NextRun struct {
	At      time.Time `json:"at"`
	AtLocal string    `json:"at_local"`
	// Shifted and Repeat are schedule.Fire's; Note says in words what
	// daylight saving did ("" when nothing).
	Shifted bool   `json:"shifted"`
	Repeat  bool   `json:"repeat"`
	Note    string `json:"note"`
}

// Lock is a job's lock document as the job page shows it.
type Lock struct {
	// Holder is the instance running the job; "" when the lock is free.
	Holder     string     `json:"holder"`
	Fence      int64      `json:"fence"`
	LeaseUntil *time.Time `json:"lease_until"`
	RunID      string     `json:"run_id"`
	// Waiting is how many fires wait on the lock (overlap queue).
	Waiting int `json:"waiting"`
	// Cancel is true while a cancel of the running run is pending.
	Cancel bool `json:"cancel"`
}

// serveDetail answers GET /api/schedules/{id}/detail.
func (a *api) serveDetail(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	st, ok := a.o.Schedules.Get(id)
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no such schedule armed or rejected: " + id})
		return
	}
	sc := a.schedule(r.Context(), st)
	d := Detail{Schedule: sc, Status: RowStatus(sc), NextRuns: a.upcoming(st),
		NextRunLocal: localTime(st.NextRun, sc.Timezone, a.o.Location)}
	if a.o.Records != nil && !sc.InvalidID {
		lock, err := a.o.Records.Lock(r.Context(), id)
		if err != nil {
			writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
			return
		}
		d.Lock = lockOf(lock)
		rows := []Row{{Schedule: sc}}
		if err := a.withRecords(r.Context(), rows, []string{id}); err != nil {
			writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
			return
		}
		d.LastRun = rows[0].LastRun
	}
	writeJSON(w, http.StatusOK, d)
}

// upcoming lists the next fires of an armed job; none otherwise.
func (a *api) upcoming(st scheduler.Status) []NextRun {
	out := []NextRun{}
	if !st.Armed {
		return out
	}
	loc := zoneOf(st.Timezone, a.o.Location)
	sched, err := st.Schedule.Parse(loc)
	if err != nil {
		return out
	}
	return nextRuns(sched, loc, a.now(), upcomingCount)
}

// lockOf shows lock; nil for none.
func lockOf(l *record.LockDoc) *Lock {
	if l == nil {
		return nil
	}
	waiting, _ := l.Waiting()
	cancelRun, _ := l.PendingCancel()
	out := &Lock{Holder: l.Holder, Fence: l.Fence, RunID: l.RunID, Waiting: waiting, Cancel: cancelRun != "",
		LeaseUntil: utcPtr(l.LeaseUntil)}
	if l.State != record.LockRunning {
		out.LeaseUntil = nil
	}
	return out
}
