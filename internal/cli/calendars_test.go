package cli_test

import (
	"encoding/json"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/cli"
)

// holidaysICS is a small iCalendar file: Christmas every year, a
// Thanksgiving rule by weekday with one EXDATE, a shutdown of four days,
// one observed holiday, and a timed event that is not a date.
const holidaysICS = "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//cronswap//test//EN\r\n" +
	"BEGIN:VEVENT\r\nUID:xmas\r\nSUMMARY:Christmas Day\r\nDTSTART;VALUE=DATE:20201225\r\nRRULE:FREQ=YEARLY\r\nEND:VEVENT\r\n" +
	"BEGIN:VEVENT\r\nUID:tg\r\nSUMMARY:Thanksgiving\r\nDTSTART;VALUE=DATE:20201126\r\nRRULE:FREQ=YEARLY;BYMONTH=11;BYDAY=4TH\r\nEXDATE;VALUE=DATE:20281123\r\nEND:VEVENT\r\n" +
	"BEGIN:VEVENT\r\nUID:shutdown\r\nSUMMARY:Year-end shutdown\r\nDTSTART;VALUE=DATE:20271227\r\nDTEND;VALUE=DATE:20271231\r\nEND:VEVENT\r\n" +
	"BEGIN:VEVENT\r\nUID:party\r\nSUMMARY:Office party\r\nDTSTART:20271217T180000Z\r\nEND:VEVENT\r\n" +
	"END:VCALENDAR\r\n"

// TestCalendarsImportAndNextSkipsThem: an .ics file imported as a
// calendar, listed and shown, and `next --exclude` marks the fires on its
// dates excluded with the calendar's name.
func TestCalendarsImportAndNextSkipsThem(t *testing.T) {
	e := newEnv(t)
	file := e.file("holidays.ics", holidaysICS)
	r := e.ok("calendars", "import", "us-holidays", file, "--tz", "America/New_York", "--until", "2030-12-31", "--by", "alice")
	if !strings.Contains(r.stdout, `calendar "us-holidays" created from holidays.ics: 10 dates, 1 yearly dates, 1 ranges`) ||
		!strings.Contains(r.stdout, `left out "Office party": a timed event`) {
		t.Fatalf("import: %v", r)
	}
	var doc bson.M
	if err := e.db.Collection("calendars").FindOne(ctx(t), bson.D{{Key: "_id", Value: "us-holidays"}}).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	if doc["timezone"] != "America/New_York" || doc["updated_by"] != "alice" || doc["source"] != "holidays.ics" {
		t.Fatalf("stored %v", doc)
	}
	// Importing again replaces it.
	if r := e.ok("calendars", "import", "us-holidays", file, "--until", "2030-12-31"); !strings.Contains(r.stdout, "replaced") {
		t.Fatalf("second import: %v", r)
	}
	r = e.ok("calendars", "get", "us-holidays")
	if !strings.Contains(r.stdout, "YEARLY       12-25") || !strings.Contains(r.stdout, "2027-11-25") || strings.Contains(r.stdout, "2028-11-23") ||
		!strings.Contains(r.stdout, "2027-12-27..2027-12-30") {
		t.Fatalf("get: %v", r)
	}
	if r := e.ok("calendars", "list"); !strings.Contains(r.stdout, "us-holidays") {
		t.Fatalf("list: %v", r)
	}

	// A daily 09:00 job excluding it: Christmas and the shutdown are
	// marked excluded, the days around them are not.
	r = e.ok("next", "0 9 * * *", "--exclude", "us-holidays", "--from", "2027-12-23T00:00:00Z", "-n", "10", "-o", "json")
	var fires []struct {
		At       string `json:"at"`
		Mark     string `json:"mark"`
		Calendar string `json:"calendar"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &fires); err != nil {
		t.Fatal(err)
	}
	var skipped []string
	for _, f := range fires {
		if f.Mark == "excluded" && f.Calendar == "us-holidays" {
			skipped = append(skipped, f.At[:10])
		}
	}
	if strings.Join(skipped, " ") != "2027-12-25 2027-12-27 2027-12-28 2027-12-29 2027-12-30" {
		t.Fatalf("skipped %v of %+v", skipped, fires)
	}
	r = e.ok("next", "0 9 * * *", "--exclude", "us-holidays", "--from", "2027-11-24T12:00:00Z", "-n", "2")
	if !strings.Contains(r.stdout, "2027-11-25T09:00:00Z  excluded: calendar:us-holidays: 2027-11-25 is in calendar \"us-holidays\"\n") {
		t.Fatalf("next text: %v", r)
	}
	if r := e.run("next", "0 9 * * *", "--exclude", "nope"); r.code != cli.ExitUserError || !strings.Contains(r.stderr, "--exclude nope: no such calendar") {
		t.Fatalf("unknown calendar: %v", r)
	}
	if r := e.ok("calendars", "delete", "us-holidays"); !strings.Contains(r.stdout, "deleted") {
		t.Fatalf("delete: %v", r)
	}
	if r := e.run("calendars", "get", "us-holidays"); r.code != cli.ExitUserError {
		t.Fatalf("get after delete: %v", r)
	}
}
