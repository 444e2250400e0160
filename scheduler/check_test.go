package scheduler

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cronswap/cronswap/schedule"
)

// TestCheckIsWhatTheEngineArms: Check, which the command line runs before
// it writes a schedule, refuses exactly the schedules the engine refuses to
// arm, with the engine's own error text; a refusal by the policy (an
// unknown action) is a *PolicyError and any other wraps
// schedule.ErrInvalid, so a writer can tell them apart.
func TestCheckIsWhatTheEngineArms(t *testing.T) {
	known := testPolicy{check: func(s schedule.Schedule) error {
		if s.ActionName() != "report" {
			return &schedule.Error{ID: s.ID, Field: schedule.FieldJob, Reason: fmt.Sprintf("unknown action %q", s.ActionName())}
		}
		return nil
	}}
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		s      schedule.Schedule
		policy bool // refused by the policy alone
	}{
		{"valid", schedule.Schedule{ID: "a", CronExpr: "0 2 * * *", Job: "report", Enabled: true}, false},
		{"valid in a zone", schedule.Schedule{ID: "a", CronExpr: "30 2 * * *", Timezone: "Asia/Seoul", Job: "report", Enabled: true}, false},
		{"unknown action", schedule.Schedule{ID: "a", CronExpr: "0 2 * * *", Job: "nosuchaction", Enabled: true}, true},
		{"unknown action, paused", schedule.Schedule{ID: "a", CronExpr: "0 2 * * *", Job: "nosuchaction"}, false},
		{"bad expression", schedule.Schedule{ID: "a", CronExpr: "0 25 * * *", Job: "report", Enabled: true}, false},
		{"bad expression and action", schedule.Schedule{ID: "a", CronExpr: "0 25 * * *", Job: "nosuchaction", Enabled: true}, false},
		{"never fires", schedule.Schedule{ID: "a", CronExpr: "0 0 30 2 *", Job: "report", Enabled: true}, false},
		{"unknown zone", schedule.Schedule{ID: "a", CronExpr: "0 2 * * *", Timezone: "Mars/Base", Job: "report", Enabled: true}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := New(Options{Location: berlin, Policy: known, Shards: 1, Logger: quiet()})
			armed := e.Reload(c.s) != Rejected
			_, err := Check(c.s, berlin, known)
			if armed != (err == nil) {
				t.Fatalf("engine armed=%t, Check = %v: they disagree", armed, err)
			}
			if err == nil {
				return
			}
			st, _ := e.Get(c.s.ID)
			if st.LastError != err.Error() {
				t.Errorf("engine's last error %q, Check's %q", st.LastError, err)
			}
			var pe *PolicyError
			if got := errors.As(err, &pe); got != c.policy {
				t.Errorf("Check = %v: a *PolicyError %t, want %t", err, got, c.policy)
			}
			if !c.policy && !errors.Is(err, schedule.ErrInvalid) {
				t.Errorf("Check = %v does not wrap schedule.ErrInvalid", err)
			}
		})
	}
	// No policy: actions are not checked.
	if _, err := Check(schedule.Schedule{ID: "a", CronExpr: "0 2 * * *", Job: "nosuchaction", Enabled: true}, nil, nil); err != nil {
		t.Errorf("Check without a policy = %v", err)
	}
}

// TestDialectBadEditKeepsLastGood: a job armed on an expression of the
// dialect keeps its timer through edits to refused ones (a W without a
// day, #6, H/0, L in the hour), each shown as the job's last error, and
// is re-armed by a good one.
func TestDialectBadEditKeepsLastGood(t *testing.T) {
	e := newEngine(t, Options{})
	expect(t, e.Reload(sch("payroll", "0 9 LW * *")), Added)
	entry := mustEntry(t, e, "payroll")
	for _, c := range []struct{ expr, want string }{
		{"0 9 32W * *", "W needs a day from 1 to 31"},
		{"0 9 ? * 5#6", "the k of n#k is 1 to 5"},
		{"H/0 9 * * *", "the step of H is 0"},
		{"0 L * * *", "hour L: L, W and # are for day of month"},
	} {
		expect(t, e.Reload(sch("payroll", c.expr)), Rejected)
		st := mustGet(t, e, "payroll")
		if !st.Armed || st.CronExpr != "0 9 LW * *" || !strings.Contains(st.LastError, c.want) {
			t.Fatalf("after %q: %+v, want the last good timer and an error containing %q", c.expr, st, c.want)
		}
		if got := mustEntry(t, e, "payroll"); got != entry {
			t.Fatalf("after %q: robfig entry changed: %+v -> %+v", c.expr, entry, got)
		}
	}
	expect(t, e.Reload(sch("payroll", "H 9 ? * FRI#3")), Replaced)
	if st := mustGet(t, e, "payroll"); st.LastError != "" || st.CronExpr != "H 9 ? * FRI#3" || st.NextRun.Weekday() != time.Friday {
		t.Fatalf("after a good edit: %+v", st)
	}
}
