package daemon

import (
	"log/slog"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/schedule"
	"github.com/cronswap/cronswap/scheduler"
)

// A refused document whose _id is not a string is tracked apart from the
// job whose id equals the _id's rendering: refusing it, listing it and
// deleting it, one event at a time or by full reloads, leave that job armed.
func TestSinkKeepsNonStringIDsApartFromJobIDs(t *testing.T) {
	objID := bson.D{{Key: "tenant", Value: "x"}, {Key: "n", Value: int32(1)}}
	rendering := `{"tenant": "x","n": {"$numberInt":"1"}}`
	marshal := func(d bson.D) bson.Raw {
		t.Helper()
		b, err := bson.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	refusedDoc := marshal(bson.D{{Key: "_id", Value: objID}, {Key: "cron_expr", Value: "@hourly"}})
	jobDoc := marshal(bson.D{{Key: "_id", Value: rendering}, {Key: "cron_expr", Value: "0 9 * * *"}})
	deleteID := marshal(bson.D{{Key: "_id", Value: objID}}).Lookup("_id")

	for _, order := range []string{"job first", "refused first"} {
		t.Run(order, func(t *testing.T) {
			engine := scheduler.New(scheduler.Options{Logger: slog.New(slog.DiscardHandler)})
			sink := NewEngineSink(engine, slog.New(slog.DiscardHandler), nil)
			if order == "job first" {
				sink.Upsert(jobDoc)
				sink.Upsert(refusedDoc)
			} else {
				sink.Upsert(refusedDoc)
				sink.Upsert(jobDoc)
			}
			armed := func(when string) {
				t.Helper()
				st, ok := engine.Get(rendering)
				if !ok || !st.Armed || st.LastError != "" || st.CronExpr != "0 9 * * *" {
					t.Fatalf("%s: job %s = %+v, %t; want armed, without error", when, rendering, st, ok)
				}
			}
			armed("both documents applied")
			if n := len(engine.List()); n != 2 {
				t.Fatalf("engine knows %d entries, want the job and the refused document", n)
			}
			st, ok := engine.Get(schedule.RefusedKey(rendering))
			if !ok || st.Armed || !strings.Contains(st.LastError, "must be a string job id") {
				t.Fatalf("refused document = %+v, %t; want listed unarmed with its error", st, ok)
			}

			sink.Delete(deleteID)
			armed("refused document deleted")
			if _, ok := engine.Get(schedule.RefusedKey(rendering)); ok || len(engine.List()) != 1 {
				t.Fatalf("refused document still listed after its delete (%d entries)", len(engine.List()))
			}
			// A second delete of the same _id (a replayed event) is a no-op.
			sink.Delete(deleteID)
			armed("delete replayed")

			// Full reloads: with both documents, then without the refused one.
			sink.ReplaceAll([]bson.Raw{jobDoc, refusedDoc})
			armed("full reload with both")
			if _, ok := engine.Get(schedule.RefusedKey(rendering)); !ok {
				t.Fatal("full reload did not list the refused document")
			}
			sink.ReplaceAll([]bson.Raw{jobDoc})
			armed("full reload without the refused document")
			if n := len(engine.List()); n != 1 {
				t.Fatalf("engine knows %d entries after the reload, want 1", n)
			}
		})
	}

	// Deleting the job itself still disarms it.
	engine := scheduler.New(scheduler.Options{Logger: slog.New(slog.DiscardHandler)})
	sink := NewEngineSink(engine, slog.New(slog.DiscardHandler), nil)
	sink.Upsert(jobDoc)
	sink.Upsert(refusedDoc)
	sink.Delete(marshal(bson.D{{Key: "_id", Value: rendering}}).Lookup("_id"))
	if _, ok := engine.Get(rendering); ok {
		t.Fatal("job still known after its own delete")
	}
	if _, ok := engine.Get(schedule.RefusedKey(rendering)); !ok {
		t.Fatal("the job's delete also cleared the refused document")
	}
}
