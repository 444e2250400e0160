package daemon

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/changestream"
	"github.com/cronswap/cronswap/internal/faultproxy"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/schedule"
)

// The jobs a full reload puts in force are collected from the second
// reload on; a failed reload keeps them for its retry (which finds them in
// force and adds them no more), and the bound handed out is when the last
// completed reload began.
func TestArrivalsCollectFromTheSecondReload(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	var a arrivals
	a.begin(t0)
	a.applied("startup") // the first sync: every job, none collected
	if added, _ := a.end(true); added != nil {
		t.Fatalf("first reload: %v, want none", added)
	}
	a.applied("between") // an event's arming, not a reload's
	a.begin(t0.Add(time.Minute))
	a.applied("x")
	if added, _ := a.end(false); added != nil {
		t.Fatalf("failed reload: %v, want none handed out yet", added)
	}
	a.begin(t0.Add(2 * time.Minute))
	a.applied("y")
	added, since := a.end(true)
	if !slices.Equal(added, []string{"x", "y"}) || !since.Equal(t0) {
		t.Fatalf("reload after a failed one: %v since %v, want [x y] since %v", added, since, t0)
	}
	a.begin(t0.Add(3 * time.Minute))
	if added, since := a.end(true); added != nil || !since.Equal(t0.Add(2*time.Minute)) {
		t.Fatalf("quiet reload: %v since %v, want none since %v", added, since, t0.Add(2*time.Minute))
	}
}

// A job that reaches the replica only with a full reload after the first
// (here a poll; a reload after the change stream lost its position goes
// the same way) was not armed here from its document's updated_at until
// then: those slots are recorded missed, no_replica_running, once no
// replica can run them any more, and the job fires from then on.
func TestLateArrivalsSlotsRecordedMissed(t *testing.T) {
	opts := testOptions()
	opts.WatchMode = changestream.ModePoll
	opts.PollInterval = 200 * time.Millisecond
	// A poll's read held: the job inserted meanwhile reaches the replica
	// only when it is let go, three seconds or more after the insert.
	db, d, _, poll := lateArrivalSetup(t, opts)
	// Beside it, jobs whose updated_at tells nothing: none, a string (an
	// operator's careless edit), and one in the future. They are armed
	// all the same, and have no missed record.
	untimed := map[string]any{"no-date": nil, "string-date": "2026-12-06T00:00:00Z", "future-date": time.Now().Add(time.Hour)}
	for id, at := range untimed {
		doc := bson.D{{Key: "_id", Value: id}, {Key: "cron_expr", Value: "* * * * * *"}, {Key: "job", Value: "tick"}}
		if at != nil {
			doc = append(doc, bson.E{Key: "updated_at", Value: at})
		}
		if _, err := db.Collection(schedule.CollectionName).InsertOne(context.Background(), doc); err != nil {
			t.Fatal(err)
		}
	}
	written := insertWhileHeld(t, d, db, poll)
	armedAt := time.Now()

	var missed, ran []record.RunDoc
	waitFor(t, 30*time.Second, "the late arrival's gap on record and a fire after it", func() bool {
		runs := runsOf(t, db, "late", written.Add(-time.Second))
		missed = slices.DeleteFunc(slices.Clone(runs), func(r record.RunDoc) bool { return r.Status != record.StatusMissed })
		ran = slices.DeleteFunc(runs, func(r record.RunDoc) bool { return r.Status == record.StatusMissed })
		return len(missed) > 0 && len(ran) > 0
	})
	if len(missed) != 1 {
		t.Fatalf("missed records %+v: want one range", missed)
	}
	m := missed[0]
	if m.Reason != record.MissedNoReplica || m.ScheduledAt.Before(written) || m.Count < 2 || m.LastScheduledAt.After(armedAt) ||
		!m.LastScheduledAt.Equal(m.ScheduledAt.Add(time.Duration(m.Count-1)*time.Second)) {
		t.Errorf("missed record %+v: want no_replica_running of the slots from %s to %s", m, written, armedAt)
	}
	for _, r := range ran {
		if !r.ScheduledAt.After(m.LastScheduledAt) {
			t.Errorf("run of %s inside the missed range %s..%s", r.ScheduledAt, m.ScheduledAt, m.LastScheduledAt)
		}
	}
	if _, ok := d.logs.find(func(l map[string]any) bool {
		return l["msg"] == "slots missed before the job reached this replica" && l["job_id"] == "late"
	}); !ok {
		t.Error("no log line of the late arrival's gap")
	}
	// The job that was there from the start has no such record, nor have
	// those whose updated_at tells nothing, which fire.
	for _, id := range []string{"other", "no-date", "string-date", "future-date"} {
		if id != "other" && !armed(d.engine, id) {
			t.Errorf("%s not armed", id)
		}
		if runs := runsOf(t, db, id, time.Time{}); slices.ContainsFunc(runs, func(r record.RunDoc) bool { return r.Status == record.StatusMissed }) {
			t.Errorf("%s: %+v, want no missed record", id, runs)
		}
	}
}

