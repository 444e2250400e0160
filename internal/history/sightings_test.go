package history

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/testmongo"
)

// writeCounter counts the update and find commands sent to the history
// collection, by the client they were sent from.
type writeCounter struct {
	mu      sync.Mutex
	updates int
	finds   int
}

func (c *writeCounter) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		coll, _ := e.Command.Lookup(e.CommandName).StringValueOK()
		if coll != CollectionName {
			return
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		switch e.CommandName {
		case "update":
			c.updates++
		case "find":
			c.finds++
		}
	}}
}

func (c *writeCounter) counts() (updates, finds int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.updates, c.finds
}

// replica is one replica's Sightings over its own client (so its
// commands can be counted), running until the test ends.
type replica struct {
	s      *Sightings
	counts *writeCounter
}

func startReplica(t *testing.T, dbName, instance string) replica {
	t.Helper()
	wc := &writeCounter{}
	client, err := mongo.Connect(options.Client().ApplyURI(testmongo.Shared(t).URI).SetMonitor(wc.monitor()))
	if err != nil {
		t.Fatal(err)
	}
	s := NewSightings(client.Database(dbName).Collection(CollectionName),
		SightingsOptions{Instance: instance, Retention: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	t.Cleanup(func() {
		s.Close()
		<-done
		cancel()
		_ = client.Disconnect(context.Background())
	})
	return replica{s: s, counts: wc}
}

// sightingOf reads job's entry (ok false: none).
func sightingOf(t *testing.T, coll *mongo.Collection, job string) (Sighting, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, ok, err := ReadFirstSeen(ctx, coll, job)
	if err != nil {
		t.Fatal(err)
	}
	return s, ok
}

// waitSighting waits until job's entry satisfies cond.
func waitSighting(t *testing.T, coll *mongo.Collection, job, what string, cond func(Sighting, bool) bool) Sighting {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		s, ok := sightingOf(t, coll, job)
		if cond(s, ok) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("sighting of %s: %+v (exists %v), want %s", job, s, ok, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// drained hands replica r a sentinel insert and waits for it: everything
// queued before it has been written.
func drained(t *testing.T, coll *mongo.Collection, r replica, n int) {
	t.Helper()
	job := "sentinel-" + r.s.opts.Instance + "-" + string(rune('a'+n))
	r.s.Inserted(job, wall0)
	waitSighting(t, coll, job, "written", func(_ Sighting, ok bool) bool { return ok })
}

// A deployment without sightings gets one per job from its first full
// read, written once: the same replica's next full read, and another
// replica's first, write nothing for those jobs. Insert and delete events
// of three replicas, one of them replaying old events late, leave one
// entry per job that follows the job's latest life: deleted (expiring a
// retention later), created again (a new sighting, no expiry).
func TestSightingsOncePerJobAcrossReplicasAndLives(t *testing.T) {
	db := testmongo.NewDatabase(t, testmongo.Client(t))
	coll := db.Collection(CollectionName)
	at := func(minutes int) time.Time { return wall0.Add(time.Duration(minutes) * time.Minute) }

	// An edit of job a from before the upgrade: not a sighting, and the
	// sightings leave it alone.
	if _, err := coll.InsertOne(context.Background(), Entry{ID: "8200000000000001", JobID: "a", At: at(-60), Op: OpUpdate,
		Changes: []Change{}, ExpireAt: at(600)}); err != nil {
		t.Fatal(err)
	}

	r1 := startReplica(t, db.Name(), "r1")
	r1.s.Present([]string{"a", "b", "c"}, at(0))
	for _, job := range []string{"a", "b", "c"} {
		s := waitSighting(t, coll, job, "seen by the read at 0", func(s Sighting, ok bool) bool { return ok })
		if !s.At.Equal(at(0)) || s.Source != SourceRead || s.Instance != "r1" || !s.DeletedAt.IsZero() {
			t.Errorf("%s after the upgrade's first read: %+v", job, s)
		}
	}
	if u, f := r1.counts.counts(); u != 1 || f != 1 {
		t.Errorf("first read: %d updates, %d finds; want one bulk update (three jobs) and one find", u, f)
	}

	// The same replica reads the same jobs again (a resync): no write.
	r1.s.Present([]string{"c", "b", "a"}, at(10))
	drained(t, coll, r1, 0)
	if u, f := r1.counts.counts(); u != 2 || f != 1 {
		t.Errorf("after a second read: %d updates, %d finds; want only the sentinel's update", u, f)
	}
	// A second replica starts: one find, no write for jobs that have one.
	r2 := startReplica(t, db.Name(), "r2")
	r2.s.Present([]string{"a", "b", "c", "sentinel-r1-a"}, at(20))
	drained(t, coll, r2, 0)
	if u, f := r2.counts.counts(); u != 1 || f != 1 {
		t.Errorf("second replica's first read: %d updates, %d finds; want the sentinel's update and one find", u, f)
	}
	if s, _ := sightingOf(t, coll, "a"); !s.At.Equal(at(0)) || s.Instance != "r1" {
		t.Errorf("a after the second replica's read: %+v, want r1's sighting at 0", s)
	}

	// a is deleted at 30 and created again at 40; both replicas see both
	// events; r3 replays a's old life late (its insert at -5, delete at 30)
	// after the new life was written.
	for _, r := range []replica{r1, r2} {
		r.s.Deleted("a", at(30))
	}
	del := waitSighting(t, coll, "a", "deleted at 30", func(s Sighting, ok bool) bool { return ok && !s.DeletedAt.IsZero() })
	if !del.DeletedAt.Equal(at(30)) {
		t.Errorf("a deleted: %+v", del)
	}
	var expire struct {
		ExpireAt time.Time `bson:"expire_at"`
	}
	if err := coll.FindOne(context.Background(), bson.D{{Key: "_id", Value: FirstSeenID("a")}}).Decode(&expire); err != nil ||
		!expire.ExpireAt.Equal(at(30).Add(time.Hour)) {
		t.Errorf("a deleted: expire_at %v (%v), want a retention after the delete", expire.ExpireAt, err)
	}
	for _, r := range []replica{r2, r1} {
		r.s.Inserted("a", at(40))
	}
	waitSighting(t, coll, "a", "a new sighting at 40", func(s Sighting, ok bool) bool { return ok && s.At.Equal(at(40)) })
	r3 := startReplica(t, db.Name(), "r3")
	r3.s.Inserted("a", at(-5))
	r3.s.Deleted("a", at(30))
	drained(t, coll, r3, 0)
	drained(t, coll, r1, 1)
	a := waitSighting(t, coll, "a", "the new life", func(s Sighting, ok bool) bool { return ok })
	if !a.At.Equal(at(40)) || a.Source != SourceInsert || !a.DeletedAt.IsZero() {
		t.Errorf("a after its new life and a late replay of the old one: %+v", a)
	}
	if err := coll.FindOne(context.Background(), bson.D{{Key: "_id", Value: FirstSeenID("a")},
		{Key: "expire_at", Value: bson.D{{Key: "$exists", Value: true}}}}).Err(); err == nil {
		t.Errorf("a's new sighting still expires")
	}

	// A full read without c (deleted while no replica streamed): marked
	// deleted at the read.
	r1.s.Present([]string{"a", "b"}, at(50))
	c := waitSighting(t, coll, "c", "deleted by the read at 50", func(s Sighting, ok bool) bool { return ok && !s.DeletedAt.IsZero() })
	if !c.DeletedAt.Equal(at(50)) || !c.At.Equal(at(0)) {
		t.Errorf("c after a read without it: %+v", c)
	}

	n, err := coll.CountDocuments(context.Background(), bson.D{})
	if err != nil || n != 1+3+4 { // the edit, a, b, c and four sentinels
		t.Errorf("%d documents (%v), want the edit, three jobs' sightings and four sentinels", n, err)
	}
	edits, err := List(context.Background(), coll, "a", 0)
	if err != nil || len(edits) != 1 || edits[0].ID != "8200000000000001" {
		t.Errorf("List of a = %+v (%v), want its edit only, not its sighting", edits, err)
	}
}

// The live sightings are read a reply of ReadBatch at a time, with a rest
// after each reply past the first, and the reconciliation that follows
// writes only what changed: the jobs new to the read, and the live ones it
// no longer contains.
func TestLiveSightingsReadAtAPace(t *testing.T) {
	db := testmongo.NewDatabase(t, testmongo.Client(t))
	var (
		mu       sync.Mutex
		getMores []int64 // their batchSize
	)
	monitor := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if e.CommandName != "getMore" {
			return
		}
		if coll, _ := e.Command.Lookup("collection").StringValueOK(); coll == CollectionName {
			mu.Lock()
			defer mu.Unlock()
			getMores = append(getMores, e.Command.Lookup("batchSize").AsInt64())
		}
	}}
	client, err := mongo.Connect(options.Client().ApplyURI(testmongo.Shared(t).URI).SetMonitor(monitor))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	coll := client.Database(db.Name()).Collection(CollectionName)

	const live, deleted = 2500, 300
	var docs []any
	var present []string
	for i := range live + deleted {
		id := fmt.Sprintf("job%04d", i)
		d := bson.D{{Key: "_id", Value: FirstSeenID(id)}, {Key: "job_id", Value: id}, {Key: "op", Value: OpFirstSeen},
			{Key: "at", Value: wall0}, {Key: FieldSource, Value: SourceRead}, {Key: "instance", Value: "seed"}, {Key: "recorded_at", Value: wall0}}
		if i >= live {
			d = append(d, bson.E{Key: FieldDeletedAt, Value: wall0}, bson.E{Key: "expire_at", Value: wall0.Add(time.Hour)})
		} else if i >= 5 { // job0000…job0004 are gone from the read
			present = append(present, id)
		}
		docs = append(docs, d)
	}
	if _, err := coll.InsertMany(context.Background(), docs); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		present = append(present, fmt.Sprintf("new%02d", i))
	}

	s := NewSightings(coll, SightingsOptions{Instance: "r1", Retention: time.Hour, ReadBatch: 1000, Logger: slog.New(slog.DiscardHandler)})
	var rests []time.Duration
	s.rest = func(_ context.Context, took time.Duration) error {
		rests = append(rests, took) // Run's goroutine only; read after Run returned
		return nil
	}
	s.Present(present, wall0.Add(time.Minute))
	s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s.Run(ctx)
	if ctx.Err() != nil {
		t.Fatal("Run did not write the read's sightings within a minute")
	}

	mu.Lock()
	if len(getMores) != 2 || getMores[0] != 1000 || getMores[1] != 1000 {
		t.Errorf("getMores of the live sightings' read, by batchSize: %v; want [1000 1000] (2,500 live in replies of 1,000)", getMores)
	}
	mu.Unlock()
	// The read rests after each of its 2 getMores; the walks that write
	// rest after each batch: the 10 new jobs, then the 5 gone.
	if len(rests) != 4 {
		t.Errorf("rests: %v; want one after each of the read's 2 getMores and each of the walks' 2 batches", rests)
	}
	for _, took := range rests {
		if took <= 0 {
			t.Errorf("a rest for a reply that took %v", took)
		}
	}
	for i := range 10 {
		if sg, ok := sightingOf(t, coll, fmt.Sprintf("new%02d", i)); !ok || sg.Instance != "r1" || !sg.At.Equal(wall0.Add(time.Minute)) {
			t.Errorf("new%02d: %+v (exists %v), want r1's sighting from the read", i, sg, ok)
		}
	}
	for i := range 5 {
		if sg, _ := sightingOf(t, coll, fmt.Sprintf("job%04d", i)); !sg.DeletedAt.Equal(wall0.Add(time.Minute)) {
			t.Errorf("job%04d, live but not in the read: %+v, want deleted at the read", i, sg)
		}
	}
	if n, err := coll.CountDocuments(context.Background(), bson.D{{Key: "instance", Value: "seed"}, {Key: FieldDeletedAt, Value: bson.D{{Key: "$exists", Value: false}}}}); err != nil || n != live-5 {
		t.Errorf("live sightings left as they were: %d (%v), want %d", n, err, live-5)
	}

	// A rest that ends (the daemon's context) ends the read with an error
	// that says which collection it was reading.
	stopped := errors.New("rest ended")
	_, err = readLive(context.Background(), coll, 1000, func(context.Context, time.Duration) error { return stopped })
	if !errors.Is(err, stopped) || !strings.Contains(err.Error(), CollectionName) {
		t.Errorf("read whose rest ended: %v; want it to wrap the rest's error and name %s", err, CollectionName)
	}
}

// Once Close is called the live sightings' read rests no more: what is
// queued behind it is written within the daemon's stop if it can be.
func TestLiveSightingsReadStopsRestingAtClose(t *testing.T) {
	s := NewSightings(nil, SightingsOptions{Instance: "r1", Retention: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	rested := make(chan error, 1)
	go func() { rested <- s.rest(context.Background(), time.Hour) }() // a rest of three hours
	s.Close()
	select {
	case err := <-rested:
		if err != nil {
			t.Fatalf("rest after Close: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the read still rests 30 s after Close")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := NewSightings(nil, SightingsOptions{Retention: time.Hour}).rest(ctx, time.Hour); err == nil {
		t.Error("a rest with its context ended returned no error")
	}
}

// logLines keeps the message and attributes of every record logged at
// info or above.
type logLines struct {
	mu    sync.Mutex
	lines []slog.Record
}

func (l *logLines) Enabled(_ context.Context, level slog.Level) bool { return level >= slog.LevelInfo }
func (l *logLines) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, r.Clone())
	return nil
}
func (l *logLines) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logLines) WithGroup(string) slog.Handler      { return l }

// jobs returns the "jobs" attribute of each line logged with msg.
func (l *logLines) jobs(msg string) []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []int64
	for _, r := range l.lines {
		if r.Message != msg {
			continue
		}
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "jobs" {
				out = append(out, a.Value.Int64())
			}
			return true
		})
	}
	return out
}

