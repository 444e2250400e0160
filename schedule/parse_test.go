package schedule

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestEveryRefused: periods that are not whole seconds from 1s to 24h are
// refused by every path that goes through the parser (ParseExpr,
// Schedule.Parse and Validate, Decode), with the reason and a valid
// example, instead of being rounded to a one-second timer.
func TestEveryRefused(t *testing.T) {
	cases := []struct {
		period, reason string
	}{
		{"-5s", "is negative"},
		{"-5m", "is negative"},
		{"0s", "less than 1s"},
		{"0h0m0s", "less than 1s"},
		{"1ns", "unit shorter than a second"},
		{"500ms", "unit shorter than a second"},
		{"1000ms", "unit shorter than a second"},
		{"10us", "unit shorter than a second"},
		{"3µs", "unit shorter than a second"},
		{"1.5s", "not a whole number of seconds"},
		{"1.5m", "not a whole number of seconds"},
		{"24h1s", "more than 24h"},
		{"25h", "more than 24h"},
		{"86401s", "more than 24h"},
		{"1441m", "more than 24h"},
		{"99999999999999999999999s", "more than 24h"},
		{"+5s", "has a sign"},
		{"", "without a period"},
		{"5", "is not a period"},
		{"s", "is not a period"},
		{"1d", "is not a period"},
		{"5m30", "is not a period"},
		{"30s5m", "is not a period"},
		{"1h1h", "is not a period"},
		{"5 m", "is not a period"},
		{"5M", "is not a period"},
	}
	for _, c := range cases {
		expr := strings.TrimSpace("@every " + c.period)
		t.Run(expr, func(t *testing.T) {
			check := func(path string, err error) {
				t.Helper()
				if err == nil {
					t.Fatalf("%s accepted %q", path, expr)
				}
				msg := err.Error()
				if !strings.Contains(msg, c.reason) || !strings.Contains(msg, `"@every 30s"`) {
					t.Fatalf("%s: %q does not say %q and give an example", path, msg, c.reason)
				}
			}
			_, err := ParseExpr(expr, nil)
			check("ParseExpr", err)
			_, err = ParseExpr("CRON_TZ=Europe/Berlin "+expr, nil)
			check("ParseExpr with a prefix", err)
			s := Schedule{ID: "e", CronExpr: expr, Enabled: true}
			_, err = s.Parse(time.UTC)
			check("Parse", err)
			err = s.Validate()
			check("Validate", err)
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Validate error does not wrap ErrInvalid: %v", err)
			}
			_, err = Decode(marshal(t, doc("e", expr)))
			check("Decode", err)
			var se *Error
			if !errors.As(err, &se) || se.Field != FieldCronExpr || se.ID != "e" {
				t.Fatalf("Decode error %#v does not name the job and field %s", err, FieldCronExpr)
			}
		})
	}
}

func TestEveryAccepted(t *testing.T) {
	cases := []struct {
		expr string
		want time.Duration
	}{
		{"@every 1s", time.Second},
		{"@every 30s", 30 * time.Second},
		{"@every 90s", 90 * time.Second},
		{"@every 5m", 5 * time.Minute},
		{"@every 90m", 90 * time.Minute},
		{"@every 1h30m", 90 * time.Minute},
		{"@every 1h0m30s", time.Hour + 30*time.Second},
		{"@every 2m0s", 2 * time.Minute},
		{"@every 05m", 5 * time.Minute},
		{"@every 24h", 24 * time.Hour},
		{"@every 1440m", 24 * time.Hour},
		{"@every 86400s", 24 * time.Hour},
		{"@every 23h59m60s", 24 * time.Hour},
		{"@every 0h0m1s", time.Second},
		{"@every\t5m", 5 * time.Minute},
		{"@every   5m  ", 5 * time.Minute},
		{"CRON_TZ=Asia/Seoul @every 1h", time.Hour},
		{"TZ=UTC @every 1h", time.Hour},
	}
	for _, c := range cases {
		sched, err := ParseExpr(c.expr, nil)
		if err != nil {
			t.Errorf("%q: %v", c.expr, err)
			continue
		}
		if ev, ok := sched.(everySchedule); !ok || ev.period != c.want {
			t.Errorf("%q parsed to %#v, want Every{%s}", c.expr, sched, c.want)
		}
	}
}

// TestTZPrefix: the edges of the CRON_TZ= / TZ= prefix.
func TestTZPrefix(t *testing.T) {
	from := time.Date(2024, 5, 10, 0, 30, 0, 0, time.UTC)
	accepted := []struct {
		expr string
		want time.Time // Next(from)
	}{
		{"CRON_TZ=UTC 0 9 * * *", time.Date(2024, 5, 10, 9, 0, 0, 0, time.UTC)},
		{"CRON_TZ=UTC   0 9 * * *", time.Date(2024, 5, 10, 9, 0, 0, 0, time.UTC)},
		{"CRON_TZ=UTC\t0 9 * * *", time.Date(2024, 5, 10, 9, 0, 0, 0, time.UTC)},
		{"  CRON_TZ=UTC 0 9 * * *  ", time.Date(2024, 5, 10, 9, 0, 0, 0, time.UTC)},
		{"TZ=Asia/Seoul 0 9 * * *", time.Date(2024, 5, 11, 0, 0, 0, 0, time.UTC)},
		{"CRON_TZ=Asia/Seoul @daily", time.Date(2024, 5, 10, 15, 0, 0, 0, time.UTC)},
	}
	for _, c := range accepted {
		sched, err := ParseExpr(c.expr, time.UTC)
		if err != nil {
			t.Errorf("%q: %v", c.expr, err)
			continue
		}
		if got := sched.Next(from); !got.Equal(c.want) {
			t.Errorf("%q: Next = %s, want %s", c.expr, got.UTC(), c.want)
		}
	}
	refused := []struct {
		expr, reason string
	}{
		{"CRON_TZ=UTC", "without an expression after it"},
		{"CRON_TZ=UTC  ", "without an expression after it"},
		{"TZ=Europe/Berlin", "without an expression after it"},
		{"CRON_TZ=", "names no zone"},
		{"TZ=", "names no zone"},
		{"TZ= 0 9 * * *", "names no zone"},
		{"CRON_TZ= 0 9 * * *", "names no zone"},
		{"CRON_TZ=Mars/Base 0 9 * * *", `unknown time zone "Mars/Base"`},
		{"CRON_TZ=Local 0 9 * * *", `unknown time zone "Local"`},
		{"CRON_TZ=Mars/Base", `unknown time zone "Mars/Base"`},
		{"CRON_TZ=UTC CRON_TZ=Asia/Seoul 0 9 * * *", "more than one time zone prefix"},
		{"CRON_TZ=UTC TZ=Asia/Seoul 0 9 * * *", "more than one time zone prefix"},
		{"CRON_TZ=UTC 61 * * * *", "cannot parse"},
	}
	for _, c := range refused {
		_, err := ParseExpr(c.expr, time.UTC)
		if err == nil {
			t.Errorf("%q accepted", c.expr)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, c.reason) || strings.Contains(msg, "runtime error") {
			t.Errorf("%q: %q, want it to say %q", c.expr, msg, c.reason)
		}
		// The same through the decoder, as the daemon sees it.
		if _, err := Decode(marshal(t, doc("p", c.expr))); err == nil || !strings.Contains(err.Error(), c.reason) {
			t.Errorf("Decode %q: %v", c.expr, err)
		}
	}
}