// The same after the change stream lost its position: the resume is
// answered ChangeStreamHistoryLost, the reload's read is held for three
// seconds, and a job inserted meanwhile has those slots on record.
func TestLateArrivalAfterALostPositionSlotsRecordedMissed(t *testing.T) {
	db, d, p, reload := lateArrivalSetup(t, testOptions())
	p.FailNext(faultproxy.All(faultproxy.IsChangeStreamAggregate, faultproxy.Collection(schedule.CollectionName)),
		faultproxy.ErrorReply{Code: 286, CodeName: "ChangeStreamHistoryLost",
			Errmsg: "Resume of change stream was not possible, as the resume point may no longer be in the oplog.",
			Labels: []string{"NonResumableChangeStreamError"}})
	p.CutAll()
	written := insertWhileHeld(t, d, db, reload)
	// The refusal comes as a lost position or a refused token, depending
	// on whether the stream's resume or its first getMore met it.
	if _, ok := d.logs.find(func(l map[string]any) bool {
		return l["msg"] == "full reload" &&
			(l["reason"] == changestream.ReasonLostPosition || l["reason"] == changestream.ReasonTokenRefused)
	}); !ok {
		t.Fatal("no full reload after the lost position")
	}

	var missed []record.RunDoc
	waitFor(t, 30*time.Second, "the late arrival's gap on record", func() bool {
		missed = slices.DeleteFunc(runsOf(t, db, "late", written.Add(-time.Second)),
			func(r record.RunDoc) bool { return r.Status != record.StatusMissed })
		return len(missed) > 0
	})
	if m := missed[0]; len(missed) != 1 || m.Reason != record.MissedNoReplica || m.ScheduledAt.Before(written) || m.Count < 2 {
		t.Errorf("missed records %+v: want one range of no_replica_running from %s, 2 slots or more", missed, written)
	}
}

// lateArrivalSetup starts a daemon with opts on a database holding the
// job "other", through the fault proxy p, waits until it is ready, and
// holds the next full read of the schedules (read, let go at the test's
// end at the latest).
func lateArrivalSetup(t *testing.T, opts Options) (db *mongo.Database, d *running, p *faultproxy.Proxy, read *faultproxy.Hold) {
	t.Helper()
	db, through, p := proxiedDatabase(t)
	insertSchedules(t, db, "other")
	d = startDaemon(t, through, opts)
	waitFor(t, 30*time.Second, "ready", func() bool {
		code, _ := d.get(t, "/readyz")
		return code == http.StatusOK && armed(d.engine, "other")
	})
	read = p.HoldNext(faultproxy.All(faultproxy.CommandName("find"), faultproxy.Database(db.Name()),
		faultproxy.Collection(schedule.CollectionName)))
	t.Cleanup(read.Release)
	return db, d, p, read
}

// insertWhileHeld waits for read, a full read of the schedules held by the
// proxy, inserts the every-second job "late" (updated_at now), lets the
// read go three seconds later, and waits for the job to be armed. It
// returns the insert's updated_at.
func insertWhileHeld(t *testing.T, d *running, db *mongo.Database, read *faultproxy.Hold) time.Time {
	t.Helper()
	select {
	case <-read.Held():
	case <-time.After(30 * time.Second):
		t.Fatal("no full read of the schedules came")
	}
	written := time.Now().Truncate(time.Millisecond)
	if _, err := db.Collection(schedule.CollectionName).InsertOne(context.Background(), bson.D{{Key: "_id", Value: "late"},
		{Key: "cron_expr", Value: "* * * * * *"}, {Key: "job", Value: "tick"}, {Key: "updated_at", Value: written}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "three seconds since the insert", func() bool { return time.Since(written) >= 3*time.Second })
	if armed(d.engine, "late") {
		t.Fatal("the late job armed while the full read was held")
	}
	read.Release()
	waitFor(t, 30*time.Second, "the late job armed", func() bool { return armed(d.engine, "late") })
	return written
}
