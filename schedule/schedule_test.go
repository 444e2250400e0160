package schedule

import (
	"errors"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/lifetime"
)

func marshal(t *testing.T, d bson.D) bson.Raw {
	t.Helper()
	raw, err := bson.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func doc(id any, expr any, more ...bson.E) bson.D {
	d := bson.D{{Key: FieldID, Value: id}, {Key: FieldCronExpr, Value: expr}}
	return append(d, more...)
}

func TestDecodeValid(t *testing.T) {
	updated := time.Date(2024, 5, 10, 8, 0, 0, 0, time.UTC)
	cases := []struct {
		name string
		doc  bson.D
		want Schedule
	}{
		{"5 fields", doc("daily_report", "0 9 * * *"),
			Schedule{ID: "daily_report", CronExpr: "0 9 * * *", Enabled: true}},
		{"6 fields", doc("fast", "*/5 * * * * *"),
			Schedule{ID: "fast", CronExpr: "*/5 * * * * *", Enabled: true}},
		{"hourly", doc("h", "@hourly"),
			Schedule{ID: "h", CronExpr: "@hourly", Enabled: true}},
		{"every 30s", doc("e", "@every 30s"),
			Schedule{ID: "e", CronExpr: "@every 30s", Enabled: true}},
		{"CRON_TZ prefix", doc("kr", "CRON_TZ=Asia/Seoul 0 9 * * *"),
			Schedule{ID: "kr", CronExpr: "CRON_TZ=Asia/Seoul 0 9 * * *", Enabled: true}},
		{"surrounding space trimmed", doc("sp", "  0 9 * * *\n"),
			Schedule{ID: "sp", CronExpr: "0 9 * * *", Enabled: true}},
		{"all fields", doc("full", "0 9 * * 1-5",
			bson.E{Key: FieldUpdatedAt, Value: updated},
			bson.E{Key: FieldEnabled, Value: false},
			bson.E{Key: FieldTimezone, Value: "Asia/Seoul"},
			bson.E{Key: FieldJob, Value: "report"},
			bson.E{Key: FieldArgs, Value: bson.D{{Key: "format", Value: "pdf"}, {Key: "n", Value: int32(3)}}},
			bson.E{Key: FieldCategory, Value: "reports"},
			bson.E{Key: "unknown_field", Value: "ignored"}),
			Schedule{ID: "full", CronExpr: "0 9 * * 1-5", Timezone: "Asia/Seoul", Enabled: false, Job: "report",
				Category: "reports", Args: `{"format":"pdf","n":3}`, UpdatedAt: updated}},
		{"nulls mean absent", doc("n", "0 9 * * *",
			bson.E{Key: FieldTimezone, Value: nil},
			bson.E{Key: FieldArgs, Value: nil}),
			Schedule{ID: "n", CronExpr: "0 9 * * *", Enabled: true}},
		{"updated_at not a date is ignored", doc("u", "0 9 * * *", bson.E{Key: FieldUpdatedAt, Value: "yesterday"}),
			Schedule{ID: "u", CronExpr: "0 9 * * *", Enabled: true}},
		{"lifetime and exclusions", doc("life", "0 9 * * *",
			bson.E{Key: lifetime.FieldStartAt, Value: updated},
			bson.E{Key: lifetime.FieldEndAt, Value: updated.Add(time.Hour)},
			bson.E{Key: lifetime.FieldMaxRuns, Value: float64(10)}, // mongosh writes numbers as doubles
			bson.E{Key: lifetime.FieldPausedUntil, Value: updated.Add(time.Minute)},
			bson.E{Key: FieldExclude, Value: bson.A{"us-holidays", "company days", "us-holidays"}}),
			Schedule{ID: "life", CronExpr: "0 9 * * *", Enabled: true, StartAt: updated, EndAt: updated.Add(time.Hour),
				MaxRuns: 10, PausedUntil: updated.Add(time.Minute), Exclude: `["us-holidays","company days"]`}},
		{"lifetime nulls and an empty exclude mean absent", doc("ln", "0 9 * * *",
			bson.E{Key: lifetime.FieldStartAt, Value: nil}, bson.E{Key: lifetime.FieldEndAt, Value: nil},
			bson.E{Key: lifetime.FieldMaxRuns, Value: nil}, bson.E{Key: lifetime.FieldPausedUntil, Value: nil},
			bson.E{Key: FieldExclude, Value: bson.A{}}),
			Schedule{ID: "ln", CronExpr: "0 9 * * *", Enabled: true}},
		{"max_runs an int64, end_at in the past", doc("past", "0 9 * * *",
			bson.E{Key: lifetime.FieldMaxRuns, Value: int64(3)}, bson.E{Key: lifetime.FieldEndAt, Value: updated}),
			Schedule{ID: "past", CronExpr: "0 9 * * *", Enabled: true, MaxRuns: 3, EndAt: updated}},
		// A name given twice (BSON allows it; the drivers keep both) is
		// read from its first element, as a lookup by name finds it.
		{"a field twice: the first counts", bson.D{{Key: FieldID, Value: "dup"}, {Key: FieldCronExpr, Value: "0 9 * * *"},
			{Key: FieldTimezone, Value: "Asia/Seoul"}, {Key: FieldEnabled, Value: false}, {Key: FieldID, Value: "other"},
			{Key: FieldCronExpr, Value: int32(1)}, {Key: FieldTimezone, Value: "Mars/Base"}, {Key: FieldEnabled, Value: true},
			{Key: lifetime.FieldMaxRuns, Value: int32(2)}, {Key: lifetime.FieldMaxRuns, Value: "many"}},
			Schedule{ID: "dup", CronExpr: "0 9 * * *", Timezone: "Asia/Seoul", Enabled: false, MaxRuns: 2}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Decode(marshal(t, c.doc))
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if got != c.want {
				t.Fatalf("Decode = %+v\nwant     %+v", got, c.want)
			}
			if _, err := got.Parse(time.UTC); err != nil {
				t.Fatalf("Parse: %v", err)
			}
		})
	}
}

