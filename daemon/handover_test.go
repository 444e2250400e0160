package daemon

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/cronswap/cronswap/internal/faultproxy"
	"github.com/cronswap/cronswap/internal/members"
	"github.com/cronswap/cronswap/internal/record"
)

// handOverEnv is one dividing daemon (r1) beside three members that are
// documents only: g1 and g3, whose leases pass together soon after the
// start, and g2, live for an hour. Once g1 and g3 are gone, r1 arms every
// job (two live members); of the jobs it did not arm before, those whose
// two armers were g1 and g3 had no live armer (orphans), the others had
// g2. reads holds the job ids of each read of the decided slots the
// daemon sent through the proxy.
type handOverEnv struct {
	db      *mongo.Database
	proxy   *faultproxy.Proxy
	d       *running
	ids     []string
	orphans []string // sorted
	newHere []string // jobs r1 arms only once g1 and g3 are gone
	reads   func() [][]string
}

// isDecidedRead matches the read of the decided slots (runstore
// DecidedSlots): a find on job_locks by _id projecting last_slot.
func isDecidedRead(cmd bsoncore.Document) bool {
	if faultproxy.CommandName("find")(cmd) && faultproxy.Collection(record.LocksCollection)(cmd) {
		proj, ok := cmd.Lookup("projection").DocumentOK()
		return ok && proj.Lookup("last_slot").Type != 0
	}
	return false
}

// decidedReadIDs returns the job ids a read of the decided slots asks for
// (its filter's _id $in).
func decidedReadIDs(cmd bsoncore.Document) []string {
	var ids []string
	in, ok := cmd.Lookup("filter", "_id", "$in").ArrayOK()
	if !ok {
		return nil
	}
	vals, _ := in.Values()
	for _, v := range vals {
		if id, ok := v.StringValueOK(); ok {
			ids = append(ids, id)
		}
	}
	return ids
}

// ghostsAndJobs inserts into db the members g1, g2 and g3, documents
// only (firing since a minute before now, their last heartbeat at now,
// their leases ending at until), nJobs every-second jobs ho000… and
// nYearly jobs hy000… due at midnight on 1 January; it returns the
// members and the jobs' ids.
func ghostsAndJobs(t *testing.T, db *mongo.Database, now time.Time, until [3]time.Time, nJobs, nYearly int) ([]members.Member, []string) {
	t.Helper()
	var ghosts []members.Member
	for i, id := range []string{"g1", "g2", "g3"} {
		g := members.Member{ID: id, Host: "ghost", PID: 1, Incarnation: "ghost-" + id, Divides: true,
			StartedAt: now.Add(-time.Minute), FiringSince: now.Add(-time.Minute), HeartbeatAt: now, LeaseUntil: until[i],
			ExpireAt: now.Add(2 * time.Hour)}
		if _, err := db.Collection(members.CollectionName).InsertOne(context.Background(), g); err != nil {
			t.Fatal(err)
		}
		ghosts = append(ghosts, g)
	}
	var ids []string
	var docs []any
	for i := range nJobs + nYearly {
		id, expr := fmt.Sprintf("ho%03d", i), "* * * * * *"
		if i >= nJobs {
			id, expr = fmt.Sprintf("hy%03d", i-nJobs), "0 0 1 1 *"
		}
		ids = append(ids, id)
		docs = append(docs, bson.D{{Key: "_id", Value: id}, {Key: "cron_expr", Value: expr},
			{Key: "job", Value: "tick"}, {Key: "updated_at", Value: now}})
	}
	if _, err := db.Collection("schedules").InsertMany(context.Background(), docs); err != nil {
		t.Fatal(err)
	}
	return ghosts, ids
}

// dividingR1 is the options of the dividing daemon r1 beside the ghosts:
// a heartbeat a second, a lease of 3 s, a claim grace of 100 ms.
func dividingR1() Options {
	opts := testOptions()
	opts.InstanceID = "r1"
	opts.DivideSchedules = true
	opts.MembersHeartbeat, opts.MembersLease = time.Second, 3*time.Second
	opts.ClaimGrace = 100 * time.Millisecond
	return opts
}

