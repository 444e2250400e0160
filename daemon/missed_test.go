package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/cronswap/cronswap/internal/faultproxy"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/jobs"
	"github.com/cronswap/cronswap/schedule"
	"github.com/cronswap/cronswap/scheduler"
)

// every returns the slot sequence of a job firing every d.
func every(d time.Duration) record.NextFunc {
	return func(t time.Time) time.Time { return t.Truncate(d).Add(d) }
}

// The start-up gap is every slot after the last decided one that the
// engine does not fire and the catch-up does not offer, collapsed into one
// range per reason: a day of an every-second job is one range of 86,400.
func TestStartupGaps(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	log := slog.New(slog.DiscardHandler)
	for _, c := range []struct {
		name string
		in   gapInput
		want string
	}{
		{"every second down for a day", gapInput{decided: t0, firesFrom: t0.Add(day).Add(300 * time.Millisecond),
			now: t0.Add(day).Add(time.Second), next: every(time.Second)},
			fmt.Sprintf("[{job %s %s 86400 no_replica_running}]", t0.Add(time.Second), t0.Add(day))},
		{"every 5 s, engine starts between slots", gapInput{decided: t0, firesFrom: t0.Add(23 * time.Second),
			now: t0.Add(24 * time.Second), next: every(5 * time.Second)},
			fmt.Sprintf("[{job %s %s 4 no_replica_running}]", t0.Add(5*time.Second), t0.Add(20*time.Second))},
		{"jitter: a slot whose delayed fire is after the start is the engine's", gapInput{decided: t0,
			firesFrom: t0.Add(20*time.Second + 100*time.Millisecond), delay: 500 * time.Millisecond,
			now: t0.Add(21 * time.Second), next: every(5 * time.Second)},
			fmt.Sprintf("[{job %s %s 3 no_replica_running}]", t0.Add(5*time.Second), t0.Add(15*time.Second))},
		{"no gap: the engine fires the next slot", gapInput{decided: t0, firesFrom: t0.Add(4 * time.Second),
			now: t0.Add(4 * time.Second), next: every(5 * time.Second)}, "[]"},
		{"the document was written during the downtime", gapInput{decided: t0, notBefore: t0.Add(12 * time.Second),
			firesFrom: t0.Add(23 * time.Second), now: t0.Add(23 * time.Second), next: every(5 * time.Second)},
			fmt.Sprintf("[{job %s %s 2 no_replica_running}]", t0.Add(15*time.Second), t0.Add(20*time.Second))},
		{"catch-up offers the latest slot; older ones split at the window", gapInput{decided: t0,
			firesFrom: t0.Add(63 * time.Second), catchUp: t0.Add(60 * time.Second), window: 25 * time.Second,
			now: t0.Add(63 * time.Second), next: every(10 * time.Second)},
			fmt.Sprintf("[{job %s %s 3 outside_catchup_window} {job %s %s 2 no_replica_running}]",
				t0.Add(10*time.Second), t0.Add(30*time.Second), t0.Add(40*time.Second), t0.Add(50*time.Second))},
		{"catch-up window shorter than the gap's youngest slot", gapInput{decided: t0,
			firesFrom: t0.Add(23 * time.Second), window: time.Second, now: t0.Add(23 * time.Second), next: every(10 * time.Second)},
			fmt.Sprintf("[{job %s %s 2 outside_catchup_window}]", t0.Add(10*time.Second), t0.Add(20*time.Second))},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := fmt.Sprint(startupGaps("job", c.in, log))
			if got == "[]" && c.want == "[]" {
				return
			}
			if got != c.want {
				t.Fatalf("gaps %s\nwant    %s", got, c.want)
			}
		})
	}
}

