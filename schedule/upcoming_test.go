package schedule

import (
	"encoding/json"
	"testing"
	"time"
)

func TestUpcoming(t *testing.T) {
	type fire struct {
		at, meantFor, meantForLast, dropped string
		shifted, repeat                     bool
		note                                string
	}
	cases := []struct {
		name, zone, expr, from string
		want                   []fire
	}{
		{"shifted", "America/New_York", "30 2 * * *", "2027-03-13T12:00:00-05:00", []fire{
			{at: "2027-03-14T03:00:00-04:00", shifted: true, meantFor: "2027-03-14 02:30:00", meantForLast: "2027-03-14 02:30:00",
				note: "02:30 does not exist on 2027-03-14 in America/New_York (the clocks go from 02:00 to 03:00): fires at 03:00 EDT instead"},
			{at: "2027-03-15T02:30:00-04:00"},
		}},
		{"skipped, on schedule at the end of the jump", "America/New_York", "*/15 * * * *", "2027-03-14T01:40:00-05:00", []fire{
			{at: "2027-03-14T01:45:00-05:00"},
			{at: "2027-03-14T03:00:00-04:00", meantFor: "2027-03-14 02:00:00", meantForLast: "2027-03-14 02:45:00",
				note: "02:00 to 02:45 do not exist on 2027-03-14 in America/New_York (the clocks go from 02:00 to 03:00): not run apart from this fire at 03:00 EDT"},
			{at: "2027-03-14T03:15:00-04:00"},
		}},
		{"dropped", "America/New_York", "30 1 * * *", "2027-11-06T12:00:00-04:00", []fire{
			{at: "2027-11-07T01:30:00-04:00", dropped: "2027-11-07T01:30:00-05:00",
				note: "01:30 occurs twice on 2027-11-07 in America/New_York: fires once, at the first (EDT), not again at 01:30 EST"},
			{at: "2027-11-08T01:30:00-05:00"},
		}},
		{"repeated", "America/New_York", "*/30 * * * *", "2027-11-07T01:20:00-04:00", []fire{
			{at: "2027-11-07T01:30:00-04:00"},
			{at: "2027-11-07T01:00:00-05:00", repeat: true,
				note: "01:00 occurs twice on 2027-11-07 in America/New_York: this is the second time (EST), 1h after the first (EDT)"},
			{at: "2027-11-07T01:30:00-05:00", repeat: true,
				note: "01:30 occurs twice on 2027-11-07 in America/New_York: this is the second time (EST), 1h after the first (EDT)"},
			{at: "2027-11-07T02:00:00-05:00"},
		}},
		{"half an hour", "Australia/Lord_Howe", "15 2 * * *", "2027-10-02T12:00:00+10:30", []fire{
			{at: "2027-10-03T02:30:00+11:00", shifted: true, meantFor: "2027-10-03 02:15:00", meantForLast: "2027-10-03 02:15:00",
				note: "02:15 does not exist on 2027-10-03 in Australia/Lord_Howe (the clocks go from 02:00 to 02:30): fires at 02:30 +11 instead"},
		}},
		{"a skipped day", "Pacific/Apia", "0 9 * * *", "2011-12-29T12:00:00-10:00", []fire{
			{at: "2011-12-31T00:00:00+14:00", shifted: true, meantFor: "2011-12-30 09:00:00", meantForLast: "2011-12-30 09:00:00",
				note: "09:00 does not exist on 2011-12-30 in Pacific/Apia (the clocks go from 2011-12-30 00:00 to 2011-12-31 00:00): fires at 00:00 +14 instead"},
			{at: "2011-12-31T09:00:00+14:00"},
		}},
		{"plain mode has no notes", "UTC", "30 1 * * *", "2027-11-06T12:00:00Z", []fire{
			{at: "2027-11-07T01:30:00Z"},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sched := parseIn(t, c.expr, c.zone, ParseOptions{})
			got := Upcoming(sched, rfc(t, c.from), len(c.want))
			if len(got) != len(c.want) {
				t.Fatalf("%d fires, want %d: %+v", len(got), len(c.want), got)
			}
			for i, w := range c.want {
				g := got[i]
				var dropped string
				if !g.Dropped.IsZero() {
					dropped = g.Dropped.Format(time.RFC3339)
				}
				var mf, mfl string
				if !g.MeantFor.IsZero() {
					mf, mfl = g.MeantFor.String(), g.MeantForLast.String()
				}
				if !g.At.Equal(rfc(t, w.at)) || g.Shifted != w.shifted || g.Repeat != w.repeat ||
					mf != w.meantFor || mfl != w.meantForLast || g.Note != w.note ||
					(w.dropped != "" && !g.Dropped.Equal(rfc(t, w.dropped))) || (w.dropped == "") != g.Dropped.IsZero() {
					t.Errorf("fire %d = %+v (dropped %s)\nwant %+v", i, g, dropped, w)
				}
			}
		})
	}
	// Not a dstSchedule: bare instants.
	got := Upcoming(everySchedule{period: time.Hour}, rfc(t, "2027-11-07T05:30:00Z"), 2)
	if len(got) != 2 || !got[0].At.Equal(rfc(t, "2027-11-07T06:00:00Z")) || got[0].Note != "" {
		t.Fatalf("Upcoming(@every 1h) = %+v", got)
	}
	if got := Upcoming(everySchedule{period: time.Hour}, time.Now(), 0); len(got) != 0 {
		t.Fatalf("n = 0 gave %+v", got)
	}
	js, err := json.Marshal(struct{ A, B WallTime }{A: WallTime{2027, 3, 14, 2, 30, 0}})
	if err != nil || string(js) != `{"A":"2027-03-14 02:30:00","B":""}` {
		t.Fatalf("WallTime JSON = %s, %v", js, err)
	}
}