// newHandOverEnv starts r1 beside the ghosts, with nJobs every-second
// jobs and nYearly yearly ones (ghostsAndJobs), and tweaks (startDaemon).
func newHandOverEnv(t *testing.T, nJobs, nYearly int, tweaks ...func(*Service)) *handOverEnv {
	t.Helper()
	e := &handOverEnv{}
	var through *mongo.Database
	e.db, through, e.proxy = proxiedDatabase(t)
	p := e.proxy

	now := time.Now()
	dies := now.Add(8 * time.Second)
	var ghosts []members.Member
	ghosts, e.ids = ghostsAndJobs(t, e.db, now, [3]time.Time{dies, now.Add(time.Hour), dies}, nJobs, nYearly)
	// Who armed what before, and after, g1 and g3 are gone.
	before := append(slices.Clone(ghosts), members.Member{ID: "r1"})
	for _, id := range e.ids {
		a, b := members.Armers(id, before)
		switch {
		case a.ID == "r1" || b.ID == "r1":
		case a.ID == "g2" || b.ID == "g2":
			e.newHere = append(e.newHere, id)
		default:
			e.orphans = append(e.orphans, id)
			e.newHere = append(e.newHere, id)
		}
	}
	if len(e.orphans) == 0 || len(e.orphans) == len(e.newHere) {
		t.Fatalf("jobs newly armed here %v, orphans %v: want some of each", e.newHere, e.orphans)
	}
	e.reads = countDecidedReads(p)

	e.d = startDaemon(t, through, dividingR1(), tweaks...)
	waitFor(t, 30*time.Second, "r1 armed its share beside g1, g2 and g3", func() bool {
		n := 0
		for _, id := range e.ids {
			if armed(e.d.engine, id) {
				n++
			}
		}
		return n == len(e.ids)-len(e.newHere)
	})
	// The ghosts fire: each job r1 arms has one of them as its other
	// armer, so r1 reads no decided slot at start-up.
	waitFor(t, 30*time.Second, "r1 firing", func() bool { return !e.d.service.members.Self().FiringSince.IsZero() })
	if reads := e.readsSince(0); len(reads) != 0 {
		t.Fatalf("r1 read the decided slots of %v at start-up, want none: the ghosts fire", reads)
	}
	return e
}

// waitAllArmed waits until r1 arms every job (g1 and g3 gone).
func (e *handOverEnv) waitAllArmed(t *testing.T) {
	t.Helper()
	waitFor(t, 30*time.Second, "r1 armed every job", func() bool {
		for _, id := range e.ids {
			if !armed(e.d.engine, id) {
				return false
			}
		}
		return true
	})
}

// readsSince returns the reads of the decided slots counted from the
// n-th on.
func (e *handOverEnv) readsSince(n int) [][]string {
	reads := e.reads()
	return reads[min(n, len(reads)):]
}

// The hand-over reads the decided slots only of the jobs whose two armers
// both died, which are armed at once: the jobs newly armed here that a
// live member armed already are left to that member's fires, and armed at
// the engine's pace. A failed read is tried again.
func TestHandOverReadsOnlyOrphanedJobs(t *testing.T) {
	e := newHandOverEnv(t, 40, 0)
	start := len(e.readsSince(0)) // the start-up's read
	e.proxy.FailNext(isDecidedRead, faultproxy.ErrorReply{Code: 1, CodeName: "InternalError", Errmsg: "hand-over read refused by the test"})
	e.waitAllArmed(t)
	waitFor(t, 30*time.Second, "the hand-over's read tried again", func() bool { return len(e.readsSince(start)) >= 2 })
	reads := e.readsSince(start)
	for i, ids := range reads {
		if !slices.Equal(ids, e.orphans) {
			t.Errorf("read %d of the decided slots asked for %v, want the orphans %v (of the %d jobs newly armed here)",
				i+1, ids, e.orphans, len(e.newHere))
		}
	}
	if len(reads) != 2 {
		t.Errorf("%d reads of the decided slots after the re-division, want 2 (one refused, one tried again)", len(reads))
	}
	// The orphans are armed at once; the jobs g2 fires, at the engine's pace.
	if _, ok := e.d.logs.find(func(r map[string]any) bool {
		return r["msg"] == "live members changed; schedules re-divided" && r["handed_over"] == float64(len(e.orphans)) &&
			r["armed_here"] == float64(len(e.orphans)) && r["deferred_here"] == float64(len(e.newHere)-len(e.orphans))
	}); !ok {
		t.Errorf("no re-division logged with armed_here %d, deferred_here %d, handed_over %d",
			len(e.orphans), len(e.newHere)-len(e.orphans), len(e.orphans))
	}
}

