package scheduler

import (
	"testing"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/cronswap/cronswap/schedule"
)

func mustParse(t *testing.T, expr, tz string) cron.Schedule {
	t.Helper()
	sched, err := schedule.Schedule{ID: "t", CronExpr: expr, Timezone: tz, Enabled: true}.Parse(time.UTC)
	if err != nil {
		t.Fatalf("parse %q: %v", expr, err)
	}
	return sched
}

func ts(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestPrevActivation(t *testing.T) {
	cases := []struct {
		name, expr, tz, now, want string
	}{
		{"5 fields before today's", "0 9 * * *", "", "2024-05-10T08:59:59.999Z", "2024-05-09T09:00:00Z"},
		{"5 fields exactly on it", "0 9 * * *", "", "2024-05-10T09:00:00Z", "2024-05-10T09:00:00Z"},
		{"5 fields just after", "0 9 * * *", "", "2024-05-10T09:00:00.5Z", "2024-05-10T09:00:00Z"},
		{"5 fields late", "0 9 * * *", "", "2024-05-10T23:59:59Z", "2024-05-10T09:00:00Z"},
		{"6 fields", "*/5 * * * * *", "", "2024-05-10T12:00:07.3Z", "2024-05-10T12:00:05Z"},
		{"6 fields every second", "* * * * * *", "", "2024-05-10T12:00:07.999999999Z", "2024-05-10T12:00:07Z"},
		{"6 fields sparse seconds", "7,41 30 * * * *", "", "2024-05-10T12:29:00Z", "2024-05-10T11:30:41Z"},
		{"irregular minutes", "* 0 * * *", "", "2024-05-10T23:59:00Z", "2024-05-10T00:59:00Z"},
		{"hourly", "@hourly", "", "2024-05-10T10:59:59Z", "2024-05-10T10:00:00Z"},
		{"daily", "@daily", "", "2024-05-10T00:00:00Z", "2024-05-10T00:00:00Z"},
		{"weekly", "@weekly", "", "2024-05-10T12:00:00Z", "2024-05-05T00:00:00Z"},
		{"monthly", "@monthly", "", "2024-05-31T23:59:59Z", "2024-05-01T00:00:00Z"},
		{"yearly", "@yearly", "", "2024-12-31T23:59:59Z", "2024-01-01T00:00:00Z"},
		{"leap day", "0 0 29 2 *", "", "2027-06-01T00:00:00Z", "2024-02-29T00:00:00Z"},
		{"every 30s", "@every 30s", "", "2024-05-10T12:00:45.9Z", "2024-05-10T12:00:30Z"},
		{"every 30s on grid", "@every 30s", "", "2024-05-10T12:00:30Z", "2024-05-10T12:00:30Z"},
		{"every 90m", "@every 90m", "", "2024-05-10T02:59:59Z", "2024-05-10T01:30:00Z"},
		{"every 7s", "@every 7s", "", "2024-05-10T12:00:00Z", "2024-05-10T11:59:58Z"}, // 1715342398 = 7*245048914
		{"CRON_TZ prefix", "CRON_TZ=Asia/Seoul 0 9 * * *", "", "2024-05-10T00:30:00Z", "2024-05-10T00:00:00Z"},
		{"CRON_TZ prefix before", "CRON_TZ=Asia/Seoul 0 9 * * *", "", "2024-05-09T23:59:59Z", "2024-05-09T00:00:00Z"},
		{"timezone field", "0 9 * * *", "Asia/Seoul", "2024-05-10T00:30:00Z", "2024-05-10T00:00:00Z"},
		{"prefix wins over field", "CRON_TZ=UTC 0 9 * * *", "Asia/Seoul", "2024-05-10T08:00:00Z", "2024-05-09T09:00:00Z"},
		{"hourly in a half-hour zone", "@hourly", "Asia/Kolkata", "2024-05-10T10:10:00Z", "2024-05-10T09:30:00Z"},
		// Berlin springs forward on 2024-03-31 at 02:00 CET (01:00Z) to 03:00 CEST.
		{"daily across spring forward", "0 12 * * *", "Europe/Berlin", "2024-03-31T09:00:00Z", "2024-03-30T11:00:00Z"},
		{"daily after spring forward", "0 12 * * *", "Europe/Berlin", "2024-03-31T10:00:00Z", "2024-03-31T10:00:00Z"},
		{"hourly across spring forward", "0 * * * *", "Europe/Berlin", "2024-03-31T01:30:00Z", "2024-03-31T01:00:00Z"},
		// Berlin falls back on 2024-10-27 at 03:00 CEST (01:00Z) to 02:00 CET.
		{"hourly across fall back", "0 * * * *", "Europe/Berlin", "2024-10-27T00:59:59Z", "2024-10-27T00:00:00Z"},
		{"hourly in the repeated hour", "0 * * * *", "Europe/Berlin", "2024-10-27T01:30:00Z", "2024-10-27T01:00:00Z"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sched := mustParse(t, c.expr, c.tz)
			now := ts(t, c.now)
			got := prevActivation(sched, now)
			if want := ts(t, c.want); !got.Equal(want) {
				t.Fatalf("prevActivation(%q, %s) = %s, want %s", c.expr, c.now, got.UTC(), want)
			}
			checkPrev(t, sched, now, got)
		})
	}
}

