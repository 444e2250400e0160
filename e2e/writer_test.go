package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/internal/faultproxy"
)

// tickJobs is a jobs: section with one cheap action, "tick", that the
// writer's documents name.
const tickJobs = `
  tick:
    exec: ["true"]
`

// writer makes random edits to the schedules collection: insert, update of
// the expression, delete, and enable/disable, over a fixed pool of ids.
type writer struct {
	coll  *mongo.Collection
	rng   *rand.Rand
	ids   []string
	exprs []string

	mu     sync.Mutex
	counts map[string]int
	errs   int
}

func newWriter(coll *mongo.Collection, seed uint64, pool int, exprs []string) *writer {
	w := &writer{coll: coll, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), exprs: exprs, counts: map[string]int{}}
	for i := range pool {
		w.ids = append(w.ids, fmt.Sprintf("job%02d", i))
	}
	return w
}

// quietExprs never fire during a test; firingExprs fire every few seconds.
var (
	quietExprs  = []string{"0 9 * * *", "30 2 * * *", "@daily", "0 */6 * * *", "15 3 * * 1-5", "0 0 1 * *", "CRON_TZ=Asia/Seoul 0 9 * * *"}
	firingExprs = []string{"*/5 * * * * *", "*/10 * * * * *", "@every 4s", "*/15 * * * * *"}
)

// edit makes one random edit and reports its kind.
func (w *writer) edit(ctx context.Context) (string, error) {
	id := w.ids[w.rng.IntN(len(w.ids))]
	expr := w.exprs[w.rng.IntN(len(w.exprs))]
	filter := bson.D{{Key: "_id", Value: id}}
	var kind string
	var err error
	switch op := w.rng.IntN(10); {
	case op < 3:
		kind = "insert"
		_, err = w.coll.InsertOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "cron_expr", Value: expr},
			{Key: "job", Value: "tick"}, {Key: "updated_at", Value: time.Now()}})
		if mongo.IsDuplicateKeyError(err) {
			kind = "update"
			_, err = w.coll.UpdateOne(ctx, filter, bson.D{{Key: "$set", Value: bson.D{
				{Key: "cron_expr", Value: expr}, {Key: "updated_at", Value: time.Now()}}}})
		}
	case op < 6:
		kind = "update"
		_, err = w.coll.UpdateOne(ctx, filter, bson.D{{Key: "$set", Value: bson.D{
			{Key: "cron_expr", Value: expr}, {Key: "updated_at", Value: time.Now()}}}})
	case op < 8:
		kind = "enable_disable"
		_, err = w.coll.UpdateOne(ctx, filter, bson.D{{Key: "$set", Value: bson.D{
			{Key: "enabled", Value: w.rng.IntN(2) == 0}, {Key: "updated_at", Value: time.Now()}}}})
	default:
		kind = "delete"
		_, err = w.coll.DeleteOne(ctx, filter)
	}
	w.mu.Lock()
	if err != nil {
		w.errs++
	} else {
		w.counts[kind]++
	}
	w.mu.Unlock()
	return kind, err
}

// editTimeout bounds one edit of the writer.
const editTimeout = 10 * time.Second

// run makes up to n edits (n <= 0: until ctx ends), one every interval.
// Ending ctx stops it between edits: the edit in flight is not cancelled
// but completes (within editTimeout), so that when run returns every edit
// it made has been answered and the collection no longer changes. A
// cancelled edit would only be abandoned by the client: the server may
// still apply it after run returned, after a check has read the collection.
func (w *writer) run(ctx context.Context, n int, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for i := 0; n <= 0 || i < n; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if ctx.Err() != nil {
			return // both were ready: the stop wins
		}
		ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), editTimeout)
		_, _ = w.edit(ectx)
		cancel()
	}
}

func (w *writer) total() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, c := range w.counts {
		n += c
	}
	return n
}

func (w *writer) summary() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	keys := make([]string, 0, len(w.counts))
	for k := range w.counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%d ", k, w.counts[k])
	}
	fmt.Fprintf(&b, "failed=%d", w.errs)
	return b.String()
}

// jobState is what the daemon must hold for one document: its expression
// and whether it is enabled.
type jobState struct {
	Expr    string
	Enabled bool
}

// collectionState reads every document of the schedules collection.
func collectionState(t *testing.T, db *mongo.Database) map[string]jobState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cur, err := db.Collection("schedules").Find(ctx, bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	var docs []struct {
		ID       string `bson:"_id"`
		CronExpr string `bson:"cron_expr"`
		Enabled  *bool  `bson:"enabled"`
	}
	if err := cur.All(ctx, &docs); err != nil {
		t.Fatal(err)
	}
	out := map[string]jobState{}
	for _, d := range docs {
		out[d.ID] = jobState{Expr: d.CronExpr, Enabled: d.Enabled == nil || *d.Enabled}
	}
	return out
}

// apiState is /api/schedules in the same form; a job with an error counts
// as a difference.
func apiState(list map[string]apiSchedule) map[string]jobState {
	out := map[string]jobState{}
	for id, s := range list {
		st := jobState{Expr: s.CronExpr, Enabled: s.Enabled}
		if s.LastError != "" || s.Armed != s.Enabled {
			st.Expr += " (error: " + s.LastError + ", armed=" + strconv.FormatBool(s.Armed) + ")"
		}
		out[id] = st
	}
	return out
}

// stateDiff lists the ids whose state differs between want and got.
func stateDiff(want, got map[string]jobState) []string {
	var diff []string
	for id, w := range want {
		if g, ok := got[id]; !ok || g != w {
			diff = append(diff, fmt.Sprintf("%s: want %+v, have %+v (present %v)", id, w, g, ok))
		}
	}
	for id, g := range got {
		if _, ok := want[id]; !ok {
			diff = append(diff, fmt.Sprintf("%s: not in the collection, have %+v", id, g))
		}
	}
	sort.Strings(diff)
	return diff
}

// waitStateExact waits until the daemon's /api/schedules equals the
// collection, job for job.
func waitStateExact(t *testing.T, d *daemon, db *mongo.Database, timeout time.Duration) {
	t.Helper()
	var diff []string
	deadline := time.Now().Add(timeout)
	for {
		diff = stateDiff(collectionState(t, db), apiState(d.schedules()))
		if len(diff) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s /api/schedules still differs from the collection:\n%s", timeout, strings.Join(diff, "\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// historyLostReply is what mongod answers when a resume point fell off the oplog.
var historyLostReply = faultproxy.ErrorReply{
	Code: 286, CodeName: "ChangeStreamHistoryLost",
	Errmsg: "Executor error during getMore :: caused by :: Resume of change stream was not possible, as the resume point may no longer be in the oplog.",
	Labels: []string{"NonResumableChangeStreamError"},
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// countLogs counts the daemon's log records matching.
func countLogs(d *daemon, match func(logLine) bool) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, l := range d.lines {
		if match(l) {
			n++
		}
	}
	return n
}

func isReconnectLog(l logLine) bool {
	return l.str("msg") == "reconnecting after error" && l["delay"] != nil && l["attempt"] != nil
}