// The start-up gap is looked for only once the decided slots were read,
// however long the database takes to answer that read: here it answers a
// second after the daemon is ready (the catch-up, which computes the gaps,
// polls for readiness every 50 ms), and the slots since the job's
// document was written, which no replica ran, are still recorded missed.
func TestStartupGapWaitsForTheDecidedSlots(t *testing.T) {
	db, through, p := proxiedDatabase(t)

	// Written 6 s ago, never fired anywhere: its slots since then are the gap.
	written := time.Now().Add(-6 * time.Second)
	if _, err := db.Collection(schedule.CollectionName).InsertOne(context.Background(), bson.D{{Key: "_id", Value: "gap"},
		{Key: "cron_expr", Value: "* * * * * *"}, {Key: "job", Value: "tick"}, {Key: "updated_at", Value: written}}); err != nil {
		t.Fatal(err)
	}
	read := p.HoldNext(faultproxy.All(faultproxy.CommandName("find"), faultproxy.Database(db.Name()),
		faultproxy.Collection(record.LocksCollection)))
	defer read.Release()
	d := startDaemon(t, through, testOptions())
	select {
	case <-read.Held():
	case <-time.After(30 * time.Second):
		t.Fatal("the decided slots were never read")
	}
	waitFor(t, 30*time.Second, "the daemon ready", func() bool {
		return d.service.watcher.Status().Ready && d.service.blackouts.ready()
	})
	// The database answers slowly: the job fires while its decided
	// slots are still being read, and only then does the answer come.
	waitFor(t, 20*time.Second, "a fire of the job while the read is held", func() bool {
		return slices.ContainsFunc(runsOf(t, db, "gap", written), func(r record.RunDoc) bool { return r.Status != record.StatusMissed })
	})
	read.Release()

	var missed []record.RunDoc
	waitFor(t, 20*time.Second, "the start-up gap on record", func() bool {
		missed = runsOf(t, db, "gap", written.Add(-time.Second))
		missed = slices.DeleteFunc(missed, func(r record.RunDoc) bool { return r.Status != record.StatusMissed })
		return len(missed) > 0
	})
	m := missed[0]
	if m.Reason != record.MissedNoReplica || m.ScheduledAt.Before(written) || m.Count < 4 {
		t.Errorf("missed record %+v: want no_replica_running from %s, at least 4 slots", m, written)
	}
}

// The engine fires while the start-up read of the decided slots is still
// unanswered: that read looks at what was decided before the engine began
// firing, and the first fires do not wait for it. Once it is answered, the
// start-up gap is recorded as ever.
func TestEngineFiresWhileTheStartupReadIsHeld(t *testing.T) {
	db, through, p := proxiedDatabase(t)
	written := time.Now().Add(-6 * time.Second)
	if _, err := db.Collection(schedule.CollectionName).InsertOne(context.Background(), bson.D{{Key: "_id", Value: "early"},
		{Key: "cron_expr", Value: "* * * * * *"}, {Key: "job", Value: "tick"}, {Key: "updated_at", Value: written}}); err != nil {
		t.Fatal(err)
	}
	// Every read of the decided slots waits at the proxy until released:
	// a daemon whose engine waited for that read (4 tries of 10 s) would
	// fire nothing within the 30 s below.
	held, release := make(chan struct{}, 1), make(chan struct{})
	var releaseOnce sync.Once
	releaseReads := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(releaseReads)
	var answered atomic.Bool
	p.FailAlways(func(cmd bsoncore.Document) bool {
		if isDecidedRead(cmd) {
			select {
			case held <- struct{}{}:
			default:
			}
			<-release
			answered.Store(true)
		}
		return false
	}, faultproxy.ErrorReply{})
	startDaemon(t, through, testOptions())
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("the decided slots were never read")
	}
	waitFor(t, 30*time.Second, "a slot run while the start-up read is held", func() bool {
		for _, r := range runsOf(t, db, "early", written) {
			if r.Status == record.StatusSucceeded {
				return true
			}
		}
		return false
	})
	if answered.Load() {
		t.Fatal("a read of the decided slots went through before the test released them")
	}
	releaseReads()
	waitFor(t, 30*time.Second, "the start-up gap on record", func() bool {
		for _, r := range runsOf(t, db, "early", written.Add(-time.Second)) {
			if r.Status == record.StatusMissed && r.Reason == record.MissedNoReplica && r.Count >= 4 {
				return true
			}
		}
		return false
	})
}

