package schedulesink

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/metrics"
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
			sink := New(engine, slog.New(slog.DiscardHandler), nil)
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
			sink.ReplaceAll(docsOf(jobDoc, refusedDoc))
			armed("full reload with both")
			if _, ok := engine.Get(schedule.RefusedKey(rendering)); !ok {
				t.Fatal("full reload did not list the refused document")
			}
			sink.ReplaceAll(docsOf(jobDoc))
			armed("full reload without the refused document")
			if n := len(engine.List()); n != 1 {
				t.Fatalf("engine knows %d entries after the reload, want 1", n)
			}
		})
	}

	// Deleting the job itself still disarms it.
	engine := scheduler.New(scheduler.Options{Logger: slog.New(slog.DiscardHandler)})
	sink := New(engine, slog.New(slog.DiscardHandler), nil)
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

// The parallel decode gives what decoding one by one gives, in order.
func TestDecodeAllMatchesSequentialDecode(t *testing.T) {
	var docs []bson.Raw
	for i := range 2500 {
		var expr any = fmt.Sprintf("%d 9 * * *", i%60)
		if i%7 == 0 {
			expr = i // refused by type; a bad expression is the engine's to refuse
		}
		b, err := bson.Marshal(bson.D{{Key: "_id", Value: fmt.Sprintf("job%04d", i)}, {Key: "cron_expr", Value: expr}})
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, b)
	}
	got := DecodeAll(docs)
	refused := 0
	if len(got) != len(docs) {
		t.Fatalf("%d items for %d documents", len(got), len(docs))
	}
	for i, d := range docs {
		want, wantErr := schedule.DecodeFields(d)
		if got[i].Schedule != want || (got[i].Err == nil) != (wantErr == nil) {
			t.Fatalf("item %d = %+v, %v; want %+v, %v", i, got[i].Schedule, got[i].Err, want, wantErr)
		}
		if got[i].Err != nil {
			refused++
		}
	}
	if refused != (len(docs)+6)/7 {
		t.Fatalf("%d documents refused, want %d", refused, (len(docs)+6)/7)
	}
}

