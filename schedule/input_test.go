package schedule

import (
	"errors"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// mustRefuse decodes d and returns its *Error, failing unless it is a refusal
// of field.
func mustRefuse(t *testing.T, d bson.D, field string) *Error {
	t.Helper()
	s, err := Decode(marshal(t, d))
	var se *Error
	if !errors.As(err, &se) || !errors.Is(err, ErrInvalid) {
		t.Fatalf("Decode accepted %q (%d bytes of args JSON), %v; want a *schedule.Error", s.ID, len(s.Args), err)
	}
	if se.Field != field {
		t.Fatalf("error %q names field %q, want %q", err, se.Field, field)
	}
	ferr := func() error { _, err := DecodeFields(marshal(t, d)); return err }()
	if ferr == nil || ferr.Error() != err.Error() {
		t.Fatalf("DecodeFields = %v, want the same refusal as Decode (%v)", ferr, err)
	}
	return se
}

func TestDecodeEnabledNullRefused(t *testing.T) {
	se := mustRefuse(t, doc("billing", "0 9 * * *", bson.E{Key: FieldEnabled, Value: nil}), FieldEnabled)
	msg := se.Error()
	for _, want := range []string{`"billing"`, "field enabled", "not null", "true or false", "enabled: false"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not say %q", msg, want)
		}
	}
	// Absent still means enabled; true and false are read as they are.
	for _, c := range []struct {
		more []bson.E
		want bool
	}{{nil, true}, {[]bson.E{{Key: FieldEnabled, Value: true}}, true}, {[]bson.E{{Key: FieldEnabled, Value: false}}, false}} {
		s, err := Decode(marshal(t, doc("billing", "0 9 * * *", c.more...)))
		if err != nil || s.Enabled != c.want {
			t.Errorf("Decode with %v = %+v, %v; want enabled %t", c.more, s, err, c.want)
		}
	}
}

// argsOfJSONSize returns an args object whose relaxed extended JSON is n
// bytes or a little more, from a BSON document of about n/6 bytes: each
// control character becomes a six-byte \u00XX escape.
func argsOfJSONSize(n int) bson.D {
	return bson.D{{Key: "blob", Value: strings.Repeat("\x01", n/6)}}
}

func TestDecodeArgsTooLongForTheEnvironment(t *testing.T) {
	d := doc("export", "@hourly", bson.E{Key: FieldArgs, Value: argsOfJSONSize(MaxArgsJSONBytes + 600)})
	if raw := marshal(t, d); len(raw) > MaxDocumentBytes {
		t.Fatalf("test document is %d bytes: over the document limit, so it tests that one", len(raw))
	}
	se := mustRefuse(t, d, FieldArgs)
	msg := se.Error()
	for _, want := range []string{`"export"`, "field args", "as JSON, more than the 131057", EnvArgs, `{"region": "eu"`} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not say %q", msg, want)
		}
	}

	// Args whose JSON fits, with the variable's name, '=' and NUL, into
	// Linux's 131072-byte limit are accepted.
	if got := len(EnvArgs) + len("=") + MaxArgsJSONBytes + 1; got != 131072 {
		t.Fatalf("the largest CRONSWAP_ARGS entry is %d bytes, want 131072", got)
	}
	fit := bson.D{{Key: "blob", Value: strings.Repeat("\x01", (MaxArgsJSONBytes-len(`{"blob":""}`))/6)}}
	s, err := Decode(marshal(t, doc("export", "@hourly", bson.E{Key: FieldArgs, Value: fit})))
	if err != nil || len(s.Args) > MaxArgsJSONBytes || len(s.Args) < MaxArgsJSONBytes-6 {
		t.Fatalf("args of %d JSON bytes: %v", len(s.Args), err)
	}
}

