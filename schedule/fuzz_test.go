package schedule

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// FuzzDecode feeds raw bytes, as they would arrive from the server, to
// Decode. The seed corpus in testdata/fuzz/FuzzDecode holds valid documents,
// an oversized one, unknown fields, ObjectId/int/unicode ids and wrong field
// types; CI runs the fuzzer briefly (scripts/test.sh) on top of replaying it.
//
// Invariants: Decode never panics (also not behind its own recover, which
// would surface as a "malformed document" error); a refusal is a *Error
// wrapping ErrInvalid with a message naming what is wrong; an accepted
// schedule has a usable id and expression, fires at least once, and decodes
// to the same thing again from its own re-encoding.
func FuzzDecode(f *testing.F) {
	for _, d := range []bson.D{
		{{Key: FieldID, Value: "daily_report"}, {Key: FieldCronExpr, Value: "0 9 * * *"}},
		{{Key: FieldID, Value: "fast"}, {Key: FieldCronExpr, Value: "*/5 * * * * *"}, {Key: FieldEnabled, Value: false}},
		{{Key: FieldID, Value: int32(7)}, {Key: FieldCronExpr, Value: "@hourly"}},
		{{Key: FieldID, Value: bson.NewObjectID()}, {Key: FieldCronExpr, Value: "@hourly"}},
		{{Key: FieldID, Value: "일일_보고"}, {Key: FieldCronExpr, Value: "CRON_TZ=Asia/Seoul 0 9 * * *"}},
		{{Key: FieldID, Value: "billing"}, {Key: FieldCronExpr, Value: "30 1 * * *"}, {Key: FieldTimezone, Value: "America/New_York"}, {Key: FieldDST, Value: "plain"}},
	} {
		raw, err := bson.Marshal(d)
		if err != nil {
			f.Fatal(err)
		}
		f.Add([]byte(raw))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Decode(bson.Raw(data))
		fields, ferr := DecodeFields(bson.Raw(data))
		if err != nil {
			checkRefusal(t, data, err)
			// DecodeFields may only accept what Decode refused for
			// the parts it leaves to the parser.
			var se *Error
			if ferr == nil && (!errors.As(err, &se) || (se.Field != FieldCronExpr && se.Field != FieldTimezone)) {
				t.Fatalf("DecodeFields accepted what Decode refused for another reason: %v", err)
			}
			if ferr != nil && ferr.Error() != err.Error() {
				t.Fatalf("DecodeFields refused with %q, Decode with %q", ferr, err)
			}
			return
		}
		if ferr != nil || fields != s {
			t.Fatalf("Decode accepted %+v, DecodeFields gave %+v, %v", s, fields, ferr)
		}
		checkAccepted(t, s)
		// Decoding is deterministic.
		again, err := Decode(bson.Raw(data))
		if err != nil || again != s {
			t.Fatalf("second Decode differs: %+v, %v; first %+v", again, err, s)
		}
		// What was accepted survives a round trip through BSON.
		d := bson.D{{Key: FieldID, Value: s.ID}, {Key: FieldCronExpr, Value: s.CronExpr}, {Key: FieldEnabled, Value: s.Enabled}}
		if s.Timezone != "" {
			d = append(d, bson.E{Key: FieldTimezone, Value: s.Timezone})
		}
		if s.Job != "" {
			d = append(d, bson.E{Key: FieldJob, Value: s.Job})
		}
		if s.DST != "" {
			d = append(d, bson.E{Key: FieldDST, Value: string(s.DST)})
		}
		raw, err := bson.Marshal(d)
		if err != nil {
			t.Fatalf("re-encode %+v: %v", s, err)
		}
		back, err := Decode(raw)
		if err != nil || back.Timing() != s.Timing() || back.ID != s.ID || back.Job != s.Job {
			t.Fatalf("round trip of %+v gave %+v, %v", s, back, err)
		}
	})
}

func checkRefusal(t *testing.T, data []byte, err error) {
	t.Helper()
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("error does not wrap ErrInvalid: %v", err)
	}
	var se *Error
	if !errors.As(err, &se) {
		t.Fatalf("error is %T, want *schedule.Error: %v", err, err)
	}
	if se.Reason == "" {
		t.Fatalf("error without a reason: %#v", se)
	}
	if strings.Contains(se.Reason, "malformed document:") {
		t.Fatalf("Decode panicked (recovered): %v", err)
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "schedule") {
		t.Fatalf("error message %q does not say it is about a schedule", msg)
	}
	if len(se.ID) > MaxIDBytes+len("…") {
		t.Fatalf("error carries a %d-byte id", len(se.ID))
	}
	if len(data) > MaxDocumentBytes && !strings.Contains(msg, "bytes, more than") {
		t.Fatalf("oversized document refused for another reason: %v", err)
	}
}

func checkAccepted(t *testing.T, s Schedule) {
	t.Helper()
	switch {
	case s.ID == "" || len(s.ID) > MaxIDBytes || !utf8.ValidString(s.ID):
		t.Fatalf("accepted a bad id %q", s.ID)
	case s.CronExpr == "" || len(s.CronExpr) > MaxExprBytes || s.CronExpr != strings.TrimSpace(s.CronExpr):
		t.Fatalf("accepted a bad expression %q", s.CronExpr)
	case len(s.Timezone) > MaxNameBytes || len(s.Job) > MaxNameBytes || len(s.Category) > MaxNameBytes:
		t.Fatalf("accepted an oversized name: %+v", s)
	case s.DST != "" && s.DST != DSTPlain:
		t.Fatalf("accepted dst %q: only DSTPlain or empty (the default) may come out", s.DST)
	case s.Args != "" && !json.Valid([]byte(s.Args)):
		t.Fatalf("args are not JSON: %q", s.Args)
	case len(s.Args) > MaxArgsJSONBytes:
		t.Fatalf("accepted %d bytes of args JSON, more than an exec action can be handed", len(s.Args))
	}
	sched, err := s.Parse(time.UTC)
	if err != nil {
		t.Fatalf("accepted %+v but Parse fails: %v", s, err)
	}
	now := time.Now()
	if next := sched.Next(now); !next.After(now) {
		t.Fatalf("accepted %+v but its next fire is %v", s, next)
	}
	if s.Validate() != nil {
		t.Fatalf("accepted %+v but Validate fails", s)
	}
	if s.ActionName() == "" {
		t.Fatalf("accepted %+v with no action name", s)
	}
}