// Of the orphans, those with a slot in the hand-over window are read
// first, in a read of their own: theirs are the slots that can still run,
// and the engine's own first fires must not come before them. The others
// (yearly jobs here, none due in the window) are read after them.
func TestHandOverReadsTheJobsDueInTheWindowFirst(t *testing.T) {
	e := newHandOverEnv(t, 40, 40)
	var due, yearly []string
	for _, id := range e.orphans {
		if strings.HasPrefix(id, "hy") {
			yearly = append(yearly, id)
		} else {
			due = append(due, id)
		}
	}
	if len(due) == 0 || len(yearly) == 0 {
		t.Fatalf("orphans %v: want every-second and yearly jobs among them", e.orphans)
	}
	start := len(e.readsSince(0))
	e.waitAllArmed(t)
	waitFor(t, 30*time.Second, "the hand-over's two reads", func() bool { return len(e.readsSince(start)) >= 2 })
	reads := e.readsSince(start)
	if len(reads) != 2 || !slices.Equal(reads[0], due) || !slices.Equal(reads[1], yearly) {
		t.Fatalf("reads of the decided slots after the re-division %v, want the orphans due in the window %v, then the yearly ones %v",
			reads, due, yearly)
	}
}

// The orphans with no slot in the window (yearly here) are read in the
// background: once the jobs deferred to the engine's pace are armed, in
// slices a tenth the size of the others', each followed by a pause.
func TestHandOverReadsTheOthersInTheBackgroundAfterArming(t *testing.T) {
	e := newHandOverEnv(t, 40, 40, func(s *Service) { s.decidedSlice = 20 })
	var due, yearly, deferred []string
	for _, id := range e.newHere {
		switch {
		case !slices.Contains(e.orphans, id):
			deferred = append(deferred, id)
		case strings.HasPrefix(id, "hy"):
			yearly = append(yearly, id)
		default:
			due = append(due, id)
		}
	}
	if len(due) == 0 || len(yearly) < 3 || len(deferred) == 0 {
		t.Fatalf("orphans %v, deferred %v: want every-second and at least 3 yearly orphans, and deferred jobs", e.orphans, deferred)
	}
	// Whether every deferred job was armed when the first read of yearly
	// orphans went out.
	var mu sync.Mutex
	var armedBefore *bool
	e.proxy.FailAlways(func(cmd bsoncore.Document) bool {
		if ids := decidedReadIDs(cmd); isDecidedRead(cmd) && len(ids) > 0 && strings.HasPrefix(ids[0], "hy") {
			mu.Lock()
			defer mu.Unlock()
			if armedBefore == nil {
				all := !slices.ContainsFunc(deferred, func(id string) bool { return !armed(e.d.engine, id) })
				armedBefore = &all
			}
		}
		return false
	}, faultproxy.ErrorReply{})
	start := len(e.readsSince(0))
	e.waitAllArmed(t)
	want := 1 + (len(yearly)+1)/2 // the due ones, then the yearly ones two at a time
	waitFor(t, 30*time.Second, "the hand-over's reads", func() bool { return len(e.readsSince(start)) >= want })
	reads := e.readsSince(start)
	if len(reads) != want || !slices.Equal(reads[0], due) {
		t.Fatalf("reads of the decided slots after the re-division %v, want the %d due in the window %v first, then the yearly ones %v two at a time",
			reads, len(due), due, yearly)
	}
	var got []string
	for _, r := range reads[1:] {
		if len(r) > 2 {
			t.Errorf("a background read asked for %v: more than a tenth of the slice of 20", r)
		}
		got = append(got, r...)
	}
	slices.Sort(got)
	if !slices.Equal(got, yearly) {
		t.Errorf("background reads asked for %v, want the yearly orphans %v", got, yearly)
	}
	mu.Lock()
	defer mu.Unlock()
	if armedBefore == nil || !*armedBefore {
		t.Errorf("the yearly orphans were read before the %d deferred jobs were armed", len(deferred))
	}
}