// checkPrev asserts the defining properties of got = prevActivation(sched, now):
// got <= now, got is an activation, and the next activation is after now.
func checkPrev(t *testing.T, sched cron.Schedule, now, got time.Time) {
	t.Helper()
	if got.IsZero() {
		t.Fatalf("no activation before %s", now)
	}
	if got.After(now) {
		t.Fatalf("slot %s after now %s", got, now)
	}
	if got.Nanosecond() != 0 {
		t.Fatalf("slot %s is not a whole second", got)
	}
	if n := sched.Next(got.Add(-time.Second)); !n.Equal(got) {
		t.Fatalf("slot %s is not an activation (Next of a second before is %s)", got, n)
	}
	if n := sched.Next(got); !n.After(now) {
		t.Fatalf("activation %s lies between slot %s and now %s", n, got, now)
	}
}

// TestPrevActivationMatchesWalk compares prevActivation with a plain forward
// walk with Next, at many instants, in zones with DST transitions.
func TestPrevActivationMatchesWalk(t *testing.T) {
	specs := []struct {
		expr, tz string
		step     time.Duration
	}{
		{"30 2 * * *", "Europe/Berlin", 7*time.Hour + 13*time.Minute},
		{"30 1 * * *", "America/New_York", 5*time.Hour + 7*time.Minute},
		{"0 */2 * * *", "America/Sao_Paulo", 3*time.Hour + 11*time.Minute},
		{"15 3 * * 1-5", "Australia/Lord_Howe", 9*time.Hour + 1*time.Minute},
		{"@every 45m", "", 47 * time.Minute},
	}
	for _, sp := range specs {
		sched := mustParse(t, sp.expr, sp.tz)
		start := ts(t, "2018-01-01T00:00:00Z")
		end := ts(t, "2019-01-01T00:00:00Z")
		// walk: a, b are consecutive activations with a <= now < b.
		a := sched.Next(start.Add(-30 * 24 * time.Hour))
		for a.Before(start) && !sched.Next(a).After(start) {
			a = sched.Next(a)
		}
		b := sched.Next(a)
		for now := start.Add(time.Second / 3); now.Before(end); now = now.Add(sp.step) {
			for !b.After(now) {
				a, b = b, sched.Next(b)
			}
			if got := prevActivation(sched, now); !got.Equal(a) {
				t.Fatalf("%s (%s) at %s: got %s, walk says %s", sp.expr, sp.tz, now.UTC(), got.UTC(), a.UTC())
			}
		}
	}
}

type neverSchedule struct{}

func (neverSchedule) Next(time.Time) time.Time { return time.Time{} }

func TestPrevActivationNone(t *testing.T) {
	if got := prevActivation(neverSchedule{}, time.Now()); !got.IsZero() {
		t.Fatalf("got %s for a schedule that never fires", got)
	}
}

func TestClaim(t *testing.T) {
	sched := mustParse(t, "*/10 * * * * *", "")
	var st slotState
	at := func(s string) time.Time { return ts(t, s) }

	claim := func(now string) (time.Time, bool) { return st.claim(sched, at(now)) }
	if s, ok := claim("2024-05-10T12:00:10.002Z"); !ok || !s.Equal(at("2024-05-10T12:00:10Z")) {
		t.Fatalf("first claim: %s %v", s, ok)
	}
	// A second run for the same activation (e.g. a replaced entry's late
	// goroutine) gets no slot: the next activation has not come yet.
	if s, ok := claim("2024-05-10T12:00:10.5Z"); ok {
		t.Fatalf("duplicate claim got slot %s", s)
	}
	// A goroutine delayed past the next activation computes 12:00:30 ...
	if s, ok := claim("2024-05-10T12:00:30.1Z"); !ok || !s.Equal(at("2024-05-10T12:00:30Z")) {
		t.Fatalf("delayed claim: %s %v", s, ok)
	}
	// ... and a clock that stepped back gets the activation after the last
	// slot if it has come, else nothing: never a slot twice or backwards.
	if s, ok := claim("2024-05-10T12:00:25Z"); ok {
		t.Fatalf("claim after clock step back got slot %s", s)
	}
	if s, ok := claim("2024-05-10T12:00:40Z"); !ok || !s.Equal(at("2024-05-10T12:00:40Z")) {
		t.Fatalf("claim: %s %v", s, ok)
	}
	if s, ok := claim("2024-05-10T12:00:40.3Z"); ok {
		t.Fatalf("duplicate claim got slot %s", s)
	}
	// Two slots behind (last=12:00:40, computed 12:00:40 again, but now is
	// past 12:00:50): the activation after the last one is used.
	st.last = at("2024-05-10T12:00:50Z")
	if s, ok := claim("2024-05-10T12:01:05Z"); !ok || !s.Equal(at("2024-05-10T12:01:00Z")) {
		t.Fatalf("claim: %s %v", s, ok)
	}
}

