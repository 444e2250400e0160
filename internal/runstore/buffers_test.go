package runstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/internal/testmongo"
	"github.com/cronswap/cronswap/jobs"
	"github.com/cronswap/cronswap/schedule"
)

func policy(o jobs.Overlap, job string, slot time.Time) record.FireClaim {
	s := dueUnder(job, slot)
	return record.FireClaim{JobID: job, Slot: slot, Overlap: o, Schedule: &s}
}

// dueUnder is a schedule with every field set, as a fire at slot came due
// under it.
func dueUnder(job string, slot time.Time) schedule.Schedule {
	return schedule.Schedule{ID: job, CronExpr: "* * * * * *", Timezone: "Europe/Paris", DST: schedule.DSTPlain,
		Enabled: true, Job: "act", Category: "cat", Args: `{"n":` + slot.Format("05") + `}`,
		UpdatedAt: time.Date(2024, 5, 1, 2, 3, 4, 5_000_000, time.UTC)}
}

func (r replica) take(t *testing.T, job string, o jobs.Overlap, now time.Time) *record.BufferedRun {
	t.Helper()
	run, err := r.TakeBuffered(testCtx(t), job, record.BufferTake{Instance: r.inst, Incarnation: r.inc, Overlap: o, Clock: func() time.Time { return now }, TTL: 10 * time.Second})
	if err != nil {
		t.Fatalf("take buffered %s by %s: %v", job, r.inst, err)
	}
	return run
}

func (r replica) end(t *testing.T, l record.Lease, at time.Time) {
	t.Helper()
	if errs := r.EndBatch(testCtx(t), []record.LeaseEnd{{Lease: l, End: record.RunEnd{Status: record.StatusSucceeded, EndedAt: at}}}); errs[0] != nil {
		t.Fatalf("end %s: %v", l.RunID, errs[0])
	}
}

func (e storeEnv) bufferRunIDs(t *testing.T, job string) []string {
	t.Helper()
	raw, err := e.locks.FindOne(testCtx(t), bson.D{{Key: "_id", Value: job}}).Raw()
	if err != nil {
		t.Fatalf("lock %s: %v", job, err)
	}
	arr, ok := bufferOf(raw)
	if !ok {
		t.Fatalf("lock %s: buffer not an array: %s", job, raw)
	}
	var ids []string
	if arr != nil {
		vals, _ := bson.RawArray(arr).Values()
		for _, v := range vals {
			id, _ := record.LookupString(v.Document(), "run_id")
			ids = append(ids, id)
		}
	}
	return ids
}