// A hand-over read that fails every try leaves no orphan's slots without
// a record: the window's slots, up to r1's first, are recorded missed,
// hand_over.
func TestHandOverReadFailingRecordsTheWindowMissed(t *testing.T) {
	e := newHandOverEnv(t, 40, 0)
	e.proxy.FailTimes(handOverReads, isDecidedRead,
		faultproxy.ErrorReply{Code: 1, CodeName: "InternalError", Errmsg: "hand-over read refused by the test"})
	for _, id := range e.orphans {
		waitFor(t, 60*time.Second, id+" recorded missed, hand_over", func() bool {
			for _, r := range runsOf(t, e.db, id, time.Time{}) {
				if r.Status == record.StatusMissed && r.Reason == record.MissedHandOver && r.Count > 0 {
					return true
				}
			}
			return false
		})
	}
	for _, id := range e.newHere {
		if slices.Contains(e.orphans, id) {
			continue
		}
		for _, r := range runsOf(t, e.db, id, time.Time{}) {
			if r.Reason == record.MissedHandOver {
				t.Errorf("%s, armed by g2 before, recorded missed hand_over: %+v", id, r)
			}
		}
	}
}

// A member of the previous view that does not divide armed every job:
// while it lives, no job newly armed here is orphaned; once it is gone
// too, the jobs whose two armers are gone are.
func TestOrphanedWithAMemberArmingEveryJob(t *testing.T) {
	since := time.Now().Add(-time.Hour)
	m := func(id string, divides bool) members.Member {
		return members.Member{ID: id, Divides: divides, FiringSince: since, HeartbeatAt: since.Add(30 * time.Minute)}
	}
	prev := []members.Member{m("r1", true), m("a", true), m("b", true), m("all", false)}
	var ids []string
	for i := range 50 {
		ids = append(ids, fmt.Sprintf("job%02d", i))
	}
	if got := orphaned(ids, prev, []members.Member{m("r1", true), m("all", false)}); len(got) != 0 {
		t.Errorf("orphaned %v while the member arming every job lives, want none", got)
	}
	got := orphaned(ids, prev, []members.Member{m("r1", true)})
	if len(got) == 0 {
		t.Fatal("no job orphaned with a, b and all gone")
	}
	for _, id := range got {
		if a, b := members.Armers(id, prev); a.ID == "r1" || b.ID == "r1" {
			t.Errorf("%s orphaned, but r1 armed it before (%s, %s)", id, a.ID, b.ID)
		}
	}
	if len(got) == len(ids) {
		t.Errorf("every job orphaned, want those r1 did not arm only")
	}
}

// A replica starting alone finds every job it arms orphaned (at a first
// start of a million jobs, a million): orphaned then hands back the list
// it was given, without a copy; when it drops some, the list given is
// left as it was.
func TestOrphanedEveryJobIsTheListGiven(t *testing.T) {
	since := time.Now().Add(-time.Hour)
	self := members.Member{ID: "r1", Divides: true, FiringSince: since, HeartbeatAt: since.Add(30 * time.Minute)}
	other := members.Member{ID: "r2", Divides: true, FiringSince: since, HeartbeatAt: since.Add(30 * time.Minute)}
	var ids []string
	for i := range 1000 {
		ids = append(ids, fmt.Sprintf("job%04d", i))
	}
	// As planDecided asks it: the live view (this replica alone), and no
	// other member firing.
	view := []members.Member{self}
	got := orphaned(ids, view, nil)
	if len(got) != len(ids) || &got[0] != &ids[0] {
		t.Errorf("a replica alone: %d of %d jobs orphaned, sharing the list given: %v; want all of them, the list itself",
			len(got), len(ids), len(got) > 0 && &got[0] == &ids[0])
	}
	rule := testing.AllocsPerRun(10, func() { orphanRule(view, nil, "", nil) })
	if allocs := testing.AllocsPerRun(10, func() { orphaned(ids, view, nil) }); allocs > rule {
		t.Errorf("orphaned of 1,000 jobs, all orphaned: %v allocations, want the rule's %v only", allocs, rule)
	}
	// r2 fires beside it and r3 joins without firing yet: the jobs r2
	// arms are not orphaned, the others are, and the list given is left
	// as it was.
	three := []members.Member{self, other, {ID: "r3", Divides: true, HeartbeatAt: since.Add(30 * time.Minute)}}
	before := slices.Clone(ids)
	got = orphaned(ids, three, []members.Member{other})
	if len(got) == 0 || len(got) == len(ids) {
		t.Errorf("r2 firing beside r1: %d of %d jobs orphaned, want those r2 does not arm", len(got), len(ids))
	}
	for _, id := range got {
		if a, b := members.Armers(id, three); a.ID == "r2" || b.ID == "r2" {
			t.Errorf("%s orphaned, but r2 arms it", id)
		}
	}
	if !slices.Equal(ids, before) {
		t.Error("orphaned changed the list it was given")
	}
}