func TestDecodeInvalid(t *testing.T) {
	big := strings.Repeat("x", MaxDocumentBytes)
	cases := []struct {
		name   string
		doc    bson.D
		id     string // the id the error is attributed to
		field  string
		reason string // a substring of the message
	}{
		{"minute 61", doc("a", "61 * * * *"), "a", FieldCronExpr, "61"},
		{"cron_expr an int", doc("a", int32(42)), "a", FieldCronExpr, "must be a string, not an int32"},
		{"cron_expr empty", doc("a", ""), "a", FieldCronExpr, "empty expression"},
		{"cron_expr blank", doc("a", "   "), "a", FieldCronExpr, "empty expression"},
		{"cron_expr missing", bson.D{{Key: FieldID, Value: "a"}}, "a", FieldCronExpr, "missing"},
		{"cron_expr never fires", doc("a", "0 0 30 2 *"), "a", FieldCronExpr, "never fires"},
		{"cron_expr bad descriptor", doc("a", "@fortnightly"), "a", FieldCronExpr, "fortnightly"},
		{"cron_expr too many fields", doc("a", "0 0 9 * * * *"), "a", FieldCronExpr, "cannot parse"},
		{"cron_expr CRON_TZ unknown", doc("a", "CRON_TZ=Mars/Base 0 9 * * *"), "a", FieldCronExpr, "Mars/Base"},
		{"cron_expr CRON_TZ only", doc("a", "CRON_TZ=UTC"), "a", FieldCronExpr, "cannot parse"},
		{"timezone unknown", doc("a", "0 9 * * *", bson.E{Key: FieldTimezone, Value: "Mars/Base"}), "a", FieldTimezone, "Mars/Base"},
		{"timezone not a string", doc("a", "0 9 * * *", bson.E{Key: FieldTimezone, Value: int32(9)}), "a", FieldTimezone, "must be a string"},
		{"enabled a string", doc("a", "0 9 * * *", bson.E{Key: FieldEnabled, Value: "yes"}), "a", FieldEnabled, "must be a boolean"},
		{"enabled a number", doc("a", "0 9 * * *", bson.E{Key: FieldEnabled, Value: int32(1)}), "a", FieldEnabled, "must be a boolean"},
		{"_id an ObjectId", doc(bson.NewObjectID(), "0 9 * * *"), "$oid", FieldID, "must be a string job id, not an ObjectId"},
		{"_id an int", doc(int32(7), "0 9 * * *"), "7", FieldID, "must be a string job id, not an int32"},
		{"_id empty", doc("", "0 9 * * *"), "", FieldID, "must not be empty"},
		{"_id missing", bson.D{{Key: FieldCronExpr, Value: "0 9 * * *"}}, "", FieldID, "missing"},
		{"_id too long", doc(strings.Repeat("i", MaxIDBytes+1), "0 9 * * *"), "iiii", FieldID, "more than"},
		{"args a string", doc("a", "0 9 * * *", bson.E{Key: FieldArgs, Value: "--force"}), "a", FieldArgs, "must be an object, not a string"},
		{"args an array", doc("a", "0 9 * * *", bson.E{Key: FieldArgs, Value: bson.A{"x"}}), "a", FieldArgs, "must be an object, not an array"},
		{"job not a string", doc("a", "0 9 * * *", bson.E{Key: FieldJob, Value: true}), "a", FieldJob, "must be a string"},
		{"category not a string", doc("a", "0 9 * * *", bson.E{Key: FieldCategory, Value: bson.D{}}), "a", FieldCategory, "must be a string"},
		{"start_at a string", doc("a", "0 9 * * *", bson.E{Key: lifetime.FieldStartAt, Value: "2027-01-01"}), "a", lifetime.FieldStartAt, "must be a date, not a string"},
		{"end_at not after start_at", doc("a", "0 9 * * *", bson.E{Key: lifetime.FieldStartAt, Value: time.Unix(100, 0)},
			bson.E{Key: lifetime.FieldEndAt, Value: time.Unix(100, 0)}), "a", lifetime.FieldEndAt, "no slot could ever run"},
		{"paused_until a number", doc("a", "0 9 * * *", bson.E{Key: lifetime.FieldPausedUntil, Value: int32(5)}), "a", lifetime.FieldPausedUntil, "must be a date"},
		{"max_runs zero", doc("a", "0 9 * * *", bson.E{Key: lifetime.FieldMaxRuns, Value: int32(0)}), "a", lifetime.FieldMaxRuns, "omit it for no limit"},
		{"max_runs negative", doc("a", "0 9 * * *", bson.E{Key: lifetime.FieldMaxRuns, Value: int64(-2)}), "a", lifetime.FieldMaxRuns, "whole number"},
		{"max_runs a fraction", doc("a", "0 9 * * *", bson.E{Key: lifetime.FieldMaxRuns, Value: 2.5}), "a", lifetime.FieldMaxRuns, "whole number"},
		{"max_runs a string", doc("a", "0 9 * * *", bson.E{Key: lifetime.FieldMaxRuns, Value: "10"}), "a", lifetime.FieldMaxRuns, "not a string"},
		{"exclude a string", doc("a", "0 9 * * *", bson.E{Key: FieldExclude, Value: "us-holidays"}), "a", FieldExclude, "must be an array of calendar names"},
		{"exclude a number", doc("a", "0 9 * * *", bson.E{Key: FieldExclude, Value: bson.A{"x", int32(3)}}), "a", FieldExclude, "element 1 must be a calendar name"},
		{"exclude an empty name", doc("a", "0 9 * * *", bson.E{Key: FieldExclude, Value: bson.A{""}}), "a", FieldExclude, "is not a calendar name"},
		{"exclude too many", doc("a", "0 9 * * *", bson.E{Key: FieldExclude, Value: manyNames(maxExclude + 1)}), "a", FieldExclude, "more than 32"},
		{"document too large", doc("a", "0 9 * * *", bson.E{Key: FieldArgs, Value: bson.D{{Key: "blob", Value: big}}}), "a", "", "bytes, more than the 65536"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := Decode(marshal(t, c.doc))
			if err == nil {
				t.Fatalf("Decode accepted %+v", s)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("errors.Is(%v, ErrInvalid) = false", err)
			}
			var se *Error
			if !errors.As(err, &se) {
				t.Fatalf("error %T is not a *schedule.Error", err)
			}
			if se.Field != c.field {
				t.Fatalf("error %q names field %q, want %q", err, se.Field, c.field)
			}
			if c.field != "" && !strings.Contains(err.Error(), "field "+c.field) {
				t.Fatalf("message %q does not name field %s", err, c.field)
			}
			if !strings.Contains(err.Error(), c.reason) {
				t.Fatalf("message %q does not say %q", err, c.reason)
			}
			if !strings.Contains(se.ID, c.id) {
				t.Fatalf("error attributed to %q, want %q", se.ID, c.id)
			}
			if se.Field != FieldID && c.id != "" && s.ID != c.id {
				t.Fatalf("Decode returned id %q with the error, want %q", s.ID, c.id)
			}
		})
	}
}

