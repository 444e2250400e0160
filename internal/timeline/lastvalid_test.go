package timeline

import (
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/schedule"
)

// While a document is refused the daemons keep firing on the last valid
// schedule before it (last known good), so that schedule stays in force:
// hourly at :00, then "bogus" from 02:10 to 04:10, then fixed to :30. The
// run at 03:00, made on the old timing while the document was refused, is
// a slot of the schedule in force, not off schedule; the 04:00 slot, which
// has no record, shows as unrecorded.
func TestRefusedEditContinuesThePreviousValidSchedule(t *testing.T) {
	from, to := t0, t0.Add(6*time.Hour)
	edits := []Edit{
		{ID: "e1", At: t0.Add(2*time.Hour + 10*time.Minute), Op: "update",
			Changes: []FieldChange{{Field: "cron_expr", Before: str("0 * * * *"), After: str("bogus")}}},
		{ID: "e2", At: t0.Add(4*time.Hour + 10*time.Minute), Op: "update",
			Changes: []FieldChange{{Field: "cron_expr", Before: str("bogus"), After: str("30 * * * *")}}},
	}
	var recs []Record
	for _, h := range []int{0, 1, 2, 3} {
		recs = append(recs, Record{ID: "r" + itoa(int64(h)), ScheduledAt: t0.Add(time.Duration(h) * time.Hour), Status: "succeeded"})
	}
	tl := Assemble(Input{JobID: "j", From: from, To: to, Now: to, Current: hourly("30 * * * *"), Edits: edits, Records: recs})
	if len(tl.Segments) != 3 {
		t.Fatalf("segments %+v, want 3", tl.Segments)
	}
	mid := tl.Segments[1]
	if mid.CronExpr != "0 * * * *" || mid.Error != "" || !strings.Contains(mid.Refused, `cannot parse "bogus"`) {
		t.Errorf("refused stretch %+v: want the last valid \"0 * * * *\" in force, refused with the parser's error", mid)
	}
	var got []string
	for _, e := range tl.Entries {
		g := e.Kind + "@" + e.At.Format("15:04")
		if e.OffSchedule {
			g += "(off)"
		}
		if e.Kind == KindNoRecord {
			g += ":" + e.Reason
		}
		got = append(got, g)
	}
	want := "run@00:00 run@01:00 run@02:00 edit@02:10 run@03:00 no_record@04:00:unrecorded edit@04:10 no_record@04:30:unrecorded"
	if g := strings.Join(got, " "); g != want {
		t.Errorf("entries\n got %s\nwant %s", g, want)
	}
}

// A job refused since its insert has no valid schedule to keep: no slots
// while it is refused, the document's error on the segment.
func TestRefusedFromItsInsertExpectsNoSlots(t *testing.T) {
	from, to := t0, t0.Add(4*time.Hour)
	edits := []Edit{
		{ID: "i", At: t0.Add(time.Hour), Op: "insert", Changes: []FieldChange{{Field: "cron_expr", After: str("bogus")}}},
		{ID: "e", At: t0.Add(3 * time.Hour), Op: "update", Changes: []FieldChange{{Field: "cron_expr", Before: str("bogus"), After: str("0 * * * *")}}},
	}
	tl := Assemble(Input{JobID: "j", From: from, To: to, Now: to, Current: hourly("0 * * * *"), Edits: edits})
	if len(tl.Segments) != 3 || tl.Segments[1].Refused != "" || !strings.Contains(tl.Segments[1].Error, "bogus") {
		t.Fatalf("segments %+v: want none, the refused insert with its error and no last valid schedule, then hourly", tl.Segments)
	}
	var got []string
	for _, e := range tl.Entries {
		got = append(got, e.Kind+"@"+e.At.Format("15:04"))
	}
	if g := strings.Join(got, " "); g != "edit@01:00 edit@03:00 no_record@04:00" {
		t.Errorf("entries %s", g)
	}
}

// A range that begins inside a refused stretch finds the valid schedule
// in force from the edits before it.
func TestRefusedAtTheRangesStartLooksFurtherBack(t *testing.T) {
	from, to := t0, t0.Add(3*time.Hour)
	bad, _ := bson.Marshal(bson.D{{Key: "_id", Value: "j"}, {Key: "cron_expr", Value: "bogus"}})
	edits := []Edit{{ID: "e", At: t0.Add(-time.Hour), Op: "update",
		Changes: []FieldChange{{Field: "cron_expr", Before: str("0 * * * *"), After: str("bogus")}}}}
	segs := Segments("j", StateOf(bad), edits, from, to, time.Time{})
	if len(segs) != 1 || segs[0].CronExpr != "0 * * * *" || segs[0].Refused == "" {
		t.Errorf("segments %+v: want \"0 * * * *\" in force, the document refused", segs)
	}
}

// LastValid walks back from the document as read to the newest version
// the check accepts, passing over edits made after the read, and stops at
// the job's insert.
func TestLastValid(t *testing.T) {
	bad, _ := bson.Marshal(bson.D{{Key: "_id", Value: "j"}, {Key: "cron_expr", Value: "bad2"}, {Key: "job", Value: "tick"}})
	accept := func(doc bson.Raw) bool {
		s, err := schedule.DecodeFields(doc)
		if err != nil {
			return false
		}
		_, err = s.Parse(time.UTC)
		return err == nil
	}
	edits := []Edit{
		{ID: "i", At: t0, Op: "insert", Changes: []FieldChange{{Field: "cron_expr", After: str("@hourly")}, {Field: "job", After: str("tick")}}},
		{ID: "a", At: t0.Add(time.Hour), Op: "update", Changes: []FieldChange{{Field: "cron_expr", Before: str("@hourly"), After: str("bad1")}}},
		{ID: "b", At: t0.Add(2 * time.Hour), Op: "update", Changes: []FieldChange{{Field: "cron_expr", Before: str("bad1"), After: str("bad2")}}},
		// After the read: the document read does not hold it.
		{ID: "c", At: t0.Add(3 * time.Hour), Op: "update", Changes: []FieldChange{{Field: "cron_expr", Before: str("bad2"), After: str("@daily")}}},
	}
	v, ok := LastValid("j", bad, edits, accept)
	if !ok || v.Doc.Lookup("cron_expr").StringValue() != "@hourly" || !v.ReplacedAt.Equal(t0.Add(time.Hour)) || !v.WrittenAt.Equal(t0) {
		t.Errorf("LastValid = %v %v, want @hourly, written at %s, replaced at %s", v, ok, t0, t0.Add(time.Hour))
	}
	if v, ok := LastValid("j", bad, edits[1:2], accept); ok {
		t.Errorf("LastValid without the edit to bad2 = %v, want none (the document read holds no edit's values)", v)
	}
	edits[0].Changes[0].After = str("bad0")
	edits[1].Changes[0].Before = str("bad0")
	if v, ok := LastValid("j", bad, edits, accept); ok {
		t.Errorf("LastValid of a job refused since its insert = %v, want none", v)
	}
}
