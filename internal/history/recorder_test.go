package history

import (
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"maps"
	"sort"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/changestream"
)

type memQueue struct{ entries []Entry }

func (q *memQueue) Enqueue(e Entry) bool { q.entries = append(q.entries, e); return true }

type nopSink struct{ replaced int }

func (nopSink) Upsert(bson.Raw)      {}
func (nopSink) Delete(bson.RawValue) {}
func (s *nopSink) ReplaceAll(docs iter.Seq2[bson.Raw, error]) ([]string, error) {
	s.replaced++
	for _, err := range docs {
		if err != nil {
			return nil, err
		}
	}
	return nil, nil
}

// docs reads ds as a full read does: one at a time, in a buffer the next
// one overwrites.
func docs(ds ...bson.Raw) iter.Seq2[bson.Raw, error] {
	return func(yield func(bson.Raw, error) bool) {
		var buf []byte
		for _, d := range ds {
			buf = append(buf[:0], d...)
			if !yield(bson.Raw(buf), nil) {
				return
			}
			clear(buf)
		}
	}
}

var wall0 = time.Date(2027, 3, 1, 10, 0, 0, 0, time.UTC)

// ev builds a change event numbered n for job id: fields are added as given
// (fullDocument, updateDescription...).
func ev(t *testing.T, n int, op string, id any, fields ...bson.E) changestream.EventInfo {
	t.Helper()
	d := bson.D{
		{Key: "_id", Value: bson.D{{Key: "_data", Value: fmt.Sprintf("82%014X", n)}}},
		{Key: "operationType", Value: op},
		{Key: "wallTime", Value: bson.NewDateTimeFromTime(wall0.Add(time.Duration(n) * time.Second))},
		{Key: "documentKey", Value: bson.D{{Key: "_id", Value: id}}},
	}
	return changestream.EventInfo{Op: op, Event: raw(t, append(d, fields...))}
}

func full(t *testing.T, d bson.D) bson.E { return bson.E{Key: "fullDocument", Value: raw(t, d)} }

func upd(t *testing.T, set bson.D, removed ...string) bson.E {
	a := bson.A{}
	for _, r := range removed {
		a = append(a, r)
	}
	return bson.E{Key: "updateDescription", Value: bson.D{{Key: "updatedFields", Value: set}, {Key: "removedFields", Value: a}}}
}

func newTestRecorder() (*Recorder, *memQueue, *nopSink) {
	q, s := &memQueue{}, &nopSink{}
	r := NewRecorder(s, q, RecorderOptions{Instance: "r1", Retention: time.Hour,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: func() time.Time { return wall0.Add(time.Hour) }})
	return r, q, s
}

func entryString(e Entry) string {
	s := e.Op + " " + e.JobID + " [" + renderAll(e.Changes) + "]"
	if e.UpdatedBy != "" {
		s += " by " + e.UpdatedBy
	}
	return s
}

