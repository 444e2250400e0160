package schedule

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// The dst field of a document: absent, null, "" and "shift" are the
// default (decoded as empty, so they are one timing), "plain" is DSTPlain, and
// anything else is refused naming the field. Parse honours it.
func TestDecodeDSTField(t *testing.T) {
	ny := bson.E{Key: FieldTimezone, Value: "America/New_York"}
	for _, c := range []struct {
		name string
		dst  []bson.E
		want DSTMode
	}{
		{"absent", nil, ""},
		{"null", []bson.E{{Key: FieldDST, Value: nil}}, ""},
		{"shift", []bson.E{{Key: FieldDST, Value: "shift"}}, ""},
		{"shift with space", []bson.E{{Key: FieldDST, Value: " shift "}}, ""},
		{"empty, like any optional string", []bson.E{{Key: FieldDST, Value: ""}}, ""},
		{"plain", []bson.E{{Key: FieldDST, Value: "plain"}}, DSTPlain},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := Decode(marshal(t, doc("a", "30 2 * * *", append([]bson.E{ny}, c.dst...)...)))
			if err != nil {
				t.Fatal(err)
			}
			if s.DST != c.want {
				t.Fatalf("DST = %q, want %q", s.DST, c.want)
			}
			def, _ := Decode(marshal(t, doc("a", "30 2 * * *", ny)))
			if (s.Timing() == def.Timing()) != (c.want == "") {
				t.Fatalf("timing %+v against the default's %+v", s.Timing(), def.Timing())
			}
			sched, err := s.Parse(time.UTC)
			if err != nil {
				t.Fatal(err)
			}
			_, isSpec := sched.(*cron.SpecSchedule)
			_, isDST := sched.(*dstSchedule)
			if isSpec != (c.want == DSTPlain) || isDST != (c.want == "") {
				t.Fatalf("Parse gave %T for dst %q", sched, c.want)
			}
			// 2027-03-14 has no 02:30 in New York: shift fires at
			// 03:00, plain skips the day.
			from := rfc(t, "2027-03-13T12:00:00-05:00")
			want := "2027-03-14T03:00:00-04:00"
			if c.want == DSTPlain {
				want = "2027-03-15T02:30:00-04:00"
			}
			if got := sched.Next(from); !got.Equal(rfc(t, want)) {
				t.Fatalf("next after %v = %v, want %s", from, got, want)
			}
		})
	}

	for _, c := range []struct {
		name   string
		value  any
		reason string
	}{
		{"unknown word", "summer", `unknown daylight-saving mode "summer" (want "shift", the default, or "plain")`},
		{"wrong case", "Plain", `unknown daylight-saving mode "Plain"`},
		{"not a string", true, "must be a string, not a boolean"},
		{"a number", int32(1), "must be a string, not an int32"},
	} {
		t.Run("refused/"+c.name, func(t *testing.T) {
			s, err := Decode(marshal(t, doc("a", "0 9 * * *", bson.E{Key: FieldDST, Value: c.value})))
			var se *Error
			if !errors.As(err, &se) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("Decode = %+v, %v; want a *schedule.Error", s, err)
			}
			if se.Field != FieldDST || se.ID != "a" || !strings.Contains(err.Error(), "field dst: ") ||
				!strings.Contains(se.Reason, c.reason) {
				t.Fatalf("error %q (field %q, id %q), want field dst of job a saying %q", err, se.Field, se.ID, c.reason)
			}
			if _, ferr := DecodeFields(marshal(t, doc("a", "0 9 * * *", bson.E{Key: FieldDST, Value: c.value}))); ferr == nil {
				t.Fatal("DecodeFields accepted it: the dst field is checked before the parser")
			}
		})
	}

	// A schedule built by hand with a bad mode is refused by Parse, naming
	// the field, not the expression.
	_, err := Schedule{ID: "a", CronExpr: "0 9 * * *", DST: "summer"}.Parse(time.UTC)
	var se *Error
	if !errors.As(err, &se) || se.Field != FieldDST {
		t.Fatalf("Parse with dst summer = %v, want a dst error", err)
	}
}
