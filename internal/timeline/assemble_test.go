package timeline

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/lifetime"
)

var t0 = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

func str(s string) bson.RawValue {
	t, b, err := bson.MarshalValue(s)
	if err != nil {
		panic(err)
	}
	return bson.RawValue{Type: t, Value: b}
}

func boolean(v bool) bson.RawValue {
	t, b, err := bson.MarshalValue(v)
	if err != nil {
		panic(err)
	}
	return bson.RawValue{Type: t, Value: b}
}

func hourly(expr string) State {
	return State{Exists: true, Known: true, Timing: Timing{CronExpr: expr, Enabled: true}}
}

// An edit of cron_expr at 03:15 splits the range in two: the edit's before
// value is in force up to 03:15, the current expression after it.
func TestSegmentsAcrossAnEdit(t *testing.T) {
	from, to := t0, t0.Add(6*time.Hour)
	edit := Edit{ID: "e1", At: t0.Add(3*time.Hour + 15*time.Minute), Op: "update",
		Changes: []FieldChange{{Field: "cron_expr", Before: str("0 * * * *"), After: str("30 * * * *")}}}
	// An edit of a field that is not timing does not split.
	other := Edit{ID: "e2", At: t0.Add(4 * time.Hour), Op: "update",
		Changes: []FieldChange{{Field: "args.region", Before: str("x"), After: str("y")}}}
	segs := Segments("j", hourly("30 * * * *"), []Edit{other, edit}, from, to, time.Time{})
	if len(segs) != 2 {
		t.Fatalf("segments %+v, want 2", segs)
	}
	if segs[0].CronExpr != "0 * * * *" || !segs[0].From.Equal(from) || !segs[0].To.Equal(edit.At) {
		t.Errorf("before the edit: %+v", segs[0])
	}
	if segs[1].CronExpr != "30 * * * *" || !segs[1].From.Equal(edit.At) || !segs[1].To.Equal(to) {
		t.Errorf("after the edit: %+v", segs[1])
	}

	tl := Assemble(Input{JobID: "j", From: from, To: to, Now: to.Add(time.Hour), Current: hourly("30 * * * *"), Edits: []Edit{edit}})
	var got []string
	for _, e := range tl.Entries {
		got = append(got, e.Kind+"@"+e.At.Format("15:04"))
		if e.Last != nil {
			got[len(got)-1] += "-" + e.Last.Format("15:04")
		}
	}
	// 00:00..03:00 of "0 * * * *" (four slots), the edit, then 03:30..05:30.
	want := "no_record@00:00-03:00 edit@03:15 no_record@03:30-05:30"
	if strings.Join(got, " ") != want {
		t.Errorf("entries %s, want %s", strings.Join(got, " "), want)
	}
	if tl.Entries[0].Count != 4 || tl.Entries[2].Count != 3 {
		t.Errorf("counts %d, %d; want 4, 3", tl.Entries[0].Count, tl.Entries[2].Count)
	}
}

