package timeline

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/cronswap/cronswap/internal/jobhistory"
)

// Operations join the timeline at the time they were done, between the
// slots, split a stretch of no-record slots as an edit does, come after a
// slot and an edit of the same instant, and read as who did what; the
// edit's message shows as its reason. Operations outside the range are
// left out.
func TestOperationsJoinTheTimeline(t *testing.T) {
	from, to := t0, t0.Add(4*time.Hour)
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	ed := Edit{ID: "e1", At: at(120), Op: "update", UpdatedBy: "alice", UpdateMessage: "move the report",
		Changes: []FieldChange{{Field: "args.region", Before: str("a"), After: str("b")}}}
	ops := []jobhistory.Operation{
		{Op: jobhistory.OpResumeAfterFailures, At: at(120), By: "carol"},
		{Op: jobhistory.OpRunNow, At: at(90), By: "alice", TriggerID: "65f0", RunID: "trigger/65f0", Status: "succeeded",
			Args: json.RawMessage(`{"region":"eu"}`)},
		{Op: jobhistory.OpBackfill, At: at(200), By: "bob", Slots: &jobhistory.Slots{Count: 3, First: at(-180), Last: at(-60),
			Statuses: map[string]int64{"succeeded": 1, "pending": 2}}},
		{Op: jobhistory.OpRunNow, At: at(300), By: "late"},
	}
	tl := Assemble(Input{JobID: "j", From: from, To: to, Now: to, Current: hourly("0 * * * *"), Edits: []Edit{ed}, Operations: ops})
	var got []string
	for _, e := range tl.Entries {
		got = append(got, e.Kind+"@"+e.At.Format("15:04")+"x"+itoa(e.Count))
	}
	want := "no_record@00:00x2 operation@01:30x0 no_record@02:00x1 edit@02:00x0 operation@02:00x0 no_record@03:00x1 operation@03:20x0 no_record@04:00x1"
	if g := strings.Join(got, " "); g != want {
		t.Fatalf("entries\n%s\nwant\n%s", g, want)
	}
	for i, w := range map[int]string{
		1: `run_now by alice, trigger 65f0, run trigger/65f0 succeeded, args {"region":"eu"}`,
		3: `update args.region "a" → "b", by alice, message "move the report"`,
		4: `resume_after_failures by carol`,
		6: `backfill by bob, 3 slots 2026-02-28T21:00:00Z .. 2026-02-28T23:00:00Z: 2 pending, 1 succeeded`,
	} {
		if s := tl.Entries[i].Summary(); s != w {
			t.Errorf("entry %d: %q, want %q", i, s, w)
		}
	}
	js, err := json.Marshal(tl.Entries[1])
	if err != nil || string(js) != `{"kind":"operation","at":"2026-03-01T01:30:00Z","status":"succeeded","run_id":"trigger/65f0","op":"run_now","by":"alice","trigger_id":"65f0","args":{"region":"eu"}}` {
		t.Errorf("run-now entry as JSON: %s %v", js, err)
	}
}

// More operations than one timeline holds cut it where the reader left
// them: the entries end before the first operation not read.
func TestOperationsCutTheTimeline(t *testing.T) {
	from, to := t0, t0.Add(time.Hour)
	cut := t0.Add(30 * time.Minute)
	ops := []jobhistory.Operation{{Op: jobhistory.OpRunNow, At: t0.Add(10 * time.Minute)}, {Op: jobhistory.OpRunNow, At: t0.Add(40 * time.Minute)}}
	tl := Assemble(Input{JobID: "j", From: from, To: to, Now: to, Current: hourly("0 0 1 1 *"), Operations: ops, Cut: cut})
	if !tl.Truncated || !tl.NextFrom.Equal(cut) || len(tl.Entries) != 1 || tl.Entries[0].Kind != KindOperation {
		t.Errorf("truncated %v next_from %v entries %+v", tl.Truncated, tl.NextFrom, tl.Entries)
	}
}