// A live armer counts only if it fired since before the last heartbeat of
// the armer that went: one that had not begun firing (a replica still
// reading the collection when the other died) or began after leaves the
// job orphaned, so that its slots between are handed over.
func TestOrphanedCountsOnlyAnArmerFiringBeforeTheOtherWent(t *testing.T) {
	died := time.Now().Add(-time.Minute)
	self := members.Member{ID: "r1", Divides: true, FiringSince: died.Add(-time.Hour), HeartbeatAt: died}
	gone := members.Member{ID: "x", Divides: true, FiringSince: died.Add(-time.Hour), HeartbeatAt: died}
	joiner := func(firing time.Time) members.Member {
		return members.Member{ID: "j", Divides: true, FiringSince: firing, HeartbeatAt: died}
	}
	prev := []members.Member{self, joiner(time.Time{}), gone}
	var ids []string // jobs whose armers in prev were x and j
	for i := 0; len(ids) < 5 && i < 1000; i++ {
		id := fmt.Sprintf("job%03d", i)
		if a, b := members.Armers(id, prev); (a.ID == "x" && b.ID == "j") || (a.ID == "j" && b.ID == "x") {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		t.Fatal("no job armed by x and j")
	}
	for _, c := range []struct {
		name   string
		firing time.Time
		orphan bool
	}{
		{"j not firing", time.Time{}, true},
		{"j firing since after x's last heartbeat", died.Add(time.Second), true},
		{"j firing since before x's last heartbeat", died.Add(-time.Second), false},
	} {
		live := []members.Member{self, joiner(c.firing)}
		got := orphaned(ids, prev, live)
		if want := map[bool]int{true: len(ids), false: 0}[c.orphan]; len(got) != want {
			t.Errorf("%s: %d of the %d jobs x and j armed are orphaned, want %d", c.name, len(got), len(ids), want)
		}
	}
}

// A member that goes is judged by its last heartbeat seen, not by the one
// it had when the view last changed: g2 begins firing after r1 first
// divided (after g1's and g3's heartbeats then) but before their last
// ones, so it fired while they lived, and the jobs it armed with them are
// not orphaned. Only the jobs of g1 and g3 together are read.
func TestHandOverJudgesAGoneMemberByItsLastHeartbeatSeen(t *testing.T) {
	e := newHandOverEnv(t, 40, 0)
	start := len(e.readsSince(0))
	coll := e.db.Collection(members.CollectionName)
	set := func(id string, fields bson.D) {
		t.Helper()
		if _, err := coll.UpdateOne(context.Background(), bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$set", Value: fields}}); err != nil {
			t.Fatal(err)
		}
	}
	firing := time.Now()
	set("g2", bson.D{{Key: "firing_since", Value: firing}})
	// One lease end for both, so that they leave the view at the same
	// tick however long the updates take.
	beat, until := firing.Add(10*time.Millisecond), time.Now().Add(4*time.Second)
	for _, g := range []string{"g1", "g3"} {
		set(g, bson.D{{Key: "heartbeat_at", Value: beat}, {Key: "lease_until", Value: until}})
	}
	waitFor(t, 30*time.Second, "r1 sees g2 firing and g1's and g3's last heartbeats", func() bool {
		n := 0
		for _, m := range e.d.service.members.LiveView() {
			switch {
			case m.ID == "g2" && m.FiringSince.Equal(firing.Truncate(time.Millisecond)),
				(m.ID == "g1" || m.ID == "g3") && !m.HeartbeatAt.Before(beat.Truncate(time.Millisecond)):
				n++
			}
		}
		return n == 3
	})
	e.waitAllArmed(t)
	waitFor(t, 30*time.Second, "the hand-over's read", func() bool { return len(e.readsSince(start)) >= 1 })
	for i, ids := range e.readsSince(start) {
		if !slices.Equal(ids, e.orphans) {
			t.Errorf("read %d of the decided slots asked for %d jobs %v, want the %d orphans %v: g2 fired before g1's and g3's last heartbeats",
				i+1, len(ids), ids, len(e.orphans), e.orphans)
		}
	}
}

// A job armed at the engine's pace is fired here only from the end of its
// round, so a member that leaves after the round, with its last heartbeat
// before the round ended, may have left it with no replica between: it
// is handed over then. Here g1 goes first: r1 defers the jobs it takes
// from g1 (each has g2 or g3 firing), and arms them at its pace. Then g2
// goes, its last heartbeat before that round: of those jobs, the ones g2
// armed with r1 are read and handed over — no others, since no job was
// orphaned at either re-division by the rule for jobs just armed.
func TestHandOverOfJobsArmedLateWhoseOtherArmerWentBefore(t *testing.T) {
	db, through, p := proxiedDatabase(t)
	now := time.Now()
	ghosts, ids := ghostsAndJobs(t, db, now, [3]time.Time{now.Add(4 * time.Second), now.Add(9 * time.Second), now.Add(time.Hour)}, 60, 0)
	reads := countDecidedReads(p)
	self := members.Member{ID: "r1"}
	all := append(slices.Clone(ghosts), self)
	afterG1 := []members.Member{ghosts[1], ghosts[2], self}
	var late []string // armed here once g1 is gone, with g2 as the other armer
	for _, id := range ids {
		a, b := members.Armers(id, all)
		if a.ID == "r1" || b.ID == "r1" {
			continue
		}
		if a, b := members.Armers(id, afterG1); (a.ID == "r1" && b.ID == "g2") || (a.ID == "g2" && b.ID == "r1") {
			late = append(late, id)
		}
	}
	if len(late) == 0 {
		t.Fatal("no job r1 takes from g1 with g2 as the other armer: pick other ids")
	}
	// Each job's last decided slot, a second before the test: the
	// hand-over of the jobs armed late offers their slots of the window
	// since, which r1's engine overtook (it fires them from the end of the
	// round, before g2 goes).
	decided := now.Truncate(time.Second).Add(-time.Second)
	for _, id := range ids {
		if _, err := db.Collection(record.RunsCollection).InsertOne(context.Background(), record.RunDoc{ID: record.RunID(id, decided),
			JobID: id, ScheduledAt: decided, Status: record.StatusSucceeded, EndedAt: decided, ExpireAt: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	d := startDaemon(t, through, dividingR1())
	waitFor(t, 30*time.Second, "r1 firing", func() bool { return !d.service.members.Self().FiringSince.IsZero() })
	waitFor(t, 30*time.Second, "g1 gone and the jobs taken from it armed at r1's pace", func() bool {
		_, ok := d.logs.find(func(r map[string]any) bool {
			return r["msg"] == "schedules re-divided: the deferred jobs armed at the engine's pace" && r["live"] == "g2,g3,r1"
		})
		return ok
	})
	if got := reads(); len(got) != 0 {
		t.Fatalf("decided slots read for %v once g1 was gone, want none: g2 or g3 fired each job r1 took", got)
	}
	waitFor(t, 30*time.Second, "g2 gone and its jobs armed late read", func() bool { return len(reads()) > 0 })
	for i, got := range reads() {
		if !slices.Equal(got, late) {
			t.Errorf("read %d of the decided slots asked for %v, want the %d jobs r1 armed late with g2 as the other armer %v",
				i+1, got, len(late), late)
		}
	}
	// Those slots were due while no replica armed the jobs, and the claim
	// takes them no more: recorded missed, hand_over, naming the later
	// slot — not skipped.
	for _, id := range late {
		waitFor(t, 30*time.Second, id+"'s overtaken slots of the window recorded missed", func() bool {
			for _, r := range runsOf(t, db, id, decided) {
				if r.Status == record.StatusMissed && r.Reason == record.MissedHandOver && strings.Contains(r.Error, "later slot") {
					return true
				}
			}
			return false
		})
		for _, r := range runsOf(t, db, id, decided) {
			if r.Status == record.StatusSkipped && strings.Contains(r.Reason, "later slot") {
				t.Errorf("%s: slot %s skipped (%s), want it recorded missed %s", id, r.ScheduledAt.UTC().Format(time.RFC3339),
					r.Reason, record.MissedHandOver)
			}
		}
	}
}

// The engine's fires of a job handed over wait for the hand-over's
// offers: the window's slots are claimed first, oldest first, then the
// engine's own, so that none is skipped for a later slot claimed before
// it. The hand-over's read of the decided slots is held back here until
// the engine has a fire of an orphan to send (waiting for its turn, or,
// without the gates, claimed), as a slow database does. Every slot from
// the last decided one on is then run (or skipped by the job's overlap
// policy while the run before it holds the lock), or recorded missed,
// hand_over, before the window.
func TestHandOverClaimsItsSlotsBeforeTheEnginesFires(t *testing.T) {
	e := newHandOverEnv(t, 40, 0)
	decided := time.Now().Truncate(time.Second)
	for _, id := range e.orphans {
		if _, err := e.db.Collection(record.LocksCollection).InsertOne(context.Background(), bson.D{{Key: "_id", Value: id},
			{Key: "state", Value: record.LockFree}, {Key: "last_slot", Value: decided}, {Key: "fence", Value: int64(0)},
			{Key: "updated_at", Value: decided}}); err != nil {
			t.Fatal(err)
		}
	}
	read := e.proxy.HoldNext(isDecidedRead)
	t.Cleanup(read.Release)
	select {
	case <-read.Held():
	case <-time.After(60 * time.Second):
		t.Fatal("no hand-over read of the decided slots within 60 s")
	}
	heldAt := time.Now()
	waitFor(t, 30*time.Second, "a fire of an orphan after the re-division, waiting its turn or claimed", func() bool {
		if e.d.service.gates.waiting() > 0 {
			return true
		}
		for _, id := range e.orphans {
			if len(runsOf(t, e.db, id, heldAt)) > 0 {
				return true
			}
		}
		return false
	})
	read.Release()
	until := time.Now().Add(2 * time.Second).Truncate(time.Second)
	for _, id := range e.orphans {
		var runs []record.RunDoc
		waitFor(t, 30*time.Second, id+"'s slots up to "+until.Format(time.RFC3339)+" decided", func() bool {
			runs = runsOf(t, e.db, id, decided)
			for _, r := range runs {
				if !r.ScheduledAt.Before(until) && r.Status != record.StatusClaiming && r.Status != record.StatusRunning {
					return true
				}
			}
			return false
		})
		covered := map[time.Time]string{}
		for _, r := range runs {
			// The job's overlap policy (skip) may skip a slot whose previous
			// run still holds the lock, as for any fire; nothing else may.
			if r.Status == record.StatusSkipped && strings.HasSuffix(r.Reason, " still holds the lock") {
				covered[r.ScheduledAt.UTC()] = record.StatusSucceeded + " "
				continue
			}
			last := r.ScheduledAt
			if r.Status == record.StatusMissed && !r.LastScheduledAt.IsZero() {
				last = r.LastScheduledAt
			}
			got := r.Status + " " + r.Reason
			if r.Error != "" {
				got += " (" + r.Error + ")" // a slot of the window overtaken by the engine's later fire
			}
			for s := r.ScheduledAt; !s.After(last); s = s.Add(time.Second) {
				covered[s.UTC()] = got
			}
		}
		for s := decided.Add(time.Second); !s.After(until); s = s.Add(time.Second) {
			switch got := covered[s.UTC()]; got {
			case record.StatusSucceeded + " ", record.StatusMissed + " " + record.MissedHandOver:
			default:
				t.Errorf("%s: slot %s is %q, want succeeded (or skipped, the run before holding the lock), or missed %s before the window",
					id, s.Format(time.RFC3339), got, record.MissedHandOver)
			}
		}
	}
}
