package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/scaledoc"
	"github.com/cronswap/cronswap/internal/testmongo"
)

// initialExpr is every loaded schedule's expression: January 1st, far from
// any run of the bench, so nothing fires.
const initialExpr = "0 0 1 1 *"

// editExpr is the unique expression edit i sets: minute, hour, day 1–28 and
// month January–October vary with i, so no two edits set the same value, none
// equals initialExpr, and none fires in November or December.
func editExpr(i int) string {
	i++ // i = 0 would be initialExpr
	return fmt.Sprintf("%d %d %d %d *", i%60, (i/60)%24, 1+(i/1440)%28, 1+(i/40320)%10)
}

// maxEdits is how many distinct expressions editExpr yields.
const maxEdits = 60*24*28*10 - 1

// load inserts n schedules with unordered insertMany batches. It returns the
// time taken and the BSON size of the collection's documents.
func load(ctx context.Context, coll *mongo.Collection, n, batch int) (time.Duration, int64, error) {
	start := time.Now()
	now := time.Now().UTC()
	docs := make([]any, 0, batch)
	var size int64
	for k := 0; k < n; k++ {
		doc := bson.D{
			{Key: "_id", Value: scaledoc.ID(k)},
			{Key: "cron_expr", Value: initialExpr},
			{Key: "job", Value: "noop"},
			{Key: "updated_at", Value: now},
		}
		raw, err := bson.Marshal(doc)
		if err != nil {
			return 0, 0, err
		}
		size += int64(len(raw))
		docs = append(docs, doc)
		if len(docs) == batch || k == n-1 {
			if _, err := coll.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false)); err != nil {
				return 0, 0, fmt.Errorf("insert into %s: %w", coll.Name(), err)
			}
			docs = docs[:0]
		}
		if (k+1)%(20*batch) == 0 {
			logf("loaded %d/%d", k+1, n)
		}
	}
	return time.Since(start), size, nil
}

// edit is one measured write and what became of it.
type edit struct {
	job, expr string
	sent, ack time.Time
	acked     bool
	armedLog  time.Time // the daemon's log record time
	armedRecv time.Time // when the bench read that record
	floorRecv time.Time // when the bench's own change stream delivered the event
}

// tracker matches daemon log records and floor events to edits. Every edit is
// registered before its write is sent: its event can arrive before the
// write's acknowledgement does.
type tracker struct {
	mu        sync.Mutex
	edits     []*edit
	byExpr    map[string]*edit
	unarmed   map[string]*edit // job id → edit not yet armed (poll mode matches by id)
	changed   chan struct{}
	unmatched int // floor events or log records that matched no edit
}

func newTracker() *tracker {
	return &tracker{byExpr: map[string]*edit{}, unarmed: map[string]*edit{}, changed: make(chan struct{}, 1)}
}

func (t *tracker) notify() {
	select {
	case t.changed <- struct{}{}:
	default:
	}
}

func (t *tracker) add(job, expr string) *edit {
	e := &edit{job: job, expr: expr, sent: time.Now()}
	t.mu.Lock()
	t.edits = append(t.edits, e)
	t.byExpr[expr] = e
	t.unarmed[job] = e
	t.mu.Unlock()
	return e
}

func (t *tracker) acked(e *edit, at time.Time) {
	t.mu.Lock()
	e.ack, e.acked = at, true
	t.mu.Unlock()
	t.notify()
}

// armedExpr records a "schedule applied" record for expr (change stream mode).
func (t *tracker) armedExpr(expr string, logT, recv time.Time) {
	t.mu.Lock()
	e := t.byExpr[expr]
	if e == nil {
		t.unmatched++
	} else if e.armedLog.IsZero() {
		e.armedLog, e.armedRecv = logT, recv
		delete(t.unarmed, e.job)
	}
	t.mu.Unlock()
	t.notify()
}

// armedJob records a poll diff that changed job id (poll mode). Diffs before
// the first edit (the start-up load) are not edits.
func (t *tracker) armedJob(id string, logT, recv time.Time) {
	t.mu.Lock()
	if len(t.edits) == 0 {
		t.mu.Unlock()
		return
	}
	if e := t.unarmed[id]; e != nil {
		e.armedLog, e.armedRecv = logT, recv
		delete(t.unarmed, id)
	} else {
		t.unmatched++
	}
	t.mu.Unlock()
	t.notify()
}

