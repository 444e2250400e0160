package daemon

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/changestream"
	"github.com/cronswap/cronswap/internal/testmongo"
	"github.com/cronswap/cronswap/schedule"
)

// In poll mode every poll reads the whole collection. The first read
// counts each bad document once in reloads_total{result="rejected"}, and
// schedules_rejected shows them for as long as they stay bad; the polls
// that read them again count nothing more. Fixed, the gauge drops; broken
// again, the job counts again. The full reload's log line names the jobs
// it changed as people read them: a document whose _id is an ObjectId as
// `_id {"$oid":"…"}`, not with the engine's internal marker byte.
func TestRejectedDocumentsCountOnceAndShowWhileBad(t *testing.T) {
	db := testmongo.NewDatabase(t, testmongo.Client(t))
	coll := db.Collection(schedule.CollectionName)
	oid := bson.NewObjectID()
	ctx := context.Background()
	if _, err := coll.InsertMany(ctx, []any{
		bson.D{{Key: "_id", Value: "good"}, {Key: "cron_expr", Value: "@hourly"}, {Key: "job", Value: "tick"}},
		bson.D{{Key: "_id", Value: "bad"}, {Key: "cron_expr", Value: "0 25 * * *"}, {Key: "job", Value: "tick"}},
		bson.D{{Key: "_id", Value: oid}, {Key: "cron_expr", Value: "@hourly"}, {Key: "job", Value: "tick"}},
	}); err != nil {
		t.Fatal(err)
	}
	opts := testOptions()
	opts.WatchMode = changestream.ModePoll
	opts.PollInterval = 100 * time.Millisecond
	d := startDaemon(t, db, opts)
	waitFor(t, 30*time.Second, "ready", func() bool {
		code, _ := d.get(t, "/readyz")
		return code == http.StatusOK
	})
	counted := func() float64 { return d.metric(t, "cronswap_reloads_total,result=rejected") }
	shown := func() float64 { return d.metric(t, "cronswap_schedules_rejected") }
	expect := func(what string, wantCounted, wantShown float64) {
		t.Helper()
		if c, s := counted(), shown(); c != wantCounted || s != wantShown {
			t.Fatalf("%s: reloads_total{rejected} = %v, schedules_rejected = %v; want %v, %v", what, c, s, wantCounted, wantShown)
		}
	}
	expect("the first read", 2, 2)

	// The first read's log line: every id readable.
	l, ok := d.logs.find(func(l map[string]any) bool { return l["msg"] == "full reload" })
	if !ok {
		t.Fatal("no full reload logged")
	}
	raw, err := bson.Marshal(bson.D{{Key: "_id", Value: oid}})
	if err != nil {
		t.Fatal(err)
	}
	key, _ := schedule.DecodeID(bson.Raw(raw).Lookup("_id"))
	want := []string{"bad", "good", schedule.ShowKey(key)}
	got := anyStrings(l["changed_ids"])
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) || schedule.ShowKey(key) != `_id {"$oid":"`+oid.Hex()+`"}` {
		t.Fatalf("full reload logged changed_ids %q, want %q", got, want)
	}

	// Polls reading the same documents again count nothing.
	polls := func() int {
		n := 0
		for _, l := range d.logs.records() {
			if l["msg"] == "schedules replaced" {
				n++
			}
		}
		return n
	}
	n := polls()
	waitFor(t, 30*time.Second, "three more polls", func() bool { return polls() >= n+3 })
	expect("polls reading the bad documents again", 2, 2)

	set := func(expr string) {
		t.Helper()
		if _, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: "bad"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "cron_expr", Value: expr}}}}); err != nil {
			t.Fatal(err)
		}
	}
	set("0 9 * * *")
	waitFor(t, 30*time.Second, "bad fixed", func() bool {
		st, ok := d.engine.Get("bad")
		return ok && st.LastError == "" && st.CronExpr == "0 9 * * *"
	})
	expect("bad fixed", 2, 1)
	set("0 26 * * *")
	waitFor(t, 30*time.Second, "bad broken again", func() bool {
		st, _ := d.engine.Get("bad")
		return st.LastError != ""
	})
	expect("bad broken again", 3, 2)
}
