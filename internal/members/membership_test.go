package members

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os/exec"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/testmongo"
)

func TestMain(m *testing.M) { testmongo.Main(m, nil) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newDB(t *testing.T) *mongo.Database {
	return testmongo.NewDatabase(t, testmongo.Client(t))
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func readDoc(t *testing.T, db *mongo.Database, id string) (Member, bool) {
	t.Helper()
	var m Member
	err := Collection(db).FindOne(ctxFor(t, 10*time.Second), bson.D{{Key: "_id", Value: id}}).Decode(&m)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return m, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return m, true
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Every write of the membership carries write concern majority and every
// read read concern majority, whatever the client's defaults. The
// heartbeat is the default one: a heartbeat's write is given the heartbeat
// period, and one shorter than the server's answer on a loaded machine
// (the 20 ms this test had) is not sent at all.
func TestMembershipUsesMajority(t *testing.T) {
	var mu sync.Mutex
	var seen []bson.Raw
	mon := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		switch e.CommandName {
		case "insert", "update", "delete", "find":
			mu.Lock()
			seen = append(seen, append(bson.Raw(nil), e.Command...))
			mu.Unlock()
		}
	}}
	client, err := mongo.Connect(options.Client().ApplyURI(testmongo.Shared(t).URI).SetMonitor(mon))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	db := testmongo.NewDatabase(t, client)
	m := New(db, Options{InstanceID: "r1", Logger: quiet})
	ctx := ctxFor(t, 10*time.Second)
	if err := m.Join(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.beat(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Live(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	kinds := map[string]bool{}
	for _, cmd := range seen {
		name := cmd.Index(0).Key()
		kinds[name] = true
		if name == "find" {
			if lvl, _ := cmd.Lookup("readConcern", "level").StringValueOK(); lvl != "majority" {
				t.Errorf("find without read concern majority: %s", cmd)
			}
			continue
		}
		if w, _ := cmd.Lookup("writeConcern", "w").StringValueOK(); w != "majority" {
			t.Errorf("%s without write concern majority: %s", name, cmd)
		}
	}
	for _, k := range []string{"find", "insert", "update", "delete"} {
		if !kinds[k] {
			t.Errorf("no %s seen (saw %v)", k, kinds)
		}
	}
}

func TestJoinHeartbeatLeave(t *testing.T) {
	db := newDB(t)
	m := New(db, Options{InstanceID: "r1", Host: "host-a", Heartbeat: 50 * time.Millisecond, Lease: time.Second, Logger: quiet})
	if err := m.Join(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	first, ok := readDoc(t, db, "r1")
	if !ok || first.Incarnation != m.Self().Incarnation || first.Host != "host-a" || !first.LiveAt(time.Now()) {
		t.Fatalf("after Join: %+v (found %v)", first, ok)
	}
	if want := first.LeaseUntil.Add(DefaultRetention); !first.ExpireAt.Equal(want) {
		t.Fatalf("expire_at %s, want lease_until + retention %s", first.ExpireAt, want)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	waitFor(t, 10*time.Second, "a heartbeat", func() bool {
		d, _ := readDoc(t, db, "r1")
		return d.HeartbeatAt.After(first.HeartbeatAt) && d.StartedAt.Equal(first.StartedAt)
	})
	live, err := m.Live(ctxFor(t, 10*time.Second))
	if err != nil || len(live) != 1 || live[0].ID != "r1" {
		t.Fatalf("Live = %+v, %v", live, err)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run after cancel: %v", err)
	}
	if err := m.Leave(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, ok := readDoc(t, db, "r1"); ok {
		t.Fatal("document left after Leave")
	}
	// The next process of the instance starts at once.
	again := New(db, Options{InstanceID: "r1", Logger: quiet})
	if err := again.Join(ctxFor(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
}

// A second process with a held instance id is refused as soon as the
// holder's heartbeat moves, long before the holder's lease passes.
func TestJoinRefusesLiveHolder(t *testing.T) {
	db := newDB(t)
	holder := New(db, Options{InstanceID: "dup", Host: "host-a", Heartbeat: 100 * time.Millisecond, Lease: time.Hour, Logger: quiet})
	if err := holder.Join(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() { _ = holder.Run(ctx) }()

	second := New(db, Options{InstanceID: "dup", Host: "host-b", Logger: quiet})
	err := second.Join(ctxFor(t, 30*time.Second))
	var de *DuplicateError
	if !errors.As(err, &de) {
		t.Fatalf("second Join: %v, want a DuplicateError", err)
	}
	if de.Other.Host != "host-a" || de.Other.Incarnation != holder.Self().Incarnation {
		t.Fatalf("refusal names %+v, want the holder on host-a", de.Other)
	}
	for _, want := range []string{`"dup"`, `"host-a"`, holder.Self().Incarnation} {
		if !contains(err.Error(), want) {
			t.Errorf("message %q lacks %s", err, want)
		}
	}
	if d, _ := readDoc(t, db, "dup"); d.Incarnation != holder.Self().Incarnation {
		t.Fatalf("the refused process changed the document: %+v", d)
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// A previous process on this machine whose process is gone (a crash) is
// taken over at once, although its lease is far from over.
func TestJoinTakesOverCrashedProcessOnThisMachine(t *testing.T) {
	if machineID() == "" {
		t.Skip("no machine id here")
	}
	db := newDB(t)
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	dead := Member{ID: "r1", Host: "host-a", PID: cmd.Process.Pid, Machine: machineID(), Incarnation: "crashed",
		StartedAt: now.Add(-time.Minute), HeartbeatAt: now, LeaseUntil: now.Add(time.Hour), ExpireAt: now.Add(2 * time.Hour)}
	if _, err := Collection(db).InsertOne(ctxFor(t, 10*time.Second), dead); err != nil {
		t.Fatal(err)
	}
	m := New(db, Options{InstanceID: "r1", Logger: quiet})
	if err := m.Join(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatalf("Join over a crashed process: %v", err)
	}
	if d, _ := readDoc(t, db, "r1"); d.Incarnation != m.Self().Incarnation {
		t.Fatalf("document %+v, want this incarnation", d)
	}
}

// A holder elsewhere whose heartbeat does not move is waited for until its
// lease passes, then taken over.
func TestJoinWaitsOutSilentHolderElsewhere(t *testing.T) {
	db := newDB(t)
	now := time.Now()
	silent := Member{ID: "r1", Host: "elsewhere", PID: 1, Machine: "another-machine", Incarnation: "old",
		StartedAt: now.Add(-time.Minute), HeartbeatAt: now, LeaseUntil: now.Add(1500 * time.Millisecond), ExpireAt: now.Add(time.Hour)}
	if _, err := Collection(db).InsertOne(ctxFor(t, 10*time.Second), silent); err != nil {
		t.Fatal(err)
	}
	m := New(db, Options{InstanceID: "r1", Logger: quiet})
	if err := m.Join(ctxFor(t, 20*time.Second)); err != nil {
		t.Fatalf("Join: %v", err)
	}
	if joined := time.Now(); joined.Before(silent.LeaseUntil) {
		t.Fatalf("joined at %s, before the silent holder's lease ended at %s", joined, silent.LeaseUntil)
	}
	if d, _ := readDoc(t, db, "r1"); d.Incarnation != m.Self().Incarnation {
		t.Fatalf("document %+v, want this incarnation", d)
	}
}

// A process whose document another incarnation took over stops at its next
// heartbeat with a TakenOverError naming the other.
func TestRunStopsWhenTakenOver(t *testing.T) {
	db := newDB(t)
	m := New(db, Options{InstanceID: "r1", Host: "host-a", Heartbeat: 50 * time.Millisecond, Logger: quiet})
	if err := m.Join(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- m.Run(context.Background()) }()
	now := time.Now()
	other := Member{ID: "r1", Host: "host-b", PID: 42, Incarnation: "usurper", StartedAt: now, HeartbeatAt: now,
		LeaseUntil: now.Add(time.Hour), ExpireAt: now.Add(2 * time.Hour)}
	if _, err := Collection(db).ReplaceOne(ctxFor(t, 10*time.Second), bson.D{{Key: "_id", Value: "r1"}}, other); err != nil {
		t.Fatal(err)
	}
	var err error
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not stop after the takeover")
	}
	var te *TakenOverError
	if !errors.As(err, &te) || te.Other.Host != "host-b" || te.Other.Incarnation != "usurper" {
		t.Fatalf("Run: %v, want a TakenOverError naming host-b", err)
	}
	if d, _ := readDoc(t, db, "r1"); d.Incarnation != "usurper" {
		t.Fatalf("the stopped process overwrote the document: %+v", d)
	}
	// Leave of the stopped process does not remove the other's document.
	if err := m.Leave(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, ok := readDoc(t, db, "r1"); !ok {
		t.Fatal("Leave removed another incarnation's document")
	}
}

// A heartbeat that finds its document gone writes it again.
func TestHeartbeatRewritesMissingDocument(t *testing.T) {
	db := newDB(t)
	m := New(db, Options{InstanceID: "r1", Heartbeat: 50 * time.Millisecond, Logger: quiet})
	if err := m.Join(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() { _ = m.Run(ctx) }()
	if _, err := Collection(db).DeleteOne(ctxFor(t, 10*time.Second), bson.D{{Key: "_id", Value: "r1"}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the document written again", func() bool {
		d, ok := readDoc(t, db, "r1")
		return ok && d.Incarnation == m.Self().Incarnation
	})
}

func TestEnsureIndexesTTL(t *testing.T) {
	db := newDB(t)
	ctx := ctxFor(t, 10*time.Second)
	if err := EnsureIndexes(ctx, Collection(db)); err != nil {
		t.Fatal(err)
	}
	if err := EnsureIndexes(ctx, Collection(db)); err != nil {
		t.Fatalf("second EnsureIndexes: %v", err)
	}
	cur, err := Collection(db).Indexes().List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var specs []bson.M
	if err := cur.All(ctx, &specs); err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		if s["name"] == TTLIndex {
			return
		}
	}
	t.Fatalf("no %s among %v", TTLIndex, specs)
}

// The member document carries the HTTP address given in Options, from the
// join on and through a heartbeat that writes the document again, so that
// the command line can ask the daemon what its engine holds.
func TestMemberDocumentCarriesTheHTTPAddress(t *testing.T) {
	db := newDB(t)
	m := New(db, Options{InstanceID: "r1", HTTP: "127.0.0.1:9090", Heartbeat: 50 * time.Millisecond, Logger: quiet})
	if err := m.Join(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if d, ok := readDoc(t, db, "r1"); !ok || d.HTTP != "127.0.0.1:9090" {
		t.Fatalf("after Join: %+v", d)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() { _ = m.Run(ctx) }()
	if _, err := Collection(db).DeleteOne(ctxFor(t, 10*time.Second), bson.D{{Key: "_id", Value: "r1"}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the document written again with its HTTP address", func() bool {
		d, ok := readDoc(t, db, "r1")
		return ok && d.HTTP == "127.0.0.1:9090"
	})
}

// The heartbeat age counts from New until the first write, then from the
// last write: it drops at Join and grows again while no heartbeat lands.
func TestHeartbeatAge(t *testing.T) {
	db := newDB(t)
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	m := New(db, Options{InstanceID: "r1", Heartbeat: time.Hour, Logger: quiet, Now: clock})
	advance(7 * time.Second)
	if got := m.HeartbeatAge(); got != 7*time.Second {
		t.Fatalf("age before Join %s, want 7s (since New)", got)
	}
	if err := m.Join(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if got := m.HeartbeatAge(); got != 0 {
		t.Fatalf("age right after Join %s, want 0", got)
	}
	advance(12 * time.Second) // no heartbeat in between (one an hour)
	if got := m.HeartbeatAge(); got != 12*time.Second {
		t.Fatalf("age 12 s after Join without a heartbeat %s, want 12s", got)
	}
}
