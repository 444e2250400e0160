package schedule

import (
	"testing"
	"time"

	"github.com/robfig/cron/v3"
)

// BenchmarkNext compares robfig's SpecSchedule.Next (plain) with
// dstSchedule.Next (shift) for a daily and an every-minute expression, in
// UTC (where ParseExpr keeps robfig's schedule) and in America/New_York,
// from an instant in the middle of a zone period and from one inside the
// repeated hour of a transition.
func BenchmarkNext(b *testing.B) {
	mid := time.Date(2026, 5, 10, 12, 0, 0, 0, time.UTC)
	repeated := time.Date(2027, 11, 7, 5, 30, 0, 0, time.UTC) // 01:30 EDT
	for _, c := range []struct {
		name, zone, expr string
		from             time.Time
	}{
		{"daily/UTC", "UTC", "0 9 * * *", mid},
		{"daily/NewYork", "America/New_York", "0 9 * * *", mid},
		{"minutely/UTC", "UTC", "* * * * *", mid},
		{"minutely/NewYork", "America/New_York", "* * * * *", mid},
		{"daily/NewYork/repeated-hour", "America/New_York", "30 1 * * *", repeated},
		// The dialect: H is a plain expression by the time it runs; L,
		// W and # put a day rule on robfig's schedule.
		{"hashed/UTC", "UTC", "H H * * *", mid},
		{"hashed/NewYork", "America/New_York", "H H * * *", mid},
		{"last-day/UTC", "UTC", "0 9 L * *", mid},
		{"last-day/NewYork", "America/New_York", "0 9 L * *", mid},
		{"weekday/UTC", "UTC", "0 9 15W * *", mid},
		{"weekday/NewYork", "America/New_York", "0 9 15W * *", mid},
		{"third-friday/UTC", "UTC", "0 9 ? * FRI#3", mid},
		{"third-friday/NewYork", "America/New_York", "0 9 ? * FRI#3", mid},
		{"last-friday-minutely/UTC", "UTC", "* * ? * 5L", mid},
		{"last-friday-minutely/NewYork", "America/New_York", "* * ? * 5L", mid},
		{"third-friday/NewYork/repeated-hour", "America/New_York", "30 1 ? * 0#1", repeated},
	} {
		for _, mode := range []DSTMode{DSTPlain, DSTShift} {
			loc, err := LoadLocation(c.zone)
			if err != nil {
				b.Fatal(err)
			}
			sched, err := ParseExprWith(c.expr, loc, ParseOptions{DST: mode, JobID: "daily_report"})
			if err != nil {
				b.Fatal(err)
			}
			b.Run(c.name+"/"+string(mode), func(b *testing.B) {
				var sink time.Time
				for b.Loop() {
					sink = sched.Next(c.from)
				}
				_ = sink
			})
		}
	}
}

// BenchmarkParse is what arming a schedule costs in the parser.
func BenchmarkParse(b *testing.B) {
	ny, err := LoadLocation("America/New_York")
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		loc  *time.Location
		opts ParseOptions
	}{
		{"UTC", time.UTC, ParseOptions{}},
		{"NewYork/plain", ny, ParseOptions{DST: DSTPlain}},
		{"NewYork/shift", ny, ParseOptions{}},
	} {
		b.Run(c.name, func(b *testing.B) {
			var sink cron.Schedule
			for b.Loop() {
				sink, _ = ParseExprWith("0 9 * * 1-5", c.loc, c.opts)
			}
			_ = sink
		})
	}
}