// The start-up read goes a slice at a time; a slice whose every try fails
// ends it, and the slices read before it still count: their jobs' start-up
// gaps are recorded. Here each slice is one job and every read after the
// first fails, so the job read first has its gap on record and the other
// has none (it is logged as not read). Before, one failed slice threw away
// what the others had read.
func TestStartupReadFailingASliceKeepsTheSlicesRead(t *testing.T) {
	db, through, p := proxiedDatabase(t)
	written := time.Now().Add(-6 * time.Second)
	for _, id := range []string{"gap-a", "gap-b"} {
		if _, err := db.Collection(schedule.CollectionName).InsertOne(context.Background(), bson.D{{Key: "_id", Value: id},
			{Key: "cron_expr", Value: "* * * * * *"}, {Key: "job", Value: "tick"}, {Key: "updated_at", Value: written}}); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var readFirst []string
	p.FailAlways(func(cmd bsoncore.Document) bool {
		if !isDecidedRead(cmd) {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		if readFirst == nil {
			readFirst = decidedReadIDs(cmd)
			return false
		}
		return true
	}, faultproxy.ErrorReply{})
	d := startDaemon(t, through, testOptions(), func(s *Service) { s.decidedSlice = 1 })
	waitFor(t, 60*time.Second, "the failed slice logged", func() bool {
		_, ok := d.logs.find(func(r map[string]any) bool {
			return r["msg"] == "could not read the decided slots of some jobs; their slots missed while no replica ran are not recorded this time" &&
				r["jobs"] == 1.0 && r["read"] == 1.0
		})
		return ok
	})
	mu.Lock()
	read := readFirst
	mu.Unlock()
	if len(read) != 1 {
		t.Fatalf("the first read asked for %v, want one job", read)
	}
	unread := "gap-a"
	if read[0] == unread {
		unread = "gap-b"
	}
	noReplica := func(id string) int {
		n := 0
		for _, r := range runsOf(t, db, id, written.Add(-time.Second)) {
			if r.Status == record.StatusMissed && r.Reason == record.MissedNoReplica {
				n += int(r.Count)
			}
		}
		return n
	}
	waitFor(t, 30*time.Second, read[0]+"'s start-up gap on record", func() bool { return noReplica(read[0]) >= 4 })
	// The other job's gap is not looked for: only what its catch-up ran.
	if n := noReplica(unread); n != 0 {
		t.Errorf("%s: %d slots recorded no_replica_running, want none: its decided slot was never read", unread, n)
	}
}

// A jittered job's first fire after the engine starts is for a slot
// before that instant (its fire comes a delay after its slot), and that
// fire's claim may come before the start-up read of the decided slots is
// answered. The read asks only for what was decided at or before the
// start less the longest delay, so it never takes that claim for the
// job's last decided slot: the slots since the job's document was written
// still all ran or are on record. Asking up to the start would take the
// engine's own claim as decided and leave the slots before it without a
// record.
func TestStartupReadIgnoresAJitteredJobsOwnFirstClaim(t *testing.T) {
	const bound = 5 * time.Second
	id := ""
	for i := 0; id == ""; i++ { // a job whose fires come 2–4 s after their slots
		if d := scheduler.JitterDelay(fmt.Sprintf("late%d", i), bound); d >= 2*time.Second && d < 4*time.Second {
			id = fmt.Sprintf("late%d", i)
		}
	}
	db, through, p := proxiedDatabase(t)
	written := time.Now().Add(-8 * time.Second).Truncate(time.Second)
	if _, err := db.Collection(schedule.CollectionName).InsertOne(context.Background(), bson.D{{Key: "_id", Value: id},
		{Key: "cron_expr", Value: "* * * * * *"}, {Key: "job", Value: "jittered"}, {Key: "updated_at", Value: written}}); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var releaseOnce sync.Once
	releaseReads := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(releaseReads)
	p.FailAlways(func(cmd bsoncore.Document) bool {
		if isDecidedRead(cmd) {
			<-release
		}
		return false
	}, faultproxy.ErrorReply{})
	d := startDaemon(t, through, testOptions(), func(s *Service) {
		if err := s.Handle("jittered", jobs.HandlerFunc(func(context.Context, jobs.Run) error { return nil }),
			jobs.Policy{Jitter: bound}); err != nil {
			t.Fatal(err)
		}
	})
	var firingAt, first time.Time
	waitFor(t, 30*time.Second, "the jittered job's first run", func() bool {
		if firingAt = d.service.members.Self().FiringSince; firingAt.IsZero() {
			return false
		}
		for _, r := range runsOf(t, db, id, written) {
			if r.Status == record.StatusSucceeded && r.StartedAt.After(firingAt) {
				first = r.ScheduledAt
				return true
			}
		}
		return false
	})
	if !first.Before(firingAt) {
		t.Fatalf("first run for slot %s, not before the engine fired at %s: no claim for the read to mistake", first, firingAt)
	}
	releaseReads()
	if n := coveredUntil(t, db, id, written, first); n == 0 {
		t.Errorf("%s: no slot recorded missed no_replica_running before its first run", id)
	}
}