// buffer_one: a fire while the lock is held waits on the lock (its record
// buffered, with what it names), a further one is skipped; when the holder
// ends, one taker gets the lock for the buffered fire with its own fence,
// a second taker gets nothing.
func TestClaimBatchBufferOne(t *testing.T) {
	t.Parallel()
	e := newStoreEnv(t)
	a, b, c := e.replica("a", "a1"), e.replica("b", "b1"), e.replica("c", "c1")
	t0, t1, t2 := base, base.Add(time.Second), base.Add(2*time.Second)
	held := a.claimOne(t, policy(jobs.OverlapBufferOne, "j", t0), t0, record.Acquired)
	o := b.claimOne(t, policy(jobs.OverlapBufferOne, "j", t1), t1, record.Buffered)
	if o.HolderRunID != record.RunID("j", t0) || o.Holder != "a" || o.CancelRunID != "" {
		t.Fatalf("buffered outcome %+v: want the holder a's run named, no cancel", o)
	}
	rec := e.rawRun(t, record.RunID("j", t1))
	if st, _ := record.LookupString(rec, "status"); st != record.StatusBuffered {
		t.Fatalf("buffered record %s: want status buffered", rec)
	}
	var kept struct {
		Schedule schedule.Schedule `bson:"schedule"`
	}
	if err := bson.Unmarshal(rec, &kept); err != nil || kept.Schedule != dueUnder("j", t1) {
		t.Fatalf("buffered record %s: want the schedule it came due under kept (%v)", rec, err)
	}
	if got := e.bufferRunIDs(t, "j"); !slices.Equal(got, []string{record.RunID("j", t1)}) {
		t.Fatalf("buffer %v, want the t1 fire", got)
	}
	// A push tried again (its answer lost) does not add the fire twice:
	// the server matches no lock whose buffer already has its run id.
	if res, err := e.locks.UpdateOne(testCtx(t), bson.D{{Key: "_id", Value: "j"},
		{Key: record.LockBufferField + ".run_id", Value: bson.D{{Key: "$ne", Value: record.RunID("j", t1)}}}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "x", Value: 1}}}}); err != nil || res.MatchedCount != 0 {
		t.Fatalf("update of a lock whose buffer has the fire: %+v, %v; want no match", res, err)
	}
	o = c.claimOne(t, policy(jobs.OverlapBufferOne, "j", t2), t2, record.Skipped)
	if st := e.run(t, record.RunID("j", t2)).Status; st != record.StatusSkipped {
		t.Fatalf("third fire recorded %s (%s), want skipped", st, o.Reason)
	}
	// While the holder runs nobody takes the buffered fire.
	if run := c.take(t, "j", jobs.OverlapBufferOne, t2); run != nil {
		t.Fatalf("took %+v while the lock is held", run)
	}
	a.end(t, held.Lease, t2)
	run := c.take(t, "j", jobs.OverlapBufferOne, t2.Add(time.Millisecond))
	if run == nil || run.Lease.RunID != record.RunID("j", t1) || run.Lease.Fence != record.FenceOf(t1) || run.Lease.Instance != "c" {
		t.Fatalf("took %+v, want the t1 fire under c with its fence", run)
	}
	if run.Schedule != dueUnder("j", t1) {
		t.Fatalf("taken fire %+v: want the schedule it came due under", run)
	}
	if run2 := b.take(t, "j", jobs.OverlapBufferOne, t2.Add(time.Millisecond)); run2 != nil {
		t.Fatalf("second taker took %+v", run2)
	}
	r := e.run(t, record.RunID("j", t1))
	if r.Status != record.StatusRunning || r.Instance != "c" || r.Fence != record.FenceOf(t1) {
		t.Fatalf("taken record %+v: want running under c", r)
	}
	l := e.lock(t, "j")
	if l.State != record.LockRunning || l.RunID != record.RunID("j", t1) || l.Holder != "c" || l.Fence != record.FenceOf(t1) {
		t.Fatalf("lock %+v: want held by the t1 run", l)
	}
	if got := e.bufferRunIDs(t, "j"); len(got) != 0 {
		t.Fatalf("buffer %v after the take, want empty", got)
	}
	// A later fire while the buffered one runs is buffered in turn.
	b.claimOne(t, policy(jobs.OverlapBufferOne, "j", base.Add(3*time.Second)), base.Add(3*time.Second), record.Buffered)
}

// buffer_all keeps up to BufferAllLimit fires in slot order and they are
// taken one after another, fences increasing.
func TestClaimBatchBufferAllInOrder(t *testing.T) {
	t.Parallel()
	e := newStoreEnv(t)
	a, b := e.replica("a", "a1"), e.replica("b", "b1")
	held := a.claimOne(t, policy(jobs.OverlapBufferAll, "j", base), base, record.Acquired)
	var want []string
	for i := 1; i <= 4; i++ {
		s := base.Add(time.Duration(i) * time.Second)
		b.claimOne(t, policy(jobs.OverlapBufferAll, "j", s), s, record.Buffered)
		want = append(want, record.RunID("j", s))
	}
	if got := e.bufferRunIDs(t, "j"); !slices.Equal(got, want) {
		t.Fatalf("buffer %v, want %v", got, want)
	}
	// A slot older than the last buffered one is not buffered.
	o := b.claimOne(t, policy(jobs.OverlapBufferAll, "j", base.Add(1500*time.Millisecond)), base.Add(time.Second), record.Skipped)
	if !strings.Contains(o.Reason, "later slot") {
		t.Fatalf("older fire skipped with %q, want a later slot named", o.Reason)
	}
	now := base.Add(5 * time.Second)
	l := held.Lease
	last := l.Fence
	for i, id := range want {
		a.end(t, l, now)
		run := b.take(t, "j", jobs.OverlapBufferAll, now)
		if run == nil || run.Lease.RunID != id || run.Lease.Fence <= last {
			t.Fatalf("take %d: %+v, want %s with a fence above %d", i, run, id, last)
		}
		l, last = run.Lease, run.Lease.Fence
	}
	a.end(t, l, now)
	if run := b.take(t, "j", jobs.OverlapBufferAll, now); run != nil {
		t.Fatalf("took %+v from an empty buffer", run)
	}
}

