package actions

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cronswap/cronswap/jobs"
	"github.com/cronswap/cronswap/schedule"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// The largest args the decoder accepts reach an exec action's program
// whole, in CRONSWAP_ARGS; one byte more and Linux refuses to start the
// program, which is why the decoder refuses such args.
func TestExecArgsAtTheDecoderLimitReachTheProgram(t *testing.T) {
	t.Parallel()
	// {"blob":"..."} with printable padding up to exactly the limit.
	pad := schedule.MaxArgsJSONBytes - len(`{"blob":""}`)
	doc, err := bson.Marshal(bson.D{{Key: "_id", Value: "export"}, {Key: "cron_expr", Value: "@hourly"},
		{Key: "args", Value: bson.D{{Key: "blob", Value: strings.Repeat("a", pad)}}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(doc) > schedule.MaxDocumentBytes {
		// Printable padding of the full length would exceed the document
		// limit; use escapes, which count six JSON bytes per BSON byte.
		pad6 := pad / 6
		rest := pad - 6*pad6
		doc, err = bson.Marshal(bson.D{{Key: "_id", Value: "export"}, {Key: "cron_expr", Value: "@hourly"},
			{Key: "args", Value: bson.D{{Key: "blob", Value: strings.Repeat("\x01", pad6) + strings.Repeat("a", rest)}}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	s, err := schedule.Decode(doc)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if len(s.Args) != schedule.MaxArgsJSONBytes {
		t.Fatalf("args JSON is %d bytes, want exactly the limit %d", len(s.Args), schedule.MaxArgsJSONBytes)
	}
	a := &ExecAction{Argv: []string{"sh", "-c", `printf %s "$CRONSWAP_ARGS" | wc -c`}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fire := jobs.Run{JobID: s.ID, Slot: time.Now(), RunID: "r", Args: s.ArgsJSON()}
	out, err := a.HandleOutput(ctx, fire)
	if err != nil {
		t.Fatalf("run with args at the limit: %v", err)
	}
	if n, _ := strconv.Atoi(strings.TrimSpace(out.Stdout)); n != schedule.MaxArgsJSONBytes {
		t.Fatalf("the program saw %s bytes of CRONSWAP_ARGS, want %d", out.Stdout, schedule.MaxArgsJSONBytes)
	}

	// One byte more: the program cannot be started at all.
	over := json.RawMessage(`{"blob":"` + strings.Repeat("a", pad+1) + `"}`)
	_, err = a.HandleOutput(ctx, jobs.Run{JobID: s.ID, Slot: time.Now(), RunID: "r2", Args: over})
	if !errors.Is(err, syscall.E2BIG) {
		t.Fatalf("run with args one byte over the limit: %v, want E2BIG (argument list too long)", err)
	}
	// ...and the decoder refuses such a document.
	doc, err = bson.Marshal(bson.D{{Key: "_id", Value: "export"}, {Key: "cron_expr", Value: "@hourly"},
		{Key: "args", Value: bson.D{{Key: "blob", Value: strings.Repeat("\x01", pad/6+1)}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := schedule.Decode(doc); !errors.Is(err, schedule.ErrInvalid) || !strings.Contains(err.Error(), "field args") {
		t.Fatalf("Decode of args over the limit: %v", err)
	}
}