// TestRecorderEntriesFollowTheEvents drives a recorder through the edits an
// operator makes and checks each entry's before -> after. Every update
// event carries a looked-up fullDocument that is already a later version
// (as updateLookup gives when edits come quickly): the entries must not
// use it.
func TestRecorderEntriesFollowTheEvents(t *testing.T) {
	r, q, sink := newTestRecorder()
	start := bson.D{{Key: "_id", Value: "daily_report"}, {Key: "cron_expr", Value: "0 9 * * *"}}
	r.ReplaceAll(docs(raw(t, start)))
	if sink.replaced != 1 {
		t.Fatal("ReplaceAll not passed on to the wrapped sink")
	}
	r.CaughtUp()
	later := full(t, bson.D{{Key: "_id", Value: "daily_report"}, {Key: "cron_expr", Value: "9 9 9 9 *"}, {Key: "enabled", Value: false}})
	now := bson.NewDateTimeFromTime(wall0)
	events := []changestream.EventInfo{
		ev(t, 1, "update", "daily_report", later, upd(t, bson.D{{Key: "cron_expr", Value: "0 8 * * *"}, {Key: "updated_at", Value: now}})),
		ev(t, 2, "update", "daily_report", later, upd(t, bson.D{{Key: "timezone", Value: "Europe/Berlin"}, {Key: "updated_at", Value: now}})),
		ev(t, 3, "update", "daily_report", later, upd(t, bson.D{{Key: "enabled", Value: false}, {Key: "updated_by", Value: "alice"}})),
		// Not setting updated_by: the document still names alice.
		ev(t, 4, "update", "daily_report", later, upd(t, bson.D{{Key: "enabled", Value: true}})),
		ev(t, 5, "update", "daily_report", later, upd(t, bson.D{{Key: "args", Value: bson.D{{Key: "region", Value: "eu"}}}}, "updated_by")),
		ev(t, 6, "update", "daily_report", later, upd(t, bson.D{{Key: "args.region", Value: "us"}})),
		// Only updated_at: nothing recorded.
		ev(t, 7, "update", "daily_report", later, upd(t, bson.D{{Key: "updated_at", Value: now}})),
		ev(t, 8, "replace", "daily_report", full(t, bson.D{{Key: "_id", Value: "daily_report"}, {Key: "cron_expr", Value: "@daily"}, {Key: "updated_by", Value: "bob"}})),
		ev(t, 9, "delete", "daily_report"),
		ev(t, 10, "insert", "daily_report", full(t, bson.D{{Key: "_id", Value: "daily_report"}, {Key: "cron_expr", Value: "@hourly"}})),
		// A document whose _id is not a string is no job: no entry.
		ev(t, 11, "insert", bson.D{{Key: "tenant", Value: "x"}}, full(t, bson.D{{Key: "_id", Value: bson.D{{Key: "tenant", Value: "x"}}}, {Key: "cron_expr", Value: "@hourly"}})),
	}
	for _, e := range events {
		r.Observe(e)
	}
	want := []string{
		`update daily_report [cron_expr: "0 9 * * *" -> "0 8 * * *"]`,
		`update daily_report [timezone: - -> "Europe/Berlin"]`,
		`update daily_report [enabled: - -> false] by alice`,
		`update daily_report [enabled: false -> true] by alice`,
		`update daily_report [args: - -> {"region":"eu"}]`,
		`update daily_report [args.region: "eu" -> "us"]`,
		`replace daily_report [cron_expr: "0 8 * * *" -> "@daily"; timezone: "Europe/Berlin" -> -; enabled: true -> -; args: {"region":"us"} -> -] by bob`,
		`delete daily_report [cron_expr: "@daily" -> -]`,
		`insert daily_report [cron_expr: - -> "@hourly"]`,
	}
	if len(q.entries) != len(want) {
		for _, e := range q.entries {
			t.Logf("entry: %s", entryString(e))
		}
		t.Fatalf("%d entries, want %d", len(q.entries), len(want))
	}
	ids := map[string]bool{}
	for i, e := range q.entries {
		if got := entryString(e); got != want[i] {
			t.Errorf("entry %d:\n got %s\nwant %s", i, got, want[i])
		}
		ids[e.ID] = true
		if e.Instance != "r1" || e.ExpireAt.Sub(e.At) != time.Hour || !e.RecordedAt.Equal(wall0.Add(time.Hour)) {
			t.Errorf("entry %d: instance %q, expire_at %s - at %s, recorded_at %s", i, e.Instance, e.ExpireAt, e.At, e.RecordedAt)
		}
	}
	if len(ids) != len(want) {
		t.Errorf("entry ids not unique per event: %v", ids)
	}
	if first := q.entries[0]; first.ID != "8200000000000001" || !first.At.Equal(wall0.Add(time.Second)) {
		t.Errorf("first entry: _id %q at %s, want the event's _data and wallTime", first.ID, first.At)
	}
}