func TestClaimBatchBufferAllLimit(t *testing.T) {
	t.Parallel()
	e := newStoreEnv(t)
	a := e.replica("a", "a1")
	a.claimOne(t, policy(jobs.OverlapBufferAll, "j", base), base, record.Acquired)
	fires := make([]record.FireClaim, jobs.BufferAllLimit+2)
	for i := range fires {
		fires[i] = policy(jobs.OverlapBufferAll, "j", base.Add(time.Duration(i+1)*time.Second))
	}
	// In batches of ten, the way fires arrive one slot after another.
	buffered, skipped := 0, 0
	for k := 0; k < len(fires); k += 10 {
		for _, o := range a.claim(t, base.Add(time.Second), 10*time.Minute, fires[k:min(k+10, len(fires))]...) {
			switch {
			case o.Err != nil:
				t.Fatal(o.Err)
			case o.Result == record.Buffered:
				buffered++
			case o.Result == record.Skipped:
				skipped++
			default:
				t.Errorf("outcome %+v", o)
			}
		}
	}
	if buffered != jobs.BufferAllLimit || skipped != 2 {
		t.Fatalf("%d buffered, %d skipped; want %d and 2", buffered, skipped, jobs.BufferAllLimit)
	}
	if n := len(e.bufferRunIDs(t, "j")); n != jobs.BufferAllLimit {
		t.Fatalf("buffer holds %d, want %d", n, jobs.BufferAllLimit)
	}
}

// cancel_other: the fire that finds the lock held asks the holder's run to
// stop in the same write that buffers it; CancelRequests tells the holder.
func TestClaimBatchCancelOtherAsksHolder(t *testing.T) {
	t.Parallel()
	e := newStoreEnv(t)
	a, b := e.replica("a", "a1"), e.replica("b", "b1")
	t0, t1 := base, base.Add(time.Second)
	held := a.claimOne(t, policy(jobs.OverlapCancelOther, "j", t0), t0, record.Acquired)
	o := b.claimOne(t, policy(jobs.OverlapCancelOther, "j", t1), t1, record.Buffered)
	if o.CancelRunID != held.Lease.RunID {
		t.Fatalf("outcome %+v: want the cancel of %s", o, held.Lease.RunID)
	}
	asked, err := a.CancelRequests(testCtx(t), []record.Lease{held.Lease})
	if err != nil || asked[held.Lease.RunID] != record.RunID("j", t1) {
		t.Fatalf("cancel requests %v, %v: want %s replaced by the t1 run", asked, err, held.Lease.RunID)
	}
	a.end(t, held.Lease, t1)
	run := a.take(t, "j", jobs.OverlapCancelOther, t1)
	if run == nil || run.Lease.RunID != record.RunID("j", t1) {
		t.Fatalf("took %+v, want the t1 fire", run)
	}
	if asked, _ := a.CancelRequests(testCtx(t), []record.Lease{run.Lease}); len(asked) != 0 {
		t.Fatalf("cancel requests %v for the new run, want none", asked)
	}
}

