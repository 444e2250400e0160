package httpapi

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cronswap/cronswap/schedule"
	"github.com/cronswap/cronswap/scheduler"
)

// Row statuses of the schedules table and the job page, by precedence:
// a job with an error is StatusError whatever else holds (a job kept on
// its last known good schedule is armed and has an error).
const (
	StatusError    = "error"
	StatusDisabled = "disabled"
	StatusPaused   = "paused"
	// StatusEnded: the job's lifetime is over (end_at passed, max_runs
	// reached): its schedule is valid, it fires no more (Schedule.Ended).
	StatusEnded   = "ended"
	StatusArmed   = "armed"
	StatusUnarmed = "unarmed"
	// FilterMissed is the status filter of rows with a missed slot in the
	// last day (not a status of its own).
	FilterMissed = "missed"
)

// Paging of /api/schedule-rows.
const (
	DefaultRowLimit = 50
	MaxRowLimit     = 500
)

// missedWindow is how far back missed_last_day looks.
const missedWindow = 24 * time.Hour

// RowFilters returns the accepted values of the status filter of
// /api/schedule-rows.
func RowFilters() []string {
	return []string{StatusArmed, StatusPaused, StatusDisabled, StatusError, StatusEnded, StatusUnarmed, FilterMissed}
}

// RowSorts returns the accepted sort keys of /api/schedule-rows.
func RowSorts() []string { return []string{"id", "next_run", "category", "status", "cron_expr"} }

// RowStatus is the status of a schedule as the table shows it.
func RowStatus(s Schedule) string {
	switch {
	case s.LastError != "":
		return StatusError
	case !s.Enabled:
		return StatusDisabled
	case s.Ended != "":
		return StatusEnded
	case s.FailurePause != nil:
		return StatusPaused
	case s.Armed:
		return StatusArmed
	default:
		return StatusUnarmed
	}
}

// Row is one row of /api/schedule-rows: the /api/schedules object and
// what the table shows beside it.
type Row struct {
	Schedule
	// Status is RowStatus of the schedule.
	Status string `json:"status"`
	// NextRunLocal is the next run in the job's zone (RFC 3339 with its
	// offset); nil when not armed.
	NextRunLocal *string `json:"next_run_local"`
	// LastRun is the job's last run (record.LastRun); nil when none is
	// recorded.
	LastRun *LastRun `json:"last_run"`
	// MissedLastDay is how many slots of the job were recorded missed in
	// the last 24 hours.
	MissedLastDay int64 `json:"missed_last_day"`
}

// Rows is the body of /api/schedule-rows.
type Rows struct {
	// Total is how many rows match the filter.
	Total int `json:"total"`
	// Offset and Limit are the page's.
	Offset int `json:"offset"`
	Limit  int `json:"limit"`
	// Categories lists every category of the schedules, sorted.
	Categories []string `json:"categories"`
	// Items are the rows of the page.
	Items []Row `json:"items"`
}

// rowQuery is the parsed query of /api/schedule-rows.
type rowQuery struct {
	q, category, status, sort string
	desc                      bool
	offset, limit             int
}

// paramError is a bad query parameter: the 400 names it.
type paramError struct{ name, msg string }

func (e *paramError) Error() string { return "parameter " + e.name + ": " + e.msg }