// update_message is the edit's reason, as updated_by is its author: the
// entry carries the document's message after the change and never lists
// it as a changed field, so an edit of nothing but the message (and its
// author and time) records nothing, as it re-arms nothing.
func TestRecorderTakesTheMessageAsTheEditsReason(t *testing.T) {
	r, q, _ := newTestRecorder()
	r.ReplaceAll(docs(raw(t, bson.D{{Key: "_id", Value: "a"}, {Key: "cron_expr", Value: "0 9 * * *"}})))
	r.CaughtUp()
	now := bson.NewDateTimeFromTime(wall0)
	for _, e := range []changestream.EventInfo{
		ev(t, 1, "update", "a", upd(t, bson.D{{Key: "cron_expr", Value: "0 8 * * *"}, {Key: "updated_by", Value: "alice"},
			{Key: "update_message", Value: "earlier reports"}, {Key: "updated_at", Value: now}})),
		// Only the message, its author and time: no entry.
		ev(t, 2, "update", "a", upd(t, bson.D{{Key: "update_message", Value: "earlier reports, really"}, {Key: "updated_by", Value: "bob"},
			{Key: "updated_at", Value: now}})),
		// A later edit that removes the message has none.
		ev(t, 3, "update", "a", upd(t, bson.D{{Key: "enabled", Value: false}, {Key: "updated_at", Value: now}}, "update_message")),
		ev(t, 4, "delete", "a"),
		ev(t, 5, "insert", "a", full(t, bson.D{{Key: "_id", Value: "a"}, {Key: "cron_expr", Value: "@daily"},
			{Key: "updated_by", Value: "ci"}, {Key: "update_message", Value: "add a"}})),
	} {
		r.Observe(e)
	}
	var got []string
	for _, e := range q.entries {
		got = append(got, entryString(e)+" message "+e.UpdateMessage)
	}
	want := []string{
		`update a [cron_expr: "0 9 * * *" -> "0 8 * * *"] by alice message earlier reports`,
		`update a [enabled: - -> false] by bob message `,
		`delete a [cron_expr: "0 8 * * *" -> -; enabled: false -> -] message `,
		`insert a [cron_expr: - -> "@daily"] by ci message add a`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("entries:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestRecorderRecordsNothingUntilCaughtUp checks the window after a full
// reload: events that the read may already include are applied to the
// recorder's documents but not recorded; once the stream caught up the
// next event has the right "before".
func TestRecorderRecordsNothingUntilCaughtUp(t *testing.T) {
	r, q, _ := newTestRecorder()
	// The read already includes event 1 (0 8) and event 2 (0 7).
	r.ReplaceAll(docs(raw(t, bson.D{{Key: "_id", Value: "a"}, {Key: "cron_expr", Value: "0 7 * * *"}})))
	r.Observe(ev(t, 1, "update", "a", upd(t, bson.D{{Key: "cron_expr", Value: "0 8 * * *"}})))
	r.Observe(ev(t, 2, "update", "a", upd(t, bson.D{{Key: "cron_expr", Value: "0 7 * * *"}})))
	if len(q.entries) != 0 {
		t.Fatalf("entries before the stream caught up: %v", q.entries)
	}
	r.CaughtUp()
	r.Observe(ev(t, 3, "update", "a", upd(t, bson.D{{Key: "cron_expr", Value: "0 6 * * *"}})))
	if len(q.entries) != 1 || entryString(q.entries[0]) != `update a [cron_expr: "0 7 * * *" -> "0 6 * * *"]` {
		t.Fatalf("entries = %v", q.entries)
	}
	// A resync's full reload pauses recording again.
	r.ReplaceAll(docs(raw(t, bson.D{{Key: "_id", Value: "a"}, {Key: "cron_expr", Value: "0 5 * * *"}})))
	r.Observe(ev(t, 4, "update", "a", upd(t, bson.D{{Key: "cron_expr", Value: "0 5 * * *"}})))
	if len(q.entries) != 1 {
		t.Fatalf("entry recorded while not caught up: %v", q.entries[1:])
	}
}

// TestRecordersOfTwoReplicasAgree feeds the same events to two recorders
// that reloaded at different moments (one before the edits, one in the
// middle with the stream replaying what its read already had) and checks
// that whatever both record is identical, id included.
func TestRecordersOfTwoReplicasAgree(t *testing.T) {
	a, qa, _ := newTestRecorder()
	b, qb, _ := newTestRecorder()
	a.ReplaceAll(docs(raw(t, bson.D{{Key: "_id", Value: "j"}, {Key: "cron_expr", Value: "0 9 * * *"}})))
	a.CaughtUp()
	events := []changestream.EventInfo{
		ev(t, 1, "update", "j", upd(t, bson.D{{Key: "cron_expr", Value: "0 8 * * *"}})),
		ev(t, 2, "update", "j", upd(t, bson.D{{Key: "enabled", Value: false}})),
		ev(t, 3, "update", "j", upd(t, bson.D{{Key: "enabled", Value: true}})),
	}
	for _, e := range events {
		a.Observe(e)
	}
	// b read the collection after event 2, then replays 1 and 2.
	b.ReplaceAll(docs(raw(t, bson.D{{Key: "_id", Value: "j"}, {Key: "cron_expr", Value: "0 8 * * *"}, {Key: "enabled", Value: false}})))
	b.Observe(events[0])
	b.Observe(events[1])
	b.CaughtUp()
	b.Observe(events[2])
	if len(qa.entries) != 3 || len(qb.entries) != 1 {
		t.Fatalf("a recorded %d, b %d; want 3 and 1", len(qa.entries), len(qb.entries))
	}
	ea, eb := qa.entries[2], qb.entries[0]
	ea.RecordedAt, eb.RecordedAt = time.Time{}, time.Time{}
	if fmt.Sprint(ea) != fmt.Sprint(eb) {
		t.Fatalf("replicas disagree on event 3:\n a %+v\n b %+v", ea, eb)
	}
}

// memSightings records what a Recorder hands to its SightingQueue.
type memSightings struct{ seen []string }

func (m *memSightings) Inserted(id string, at time.Time) {
	m.seen = append(m.seen, "insert "+id+" "+at.Sub(wall0).String())
}

func (m *memSightings) Deleted(id string, at time.Time) {
	m.seen = append(m.seen, "delete "+id+" "+at.Sub(wall0).String())
}

func (m *memSightings) Present(ids []string, at time.Time) {
	sort.Strings(ids)
	m.seen = append(m.seen, "present "+strings.Join(ids, ",")+" "+at.Sub(wall0).String())
}

// The recorder hands every insert and delete event to the sightings, also
// while it records no edits (after a full reload, before the stream caught
// up), and the collection once per full reload, when it is exact: at the
// first CaughtUp after the reload, with the events applied since (or, in
// poll mode, at ReadIsCurrent).
func TestRecorderSightings(t *testing.T) {
	m := &memSightings{}
	r := NewRecorder(&nopSink{}, &memQueue{}, RecorderOptions{Instance: "r1", Retention: time.Hour,
		Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { return wall0.Add(time.Hour) }, Sightings: m})
	r.ReplaceAll(docs(raw(t, bson.D{{Key: "_id", Value: "a"}, {Key: "cron_expr", Value: "@daily"}}),
		raw(t, bson.D{{Key: "_id", Value: 7}, {Key: "cron_expr", Value: "@daily"}})))
	r.Observe(ev(t, 1, "insert", "b", full(t, bson.D{{Key: "_id", Value: "b"}, {Key: "cron_expr", Value: "@daily"}})))
	r.Observe(ev(t, 2, "delete", "a"))
	r.Observe(ev(t, 3, "update", "b", upd(t, bson.D{{Key: "enabled", Value: false}})))
	r.CaughtUp()
	r.CaughtUp() // no full reload since: nothing more
	r.Observe(ev(t, 4, "insert", "c", full(t, bson.D{{Key: "_id", Value: "c"}, {Key: "cron_expr", Value: "@daily"}})))
	r.ReplaceAll(docs(raw(t, bson.D{{Key: "_id", Value: "c"}, {Key: "cron_expr", Value: "@daily"}})))
	r.ReadIsCurrent()
	r.ReadIsCurrent()
	want := []string{
		"insert b 1s", "delete a 2s",
		"present b 1h0m0s",
		"insert c 4s",
		"present c 1h0m0s",
	}
	if strings.Join(m.seen, "\n") != strings.Join(want, "\n") {
		t.Errorf("sightings:\n%s\nwant:\n%s", strings.Join(m.seen, "\n"), strings.Join(want, "\n"))
	}
}

// documentsOf renders what Documents lists as id → cron_expr.
func documentsOf(r *Recorder) map[string]string {
	out := map[string]string{}
	for d := range r.Documents() {
		out[d.Lookup("_id").String()] = d.Lookup("cron_expr").StringValue()
	}
	return out
}

// Documents lists the documents as the full read and the events left
// them — the state file's documents — refused _ids included; a read that
// fails part-way updates what it read and removes nothing.
func TestRecorderDocumentsFollowReadsAndEvents(t *testing.T) {
	r, _, _ := newTestRecorder()
	doc := func(id any, expr string) bson.Raw {
		return raw(t, bson.D{{Key: "_id", Value: id}, {Key: "cron_expr", Value: expr}})
	}
	if _, err := r.ReplaceAll(docs(doc("a", "0 1 * * *"), doc("b", "0 2 * * *"), doc(int32(7), "0 3 * * *"))); err != nil {
		t.Fatal(err)
	}
	r.Observe(ev(t, 1, "insert", "c", full(t, bson.D{{Key: "_id", Value: "c"}, {Key: "cron_expr", Value: "0 4 * * *"}})))
	r.Observe(ev(t, 2, "update", "a", upd(t, bson.D{{Key: "cron_expr", Value: "0 5 * * *"}})))
	r.Observe(ev(t, 3, "delete", "b"))
	r.Observe(ev(t, 4, "delete", int32(7)))
	want := map[string]string{`"a"`: "0 5 * * *", `"c"`: "0 4 * * *"}
	if got := documentsOf(r); !maps.Equal(got, want) {
		t.Fatalf("documents after the events: %v, want %v", got, want)
	}
	boom := errors.New("connection reset")
	failing := func(yield func(bson.Raw, error) bool) {
		if yield(doc("c", "0 6 * * *"), nil) {
			yield(nil, boom)
		}
	}
	if _, err := r.ReplaceAll(failing); !errors.Is(err, boom) {
		t.Fatalf("failed read returned %v", err)
	}
	want[`"c"`] = "0 6 * * *"
	if got := documentsOf(r); !maps.Equal(got, want) {
		t.Fatalf("documents after a failed read: %v, want %v", got, want)
	}
	if _, err := r.ReplaceAll(docs(doc("c", "0 6 * * *"))); err != nil {
		t.Fatal(err)
	}
	if got := documentsOf(r); !maps.Equal(got, map[string]string{`"c"`: "0 6 * * *"}) {
		t.Fatalf("documents after a complete read: %v", got)
	}
}

// askingSink is a sink that, in a full read, asks its recorder whether
// each document it reads is unchanged (as the engine's sink does), and
// whether a copy of it is: the answers by document id.
type askingSink struct {
	nopSink
	r            *Recorder
	same, copies map[string]bool
	fail         error // returned after reading every document, once
}

func (s *askingSink) ReplaceAll(docs iter.Seq2[bson.Raw, error]) ([]string, error) {
	s.same, s.copies = map[string]bool{}, map[string]bool{}
	for d, err := range docs {
		if err != nil {
			return nil, err
		}
		id := d.Lookup("_id").StringValue()
		s.same[id] = s.r.Unchanged(d)
		s.copies[id] = s.r.Unchanged(bson.Raw(append([]byte(nil), d...)))
	}
	if err := s.fail; err != nil {
		s.fail = nil
		return nil, err
	}
	return nil, nil
}

// Unchanged says true, during a full read, only of the document being
// handed on that is byte for byte the one the recorder held, while every
// document the recorder holds was handed to the sink: never on the first
// read, never for a changed document or a copy, not in the read after a
// failed one, and again once a read succeeded. Outside a read it is false.
func TestRecorderUnchangedOnlyForTheDocumentTheSinkWasGiven(t *testing.T) {
	sink := &askingSink{}
	r := NewRecorder(sink, &memQueue{}, RecorderOptions{Instance: "r1", Retention: time.Hour,
		Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { return wall0 }})
	sink.r = r
	doc := func(id, expr string) bson.Raw {
		return raw(t, bson.D{{Key: "_id", Value: id}, {Key: "cron_expr", Value: expr}})
	}
	read := func(want map[string]bool, ds ...bson.Raw) {
		t.Helper()
		if _, err := r.ReplaceAll(docs(ds...)); err != nil && !strings.Contains(err.Error(), "failed on purpose") {
			t.Fatal(err)
		}
		if !maps.Equal(sink.same, want) {
			t.Fatalf("Unchanged during the read: %v, want %v", sink.same, want)
		}
		for id, same := range sink.copies {
			if same {
				t.Fatalf("Unchanged said true of a copy of %s", id)
			}
		}
	}
	read(map[string]bool{"a": false, "b": false}, doc("a", "0 1 * * *"), doc("b", "0 2 * * *"))
	read(map[string]bool{"a": true, "b": false, "c": false}, doc("a", "0 1 * * *"), doc("b", "0 3 * * *"), doc("c", "0 4 * * *"))
	// An event keeps the copy and the sink together (the watcher hands
	// both the event); the next read finds the document as the event left it.
	r.Observe(ev(t, 1, "update", "a", upd(t, bson.D{{Key: "cron_expr", Value: "0 5 * * *"}})))
	read(map[string]bool{"a": true, "b": true, "c": true}, doc("a", "0 5 * * *"), doc("b", "0 3 * * *"), doc("c", "0 4 * * *"))
	// A read the sink fails: what the recorder stored then may not have
	// reached the sink, so the read after it decodes everything again.
	sink.fail = errors.New("failed on purpose")
	read(map[string]bool{"a": true, "b": true, "c": false}, doc("a", "0 5 * * *"), doc("b", "0 3 * * *"), doc("c", "0 6 * * *"))
	read(map[string]bool{"a": false, "b": false, "c": false}, doc("a", "0 5 * * *"), doc("b", "0 3 * * *"), doc("c", "0 6 * * *"))
	read(map[string]bool{"a": true, "b": true, "c": true}, doc("a", "0 5 * * *"), doc("b", "0 3 * * *"), doc("c", "0 6 * * *"))
	if r.Unchanged(doc("a", "0 5 * * *")) {
		t.Fatal("Unchanged said true outside a read")
	}
}