// The sink leaves parsing to the engine: an unparsable expression or an
// unknown zone is still refused, with the job keeping its last known good
// timer and the error naming the field.
func TestSinkRefusesBadExpressionThroughTheEngine(t *testing.T) {
	engine := scheduler.New(scheduler.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	sink := New(engine, nil, nil)
	doc := func(expr, tz string) bson.Raw {
		d := bson.D{{Key: "_id", Value: "j"}, {Key: "cron_expr", Value: expr}}
		if tz != "" {
			d = append(d, bson.E{Key: "timezone", Value: tz})
		}
		b, err := bson.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	sink.Upsert(doc("0 9 * * *", ""))
	for _, bad := range []struct{ expr, tz, field string }{{"0 25 * * *", "", "cron_expr"}, {"0 9 * * *", "Mars/Base", "timezone"}} {
		sink.Upsert(doc(bad.expr, bad.tz))
		st, ok := engine.Get("j")
		if !ok || !st.Armed || st.CronExpr != "0 9 * * *" || !strings.Contains(st.LastError, "field "+bad.field) {
			t.Fatalf("after %+v: %+v", bad, st)
		}
	}
}

// ReplaceAll logs how a full reload divided its time between decoding and
// the engine: at info level when something changed, at debug level when the
// snapshot matched the engine.
func TestSinkLogsTheDecodeEngineSplit(t *testing.T) {
	var buf strings.Builder
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	engine := scheduler.New(scheduler.Options{Logger: slog.New(slog.DiscardHandler)})
	sink := New(engine, log, nil)
	var docs []bson.Raw
	for i := range 3 {
		b, err := bson.Marshal(bson.D{{Key: "_id", Value: fmt.Sprintf("j%d", i)}, {Key: "cron_expr", Value: "0 9 * * *"}})
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, b)
	}
	if changed, _ := sink.ReplaceAll(docsOf(docs...)); len(changed) != 3 {
		t.Fatalf("first ReplaceAll changed %v", changed)
	}
	if changed, _ := sink.ReplaceAll(docsOf(docs...)); len(changed) != 0 {
		t.Fatalf("second ReplaceAll changed %v", changed)
	}
	type record struct {
		Level     string `json:"level"`
		Msg       string `json:"msg"`
		Documents int    `json:"documents"`
		Changed   int    `json:"changed"`
		Decode    *int64 `json:"decode"` // nanoseconds
		Engine    *int64 `json:"engine"`
	}
	var recs []record
	for line := range strings.Lines(buf.String()) {
		var rec record
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		if rec.Msg == msgSchedulesReplaced {
			recs = append(recs, rec)
		}
	}
	if len(recs) != 2 {
		t.Fatalf("%d %q records, want 2:\n%s", len(recs), msgSchedulesReplaced, buf.String())
	}
	for i, want := range []struct {
		level   string
		changed int
	}{{"INFO", 3}, {"DEBUG", 0}} {
		r := recs[i]
		if r.Level != want.level || r.Documents != 3 || r.Changed != want.changed || r.Decode == nil || r.Engine == nil || *r.Decode < 0 || *r.Engine <= 0 {
			t.Errorf("record %d: %+v, want level %s, 3 documents, %d changed, a decode and engine duration", i, r, want.level, want.changed)
		}
	}
}

// docsOf reads docs as a full read does: one at a time, each in the same
// buffer, overwritten by the next (so a sink that keeps a document without
// copying it sees it change).
func docsOf(docs ...bson.Raw) iter.Seq2[bson.Raw, error] {
	return func(yield func(bson.Raw, error) bool) {
		var buf []byte
		for _, d := range docs {
			buf = append(buf[:0], d...)
			if !yield(bson.Raw(buf), nil) {
				return
			}
			clear(buf)
		}
	}
}

// A full reload of more documents than one decode batch applies every one
// of them, whatever the read does with its buffers afterwards; a read that
// fails part-way returns its error and removes no job it did not reach.
func TestReplaceAllStreamsAndStopsAtAReadError(t *testing.T) {
	engine := scheduler.New(scheduler.Options{Logger: slog.New(slog.DiscardHandler)})
	sink := New(engine, slog.New(slog.DiscardHandler), nil)
	n := 2*decodeBatch + 17
	docs := make([]bson.Raw, n)
	for i := range docs {
		b, err := bson.Marshal(bson.D{{Key: "_id", Value: fmt.Sprintf("j%05d", i)},
			{Key: "cron_expr", Value: fmt.Sprintf("%d 9 * * *", i%60)}})
		if err != nil {
			t.Fatal(err)
		}
		docs[i] = b
	}
	changed, err := sink.ReplaceAll(docsOf(docs...))
	if err != nil || len(changed) != n {
		t.Fatalf("ReplaceAll: %d changed, %v; want %d, nil", len(changed), err, n)
	}
	for i := range docs {
		id := fmt.Sprintf("j%05d", i)
		if st, ok := engine.Get(id); !ok || !st.Armed || st.CronExpr != fmt.Sprintf("%d 9 * * *", i%60) {
			t.Fatalf("%s = %+v (known %v)", id, st, ok)
		}
	}

	boom := errors.New("connection reset")
	failing := func(yield func(bson.Raw, error) bool) {
		for d, err := range docsOf(docs[:decodeBatch+5]...) {
			if !yield(d, err) {
				return
			}
		}
		yield(nil, boom)
	}
	if _, err := sink.ReplaceAll(failing); !errors.Is(err, boom) {
		t.Fatalf("ReplaceAll of a failing read returned %v, want its error", err)
	}
	if got := len(engine.List()); got != n {
		t.Fatalf("%d jobs after a failed read, want all %d kept", got, n)
	}
}

// With WithUnchanged, a full reload does not decode the documents the
// function vouches for and the engine knows: the engine keeps those jobs
// as they are (here, their documents differ from what the engine has, to
// show they were not read), decodes the others, and a job it does not
// know is decoded whatever the function says. Batches mixing the two
// keep the documents' order; the log counts what was decoded.
func TestReplaceAllDoesNotDecodeWhatTheEngineHas(t *testing.T) {
	var buf strings.Builder
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	engine := scheduler.New(scheduler.Options{Logger: slog.New(slog.DiscardHandler)})
	doc := func(id, expr string) bson.Raw {
		b, err := bson.Marshal(bson.D{{Key: "_id", Value: id}, {Key: "cron_expr", Value: expr}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	n := decodeBatch + 100
	var docs []bson.Raw
	for i := range n {
		docs = append(docs, doc(fmt.Sprintf("j%05d", i), "0 9 * * *"))
	}
	if _, err := New(engine, log, nil).ReplaceAll(docsOf(docs...)); err != nil {
		t.Fatal(err)
	}
	vouched := func(d bson.Raw) bool {
		id := d.Lookup("_id").StringValue()
		return id == "new" || id[len(id)-1]%2 == 0
	}
	docs = docs[:0]
	for i := range n {
		docs = append(docs, doc(fmt.Sprintf("j%05d", i), "0 10 * * *"))
	}
	docs = append(docs, doc("new", "0 11 * * *"))
	sink := New(engine, log, nil).WithUnchanged(vouched)
	changed, err := sink.ReplaceAll(docsOf(docs...))
	if err != nil {
		t.Fatal(err)
	}
	if want := n/2 + 1; len(changed) != want {
		t.Fatalf("changed %d jobs, want %d (the odd ones and new)", len(changed), want)
	}
	for i := range n {
		id := fmt.Sprintf("j%05d", i)
		want := "0 10 * * *"
		if i%2 == 0 {
			want = "0 9 * * *"
		}
		if st, ok := engine.Get(id); !ok || st.CronExpr != want {
			t.Fatalf("%s: %+v (known %v), want %q", id, st, ok, want)
		}
	}
	if st, ok := engine.Get("new"); !ok || st.CronExpr != "0 11 * * *" {
		t.Fatalf("new: %+v (known %v): a job the engine did not know must be decoded", st, ok)
	}
	var last struct {
		Documents, Decoded int
	}
	for line := range strings.Lines(buf.String()) {
		if strings.Contains(line, msgSchedulesReplaced) {
			if err := json.Unmarshal([]byte(line), &last); err != nil {
				t.Fatal(err)
			}
		}
	}
	if last.Documents != n+1 || last.Decoded != n/2+1 {
		t.Fatalf("logged %+v, want %d documents, %d decoded", last, n+1, n/2+1)
	}
}

// A job counts once in reloads_total{result="rejected"} as it enters the
// rejected state, found by a full read or by an event alike: the start's
// read of a bad document counts it, reading it again (a poll, a resync)
// does not, nor does an event bringing it again or another bad one; once
// fixed, breaking it again counts again. A document whose _id is no job
// id counts as one too.
func TestRejectedCountsEachJobEnteringTheRejectedState(t *testing.T) {
	mx := metrics.New()
	engine := scheduler.New(scheduler.Options{Logger: slog.New(slog.DiscardHandler),
		Hooks: scheduler.Hooks{Rejected: CountRejected(mx)}})
	sink := New(engine, slog.New(slog.DiscardHandler), mx)
	doc := func(id any, expr any) bson.Raw {
		b, err := bson.Marshal(bson.D{{Key: "_id", Value: id}, {Key: "cron_expr", Value: expr}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	good, fixed := doc("good", "0 9 * * *"), doc("bad", "0 10 * * *")
	badExpr, badType := doc("bad", "0 25 * * *"), doc("bad", 42) // refused by the engine / by the decode
	objID := doc(bson.NewObjectID(), "0 9 * * *")
	step := func(what string, counted float64, rejected int) {
		t.Helper()
		var m dto.Metric
		if err := mx.Reloads.WithLabelValues(metrics.ReloadRejected).Write(&m); err != nil {
			t.Fatal(err)
		}
		if got := m.GetCounter().GetValue(); got != counted || engine.Rejected() != rejected {
			t.Fatalf("%s: reloads_total{rejected} = %v, engine.Rejected() = %d; want %v, %d", what, got, engine.Rejected(), counted, rejected)
		}
	}
	replace := func(docs ...bson.Raw) {
		t.Helper()
		if _, err := sink.ReplaceAll(docsOf(docs...)); err != nil {
			t.Fatal(err)
		}
	}
	replace(good, badExpr, objID)
	step("the start's read", 2, 2)
	for range 3 {
		replace(good, badExpr, objID)
	}
	step("the same documents read again", 2, 2)
	replace(good, badType, objID)
	step("another bad document for the refused job", 2, 2)
	replace(good, fixed, objID)
	step("fixed", 2, 1)
	replace(good, fixed, objID)
	step("fixed, read again", 2, 1)
	replace(good, badExpr, objID)
	step("broken again", 3, 2)

	// Events follow the same rule.
	sink.Upsert(badType)
	sink.Upsert(badExpr)
	step("bad events for the refused job", 3, 2)
	sink.Upsert(fixed)
	step("fixed by an event", 3, 1)
	sink.Upsert(badExpr)
	step("broken by an event", 4, 2)
	replace(good, badExpr, objID)
	step("then read again", 4, 2)
	sink.Delete(badExpr.Lookup("_id"))
	step("deleted", 4, 1)
	sink.Upsert(badType)
	step("inserted bad", 5, 2)
}

// A field no one reads that looks like one that is read is pointed out
// once as it arrives: by an event, or by a full read that finds its
// document changed — not by the first load of an empty engine (a cold
// start's), nor by a read that finds the document the engine already
// has. The job is applied as the rest of its document says; a note of
// the user's own is not listed.
func TestMisspeltFieldsWarnedAsTheyArrive(t *testing.T) {
	var buf strings.Builder
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	engine := scheduler.New(scheduler.Options{Logger: slog.New(slog.DiscardHandler)})
	doc := func(id string, extra ...bson.E) bson.Raw {
		b, err := bson.Marshal(append(bson.D{{Key: "_id", Value: id}, {Key: "cron_expr", Value: "0 9 * * *"}}, extra...))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	type warning struct {
		Msg, JobID, Field, Meant string
	}
	warnings := func() []warning {
		var out []warning
		for line := range strings.Lines(buf.String()) {
			var w struct {
				Msg   string `json:"msg"`
				JobID string `json:"job_id"`
				Field string `json:"field"`
				Meant string `json:"meant"`
			}
			if err := json.Unmarshal([]byte(line), &w); err != nil {
				t.Fatal(err)
			}
			if w.Msg == MsgMisspelt {
				out = append(out, warning{w.Msg, w.JobID, w.Field, w.Meant})
			}
		}
		buf.Reset()
		return out
	}
	typo := doc("typo", bson.E{Key: "enabeld", Value: false}, bson.E{Key: "owner", Value: "team-a"})
	plain := doc("plain", bson.E{Key: "owner", Value: "team-a"})
	sink := New(engine, log, nil)
	if _, err := sink.ReplaceAll(docsOf(typo, plain)); err != nil {
		t.Fatal(err)
	}
	if got := warnings(); len(got) != 0 {
		t.Fatalf("the first load of an empty engine warned %v", got)
	}
	if st, ok := engine.Get("typo"); !ok || !st.Armed {
		t.Fatalf("typo: %+v (known %v): the misspelt field must change nothing", st, ok)
	}
	// A later read (a resync, a poll) decoding both documents.
	if _, err := sink.ReplaceAll(docsOf(typo, plain)); err != nil {
		t.Fatal(err)
	}
	want := []warning{{MsgMisspelt, "typo", "enabeld", "enabled"}}
	if got := warnings(); !slices.Equal(got, want) {
		t.Fatalf("a later read warned %v, want %v", got, want)
	}
	// A re-read finding both documents as the engine has them: no warning.
	same := func(bson.Raw) bool { return true }
	if _, err := sink.WithUnchanged(same).ReplaceAll(docsOf(typo, plain)); err != nil {
		t.Fatal(err)
	}
	if got := warnings(); len(got) != 0 {
		t.Fatalf("a read of unchanged documents warned %v", got)
	}
	// An event bringing a new typo.
	sink.Upsert(doc("plain", bson.E{Key: "TZ", Value: "Asia/Seoul"}))
	want = []warning{{MsgMisspelt, "plain", "TZ", "timezone"}}
	if got := warnings(); !slices.Equal(got, want) {
		t.Fatalf("the event warned %v, want %v", got, want)
	}
}
