package daemon

import (
	"errors"
	"iter"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/calendar"
	"github.com/cronswap/cronswap/schedule"
)

// noPolicy accepts every schedule.
type noPolicy struct{}

func (noPolicy) Check(schedule.Schedule) error          { return nil }
func (noPolicy) Jitter(schedule.Schedule) time.Duration { return 0 }

func calendarDoc(t *testing.T, d bson.D) bson.Raw {
	t.Helper()
	raw, err := bson.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// A slot is excluded on a date of the first calendar of exclude that holds
// it, the date read in the calendar's zone, else the job's (its CRON_TZ=,
// else timezone, else the daemon's); the record's reason names the
// calendar. The policy refuses a schedule excluding a calendar that is not
// in force; a deleted calendar's dates stay in force, with the problem.
func TestCalendarMatchReadsTheDateInTheRightZone(t *testing.T) {
	c := &calendarWatch{set: calendar.NewSet(slog.New(slog.DiscardHandler)), loc: time.UTC}
	sink := calendarSink{c}
	if _, err := sink.ReplaceAll(rawDocs(
		calendarDoc(t, bson.D{{Key: "_id", Value: "xmas"}, {Key: "yearly", Value: bson.A{"12-25"}}}),
		calendarDoc(t, bson.D{{Key: "_id", Value: "ny"}, {Key: "timezone", Value: "America/New_York"}, {Key: "dates", Value: bson.A{"2027-12-24"}}}),
	)); err != nil {
		t.Fatal(err)
	}
	// 2027-12-24T20:00Z is the 25th in Tokyo, the 24th in UTC and New York.
	slot := time.Date(2027, 12, 24, 20, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		s        schedule.Schedule
		calendar string
	}{
		{"job in UTC", schedule.Schedule{ID: "a", CronExpr: "0 20 * * *", Exclude: `["xmas"]`}, ""},
		{"job in Tokyo", schedule.Schedule{ID: "b", CronExpr: "0 5 * * *", Timezone: "Asia/Tokyo", Exclude: `["xmas"]`}, "xmas"},
		{"CRON_TZ wins", schedule.Schedule{ID: "c", CronExpr: "CRON_TZ=Asia/Tokyo 0 5 * * *", Timezone: "UTC", Exclude: `["xmas"]`}, "xmas"},
		{"the calendar's zone", schedule.Schedule{ID: "d", CronExpr: "0 5 * * *", Timezone: "Asia/Tokyo", Exclude: `["ny"]`}, "ny"},
		{"the first that holds it", schedule.Schedule{ID: "e", CronExpr: "0 20 * * *", Exclude: `["xmas","ny"]`}, "ny"},
		{"none", schedule.Schedule{ID: "f", CronExpr: "0 20 * * *"}, ""},
	} {
		x, ok := c.match(tc.s, slot)
		if ok != (tc.calendar != "") || x.Calendar != tc.calendar {
			t.Errorf("%s: excluded %v by %q, want by %q", tc.name, ok, x.Calendar, tc.calendar)
			continue
		}
		if ok && (x.Reason != "calendar:"+tc.calendar || !strings.Contains(x.Error, "is in calendar")) {
			t.Errorf("%s: %+v, want reason calendar:%s", tc.name, x, tc.calendar)
		}
	}

	p := c.policy(noPolicy{})
	unknown := schedule.Schedule{ID: "g", CronExpr: "0 9 * * *", Exclude: `["xmas","nope"]`}
	var se *schedule.Error
	if err := p.Check(unknown); !errors.As(err, &se) || se.Field != schedule.FieldExclude || !strings.Contains(err.Error(), `calendar "nope": no such calendar`) {
		t.Errorf("unknown calendar: %v, want a field exclude error naming it", err)
	}
	if x, ok := c.match(unknown, time.Date(2027, 7, 1, 9, 0, 0, 0, time.UTC)); !ok || x.Calendar != "nope" {
		t.Errorf("a slot of a schedule excluding a calendar never seen: %+v %v, want excluded", x, ok)
	}
	known := schedule.Schedule{ID: "h", CronExpr: "0 9 * * *", Exclude: `["xmas"]`}
	if err := p.Check(known); err != nil {
		t.Errorf("known calendar refused: %v", err)
	}
	id := bson.RawValue{Type: bson.TypeString, Value: bsonString("xmas")}
	sink.Delete(id)
	if err := p.Check(known); err == nil || !strings.Contains(err.Error(), calendar.ProblemDeleted) {
		t.Errorf("deleted calendar: %v, want the problem shown", err)
	}
	if x, ok := c.match(known, time.Date(2028, 12, 25, 9, 0, 0, 0, time.UTC)); !ok || x.Calendar != "xmas" {
		t.Errorf("a deleted calendar's dates: %+v %v, want still excluded", x, ok)
	}
}

// bsonString is the BSON encoding of a string value.
func bsonString(s string) []byte {
	_, b, err := bson.MarshalValue(s)
	if err != nil {
		panic(err)
	}
	return b
}

// rawDocs yields docs one at a time, as a full read does.
func rawDocs(docs ...bson.Raw) iter.Seq2[bson.Raw, error] {
	return func(yield func(bson.Raw, error) bool) {
		for _, d := range docs {
			if !yield(d, nil) {
				return
			}
		}
	}
}