func manyNames(n int) bson.A {
	a := bson.A{}
	for i := range n {
		a = append(a, "cal-"+strings.Repeat("x", i))
	}
	return a
}

func TestDecodeMalformed(t *testing.T) {
	raw := marshal(t, doc("a", "0 9 * * *"))
	raw = raw[:len(raw)-3]
	if _, err := Decode(raw); !errors.Is(err, ErrInvalid) {
		t.Fatalf("truncated BSON: %v", err)
	}
}

// zeroLengthString builds a document whose fields are well-formed except one
// string field declared with length 0. The driver's Validate accepts that
// (it checks only that the value fits), but its StringValue panics on it: the
// fuzzer found this in CI. Decode must refuse it with a clear error instead.
func zeroLengthString(field string, rest bson.D) bson.Raw {
	var body []byte
	body = append(body, byte(bson.TypeString))
	body = append(body, field...)
	body = append(body, 0, 0, 0, 0, 0) // key terminator, then int32 length 0
	for _, e := range rest {
		raw, _ := bson.Marshal(bson.D{e})
		body = append(body, raw[4:len(raw)-1]...)
	}
	n := 4 + len(body) + 1
	out := []byte{byte(n), byte(n >> 8), byte(n >> 16), byte(n >> 24)}
	out = append(out, body...)
	return append(out, 0)
}