func (t *tracker) floorEvent(expr string, recv time.Time) {
	t.mu.Lock()
	if e := t.byExpr[expr]; e != nil && e.floorRecv.IsZero() {
		e.floorRecv = recv
	} else {
		t.unmatched++
	}
	t.mu.Unlock()
	t.notify()
}

// wait blocks until cond (called under the lock) holds, ctx ends or the deadline passes.
func (t *tracker) wait(ctx context.Context, deadline time.Time, cond func() bool) bool {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		t.mu.Lock()
		ok := cond()
		t.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-t.changed:
		case <-timer.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// done reports whether every edit is acknowledged, armed and (with floor) seen by the floor stream.
func (t *tracker) doneLocked(floor bool) bool {
	for _, e := range t.edits {
		if !e.acked || e.armedLog.IsZero() || (floor && e.floorRecv.IsZero()) {
			return false
		}
	}
	return true
}

// driveEdits sends edits from..to-1 at rate per second, each to a different
// job, never with more than maxInflight of them unarmed. It returns how many
// edits had to wait for the in-flight bound.
func driveEdits(ctx context.Context, coll *mongo.Collection, t *tracker, o settings, from, to int) (int, error) {
	interval := time.Duration(float64(time.Second) / o.rate)
	stride := strideFor(o.n)
	start := time.Now()
	held := 0
	for i := from; i < to; i++ {
		due := start.Add(time.Duration(i-from) * interval)
		if d := time.Until(due); d > 0 {
			select {
			case <-ctx.Done():
				return held, ctx.Err()
			case <-time.After(d):
			}
		}
		below := func() bool { return len(t.unarmed) < o.maxInflight }
		t.mu.Lock()
		free := below()
		t.mu.Unlock()
		if !free {
			held++
			if !t.wait(ctx, time.Now().Add(2*time.Minute), below) {
				return held, errors.New("edits stopped being armed (in-flight bound never freed within 2m)")
			}
		}
		job := scaledoc.ID(int((int64(i) * int64(stride)) % int64(o.n)))
		e := t.add(job, editExpr(i))
		res, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: job}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "cron_expr", Value: e.expr}, {Key: "updated_at", Value: time.Now().UTC()}}}})
		ack := time.Now()
		if err != nil {
			return held, fmt.Errorf("update %s: %w", job, err)
		}
		if res.MatchedCount != 1 {
			return held, fmt.Errorf("update %s: matched %d documents", job, res.MatchedCount)
		}
		t.acked(e, ack)
	}
	return held, nil
}

// strideFor returns a step coprime to n, so that edit i → job (i·stride mod n)
// visits distinct jobs spread over the collection.
func strideFor(n int) int {
	for _, s := range []int{7919, 7907, 7901, 104729, 1} {
		if gcd(s, n) == 1 {
			return s
		}
	}
	return 1
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// floor is the bench's own change stream on the schedules collection, with
// the daemon's options (fullDocument updateLookup, maxAwaitTime 1 s).
type floor struct {
	client *mongo.Client
	cancel context.CancelFunc
	done   chan error
}

func startFloor(ctx context.Context, uri, database string, t *tracker) (*floor, error) {
	client, err := testmongo.Connect(ctx, uri)
	if err != nil {
		return nil, err
	}
	coll := client.Database(database).Collection("schedules")
	cs, err := coll.Watch(ctx, mongo.Pipeline{},
		options.ChangeStream().SetFullDocument(options.UpdateLookup).SetMaxAwaitTime(time.Second))
	if err != nil {
		_ = client.Disconnect(context.Background())
		return nil, fmt.Errorf("floor: watch %s: %w", coll.Name(), err)
	}
	fctx, cancel := context.WithCancel(context.Background())
	f := &floor{client: client, cancel: cancel, done: make(chan error, 1)}
	go func() {
		for cs.Next(fctx) {
			recv := time.Now()
			v, ok := cs.Current.Lookup("updateDescription", "updatedFields", "cron_expr").StringValueOK()
			if !ok {
				v, _ = cs.Current.Lookup("fullDocument", "cron_expr").StringValueOK()
			}
			t.floorEvent(v, recv)
		}
		err := cs.Err()
		_ = cs.Close(context.Background())
		if fctx.Err() != nil {
			err = nil
		}
		f.done <- err
	}()
	return f, nil
}

// close stops the stream and returns the error that ended it early, if any.
func (f *floor) close() error {
	if f == nil {
		return nil
	}
	f.cancel()
	err := <-f.done
	f.done <- err
	dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = f.client.Disconnect(dctx)
	return err
}