func TestEverySchedule(t *testing.T) {
	sched := mustParse(t, "@every 30s", "")
	// Replicas asking at different instants agree on the grid.
	for _, now := range []string{"2024-05-10T12:00:00.001Z", "2024-05-10T12:00:17Z", "2024-05-10T12:00:29.999Z"} {
		if got := sched.Next(ts(t, now)); !got.Equal(ts(t, "2024-05-10T12:00:30Z")) {
			t.Fatalf("Next(%s) = %s", now, got)
		}
	}
	if got := sched.Next(ts(t, "2024-05-10T12:00:30Z")); !got.Equal(ts(t, "2024-05-10T12:01:00Z")) {
		t.Fatalf("Next on the grid = %s", got)
	}
	loc, _ := time.LoadLocation("Asia/Seoul")
	if got := sched.Next(ts(t, "2024-05-10T12:00:10Z").In(loc)); got.Location() != loc {
		t.Fatalf("Next changed the location to %s", got.Location())
	}
	pre := mustParse(t, "@every 7s", "").(interface {
		Next(time.Time) time.Time
		Prev(time.Time) time.Time
	})
	if got := pre.Prev(time.Unix(-1, 500)); got.Unix() != -7 {
		t.Fatalf("Prev before the epoch = %d, want -7", got.Unix())
	}
	if got := pre.Next(time.Unix(-7, 0)); got.Unix() != 0 {
		t.Fatalf("Next before the epoch = %d, want 0", got.Unix())
	}
}

func TestLastSlot(t *testing.T) {
	now := time.Date(2026, 3, 10, 9, 30, 15, 0, time.UTC)
	e := New(Options{Fire: func(schedule.Due) {}, Logger: quiet(), Now: func() time.Time { return now }})
	seoul := sch("seoul", "0 9 * * *")
	seoul.Timezone = "Asia/Seoul"
	off := sch("off", "0 * * * *")
	off.Enabled = false
	for _, s := range []schedule.Schedule{sch("hourly", "0 * * * *"), seoul, off} {
		if o := e.Reload(s); o == Rejected {
			t.Fatalf("%s rejected: %+v", s.ID, mustGet(t, e, s.ID))
		}
	}
	if got, ok := e.LastSlot("hourly", now); !ok || !got.Equal(time.Date(2026, 3, 10, 9, 0, 0, 0, time.UTC)) {
		t.Errorf("hourly: %v %v", got, ok)
	}
	// 09:00 in Seoul is 00:00 UTC.
	if got, ok := e.LastSlot("seoul", now); !ok || !got.Equal(time.Date(2026, 3, 10, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("seoul: %v %v", got, ok)
	}
	if _, ok := e.LastSlot("unknown", now); ok {
		t.Error("an unknown job has a last slot")
	}
	if _, ok := e.LastSlot("off", now); ok {
		t.Error("a disabled job has a last slot")
	}
}

// countingSchedule counts the Next calls made on a schedule.
type countingSchedule struct {
	cron.Schedule
	calls *int
}

func (c countingSchedule) Next(t time.Time) time.Time {
	*c.calls++
	return c.Schedule.Next(t)
}

// TestClaimPlanned: claim with planned activations (what firing.Next
// handed to robfig) gives exactly the slot it finds by searching, whatever
// the planned values are, and uses no Next at all when one of them lies
// within the second up to now.
func TestClaimPlanned(t *testing.T) {
	for _, expr := range []string{"*/10 * * * * *", "* * * * * *", "0 9 * * *", "@every 7s", "0 * * * *"} {
		sched := mustParse(t, expr, "Europe/Berlin")
		start := ts(t, "2024-03-31T00:59:00Z") // across a DST change at 01:00Z
		for i := range 400 {
			now := start.Add(time.Duration(i) * 1237 * time.Millisecond)
			// planned candidates: the run's own activation, the one after
			// it, older and stale ones, and none.
			own := prevActivation(sched, now)
			before := prevActivation(sched, own.Add(-time.Nanosecond))
			cands := [][]time.Time{
				{own}, {sched.Next(own), own}, {own, sched.Next(own)}, {before}, {before, own},
				{sched.Next(now)}, {sched.Next(now.Add(-time.Hour))}, {time.Time{}, own}, nil,
			}
			for _, planned := range cands {
				var st slotState
				calls := 0
				got, ok := st.claim(countingSchedule{sched, &calls}, now, planned...)
				if !ok || !got.Equal(own) {
					t.Fatalf("%s at %s, planned %v: slot %s %v, want %s", expr, now, planned, got, ok, own)
				}
				usable := false
				for _, p := range planned {
					usable = usable || (!p.IsZero() && !p.After(now) && now.Sub(p) < time.Second)
				}
				if usable && calls != 0 {
					t.Fatalf("%s at %s: %d Next calls although planned %v holds the slot", expr, now, calls, planned)
				}
			}
		}
	}
}