func TestDecodeZeroLengthStrings(t *testing.T) {
	base := bson.D{{Key: FieldID, Value: "a"}, {Key: FieldCronExpr, Value: "@hourly"}}
	for _, field := range []string{FieldID, FieldCronExpr, FieldTimezone, FieldJob, FieldCategory} {
		t.Run(field, func(t *testing.T) {
			var rest bson.D
			for _, e := range base {
				if e.Key != field {
					rest = append(rest, e)
				}
			}
			raw := zeroLengthString(field, rest)
			if err := raw.Validate(); err != nil {
				t.Fatalf("test document is not what the driver's Validate accepts: %v", err)
			}
			_, err := Decode(raw)
			var se *Error
			if !errors.As(err, &se) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("Decode = %v, want a schedule error", err)
			}
			if strings.Contains(se.Reason, "malformed document:") || !strings.Contains(se.Reason, "malformed BSON string") {
				t.Fatalf("reason %q, want the malformed string named (not a recovered panic)", se.Reason)
			}
			if se.Field != field {
				t.Fatalf("error names field %q, want %q", se.Field, field)
			}
		})
	}
}

func TestTiming(t *testing.T) {
	a, err := Decode(marshal(t, doc("a", "0 9 * * *", bson.E{Key: FieldUpdatedAt, Value: time.Unix(1, 0)},
		bson.E{Key: FieldCategory, Value: "x"})))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Decode(marshal(t, doc("a", "0 9 * * *", bson.E{Key: FieldUpdatedAt, Value: time.Unix(2, 0)},
		bson.E{Key: FieldCategory, Value: "y"}, bson.E{Key: FieldArgs, Value: bson.D{{Key: "k", Value: 1}}})))
	if err != nil {
		t.Fatal(err)
	}
	if a.Timing() != b.Timing() {
		t.Fatalf("metadata changed the timing: %+v vs %+v", a.Timing(), b.Timing())
	}
	for _, c := range []Schedule{
		{ID: "a", CronExpr: "0 8 * * *", Enabled: true},
		{ID: "a", CronExpr: "0 9 * * *", Timezone: "UTC", Enabled: true},
		{ID: "a", CronExpr: "0 9 * * *"},
	} {
		if c.Timing() == a.Timing() {
			t.Fatalf("%+v has the timing of %+v", c, a)
		}
	}
	if a.ActionName() != "a" || (Schedule{ID: "a", Job: "b"}).ActionName() != "b" {
		t.Fatal("ActionName")
	}
	if string(a.ArgsJSON()) != "{}" || string(b.ArgsJSON()) != `{"k":1}` {
		t.Fatalf("ArgsJSON: %s %s", a.ArgsJSON(), b.ArgsJSON())
	}
}