// Insert, disable, enable, timezone and delete walked backwards.
func TestSegmentsInsertDisableDelete(t *testing.T) {
	from, to := t0, t0.Add(10*time.Hour)
	h := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Hour) }
	edits := []Edit{
		{At: h(1), Op: "insert", Changes: []FieldChange{{Field: "cron_expr", After: str("0 * * * *")}}},
		{At: h(3), Op: "update", Changes: []FieldChange{{Field: "enabled", Before: bson.RawValue{}, After: boolean(false)}}},
		{At: h(5), Op: "update", Changes: []FieldChange{{Field: "enabled", Before: boolean(false), After: boolean(true)},
			{Field: "timezone", Before: bson.RawValue{}, After: str("Asia/Kolkata")}}},
		{At: h(8), Op: "delete", Changes: []FieldChange{{Field: "cron_expr", Before: str("0 * * * *")},
			{Field: "timezone", Before: str("Asia/Kolkata")}, {Field: "enabled", Before: boolean(true)}}},
	}
	segs := Segments("j", State{Known: true}, edits, from, to, time.Time{})
	type want struct {
		from, to int
		exists   bool
		enabled  bool
		tz       string
	}
	wants := []want{{0, 1, false, false, ""}, {1, 3, true, true, ""}, {3, 5, true, false, ""}, {5, 8, true, true, "Asia/Kolkata"}, {8, 10, false, false, ""}}
	if len(segs) != len(wants) {
		t.Fatalf("segments %+v, want %d", segs, len(wants))
	}
	for i, w := range wants {
		s := segs[i]
		if !s.From.Equal(h(w.from)) || !s.To.Equal(h(w.to)) || s.Exists != w.exists || s.Enabled != w.enabled || s.Timezone != w.tz {
			t.Errorf("segment %d = %+v, want %+v", i, s, w)
		}
	}

	tl := Assemble(Input{JobID: "j", From: from, To: to, Now: to, Current: State{Known: true}, Edits: edits})
	var slots []string
	for _, e := range tl.Entries {
		if e.Kind == KindNoRecord {
			slots = append(slots, e.At.Format("15:04")+"x"+itoa(e.Count))
		}
	}
	// 01:00 is the insert itself (a slot at the edit instant belongs to
	// the schedule before it): 02:00, 03:00 (the pause applied at 03:00),
	// then Kolkata's :30 slots 05:30, 06:30, 07:30.
	if got := strings.Join(slots, " "); got != "02:00x2 05:30x3" {
		t.Errorf("no-record slots %s", got)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// An every-second job over a day with nothing recorded is one entry; a
// run, a skip, a missed range and a future stretch break it into
// consecutive ranges, in order.
func TestCollapse(t *testing.T) {
	from, to := t0, t0.Add(24*time.Hour-time.Second)
	every := State{Exists: true, Known: true, Timing: Timing{CronExpr: "@every 1s", Enabled: true}}
	tl := Assemble(Input{JobID: "j", From: from, To: to, Now: to.Add(time.Hour), Current: every})
	if len(tl.Entries) != 1 || tl.Entries[0].Count != 86400 || tl.Entries[0].Kind != KindNoRecord || !tl.Entries[0].Last.Equal(to) {
		t.Fatalf("a quiet day of an every-second job: %+v", tl.Entries)
	}

	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	recs := []Record{
		{ID: "r1", ScheduledAt: at(10), Status: "succeeded", Instance: "a", Fence: 1, StartedAt: at(10), EndedAt: at(11)},
		{ID: "r2", ScheduledAt: at(11), Status: "skipped", Instance: "a", Error: "held"},
		{ID: "m1", ScheduledAt: at(100), LastScheduledAt: at(199), Count: 100, Status: "missed", Reason: "no_replica_running"},
	}
	tl = Assemble(Input{JobID: "j", From: from, To: at(299), Now: at(249), Current: every, Records: recs})
	var got []string
	for _, e := range tl.Entries {
		got = append(got, e.Kind+":"+e.At.Format("15:04:05")+":"+itoa(e.Count)+":"+e.Reason)
	}
	want := []string{
		"no_record:00:00:00:10:unrecorded",
		"run:00:00:10:1:",
		"skipped:00:00:11:1:held",
		"no_record:00:00:12:88:unrecorded",
		"missed:00:01:40:100:no_replica_running",
		"no_record:00:03:20:50:unrecorded",
		"no_record:00:04:10:50:future",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("entries:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if e := tl.Entries[1]; e.Fence == nil || *e.Fence != 1 || e.DurationMS == nil || *e.DurationMS != 1000 || e.OffSchedule {
		t.Errorf("run entry %+v", e)
	}
	if e := tl.Entries[4]; e.Last == nil || !e.Last.Equal(at(199)) {
		t.Errorf("missed entry %+v", e)
	}
}

// A record at an instant the schedule does not name is shown and marked;
// an edit in the middle of a no-record stretch splits it.
func TestOffScheduleAndEditSplit(t *testing.T) {
	from, to := t0, t0.Add(4*time.Hour)
	recs := []Record{{ID: "r", ScheduledAt: t0.Add(90 * time.Minute), Status: "succeeded"}}
	ed := Edit{At: t0.Add(150 * time.Minute), Op: "update", Changes: []FieldChange{{Field: "args.region", Before: str("a"), After: str("b")}}, UpdatedBy: "alice"}
	tl := Assemble(Input{JobID: "j", From: from, To: to, Now: to, Current: hourly("0 * * * *"), Records: recs, Edits: []Edit{ed}})
	var got []string
	for _, e := range tl.Entries {
		got = append(got, e.Kind+"@"+e.At.Format("15:04")+"x"+itoa(e.Count))
	}
	if g := strings.Join(got, " "); g != "no_record@00:00x2 run@01:30x1 no_record@02:00x1 edit@02:30x0 no_record@03:00x2" {
		t.Errorf("entries %s", g)
	}
	if !tl.Entries[1].OffSchedule {
		t.Errorf("run at 01:30 of an hourly job not marked off schedule")
	}
	if s := tl.Entries[3].Summary(); s != `update args.region "a" → "b", by alice` {
		t.Errorf("edit summary %q", s)
	}
}

// More slots than MaxSlots cut the timeline where the bound is reached.
func TestSlotBound(t *testing.T) {
	every := State{Exists: true, Known: true, Timing: Timing{CronExpr: "@every 1s", Enabled: true}}
	from := t0
	tl := Assemble(Input{JobID: "j", From: from, To: from.Add(3 * 24 * time.Hour), Now: from.Add(-time.Second), Current: every})
	if !tl.Truncated || tl.NextFrom == nil || !tl.NextFrom.Equal(from.Add(MaxSlots*time.Second)) {
		t.Fatalf("truncated %v next_from %v, want cut at slot %d", tl.Truncated, tl.NextFrom, MaxSlots)
	}
	if len(tl.Entries) != 1 || tl.Entries[0].Count != MaxSlots {
		t.Errorf("entries %+v", tl.Entries)
	}
}

func TestParseWindow(t *testing.T) {
	now := time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	from, to, err := ParseWindow("", "", now)
	if err != nil || !to.Equal(now) || !from.Equal(now.Add(-DefaultWindow)) {
		t.Errorf("defaults: %v %v %v", from, to, err)
	}
	from, to, err = ParseWindow("-2h", "-30m", now)
	if err != nil || !from.Equal(now.Add(-2*time.Hour)) || !to.Equal(now.Add(-30*time.Minute)) {
		t.Errorf("relative: %v %v %v", from, to, err)
	}
	from, _, err = ParseWindow("-7d", "", now)
	if err != nil || !from.Equal(now.Add(-7*24*time.Hour)) {
		t.Errorf("days: %v %v", from, err)
	}
	from, to, err = ParseWindow("2026-03-01T09:00:00+01:00", "now", now)
	if err != nil || !from.Equal(time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)) || !to.Equal(now) {
		t.Errorf("RFC 3339: %v %v %v", from, to, err)
	}
	for _, c := range []struct{ from, to, want string }{
		{"yesterday", "", "want RFC 3339"},
		{"2h", "", "needs a sign: -2h"},
		{"-2x", "", "want a duration"},
		{"", "-1.5d", "whole number of days"},
		{"-1h", "-2h", "is after to"},
		{"-40d", "", "more than the"},
	} {
		_, _, err := ParseWindow(c.from, c.to, now)
		if err == nil || !errors.Is(err, ErrBadRange) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseWindow(%q, %q) = %v, want an ErrBadRange saying %q", c.from, c.to, err, c.want)
		}
	}
}