// parseRowQuery reads and checks the query of /api/schedule-rows.
func parseRowQuery(v url.Values) (rowQuery, error) {
	known := []string{"q", "category", "status", "sort", "order", "offset", "limit"}
	for name, vs := range v {
		if !slices.Contains(known, name) {
			return rowQuery{}, &paramError{name, "unknown parameter (want " + strings.Join(known, ", ") + ")"}
		}
		if len(vs) > 1 {
			return rowQuery{}, &paramError{name, "given more than once"}
		}
	}
	rq := rowQuery{q: strings.ToLower(v.Get("q")), category: v.Get("category"), status: v.Get("status"),
		sort: cmp.Or(v.Get("sort"), "id"), limit: DefaultRowLimit}
	if rq.status != "" && !slices.Contains(RowFilters(), rq.status) {
		return rowQuery{}, &paramError{"status", fmt.Sprintf("%q is not one of %s", rq.status, strings.Join(RowFilters(), ", "))}
	}
	if !slices.Contains(RowSorts(), rq.sort) {
		return rowQuery{}, &paramError{"sort", fmt.Sprintf("%q is not one of %s", rq.sort, strings.Join(RowSorts(), ", "))}
	}
	switch v.Get("order") {
	case "", "asc":
	case "desc":
		rq.desc = true
	default:
		return rowQuery{}, &paramError{"order", fmt.Sprintf("%q is not asc or desc", v.Get("order"))}
	}
	var err error
	if rq.offset, err = intParam(v, "offset", 0, 0, -1); err != nil {
		return rowQuery{}, err
	}
	if rq.limit, err = intParam(v, "limit", DefaultRowLimit, 1, MaxRowLimit); err != nil {
		return rowQuery{}, err
	}
	return rq, nil
}

// intParam reads integer parameter name in [lo, hi] (hi < 0: no upper
// bound), def when absent.
func intParam(v url.Values, name string, def, lo, hi int) (int, error) {
	s := v.Get(name)
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < lo || (hi >= 0 && n > hi) {
		want := fmt.Sprintf("an integer >= %d", lo)
		if hi >= 0 {
			want = fmt.Sprintf("an integer from %d to %d", lo, hi)
		}
		return 0, &paramError{name, fmt.Sprintf("%q is not %s", s, want)}
	}
	return n, nil
}

// candidate is job i of the table with its failure pause (s) and, when
// the rows are sorted by it, its next run, before paging.
type candidate struct {
	i    int
	s    *Schedule
	next time.Time
}

// matches reports whether c passes the text, category and status filters
// (missed is checked apart).
func (rq rowQuery) matches(c candidate) bool {
	if rq.category != "" && c.s.Category != rq.category {
		return false
	}
	if rq.status != "" && rq.status != FilterMissed && RowStatus(*c.s) != rq.status {
		return false
	}
	if rq.q == "" {
		return true
	}
	for _, f := range []string{c.s.ID, c.s.CronExpr, c.s.Job, c.s.Category} {
		if strings.Contains(strings.ToLower(f), rq.q) {
			return true
		}
	}
	return false
}

// compare orders two candidates by the query's sort key, then by id.
func (rq rowQuery) compare(a, b candidate) int {
	var c int
	switch rq.sort {
	case "next_run":
		c = compareNext(a.next, b.next)
	case "category":
		c = strings.Compare(a.s.Category, b.s.Category)
	case "status":
		c = strings.Compare(RowStatus(*a.s), RowStatus(*b.s))
	case "cron_expr":
		c = strings.Compare(a.s.CronExpr, b.s.CronExpr)
	}
	if c == 0 {
		c = strings.Compare(a.s.ID, b.s.ID)
	}
	if rq.desc {
		return -c
	}
	return c
}

// compareNext orders next runs, the unarmed (zero) last.
func compareNext(a, b time.Time) int {
	switch {
	case a.IsZero() && b.IsZero():
		return 0
	case a.IsZero():
		return 1
	case b.IsZero():
		return -1
	}
	return a.Compare(b)
}