func TestRefusedIDsHaveTheirOwnKeys(t *testing.T) {
	obj := bson.D{{Key: "tenant", Value: "x"}, {Key: "n", Value: int32(1)}}
	long := strings.Repeat("é", MaxIDBytes) // 512 bytes
	cases := []struct {
		name  string
		id    any
		shown string // the rendering the key carries
		errID string // what the error names
	}{
		{"object", obj, `{"tenant": "x","n": {"$numberInt":"1"}}`, `{"tenant": "x","n": {"$numberInt":"1"}}`},
		{"int", int32(7), `{"$numberInt":"7"}`, `{"$numberInt":"7"}`},
		{"too long", long, `"` + strings.Repeat("é", 16) + `…" (512 bytes)`, strings.Repeat("é", 16) + "…"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := DecodeFields(marshal(t, doc(c.id, "@hourly")))
			var se *Error
			if !errors.As(err, &se) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("DecodeFields = %+v, %v; want a refusal", s, err)
			}
			if se.ID != c.errID {
				t.Fatalf("error attributed to %q, want the readable %q", se.ID, c.errID)
			}
			shown, refused := RefusedID(s.ID)
			if !refused || shown != c.shown {
				t.Fatalf("refused document tracked under %q (refused %t), want the RefusedKey of %q", s.ID, refused, c.shown)
			}
			// No job id can take the refused document's key: the job whose
			// id is the rendering has a key of its own.
			job, err := Decode(marshal(t, doc(shown, "@hourly")))
			if err != nil {
				t.Fatalf("the rendering %q as a job id: %v", shown, err)
			}
			if job.ID == s.ID {
				t.Fatalf("job %q and the refused _id share the key %q", shown, s.ID)
			}
			if _, refused := RefusedID(job.ID); refused {
				t.Fatalf("job id %q reads as a refused _id", job.ID)
			}
			v := marshal(t, bson.D{{Key: FieldID, Value: c.id}}).Lookup(FieldID)
			if key, _ := DecodeID(v); key != s.ID {
				t.Fatalf("DecodeID of the _id (as a delete event carries it) = %q, want %q", key, s.ID)
			}
			if got := ShowKey(s.ID); got != "_id "+c.shown {
				t.Fatalf("ShowKey = %q", got)
			}
		})
	}
	if ShowKey("daily_report") != "daily_report" {
		t.Fatal("ShowKey changes a job id")
	}
}

// TestCronExprLimitCountsTheWhiteSpace: cron_expr is at most MaxExprBytes
// as written, before the white space around it is trimmed, so padding
// cannot carry a 60 KB string into a schedule; white space alone is an
// empty expression, said so. The decoder (the daemon's and the command
// line's check) and ParseExpr (validate, next) agree.
func TestCronExprLimitCountsTheWhiteSpace(t *testing.T) {
	padded := strings.Repeat(" ", 60000) + "0 2 * * *"
	blank := strings.Repeat(" ", 60000)
	for _, c := range []struct {
		name, expr string
		want       []string
	}{
		{"padded past the limit", padded, []string{"60009 bytes, more than 256", "white space around it included"}},
		{"padded just past the limit", strings.Repeat(" ", MaxExprBytes-8) + "0 2 * * *", []string{"257 bytes, more than 256"}},
		{"white space only, long", blank, []string{"more than 256"}},
		{"white space only", "   \t ", []string{"empty expression: 5 bytes of white space only"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			se := mustRefuse(t, doc("pad", c.expr), FieldCronExpr)
			_, perr := ParseExpr(c.expr, nil)
			for _, want := range c.want {
				if !strings.Contains(se.Error(), want) {
					t.Errorf("Decode: %q does not say %q", se, want)
				}
				if perr == nil || !strings.Contains(perr.Error(), want) {
					t.Errorf("ParseExpr: %v does not say %q", perr, want)
				}
			}
		})
	}
	// Exactly the limit, white space included, is accepted and trimmed.
	exact := strings.Repeat(" ", MaxExprBytes-9) + "0 2 * * *"
	s, err := Decode(marshal(t, doc("pad", exact)))
	if err != nil || s.CronExpr != "0 2 * * *" {
		t.Fatalf("Decode(%d bytes) = %q, %v; want the trimmed expression", len(exact), s.CronExpr, err)
	}
}