// A slot daylight saving moved carries its note and stands alone: on
// 2027-03-14 in New York 02:30 does not exist and fires at 03:00 EDT.
func TestDSTSlotStandsAlone(t *testing.T) {
	ny := State{Exists: true, Known: true, Timing: Timing{CronExpr: "30 2 * * *", Timezone: "America/New_York", Enabled: true}}
	from := time.Date(2027, 3, 12, 12, 0, 0, 0, time.UTC)
	to := time.Date(2027, 3, 17, 12, 0, 0, 0, time.UTC)
	tl := Assemble(Input{JobID: "j", From: from, To: to, Now: to, Current: ny})
	var got []string
	for _, e := range tl.Entries {
		got = append(got, e.At.Format(time.RFC3339)+"x"+itoa(e.Count)+"/"+strconv.FormatBool(e.Shifted))
	}
	// 03-13 07:30Z (EST), the shifted 03-14 07:00Z (03:00 EDT), then 03-15..17 06:30Z (EDT).
	if g := strings.Join(got, " "); g != "2027-03-13T07:30:00Zx1/false 2027-03-14T07:00:00Zx1/true 2027-03-15T06:30:00Zx3/false" {
		t.Errorf("entries %s", g)
	}
	if tl.Entries[1].DSTNote == "" {
		t.Errorf("the shifted slot has no note: %+v", tl.Entries[1])
	}
}

