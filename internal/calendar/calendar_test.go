package calendar

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

func raw(t *testing.T, d bson.D) bson.Raw {
	t.Helper()
	b, err := bson.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestImport reads testdata/holidays.ics: a yearly date stays yearly, a
// rule by weekday is expanded up to Until less its EXDATE, a multi-day
// event is a range (DTEND exclusive), a single all-day event a date;
// timed and cancelled events are left out and listed.
func TestImport(t *testing.T) {
	f, err := os.Open("testdata/holidays.ics")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c, skipped, err := Import(f, "us-holidays", ImportOptions{Timezone: "America/New_York", Until: Date{2030, 12, 31}, Source: "holidays.ics"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"2020-11-26", "2021-11-25", "2022-11-24", "2023-11-23", "2024-11-28", "2025-11-27", "2026-11-26", "2027-07-05",
		"2027-11-25", "2029-11-22", "2030-11-28"}
	if got := fmt.Sprint(c.Dates); got != fmt.Sprint(want) {
		t.Errorf("dates %s\nwant  %s", got, want)
	}
	if got := fmt.Sprint(c.Yearly); got != "[12-25]" {
		t.Errorf("yearly %s, want [12-25]", got)
	}
	if len(c.Ranges) != 1 || c.Ranges[0].From.String() != "2027-12-27" || c.Ranges[0].To.String() != "2027-12-30" {
		t.Errorf("ranges %+v, want 2027-12-27 .. 2027-12-30", c.Ranges)
	}
	if c.Description != "US holidays (test)" || c.Source != "holidays.ics" || c.Timezone != "America/New_York" {
		t.Errorf("calendar %+v", c)
	}
	if len(skipped) != 2 || skipped[0].Summary != "Office party" || !strings.Contains(skipped[0].Reason, "timed event") ||
		skipped[1].Summary != "Cancelled day" {
		t.Errorf("skipped %+v", skipped)
	}
	// The document it makes decodes to the same calendar.
	back, err := Decode(raw(t, c.Document()))
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(back.Dates, back.Yearly, back.Ranges) != fmt.Sprint(c.Dates, c.Yearly, c.Ranges) || back.Timezone != c.Timezone {
		t.Errorf("round trip: %+v\nwant %+v", back, c)
	}
}

// TestHolds reads a slot's date in the calendar's zone, else the job's.
func TestHolds(t *testing.T) {
	c, err := Decode(raw(t, bson.D{{Key: "_id", Value: "h"}, {Key: "dates", Value: bson.A{"2027-07-05"}},
		{Key: "yearly", Value: bson.A{"12-25", "02-29"}}, {Key: "ranges", Value: bson.A{bson.D{{Key: "from", Value: "2027-12-27"}, {Key: "to", Value: "2027-12-30"}}}}}))
	if err != nil {
		t.Fatal(err)
	}
	ny, _ := time.LoadLocation("America/New_York")
	for _, x := range []struct {
		at   string
		loc  *time.Location
		want bool
	}{
		{"2027-07-05T12:00:00Z", nil, true},
		{"2027-07-05T02:00:00Z", ny, false}, // still the 4th in New York
		{"2027-07-06T02:00:00Z", ny, true},
		{"2031-12-25T09:00:00Z", nil, true},
		{"2028-02-29T09:00:00Z", nil, true},
		{"2027-12-26T23:59:59Z", nil, false},
		{"2027-12-27T00:00:00Z", nil, true},
		{"2027-12-30T23:59:59Z", nil, true},
		{"2027-12-31T00:00:00Z", nil, false},
	} {
		at, _ := time.Parse(time.RFC3339, x.at)
		if _, got := c.Holds(at, x.loc); got != x.want {
			t.Errorf("Holds(%s in %v) = %v, want %v", x.at, x.loc, got, x.want)
		}
	}
	zoned, err := Decode(raw(t, bson.D{{Key: "_id", Value: "z"}, {Key: "timezone", Value: "Asia/Tokyo"}, {Key: "dates", Value: bson.A{"2027-07-05"}}}))
	if err != nil {
		t.Fatal(err)
	}
	at, _ := time.Parse(time.RFC3339, "2027-07-04T16:00:00Z") // 01:00 on the 5th in Tokyo
	if _, got := zoned.Holds(at, ny); !got {
		t.Error("a calendar with a zone of its own reads dates in it, not in the job's")
	}
}

// TestDecodeRefusals lists what a calendars document may not be.
func TestDecodeRefusals(t *testing.T) {
	for _, c := range []struct {
		doc  bson.D
		want string
	}{
		{bson.D{{Key: "_id", Value: 7}}, "must be a string, the calendar's name"},
		{bson.D{{Key: "_id", Value: ""}}, "empty calendar name"},
		{bson.D{{Key: "_id", Value: "a"}, {Key: "date", Value: bson.A{"2027-01-01"}}}, "field date: unknown field"},
		{bson.D{{Key: "_id", Value: "a"}, {Key: "dates", Value: bson.A{"2027-13-01"}}}, `"2027-13-01", is not a date`},
		{bson.D{{Key: "_id", Value: "a"}, {Key: "dates", Value: "2027-01-01"}}, "must be an array of strings"},
		{bson.D{{Key: "_id", Value: "a"}, {Key: "yearly", Value: bson.A{"12-32"}}}, "is not a month and day"},
		{bson.D{{Key: "_id", Value: "a"}, {Key: "ranges", Value: bson.A{bson.D{{Key: "from", Value: "2027-01-05"}, {Key: "to", Value: "2027-01-01"}}}}}, "ends (2027-01-01) before it starts"},
		{bson.D{{Key: "_id", Value: "a"}, {Key: "timezone", Value: "Mars/Base"}}, "unknown time zone"},
	} {
		_, err := Decode(raw(t, c.doc))
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Decode(%v) = %v, want %q", c.doc, err, c.want)
		}
	}
}