func TestParseZones(t *testing.T) {
	seoul, err := time.LoadLocation("Asia/Seoul")
	if err != nil {
		t.Fatal(err)
	}
	from := time.Date(2024, 5, 10, 0, 30, 0, 0, time.UTC) // 09:30 in Seoul
	cases := []struct {
		s    Schedule
		def  *time.Location
		want time.Time
	}{
		{Schedule{CronExpr: "0 9 * * *"}, nil, time.Date(2024, 5, 10, 9, 0, 0, 0, time.UTC)},
		{Schedule{CronExpr: "0 9 * * *"}, seoul, time.Date(2024, 5, 11, 0, 0, 0, 0, time.UTC)},
		{Schedule{CronExpr: "0 9 * * *", Timezone: "Asia/Seoul"}, time.UTC, time.Date(2024, 5, 11, 0, 0, 0, 0, time.UTC)},
		{Schedule{CronExpr: "CRON_TZ=Asia/Seoul 0 9 * * *"}, time.UTC, time.Date(2024, 5, 11, 0, 0, 0, 0, time.UTC)},
		{Schedule{CronExpr: "CRON_TZ=UTC 0 9 * * *", Timezone: "Asia/Seoul"}, seoul, time.Date(2024, 5, 10, 9, 0, 0, 0, time.UTC)},
		{Schedule{CronExpr: "@daily", Timezone: "Asia/Seoul"}, time.UTC, time.Date(2024, 5, 10, 15, 0, 0, 0, time.UTC)},
		// @every ignores zones: a grid of multiples of the period since the Unix epoch.
		{Schedule{CronExpr: "@every 1h", Timezone: "Asia/Kolkata"}, time.UTC, time.Date(2024, 5, 10, 1, 0, 0, 0, time.UTC)},
	}
	for _, c := range cases {
		sched, err := c.s.Parse(c.def)
		if err != nil {
			t.Fatalf("%+v: %v", c.s, err)
		}
		if got := sched.Next(from); !got.Equal(c.want) {
			t.Errorf("%+v in %v: Next = %s, want %s", c.s, c.def, got.UTC(), c.want)
		}
	}
}