// A full read that writes many batches of sightings logs one line for
// them all (a first start of a million jobs wrote 2,000 lines, one a
// batch), and so does one that marks many deleted; with progress asked
// after every batch, a progress line follows each batch with the count so
// far.
func TestAFullReadsSightingsAreLoggedOncePerWalk(t *testing.T) {
	db := testmongo.NewDatabase(t, testmongo.Client(t))
	coll := db.Collection(CollectionName)
	logs := &logLines{}
	s := NewSightings(coll, SightingsOptions{Instance: "r1", Retention: time.Hour, Batch: 100, Logger: slog.New(logs)})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	ids := make([]string, 1050)
	for i := range ids {
		ids[i] = fmt.Sprintf("job%04d", i)
	}
	if err := s.present(ctx, sightingOp{kind: sightPresent, ids: ids, at: wall0}); err != nil {
		t.Fatal(err)
	}
	const (
		recorded = "first sightings recorded from a full read"
		marked   = "first sightings of jobs a full read no longer found marked deleted"
	)
	if got := logs.jobs(recorded); len(got) != 1 || got[0] != 1050 {
		t.Errorf("lines %q of a read of 1,050 new jobs in batches of 100, by jobs: %v; want one, of 1050", recorded, got)
	}
	// A read without 250 of them: one line for the 250 marked deleted,
	// and none for the jobs sighted (there were none to write).
	s.progressEvery = 0
	if err := s.present(ctx, sightingOp{kind: sightPresent, ids: ids[250:], at: wall0.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if got := logs.jobs(marked); len(got) != 1 || got[0] != 250 {
		t.Errorf("lines %q of a read without 250 jobs, by jobs: %v; want one, of 250", marked, got)
	}
	if got := logs.jobs(recorded); len(got) != 1 {
		t.Errorf("lines %q after a read with no job to sight: %d; want still the first one only", recorded, len(got))
	}
	if got := logs.jobs("first sightings of jobs a full read no longer found being marked deleted"); !slices.Equal(got, []int64{100, 200, 250}) {
		t.Errorf("progress lines of the 250 marked deleted in batches of 100, by jobs so far: %v; want [100 200 250]", got)
	}
	if n, err := coll.CountDocuments(ctx, bson.D{{Key: FieldDeletedAt, Value: bson.D{{Key: "$exists", Value: true}}}}); err != nil || n != 250 {
		t.Errorf("sightings marked deleted: %d (%v), want 250", n, err)
	}
}
