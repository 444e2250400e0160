package timeline

import (
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/schedule"
)

// A job first seen at 02:30 expects no slot before it: no no_record entry
// before 03:00, though its schedule (with no insert in the history) is
// assumed back to from. A record before the sighting (a job that existed
// before the deployment kept sightings) is still shown, and matched with
// its slot, not marked off schedule.
func TestFirstSeenBeginsTheTimeline(t *testing.T) {
	from, to := t0, t0.Add(6*time.Hour)
	recs := []Record{{ID: "j@01", ScheduledAt: t0.Add(time.Hour), Status: "succeeded", Instance: "a"}}
	seen := &FirstSeen{At: t0.Add(150 * time.Minute), Source: "read"}
	tl := Assemble(Input{JobID: "j", From: from, To: to, Now: to, Current: hourly("0 * * * *"), Records: recs, FirstSeen: seen})
	var got []string
	for _, e := range tl.Entries {
		got = append(got, e.Kind+"@"+e.At.Format("15:04")+"x"+itoa(e.Count))
	}
	if g := strings.Join(got, " "); g != "run@01:00x1 no_record@03:00x4" {
		t.Errorf("entries %s, want run@01:00x1 no_record@03:00x4", g)
	}
	if tl.Entries[0].OffSchedule {
		t.Errorf("the run before the sighting is marked off schedule")
	}
	if tl.FirstSeen == nil || !tl.FirstSeen.At.Equal(seen.At) {
		t.Errorf("first_seen %+v, want %+v", tl.FirstSeen, seen)
	}
	// A slot at the very instant of the sighting is not expected either.
	tl = Assemble(Input{JobID: "j", From: from, To: to, Now: to, Current: hourly("0 * * * *"), FirstSeen: &FirstSeen{At: t0.Add(3 * time.Hour)}})
	if len(tl.Entries) != 1 || !tl.Entries[0].At.Equal(t0.Add(4*time.Hour)) || tl.Entries[0].Count != 3 {
		t.Errorf("first seen at a slot: entries %+v, want 04:00..06:00", tl.Entries)
	}
}

// A document the daemon refuses reads as the daemon reads it: a numeric
// cron_expr is shown as stored (5, not "") with the decoder's own error,
// and expects no slots; the schedule before an edit that made it a
// string is reconstructed and decoded the same way: while the number was
// there, the valid schedule before it stayed in force, the number's error
// shown as the segment's refusal.
func TestBadDocumentReadsAsTheDaemonReadsIt(t *testing.T) {
	doc, err := bson.Marshal(bson.D{{Key: "_id", Value: "n"}, {Key: "cron_expr", Value: int32(5)}})
	if err != nil {
		t.Fatal(err)
	}
	_, daemonErr := schedule.DecodeFields(doc)
	st := StateOf(doc)
	if st.Timing.CronExpr != "5" || st.Timing.ExprText() != "5" || daemonErr == nil || st.Timing.Error != daemonErr.Error() ||
		!strings.Contains(st.Timing.Error, "must be a string, not an int32") {
		t.Fatalf("timing of a numeric cron_expr: %+v (shown %s); the daemon says %v", st.Timing, st.Timing.ExprText(), daemonErr)
	}
	tl := Assemble(Input{JobID: "n", From: t0, To: t0.Add(3 * time.Hour), Now: t0.Add(3 * time.Hour), Current: st})
	if len(tl.Entries) != 0 || tl.Schedule == nil || tl.Schedule.Error != daemonErr.Error() || len(tl.Segments) != 1 || tl.Segments[0].Error != daemonErr.Error() {
		t.Errorf("timeline of a refused document: schedule %+v, segments %+v, entries %+v", tl.Schedule, tl.Segments, tl.Entries)
	}

	// Now a string; an hour in, it was the number, before that "@hourly".
	good, _ := bson.Marshal(bson.D{{Key: "_id", Value: "n"}, {Key: "cron_expr", Value: "30 * * * *"}})
	five := bson.RawValue{Type: bson.TypeInt32, Value: []byte{5, 0, 0, 0}}
	edits := []Edit{
		{ID: "e1", At: t0.Add(time.Hour), Op: "update", Changes: []FieldChange{{Field: "cron_expr", Before: str("@hourly"), After: five}}},
		{ID: "e2", At: t0.Add(2 * time.Hour), Op: "update", Changes: []FieldChange{{Field: "cron_expr", Before: five, After: str("30 * * * *")}}},
	}
	segs := Segments("n", StateOf(good), edits, t0, t0.Add(3*time.Hour), time.Time{})
	if len(segs) != 3 || segs[0].CronExpr != "@hourly" || segs[0].Error != "" ||
		segs[1].CronExpr != "@hourly" || segs[1].Error != "" || segs[1].Refused != daemonErr.Error() ||
		segs[2].CronExpr != "30 * * * *" || segs[2].Error != "" {
		t.Errorf("segments %+v", segs)
	}
}