func TestEvery(t *testing.T) {
	sched, err := ParseExpr("@every 30s", nil)
	if err != nil {
		t.Fatal(err)
	}
	ev, ok := sched.(everySchedule)
	if !ok || ev.period != 30*time.Second {
		t.Fatalf("@every 30s parsed to %#v", sched)
	}
	// Two replicas asking at different instants get the same activation.
	a := sched.Next(time.Date(2024, 5, 10, 12, 0, 1, 0, time.UTC))
	b := sched.Next(time.Date(2024, 5, 10, 12, 0, 29, 999, time.UTC))
	if want := time.Date(2024, 5, 10, 12, 0, 30, 0, time.UTC); !a.Equal(want) || !b.Equal(want) {
		t.Fatalf("Next = %s, %s; want %s", a, b, want)
	}
	if got := ev.Prev(a); !got.Equal(a) {
		t.Fatalf("Prev on the grid = %s, want %s", got, a)
	}
	if got := ev.Prev(a.Add(-time.Nanosecond)); !got.Equal(a.Add(-30 * time.Second)) {
		t.Fatalf("Prev just before the grid = %s", got)
	}
	// ParseExpr refuses sub-second periods; one built by hand counts as
	// one second.
	if _, err := ParseExpr("@every 10ms", nil); err == nil {
		t.Fatal("@every 10ms accepted")
	}
	from := time.Date(2024, 5, 10, 12, 0, 1, 500, time.UTC)
	if got := (everySchedule{period: 10 * time.Millisecond}).Next(from); !got.Equal(time.Date(2024, 5, 10, 12, 0, 2, 0, time.UTC)) {
		t.Fatalf("Every{10ms}.Next = %s", got)
	}
	if (everySchedule{}).Next(from).Sub(from) > time.Second {
		t.Fatal("zero Every is not a one-second grid")
	}
}

// The fields that describe an edit — who (updated_by), why
// (update_message), and apply's managed_by — are not the schedule's: the
// decoder ignores them as it ignores every field it does not know, so a
// document that differs only in them decodes to the same Schedule, and
// the engine keeps its timer and counts nothing as changed
// (SameExceptTiming).
func TestEditMetadataIsNotPartOfTheSchedule(t *testing.T) {
	base := bson.D{{Key: "_id", Value: "rep"}, {Key: "cron_expr", Value: "0 9 * * *"}, {Key: "args", Value: bson.D{{Key: "n", Value: 1}}}}
	plain, err := Decode(marshal(t, base))
	if err != nil {
		t.Fatal(err)
	}
	edited, err := Decode(marshal(t, append(append(bson.D{}, base...), bson.E{Key: FieldUpdatedBy, Value: "alice"},
		bson.E{Key: FieldUpdateMessage, Value: "why not"}, bson.E{Key: "managed_by", Value: "cronswap apply"})))
	if err != nil {
		t.Fatal(err)
	}
	if plain != edited || !plain.SameExceptTiming(edited) || plain.Timing() != edited.Timing() {
		t.Errorf("edit metadata changed the schedule:\n%+v\n%+v", plain, edited)
	}
}

// Zone is the zone the expression's wall times are read in: a prefix wins
// over the timezone field; Excludes reads the names back from their JSON.
func TestZoneAndExcludes(t *testing.T) {
	for _, c := range []struct{ expr, tz, want string }{
		{"0 9 * * *", "", ""}, {"0 9 * * *", "Asia/Seoul", "Asia/Seoul"},
		{"CRON_TZ=Europe/Berlin 0 9 * * *", "Asia/Seoul", "Europe/Berlin"}, {"TZ=UTC @hourly", "", "UTC"},
	} {
		if got := (Schedule{CronExpr: c.expr, Timezone: c.tz}).Zone(); got != c.want {
			t.Errorf("Zone of %q (timezone %q) = %q, want %q", c.expr, c.tz, got, c.want)
		}
	}
	s, err := Decode(marshal(t, doc("x", "0 9 * * *", bson.E{Key: FieldExclude, Value: bson.A{"a,b", `quo"te`}})))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Excludes(); len(got) != 2 || got[0] != "a,b" || got[1] != `quo"te` {
		t.Fatalf("Excludes() = %q", got)
	}
	if (Schedule{}).Excludes() != nil {
		t.Fatal("Excludes of no exclusions is not nil")
	}
}
