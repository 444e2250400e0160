package members

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/testmongo"
)

func viewIDs(m *Membership) []string {
	var ids []string
	for _, d := range m.LiveView() {
		ids = append(ids, d.ID)
	}
	return ids
}

// run runs m's heartbeat loop until the test ends (or stop is called).
func run(t *testing.T, m *Membership) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run of %s: %v", m.Self().ID, err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// The view is unknown before Join (Owns says yes to everything), read
// right after Join, and read again after each heartbeat, so a member that
// joined later shows up in an earlier member's view at its next heartbeat.
func TestViewReadAfterJoinAndEachHeartbeat(t *testing.T) {
	db := newDB(t)
	r1 := New(db, Options{InstanceID: "r1", Heartbeat: 50 * time.Millisecond, Lease: 10 * time.Second, Logger: quiet})
	if v := r1.LiveView(); v != nil {
		t.Fatalf("LiveView before Join = %+v, want none", v)
	}
	if !r1.Owns("any") {
		t.Fatal("Owns before any read = false, want true (claim at once)")
	}
	if err := r1.Join(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if got := viewIDs(r1); !slices.Equal(got, []string{"r1"}) {
		t.Fatalf("r1's view right after Join = %v, want [r1]", got)
	}
	r2 := New(db, Options{InstanceID: "r2", Heartbeat: time.Hour, Lease: 10 * time.Second, Logger: quiet})
	if err := r2.Join(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if got := viewIDs(r2); !slices.Equal(got, []string{"r1", "r2"}) {
		t.Fatalf("r2's view right after Join = %v, want [r1 r2]", got)
	}
	if got := viewIDs(r1); !slices.Equal(got, []string{"r1"}) {
		t.Fatalf("r1's view before its next heartbeat = %v, want [r1] (no read in between)", got)
	}
	run(t, r1)
	waitFor(t, 10*time.Second, "r2 in r1's view", func() bool {
		return slices.Equal(viewIDs(r1), []string{"r1", "r2"})
	})
	for _, d := range r1.LiveView() {
		if d.ID == "r2" && d.Incarnation != r2.Self().Incarnation {
			t.Fatalf("r1's view of r2 = %+v, want incarnation %s", d, r2.Self().Incarnation)
		}
	}
}

// joinedThree returns members r1, r2 and r3 of db, joined (heartbeat
// 50 ms, lease 10 s) but not running.
func joinedThree(t *testing.T, db *mongo.Database) []*Membership {
	t.Helper()
	var ms []*Membership
	for _, id := range []string{"r1", "r2", "r3"} {
		m := New(db, Options{InstanceID: id, Heartbeat: 50 * time.Millisecond, Lease: 10 * time.Second, Logger: quiet})
		if err := m.Join(ctxFor(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
		ms = append(ms, m)
	}
	return ms
}

// Three members with the same view split the jobs: every job is owned by
// exactly one of them, the one members.Owner names, and each owns about a
// third.
func TestOwnsSplitsJobsAcrossThreeMembers(t *testing.T) {
	ms := joinedThree(t, newDB(t))
	for _, m := range ms {
		run(t, m)
	}
	want := []string{"r1", "r2", "r3"}
	waitFor(t, 10*time.Second, "every view holding the three members", func() bool {
		for _, m := range ms {
			if !slices.Equal(viewIDs(m), want) {
				return false
			}
		}
		return true
	})
	const jobs = 3000
	owned := map[string]int{}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i := range jobs {
		wg.Go(func() { // concurrent use, as the fires of a burst do
			id := fmt.Sprintf("job-%04d", i)
			var owners []string
			for _, m := range ms {
				if m.Owns(id) {
					owners = append(owners, m.Self().ID)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if len(owners) != 1 {
				t.Errorf("%s owned by %v, want exactly one", id, owners)
				return
			}
			if o := Owner(id, ms[0].LiveView()).ID; o != owners[0] {
				t.Errorf("%s: Owns says %s, Owner says %s", id, owners[0], o)
			}
			owned[owners[0]]++
		})
	}
	wg.Wait()
	for _, id := range want {
		if n := owned[id]; n < jobs/5 || n > jobs/2 {
			t.Errorf("%s owns %d of %d jobs, want about a third (%v)", id, n, jobs, owned)
		}
	}
}

// A member whose lease passed (it stopped heartbeating without leaving)
// drops out of the others' views, and the next heartbeat's read no longer
// has it at all; its jobs move to the others.
// With the schedules divided, each job is armed by exactly two of three
// members — its owner and the member second for it — as Armers says from
// any view.
func TestArmsTwoOfThreeMembers(t *testing.T) {
	db := newDB(t)
	var ms []*Membership
	for _, id := range []string{"r1", "r2", "r3"} {
		m := New(db, Options{InstanceID: id, Heartbeat: 50 * time.Millisecond, Lease: 10 * time.Second, Logger: quiet})
		if !m.Arms("any") {
			t.Fatal("a member that has read no view yet must arm every job")
		}
		if err := m.Join(ctxFor(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
		ms = append(ms, m)
	}
	for _, m := range ms {
		run(t, m)
	}
	want := []string{"r1", "r2", "r3"}
	waitFor(t, 10*time.Second, "every view holding the three members", func() bool {
		for _, m := range ms {
			if !slices.Equal(viewIDs(m), want) {
				return false
			}
		}
		return true
	})
	for i := range 3000 {
		id := fmt.Sprintf("job-%04d", i)
		first, second := Armers(id, ms[0].LiveView())
		var armers []string
		for _, m := range ms {
			if m.Arms(id) {
				armers = append(armers, m.Self().ID)
			}
		}
		if wantArmers := []string{first.ID, second.ID}; len(armers) != 2 || !slices.Contains(armers, first.ID) ||
			!slices.Contains(armers, second.ID) {
			t.Fatalf("%s armed by %v, want %v", id, armers, wantArmers)
		}
	}
}

func TestDeadMemberDropsOutOfTheView(t *testing.T) {
	db := newDB(t)
	r1 := New(db, Options{InstanceID: "r1", Heartbeat: 50 * time.Millisecond, Lease: 10 * time.Second, Logger: quiet})
	if err := r1.Join(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	run(t, r1)
	r2 := New(db, Options{InstanceID: "r2", Heartbeat: 100 * time.Millisecond, Lease: 400 * time.Millisecond, Logger: quiet})
	if err := r2.Join(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	stopR2 := run(t, r2)
	waitFor(t, 10*time.Second, "r2 in r1's view", func() bool { return slices.Equal(viewIDs(r1), []string{"r1", "r2"}) })
	var r2Job string
	for i := 0; r2Job == ""; i++ {
		if id := fmt.Sprintf("job-%d", i); !r1.Owns(id) {
			r2Job = id
		}
	}
	stopR2() // dies without Leave: its document stays, its lease runs out
	// r2 is judged by the last of its heartbeats r1 read, not by one it
	// may have written as it stopped.
	var leaseEnd time.Time
	waitFor(t, 10*time.Second, "r2 out of r1's view", func() bool {
		for _, d := range r1.view.Load().members {
			if d.ID == "r2" {
				leaseEnd = d.LeaseUntil
			}
		}
		return slices.Equal(viewIDs(r1), []string{"r1"})
	})
	if now := time.Now(); now.Before(leaseEnd) {
		t.Fatalf("r2 left r1's view at %s, before the lease r1 read ended at %s", now, leaseEnd)
	}
	// The next heartbeat's read does not return it any more.
	readAfter := leaseEnd
	waitFor(t, 10*time.Second, "a heartbeat's read after r2's lease", func() bool {
		v := r1.view.Load()
		return v.readAt.After(readAfter)
	})
	for _, d := range r1.view.Load().members {
		if d.ID == "r2" {
			t.Fatalf("a read after r2's lease still holds it: %+v", d)
		}
	}
	if _, ok := readDoc(t, db, "r2"); !ok {
		t.Fatal("r2's document is gone; the test wants it kept (dead, not left)")
	}
	if !r1.Owns(r2Job) {
		t.Fatalf("r1 does not own %s after r2 died", r2Job)
	}
}

// This member counts as live in its own view whatever the read returned:
// its own document missing, behind its last write, or another
// incarnation's.
func TestSelfAlwaysInTheView(t *testing.T) {
	db := newDB(t)
	r1 := New(db, Options{InstanceID: "r1", Heartbeat: time.Hour, Lease: 10 * time.Second, Logger: quiet})
	if err := r1.Join(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	other := Member{ID: "r2", Host: "h", Incarnation: "x", StartedAt: now, HeartbeatAt: now,
		LeaseUntil: now.Add(time.Hour), ExpireAt: now.Add(2 * time.Hour)}
	if _, err := Collection(db).InsertOne(ctxFor(t, 10*time.Second), other); err != nil {
		t.Fatal(err)
	}
	for _, change := range []bson.D{
		{{Key: "$set", Value: bson.D{{Key: "lease_until", Value: now.Add(-time.Minute)}}}},                             // behind
		{{Key: "$set", Value: bson.D{{Key: "incarnation", Value: "someone-else"}, {Key: "host", Value: "elsewhere"}}}}, // overwritten
	} {
		if _, err := Collection(db).UpdateOne(ctxFor(t, 10*time.Second), bson.D{{Key: "_id", Value: "r1"}}, change); err != nil {
			t.Fatal(err)
		}
		if err := r1.refreshView(ctxFor(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
		v := r1.LiveView()
		if got := viewIDs(r1); !slices.Equal(got, []string{"r1", "r2"}) {
			t.Fatalf("view after %v = %v, want [r1 r2]", change, got)
		}
		if v[0].Incarnation != r1.Self().Incarnation {
			t.Fatalf("self in the view = %+v, want this process's document", v[0])
		}
	}
	if _, err := Collection(db).DeleteOne(ctxFor(t, 10*time.Second), bson.D{{Key: "_id", Value: "r1"}}); err != nil {
		t.Fatal(err)
	}
	if err := r1.refreshView(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if got := viewIDs(r1); !slices.Equal(got, []string{"r1", "r2"}) {
		t.Fatalf("view with its own document missing = %v, want [r1 r2]", got)
	}
	owns := 0
	for i := range 200 {
		if r1.Owns(fmt.Sprint("job-", i)) {
			owns++
		}
	}
	if owns == 0 || owns == 200 {
		t.Fatalf("r1 owns %d of 200 jobs, want a share (itself and r2 live)", owns)
	}
	// A read sent earlier than the stored one does not replace it.
	stored := r1.view.Load()
	early := New(db, Options{InstanceID: "r1", Logger: quiet, Now: func() time.Time { return stored.readAt.Add(-time.Second) }})
	early.view.Store(stored)
	if err := early.refreshView(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if early.view.Load() != stored {
		t.Fatal("an earlier read replaced a later one")
	}
}

// Each heartbeat costs one update and one find, nothing else.
func TestHeartbeatIsOneUpdateAndOneFind(t *testing.T) {
	var mu sync.Mutex
	counts := map[string]int{}
	mon := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		mu.Lock()
		counts[e.CommandName]++
		mu.Unlock()
	}}
	client, err := mongo.Connect(options.Client().ApplyURI(testmongo.Shared(t).URI).SetMonitor(mon))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	db := testmongo.NewDatabase(t, client)
	m := New(db, Options{InstanceID: "r1", Heartbeat: 50 * time.Millisecond, Logger: quiet})
	if err := m.Join(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	joinFinds := counts["find"] // Join: the read of its own document, then the view
	clear(counts)
	mu.Unlock()
	if joinFinds != 2 {
		t.Errorf("Join sent %d finds, want 2 (its document, the view)", joinFinds)
	}
	stop := run(t, m)
	waitFor(t, 10*time.Second, "ten heartbeats", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return counts["update"] >= 10
	})
	stop()
	mu.Lock()
	defer mu.Unlock()
	if d := counts["find"] - counts["update"]; d < -1 || d > 0 {
		t.Errorf("per heartbeat: %v, want one update and one find each", counts)
	}
	for name := range counts {
		if name != "find" && name != "update" {
			t.Errorf("heartbeats sent %s (%v)", name, counts)
		}
	}
}

// A member that joined but does not fire yet owns no job while the others
// fire: the jobs it is to own are owned, in every view, by the best of the
// members that fire, so their fires are claimed at once rather than after
// the grace; once it fires and the others have read that, it owns them.
func TestOwnsWaitsForAJoinerToFire(t *testing.T) {
	ms := joinedThree(t, newDB(t))
	at := time.Now()
	for _, m := range ms[:2] {
		if err := m.Firing(ctxFor(t, 10*time.Second), at); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range ms {
		run(t, m)
	}
	firingSeen := func(n int) bool { // every view has the three members, n of them firing
		for _, m := range ms {
			live := m.LiveView()
			f := 0
			for _, d := range live {
				if !d.FiringSince.IsZero() {
					f++
				}
			}
			if len(live) != 3 || f != n {
				return false
			}
		}
		return true
	}
	waitFor(t, 10*time.Second, "every view holding three members, two firing", func() bool { return firingSeen(2) })
	owners := func(id string) []string {
		var out []string
		for _, m := range ms {
			if m.Owns(id) {
				out = append(out, m.Self().ID)
			}
		}
		return out
	}
	all := named("r1", "r2", "r3")
	joinersJobs := 0
	for i := range 600 {
		id := fmt.Sprintf("job-%04d", i)
		want := Owner(id, all).ID
		if want == "r3" {
			joinersJobs++
			want = Owner(id, all[:2]).ID
		}
		if got := owners(id); !slices.Equal(got, []string{want}) {
			t.Fatalf("%s owned by %v while r3 starts, want [%s]", id, got, want)
		}
	}
	if joinersJobs == 0 {
		t.Fatal("no job is r3's best: the test shows nothing")
	}
	if err := ms[2].Firing(ctxFor(t, 10*time.Second), time.Now()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "every view holding the three members firing", func() bool { return firingSeen(3) })
	for i := range 600 {
		id := fmt.Sprintf("job-%04d", i)
		if got, want := owners(id), Owner(id, all).ID; !slices.Equal(got, []string{want}) {
			t.Fatalf("%s owned by %v once r3 fires, want [%s]", id, got, want)
		}
	}
}