// An http action's answer reaches its run entry and its summary, as an
// exec action's exit code does.
func TestRunEntryCarriesTheAnswer(t *testing.T) {
	recs := []Record{{ID: "r", ScheduledAt: t0.Add(time.Hour), Status: "failed", Instance: "a", Fence: 3,
		Error: "http action j: POST https://h/ answered 503 Service Unavailable: busy", AnswerStatus: 503, Answer: "busy"}}
	tl := Assemble(Input{JobID: "j", From: t0, To: t0.Add(time.Hour), Now: t0.Add(2 * time.Hour), Current: hourly("0 * * * *"), Records: recs})
	var run Entry
	for _, e := range tl.Entries {
		if e.Kind == KindRun {
			run = e
		}
	}
	if run.AnswerStatus != 503 || run.Answer != "busy" {
		t.Fatalf("run entry %+v", run)
	}
	if s := run.Summary(); !strings.Contains(s, "fence 3, answered 503, error: http action j") {
		t.Errorf("summary %q", s)
	}
}

// A schedule's lifetime says why its slots outside it do not run: before
// start_at, paused until …, after end_at (in the past and the future
// alike), each stretch one entry; the slots inside are as ever. An edit
// of end_at splits the range like any timing edit.
func TestLifetimeSaysWhyASlotDoesNotRun(t *testing.T) {
	from, to := t0, t0.Add(10*time.Hour)
	h := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Hour) }
	cur := hourly("0 * * * *")
	cur.Timing.StartAt, cur.Timing.PausedUntil, cur.Timing.EndAt = h(2), h(4), h(7)
	tl := Assemble(Input{JobID: "j", From: from, To: to, Now: h(8).Add(30 * time.Minute), Current: cur})
	var got []string
	for _, e := range tl.Entries {
		s := e.Reason + "@" + e.At.Format("15:04")
		if e.Last != nil {
			s += "-" + e.Last.Format("15:04")
		}
		got = append(got, s)
	}
	want := "before start_at@00:00-01:00 paused until 2026-03-01T04:00:00Z@02:00-03:00 unrecorded@04:00-06:00 " +
		"after end_at@07:00-10:00"
	if strings.Join(got, " ") != want {
		t.Errorf("entries\n%s\nwant\n%s", strings.Join(got, " "), want)
	}

	// max_runs 2: after the slot skipped as max_runs reached the daemons
	// disarmed the job, and the slots after it say so.
	cur = hourly("0 * * * *")
	cur.Timing.MaxRuns = 2
	recs := []Record{{ID: "j@0", ScheduledAt: h(0), Status: "succeeded"}, {ID: "j@1", ScheduledAt: h(1), Status: "succeeded"},
		{ID: "j@2", ScheduledAt: h(2), Status: "skipped", Reason: lifetime.ReasonMaxRuns}}
	tl = Assemble(Input{JobID: "j", From: from, To: h(5), Now: h(5).Add(time.Minute), Current: cur, Records: recs})
	last := tl.Entries[len(tl.Entries)-1]
	if last.Kind != KindNoRecord || last.Reason != lifetime.ReasonMaxRuns || !last.At.Equal(h(3)) || last.Count != 3 {
		t.Errorf("after the max_runs skip: %+v, want 3 slots from 03:00 with reason %q", last, lifetime.ReasonMaxRuns)
	}

	// end_at set at 05:30 (it was absent): the slots after it are not
	// expected from the edit on.
	edit := Edit{ID: "e1", At: h(5).Add(30 * time.Minute), Op: "update",
		Changes: []FieldChange{{Field: "end_at", Before: bson.RawValue{}, After: dateValue(h(5))}}}
	cur = hourly("0 * * * *")
	cur.Timing.EndAt = h(5)
	segs := Segments("j", cur, []Edit{edit}, from, to, time.Time{})
	if len(segs) != 2 || !segs[0].EndAt.IsZero() || !segs[1].EndAt.Equal(h(5)) {
		t.Fatalf("segments %+v, want two split by the end_at edit", segs)
	}
}

func dateValue(at time.Time) bson.RawValue {
	t, b, err := bson.MarshalValue(at)
	if err != nil {
		panic(err)
	}
	return bson.RawValue{Type: t, Value: b}
}