// A holder that died leaves the buffered fire to whoever takes it after
// the lease; a taker that died between taking the lock and starting the
// record leaves it to the next taker; a fire already decided is removed.
func TestTakeBufferedAfterDeaths(t *testing.T) {
	t.Parallel()
	e := newStoreEnv(t)
	dead, b, c := e.replica("dead", "d1"), e.replica("b", "b1"), e.replica("c", "c1")
	t0, t1, t2 := base, base.Add(time.Second), base.Add(2*time.Second)
	ttl := 10 * time.Second
	dead.claimOne(t, policy(jobs.OverlapBufferAll, "j", t0), t0, record.Acquired)
	b.claimOne(t, policy(jobs.OverlapBufferAll, "j", t1), t1, record.Buffered)
	b.claimOne(t, policy(jobs.OverlapBufferAll, "j", t2), t2, record.Buffered)
	if run := c.take(t, "j", jobs.OverlapBufferAll, t1); run != nil {
		t.Fatalf("took %+v within the holder's lease", run)
	}
	ids, err := c.PendingBuffers(testCtx(t), t0.Add(ttl+time.Second), 10)
	if err != nil || !slices.Equal(ids, []string{"j"}) {
		t.Fatalf("pending buffers %v, %v; want j once the lease passed", ids, err)
	}
	if ids, _ := c.PendingBuffers(testCtx(t), t1, 10); len(ids) != 0 {
		t.Fatalf("pending buffers %v within the lease, want none", ids)
	}
	// The taker dies after taking the lock, before starting the record:
	// simulated by taking the lock for t1 by hand.
	after := t0.Add(ttl + time.Second)
	if _, err := e.locks.UpdateOne(testCtx(t), bson.D{{Key: "_id", Value: "j"}}, bson.D{{Key: "$set", Value: bson.D{
		{Key: "holder", Value: "dead2"}, {Key: "incarnation", Value: "x"}, {Key: "run_id", Value: record.RunID("j", t1)},
		{Key: "fence", Value: record.FenceOf(t1)}, {Key: "lease_until", Value: after}}}}); err != nil {
		t.Fatal(err)
	}
	run := c.take(t, "j", jobs.OverlapBufferAll, after.Add(time.Second))
	if run == nil || run.Lease.RunID != record.RunID("j", t1) {
		t.Fatalf("took %+v, want the t1 fire its taker never started", run)
	}
	// The new taker dies after starting t1: its record is abandoned by
	// the sweep, and the next taker removes it and gets t2.
	later := after.Add(ttl + 2*time.Second)
	if _, err := c.SweepExpired(testCtx(t), later, 10); err != nil {
		t.Fatal(err)
	}
	// ... and died before removing t1 from the buffer.
	entry := func(s time.Time) record.BufferEntry {
		return record.BufferEntry{RunID: record.RunID("j", s), Slot: s, At: s, By: "b"}
	}
	if _, err := e.locks.UpdateOne(testCtx(t), bson.D{{Key: "_id", Value: "j"}}, bson.D{{Key: "$set", Value: bson.D{
		{Key: record.LockBufferField, Value: bson.A{entry(t1), entry(t2)}}}}}); err != nil {
		t.Fatal(err)
	}
	run = b.take(t, "j", jobs.OverlapBufferAll, later)
	if run == nil || run.Lease.RunID != record.RunID("j", t2) {
		t.Fatalf("took %+v, want the t2 fire", run)
	}
	if st := e.run(t, record.RunID("j", t1)).Status; st != record.StatusAbandoned {
		t.Fatalf("t1 record %s, want abandoned", st)
	}
	if got := e.bufferRunIDs(t, "j"); len(got) != 0 {
		t.Fatalf("buffer %v, want empty", got)
	}
}

// Bad buffer contents on a lock document are logged and removed; the job
// goes on.
func TestTakeBufferedBadDocuments(t *testing.T) {
	t.Parallel()
	e := newStoreEnv(t)
	a := e.replica("a", "a1")
	free := bson.D{{Key: "state", Value: record.LockFree}, {Key: "holder", Value: ""}, {Key: "run_id", Value: ""},
		{Key: "fence", Value: int64(0)}, {Key: "last_slot", Value: base}, {Key: "lease_until", Value: base}}
	for id, buf := range map[string]any{
		"not_array": "junk",
		"no_run_id": bson.A{bson.D{{Key: "slot", Value: base}}},
		"number":    bson.A{int32(7)},
	} {
		doc := append(bson.D{{Key: "_id", Value: id}, {Key: record.LockBufferField, Value: buf}}, free...)
		if _, err := e.locks.InsertOne(testCtx(t), doc); err != nil {
			t.Fatal(err)
		}
		if run := a.take(t, id, jobs.OverlapBufferOne, base.Add(time.Second)); run != nil {
			t.Fatalf("%s: took %+v", id, run)
		}
		if got := e.bufferRunIDs(t, id); len(got) != 0 {
			t.Fatalf("%s: buffer %v left, want cleared", id, got)
		}
		a.claimOne(t, policy(jobs.OverlapBufferOne, id, base.Add(time.Second)), base.Add(time.Second), record.Acquired)
	}
}