// categoriesOf returns the sorted distinct non-empty categories of list.
func categoriesOf(list []Schedule) []string {
	out := []string{}
	for _, s := range list {
		if s.Category != "" {
			out = append(out, s.Category)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// serveRows answers GET /api/schedule-rows.
func (a *api) serveRows(w http.ResponseWriter, r *http.Request) {
	rq, err := parseRowQuery(r.URL.Query())
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	body, err := a.rows(r.Context(), rq)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, body)
}

// rows filters, sorts and pages the engine's jobs (the table of its
// current version, with the failure pauses read now), then reads the
// engine's current state and the records of the page's rows only.
func (a *api) rows(ctx context.Context, rq rowQuery) (Rows, error) {
	byNext := rq.sort == "next_run"
	t := a.tables.get(a.o.Schedules, a.o.DefaultTimezone, byNext)
	pauses := t.withPauses(failurePauses(ctx, a.o.FailurePauses))
	var missedJobs map[string]int64
	if rq.status == FilterMissed {
		m, err := a.missed(ctx, nil)
		if err != nil {
			return Rows{}, err
		}
		missedJobs = m
	}
	cands := make([]candidate, 0, len(t.jobs))
	for i := range t.jobs {
		c := candidate{i: i, s: t.job(i, pauses)}
		if byNext {
			c.next = t.nexts[i]
		}
		if !rq.matches(c) || (missedJobs != nil && missedJobs[c.s.ID] == 0) {
			continue
		}
		cands = append(cands, c)
	}
	slices.SortFunc(cands, rq.compare)
	out := Rows{Total: len(cands), Offset: rq.offset, Limit: rq.limit, Categories: t.categories, Items: []Row{}}
	page := cands[min(rq.offset, len(cands)):min(rq.offset+rq.limit, len(cands))]
	ids := make([]string, 0, len(page))
	for _, c := range page {
		out.Items = append(out.Items, a.pageRow(t, c))
		if !c.s.InvalidID {
			ids = append(ids, c.s.ID)
		}
	}
	if live, err := a.liveMembers(ctx); err == nil {
		for i := range out.Items {
			out.Items[i].Owner = ownerOf(out.Items[i].Schedule, live)
			out.Items[i].ArmedBy = armedBy(out.Items[i].Schedule, live)
		}
	}
	return out, a.withRecords(ctx, out.Items, ids)
}

// pageRow is the row of candidate c of table t as the engine has the job
// now (Schedules.Get: its next run follows the clock, which the table's
// does not), with the failure pause c has; the table's entry, with no next
// run, when the job left the engine since the table was built.
func (a *api) pageRow(t *jobTable, c candidate) Row {
	st, ok := a.o.Schedules.Get(t.keys[c.i])
	if !ok {
		return a.row(*c.s, time.Time{})
	}
	s := FromStatus(st, a.o.DefaultTimezone)
	s.FailurePause = c.s.FailurePause
	return a.row(s, st.NextRun)
}

// withRecords fills last_run and missed_last_day of items from the
// records of ids (one read each).
func (a *api) withRecords(ctx context.Context, items []Row, ids []string) error {
	if a.o.Records == nil || len(ids) == 0 {
		return nil
	}
	last, err := a.o.Records.LastRuns(ctx, ids)
	if err != nil {
		return err
	}
	missed, err := a.missed(ctx, ids)
	if err != nil {
		return err
	}
	for i := range items {
		if items[i].InvalidID {
			continue
		}
		if lr, ok := last[items[i].ID]; ok {
			items[i].LastRun = &lr
		}
		items[i].MissedLastDay = missed[items[i].ID]
	}
	return nil
}

// missed reads the missed slots of the last day of ids (all jobs: nil).
func (a *api) missed(ctx context.Context, ids []string) (map[string]int64, error) {
	if a.o.Records == nil {
		return map[string]int64{}, nil
	}
	return a.o.Records.MissedSince(ctx, ids, a.now().Add(-missedWindow))
}

// row builds the table row of s (next: the engine's next run).
func (a *api) row(s Schedule, next time.Time) Row {
	return Row{Schedule: s, Status: RowStatus(s), NextRunLocal: localTime(next, s.Timezone, a.o.Location)}
}

// localTime formats t in zone tz (def when tz does not load); nil for
// the zero time.
func localTime(t time.Time, tz string, def *time.Location) *string {
	if t.IsZero() {
		return nil
	}
	v := t.In(zoneOf(tz, def)).Format(time.RFC3339)
	return &v
}

// zoneOf loads tz, or returns def (UTC when nil) when it does not load.
func zoneOf(tz string, def *time.Location) *time.Location {
	if tz != "" {
		if loc, err := schedule.LoadLocation(tz); err == nil {
			return loc
		}
	}
	if def == nil {
		return time.UTC
	}
	return def
}

// schedulesOf converts statuses to their API form.
func schedulesOf(list []scheduler.Status, defaultTZ string) []Schedule {
	out := make([]Schedule, 0, len(list))
	for _, s := range list {
		out = append(out, FromStatus(s, defaultTZ))
	}
	return out
}