// A damaged lock with fires waiting is repaired keeping them, and they
// run in order with fences from the records that ran (the buffered
// records' fences are not handed out yet).
func TestRepairKeepsBufferedFires(t *testing.T) {
	t.Parallel()
	e := newStoreEnv(t)
	a, b := e.replica("a", "a1"), e.replica("b", "b1")
	t0, t1, t2, t3 := base, base.Add(time.Second), base.Add(2*time.Second), base.Add(3*time.Second)
	held := a.claimOne(t, policy(jobs.OverlapBufferAll, "j", t0), t0, record.Acquired)
	b.claimOne(t, policy(jobs.OverlapBufferAll, "j", t1), t1, record.Buffered)
	b.claimOne(t, policy(jobs.OverlapBufferAll, "j", t2), t2, record.Buffered)
	a.end(t, held.Lease, t2)
	if _, err := e.locks.UpdateOne(testCtx(t), bson.D{{Key: "_id", Value: "j"}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "fence", Value: "7"}}}}); err != nil {
		t.Fatal(err)
	}
	o := b.claimOne(t, policy(jobs.OverlapBufferAll, "j", t3), t3, record.Buffered)
	if len(o.Repaired) == 0 {
		t.Fatalf("outcome %+v: want the damage repaired", o)
	}
	want := []string{record.RunID("j", t1), record.RunID("j", t2), record.RunID("j", t3)}
	if got := e.bufferRunIDs(t, "j"); !slices.Equal(got, want) {
		t.Fatalf("buffer %v after the repair, want %v", got, want)
	}
	for _, id := range want {
		run := a.take(t, "j", jobs.OverlapBufferAll, t3)
		if run == nil || run.Lease.RunID != id {
			t.Fatalf("took %+v, want %s", run, id)
		}
		a.end(t, run.Lease, t3)
	}
}

// A batch of N fires of buffering jobs whose locks are held costs a
// constant number of commands, whatever N: the claim's insert, lock
// upserts, one find of the held locks, one bulk setting the records
// buffered, one bulk putting the fires on the locks, and one more round
// of upserts and a find telling they are there.
func TestClaimBatchBufferedCommandCount(t *testing.T) {
	t.Parallel()
	var cc commandCounter
	client, err := mongo.Connect(options.Client().ApplyURI(testmongo.Shared(t).URI).SetMonitor(cc.monitor()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	e := newStoreEnvOn(t, client)
	a, b := e.replica("a", "a1"), e.replica("b", "b1")
	const n = 500
	first, second := make([]record.FireClaim, n), make([]record.FireClaim, n)
	for i := range first {
		first[i] = policy(jobs.OverlapBufferAll, fmt.Sprintf("b%d", i), base)
		second[i] = policy(jobs.OverlapBufferAll, fmt.Sprintf("b%d", i), base.Add(time.Second))
	}
	for _, o := range a.claim(t, base, time.Minute, first...) {
		if o.Result != record.Acquired {
			t.Fatalf("%+v", o)
		}
	}
	cc.take()
	for _, o := range b.claim(t, base.Add(time.Second), time.Minute, second...) {
		if o.Result != record.Buffered {
			t.Fatalf("%+v, want buffered", o)
		}
	}
	cmds := cc.take()
	t.Logf("claim of %d fires behind held locks: %v", n, cmds)
	if len(cmds) > 8 {
		t.Errorf("claim of %d buffered fires took %d commands %v, want at most 8", n, len(cmds), cmds)
	}
}

// A buffered record written by an earlier version kept the action, args
// and category only: a taker runs it with those.
func TestBufferedScheduleOfEarlierRecords(t *testing.T) {
	raw, err := bson.Marshal(bson.D{{Key: "_id", Value: "j@x"}, {Key: record.RunBufferedActionField, Value: "act"},
		{Key: record.RunBufferedArgsField, Value: `{"a":1}`}, {Key: record.RunBufferedCategoryField, Value: "cat"}})
	if err != nil {
		t.Fatal(err)
	}
	want := schedule.Schedule{ID: "j", Enabled: true, Job: "act", Args: `{"a":1}`, Category: "cat"}
	if got := bufferedSchedule("j", raw); got != want {
		t.Fatalf("schedule of an earlier record = %+v, want %+v", got, want)
	}
}
