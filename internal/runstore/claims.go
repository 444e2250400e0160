package runstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/topology"

	"github.com/cronswap/cronswap/internal/record"
)

// maxClaimRounds bounds the rounds of one step of a claim batch that are
// not caused by an unreachable database (which is retried while the
// context allows): each round either decides a fire or changed the
// document it looked at (a repair, a lock freed in between), so a few
// suffice.
const maxClaimRounds = 5

// reasonDuplicateFire answers a fire that appears twice in one batch.
const reasonDuplicateFire = "the same fire twice in one batch"

// claimer is one ClaimBatch call in progress.
type claimer struct {
	s      *Store
	b      record.BatchClaim
	out    []record.ClaimOutcome
	leases []record.Lease
	// recorded marks the fires whose running record is this replica's
	// (confirmed written); notSent those whose every insert so far failed
	// before being sent (so nothing of theirs can have landed).
	recorded []bool
	notSent  []bool
	// pushed marks the fires put on their lock's buffer by this call
	// (the write sent; whether it matched is read back).
	pushed []bool
	// takeover says, by fire, whether its lock writes take the lock over
	// from a run no longer live (as the lock was last read), and from
	// which; without, they take the lock only while it is free.
	takeover []takeover
	// overtaken says, by fire, what overtook a fire recorded missed
	// (Result Missed): the missed record's error.
	overtaken map[int]string
	// nonce identifies this call; each fire's token is the nonce and its
	// index.
	nonce string
}

// ClaimBatch implements record.Store. Commands per batch, when nothing is
// contended or lost: [find job_runs for the Check fires] + insertMany
// job_runs + (for the fires won whose policy takes the lock) one bulkWrite
// on job_locks. A fire whose lock is held costs one find of the held locks
// and one bulkWrite turning their records skipped, for all such fires; a
// fire whose lock is held by a run no longer live (past its lease, or a
// previous incarnation's) costs that find and one more bulkWrite on
// job_locks taking such locks over, for all such fires: the outcome then
// says TakenOver rather than Acquired.
func (s *Store) ClaimBatch(ctx context.Context, b record.BatchClaim) []record.ClaimOutcome {
	c := &claimer{s: s, b: b, out: make([]record.ClaimOutcome, len(b.Fires)),
		leases: make([]record.Lease, len(b.Fires)), recorded: make([]bool, len(b.Fires)),
		notSent: make([]bool, len(b.Fires)), pushed: make([]bool, len(b.Fires)), takeover: make([]takeover, len(b.Fires)),
		nonce: claimNonce()}
	seen := make(map[string]bool, len(b.Fires))
	var todo []int
	for i, f := range b.Fires {
		slot := f.Slot.UTC()
		c.leases[i] = record.Lease{JobID: f.JobID, Slot: slot, Instance: b.Instance, Incarnation: b.Incarnation,
			RunID: record.RunID(f.JobID, slot), Fence: record.FenceOf(slot), Overlap: f.Overlap,
			Token: c.nonce + "." + strconv.Itoa(i), Until: b.Now.Add(b.TTL)}
		if f.OffSchedule {
			c.leases[i].RunID, c.leases[i].Fence, c.leases[i].OffSchedule = f.RunID, f.Fence, true
		}
		if seen[c.leases[i].RunID] {
			c.out[i] = record.ClaimOutcome{Result: record.AlreadyFired, Reason: reasonDuplicateFire}
			continue
		}
		seen[c.leases[i].RunID] = true
		todo = append(todo, i)
	}
	todo = c.check(ctx, todo)
	todo = c.skipExcluded(ctx, todo)
	won := c.insert(ctx, todo)
	// Every fire won moves its job's last slot (a policy taking the lock
	// also takes it): a slot older than one already claimed is not run,
	// even when the records that would say so are gone (a dropped job_runs).
	c.lock(ctx, won)
	c.closeUnrun(ctx)
	return c.out
}

// newToken returns a random token for one acquisition (Lease.Token).
func newToken() string { return claimNonce() }

// claimNonce returns a random id for one ClaimBatch call.
func claimNonce() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// runKey is the (job, slot) of a record, to match records read back: the
// slot in milliseconds, as the database stores and compares it (the unique
// (job_id, scheduled_at) index).
type runKey struct {
	job  string
	slot int64
}

func keyOf(l record.Lease) runKey { return runKey{l.JobID, l.Slot.UnixMilli()} }

// check answers the Check fires already recorded (one find for all of
// them) and returns the fires left to insert.
func (c *claimer) check(ctx context.Context, todo []int) []int {
	var checks []int
	for _, i := range todo {
		if c.b.Fires[i].Check {
			checks = append(checks, i)
		}
	}
	if len(checks) == 0 {
		return todo
	}
	found, err := c.readRuns(ctx, checks, false)
	if err != nil {
		for _, i := range checks {
			c.out[i].Err = c.errf(i, "look for the record", fmt.Errorf("%w: %w", record.ErrUnreachable, err))
		}
	}
	var left []int
	for _, i := range todo {
		switch {
		case !c.b.Fires[i].Check:
			left = append(left, i)
		case err != nil:
		case found[i] != nil:
			c.out[i] = record.ClaimOutcome{Result: record.AlreadyFired, Reason: recordedReason(found[i])}
		default:
			left = append(left, i)
		}
	}
	return left
}

// runSeen is a record read back: enough to tell whose it is.
type runSeen struct {
	Claim       string    `bson:"claim"`
	ID          string    `bson:"_id"`
	JobID       string    `bson:"job_id"`
	ScheduledAt time.Time `bson:"scheduled_at"`
	Instance    string    `bson:"instance"`
	Incarnation string    `bson:"incarnation"`
	Status      string    `bson:"status"`
}

func recordedReason(r *runSeen) string {
	return fmt.Sprintf("slot recorded %s by %s (%s)", r.Status, r.Instance, r.ID)
}

// readRuns reads back the records of the fires idx by _id, and with
// bySlot, for those not found so, by (job, slot) (a missed record of the
// slot, or another off-schedule run of it, has another _id), retrying
// while ctx allows. found[i] is the record of fire i — its own, else the
// one record of its (job, slot) — nil when there is none. Several fires of
// one batch may share a (job, slot) (off-schedule runs with their own run
// ids): a record of the slot answers each of them that has none of its own.
func (c *claimer) readRuns(ctx context.Context, idx []int, bySlot bool) (map[int]*runSeen, error) {
	ids := make(bson.A, 0, len(idx))
	byKey := make(map[runKey][]int, len(idx))
	byID := make(map[string]int, len(idx))
	for _, i := range idx {
		l := c.leases[i]
		ids = append(ids, l.RunID)
		byKey[keyOf(l)] = append(byKey[keyOf(l)], i)
		byID[l.RunID] = i
	}
	found := make(map[int]*runSeen, len(idx))
	// By _id first: the fire's own record, found through the _id index.
	if err := c.findRuns(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}}, byID, byKey, found); err != nil {
		return nil, err
	}
	if !bySlot || len(found) == len(idx) {
		return found, nil
	}
	// Then, for the rest, any record of the slot (a missed record has
	// another _id), through the unique (job_id, scheduled_at) index.
	jobs, slots := bson.A{}, bson.A{}
	jobSeen, slotSeen := map[string]bool{}, map[int64]bool{}
	for _, i := range idx {
		if found[i] != nil {
			continue
		}
		l := c.leases[i]
		if !jobSeen[l.JobID] {
			jobSeen[l.JobID] = true
			jobs = append(jobs, l.JobID)
		}
		if !slotSeen[l.Slot.UnixMilli()] {
			slotSeen[l.Slot.UnixMilli()] = true
			slots = append(slots, l.Slot)
		}
	}
	filter := bson.D{{Key: "job_id", Value: bson.D{{Key: "$in", Value: jobs}}}, {Key: "scheduled_at", Value: bson.D{{Key: "$in", Value: slots}}}}
	if err := c.findRuns(ctx, filter, byID, byKey, found); err != nil {
		return nil, err
	}
	return found, nil
}

// findRuns reads the records matching filter (one find, retried while
// ctx allows) into found: a record goes to the fire whose run id it has,
// and to every fire of its (job, slot) (an off-schedule run's record may
// have another run id, or another replica's); a record under the fire's
// own id wins over another of the same slot.
func (c *claimer) findRuns(ctx context.Context, filter bson.D, byID map[string]int, byKey map[runKey][]int, found map[int]*runSeen) error {
	proj := options.Find().SetProjection(bson.D{{Key: "job_id", Value: 1}, {Key: "scheduled_at", Value: 1},
		{Key: "instance", Value: 1}, {Key: "incarnation", Value: 1}, {Key: "status", Value: 1}, {Key: "claim", Value: 1}})
	var docs []runSeen
	err := retrying(ctx, func() error {
		docs = docs[:0]
		cur, err := c.s.runs.Find(ctx, filter, proj)
		if err != nil {
			return err
		}
		return cur.All(ctx, &docs)
	})
	if err != nil {
		return fmt.Errorf("read back records in %s: %w", c.s.runs.Name(), err)
	}
	for k := range docs {
		d := &docs[k]
		if i, ok := byID[d.ID]; ok {
			found[i] = d
		}
		// Records of other jobs at one of the slots match no key.
		for _, i := range byKey[runKey{d.JobID, d.ScheduledAt.UnixMilli()}] {
			if prev := found[i]; prev == nil || prev.ID != c.leases[i].RunID {
				found[i] = d
			}
		}
	}
	return nil
}

// mine reports whether r is the running record this ClaimBatch inserted
// for fire i.
func (c *claimer) mine(i int, r *runSeen) bool {
	return r.ID == c.leases[i].RunID && r.Instance == c.b.Instance && r.Incarnation == c.b.Incarnation &&
		r.Claim == c.leases[i].Token
}

// insert writes the running records of the fires todo with one unordered
// insertMany and returns the fires whose record is this replica's. A
// duplicate key means another record of the fire exists: whose it is is
// read back (it may be this replica's own, written by a try whose answer
// was lost, or by the driver's retry of it). Outcomes lost on the way are
// read back and the records not there inserted again, while ctx allows.
func (c *claimer) insert(ctx context.Context, todo []int) (won []int) {
	wait := retryFirst
	dupRounds := 0
	first := make(map[int]bool, len(todo))
	for _, i := range todo {
		first[i] = true
	}
	for len(todo) > 0 {
		docs := make([]any, len(todo))
		for k, i := range todo {
			l := c.leases[i]
			status := record.StatusRunning
			if l.Overlap.TakesLock() {
				status = record.StatusClaiming // running once the lock is taken
			}
			// The record's claim is the acquisition's token: it tells a
			// record this very claim wrote (by a try whose answer was lost,
			// or by the driver's own retry of it) from any other, and every
			// later write of the run matches it.
			docs[k] = record.RunDoc{ID: l.RunID, JobID: l.JobID, ScheduledAt: l.Slot, Instance: l.Instance,
				Incarnation: l.Incarnation, Fence: l.Fence, Status: status, StartedAt: c.b.Now,
				LeaseUntil: c.b.Now.Add(c.b.TTL), ExpireAt: c.b.Now.Add(c.s.retention), Claim: l.Token}
		}
		_, err := c.s.runs.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
		sp := splitInserts(todo, err)
		wholeErr, lastErr, maybe := sp.whole, sp.last, sp.look
		for _, i := range todo {
			c.notSent[i] = (first[i] || c.notSent[i]) && wholeErr != nil && notSent(wholeErr)
			first[i] = false
		}
		for _, i := range sp.inserted {
			c.recorded[i] = true
			won = append(won, i)
		}
		for i, we := range sp.refused {
			c.out[i].Err = c.errf(i, "record the run", we)
		}
		todo = nil
		if len(maybe) == 0 {
			break
		}
		if wholeErr != nil {
			if !sleepCtx(ctx, wait) {
				for _, i := range maybe {
					c.unknown(i, "record the run", wholeErr)
				}
				break
			}
			wait = min(2*wait, retryMax)
		} else {
			dupRounds++
		}
		found, err := c.readRuns(ctx, maybe, true)
		if err != nil {
			for _, i := range maybe {
				c.unknown(i, "record the run", err)
			}
			break
		}
		for _, i := range maybe {
			r := found[i]
			switch {
			case r == nil && wholeErr != nil && !transient(wholeErr):
				c.out[i].Err = c.errf(i, "record the run", wholeErr) // refused, and not there
			case r == nil && dupRounds > maxClaimRounds:
				c.out[i].Err = c.errf(i, "record the run", fmt.Errorf("duplicate key but no record to be read: %w", lastErr))
			case r == nil:
				todo = append(todo, i) // not there: try again
			case c.mine(i, r) && (r.Status == record.StatusRunning || r.Status == record.StatusClaiming):
				c.recorded[i] = true
				won = append(won, i)
			default:
				c.out[i] = record.ClaimOutcome{Result: record.AlreadyFired, Reason: recordedReason(r)}
			}
		}
	}
	return won
}

// unknown answers fire i with no decision: the database could not be
// asked or its answer was lost. Unless the step is the insert and err says
// the command was never sent (no server could be selected), this
// replica's record may have landed: ErrOutcomeUnknown, and the lease is
// filled in for Disown.
func (c *claimer) unknown(i int, step string, err error) {
	if err == nil {
		err = errors.New("no answer")
	}
	if !c.recorded[i] && c.notSent[i] && notSent(err) {
		c.out[i] = record.ClaimOutcome{Err: c.errf(i, step, fmt.Errorf("%w: %w", record.ErrUnreachable, err))}
		return
	}
	c.out[i] = record.ClaimOutcome{Lease: c.leases[i],
		Err: c.errf(i, step, fmt.Errorf("%w: %w: %w", record.ErrUnreachable, record.ErrOutcomeUnknown, err))}
}

// notSent reports whether err says a command never left the client: no
// server could be selected (the context ended first, or none answered).
func notSent(err error) bool {
	var sse topology.ServerSelectionError
	return errors.As(err, &sse)
}

func (c *claimer) errf(i int, step string, err error) error {
	l := c.leases[i]
	return fmt.Errorf("claim %s at %s: %s: %w", l.JobID, l.Slot.Format(time.RFC3339Nano), step, err)
}

// lockFilter matches the lock of fire i when the fire may take it: the
// slot is later than the job's last, the document is sane (state known,
// integer fence: anything else is damage, repaired first), and the lock is
// free, or, once it was read held by a run no longer live, held past its
// lease or by a previous incarnation of this instance (holderFilter).
func (c *claimer) lockFilter(i int) bson.D {
	l := c.leases[i]
	if c.b.Fires[i].OffSchedule {
		return c.offScheduleFilter(i)
	}
	if !l.Overlap.TakesLock() {
		// Only the slot: later than the job's last, on a sane document.
		return append(bson.D{
			{Key: "_id", Value: l.JobID},
			{Key: "last_slot", Value: bson.D{{Key: "$lt", Value: l.Slot}}},
			{Key: "state", Value: bson.D{{Key: "$in", Value: bson.A{record.LockFree, record.LockRunning}}}},
			{Key: "fence", Value: bson.D{{Key: "$type", Value: bson.A{"int", "long"}}, {Key: "$gte", Value: 0}}},
		}, runsBelow(c.b.Fires[i].MaxRuns)...)
	}
	f := append(bson.D{
		{Key: "_id", Value: l.JobID},
		{Key: "last_slot", Value: bson.D{{Key: "$lt", Value: l.Slot}}},
		{Key: "fence", Value: bson.D{{Key: "$type", Value: bson.A{"int", "long"}}, {Key: "$gte", Value: 0}}},
	}, c.holderFilter(i)...)
	if l.Overlap.Buffers() {
		// Fires already waiting for the lock go first.
		f = append(f, bufferEmpty())
	}
	return append(f, runsBelow(c.b.Fires[i].MaxRuns)...)
}

// takeover is a fire's lock writes taking the lock over (on) from the run
// runID of holder, no longer live when the lock was read.
type takeover struct {
	on            bool
	holder, runID string
}

// holderFilter is the lock filter's terms on the lock's holder, for a fire
// whose policy takes the lock: free — the first write of every fire, and
// what a free lock, the common case, matches at once — or, once the lock
// was read held by a run no longer live (c.takeover), held past its lease
// or by a previous incarnation of this instance. Either matches a sane
// state only. Telling the two apart is what lets the outcome say
// TakenOver: a bulkWrite does not say which documents its updates matched.
func (c *claimer) holderFilter(i int) bson.D {
	if !c.takeover[i].on {
		return bson.D{{Key: "state", Value: record.LockFree}}
	}
	return bson.D{
		{Key: "state", Value: record.LockRunning},
		{Key: "$or", Value: bson.A{
			bson.D{{Key: "lease_until", Value: bson.D{{Key: "$lt", Value: c.b.Now}}}},
			bson.D{{Key: "holder", Value: c.b.Instance}, {Key: "incarnation", Value: bson.D{{Key: "$ne", Value: c.b.Incarnation}}}},
		}},
	}
}

// won answers fire i, whose lock write landed: Acquired, or TakenOver
// when the write took the lock over.
func (c *claimer) won(i int, repaired []string) record.ClaimOutcome {
	o := record.ClaimOutcome{Result: record.Acquired, Lease: c.leases[i], Repaired: repaired}
	if t := c.takeover[i]; t.on && c.leases[i].Overlap.TakesLock() {
		o.Result, o.Holder, o.HolderRunID = record.TakenOver, t.holder, t.runID
	}
	return o
}

// runsBelow is the lock filter term of a cron slot under max_runs: the
// job's run count below it (absent counts as 0). A count that is not a
// number matches too: the $inc of the same write then fails, and the
// document is read back and repaired as damaged.
func runsBelow(maxRuns int) bson.D {
	if maxRuns <= 0 {
		return nil
	}
	return bson.D{{Key: record.LockRunsField, Value: bson.D{{Key: "$not", Value: bson.D{{Key: "$gte", Value: maxRuns}}}}}}
}

// countRun is the update term that counts a cron slot's start in the
// job's run count (LockRunsField), whatever its policy: the claim's own
// conditional write, so it counts once across replicas.
func countRun() bson.E {
	return bson.E{Key: "$inc", Value: bson.D{{Key: record.LockRunsField, Value: 1}}}
}

func (c *claimer) lockUpdate(i int) bson.D {
	l := c.leases[i]
	if c.b.Fires[i].OffSchedule {
		return c.offScheduleUpdate(i)
	}
	if !l.Overlap.TakesLock() {
		// A job without a lock document gets a free one.
		return bson.D{
			{Key: "$set", Value: bson.D{{Key: "updated_at", Value: c.b.Now}}},
			{Key: "$max", Value: bson.D{{Key: "last_slot", Value: l.Slot}}},
			{Key: "$setOnInsert", Value: bson.D{
				{Key: "state", Value: record.LockFree}, {Key: "holder", Value: ""}, {Key: "run_id", Value: ""},
				{Key: "acquired_at", Value: time.Time{}}, {Key: "lease_until", Value: c.b.Now}, {Key: "fence", Value: int64(0)},
			}},
			countRun(),
		}
	}
	return bson.D{
		{Key: "$set", Value: bson.D{
			{Key: "state", Value: record.LockRunning},
			{Key: "holder", Value: l.Instance},
			{Key: "incarnation", Value: l.Incarnation},
			{Key: "run_id", Value: l.RunID},
			{Key: "claim", Value: l.Token},
			{Key: "acquired_at", Value: c.b.Now},
			{Key: "lease_until", Value: c.b.Now.Add(c.b.TTL)},
			{Key: "fence", Value: l.Fence},
			{Key: "updated_at", Value: c.b.Now},
		}},
		{Key: "$max", Value: bson.D{{Key: "last_slot", Value: l.Slot}}},
		countRun(),
	}
}

// lock takes the locks of the fires todo (their records are this
// replica's) with one unordered bulkWrite of conditional upserts: an
// upsert whose filter does not match an existing document fails with a
// duplicate key on _id, and those locks are read back (one find) to tell
// held (skipped), a later slot claimed (skipped), damaged (repaired, tried
// again) or changed in between (tried again). Outcomes lost on the way are
// read back by run_id.
func (c *claimer) lock(ctx context.Context, todo []int) {
	repaired := map[int][]string{}
	var lastErr error
	wait := retryFirst
	rounds := 0
	// reread holds off-schedule fires whose push onto the lock's buffer
	// was sent: they are only read back (taking the lock for one could
	// run it beside a taker of the buffer that already started it).
	var reread []int
	for len(todo) > 0 || len(reread) > 0 {
		models := make([]mongo.WriteModel, len(todo))
		for k, i := range todo {
			models[k] = mongo.NewUpdateOneModel().SetFilter(c.lockFilter(i)).SetUpdate(c.lockUpdate(i)).SetUpsert(true)
		}
		var err error
		if len(models) > 0 {
			_, err = c.s.locks.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
		}
		perOp, wholeErr := splitBulkError(err)
		look := reread
		reread = nil
		for k, i := range todo {
			we, failed := perOp[k]
			switch {
			case wholeErr != nil:
				lastErr = wholeErr
				look = append(look, i)
			case !failed:
				c.out[i] = c.won(i, repaired[i])
			default:
				// 11000: the filter did not match; another code: the
				// server refused the update (a damaged document?).
				if we.Code != 11000 {
					lastErr = we
				}
				look = append(look, i)
			}
		}
		todo = nil
		if len(look) == 0 {
			break
		}
		if wholeErr != nil {
			if !sleepCtx(ctx, wait) {
				for _, i := range look {
					c.unknown(i, "take the lock", wholeErr)
				}
				break
			}
			wait = min(2*wait, retryMax)
		} else {
			rounds++
		}
		raws, err := c.readLocks(ctx, look)
		if err != nil {
			for _, i := range look {
				c.unknown(i, "take the lock", err)
			}
			break
		}
		var pushing []toBuffer
		for _, i := range look {
			l := c.leases[i]
			raw := raws[l.JobID]
			if raw == nil {
				c.takeover[i] = takeover{}
				todo = append(todo, i) // no document: the upsert creates it
				continue
			}
			v := record.InspectLock(raw, c.b.Now, c.b.TTL)
			switch d := c.decide(ctx, i, v); d.Step {
			case record.ClaimAgain:
				c.takeover[i] = takeover{on: d.TakeOver, holder: d.Holder, runID: d.HolderRunID}
				if d.Fence != 0 {
					// Its record gets the fence when it is set running
					// (closeUnrun).
					c.leases[i].Fence = d.Fence
				}
				c.pushed[i] = false // a push that did not land
				todo = append(todo, i)
			case record.ClaimRepair:
				c.takeover[i] = takeover{} // read again after the repair
				done, err := c.s.repair(ctx, l.JobID, l.RunID, raw, v, c.b.Now)
				switch {
				case err != nil && ctx.Err() != nil:
					c.unknown(i, "repair the lock", err)
				case err != nil:
					lastErr = err
					todo = append(todo, i)
				default:
					if done {
						repaired[i] = append(repaired[i], v.Damage...)
					}
					todo = append(todo, i)
				}
			case record.ClaimAcquired:
				c.out[i] = c.won(i, repaired[i]) // the last write landed, its answer lost
			case record.ClaimWaiting:
				c.out[i] = record.ClaimOutcome{Result: record.Buffered, Lease: c.leases[i], Repaired: repaired[i],
					Reason: d.Reason, Holder: d.Holder, HolderRunID: d.HolderRunID, CancelRunID: d.CancelRunID}
			case record.ClaimSkip:
				c.out[i] = record.ClaimOutcome{Result: record.Skipped, Holder: d.Holder, HolderRunID: d.HolderRunID,
					Reason: d.Reason, Repaired: repaired[i], MaxRunsReached: d.MaxRunsReached}
				if d.MissedReason != "" {
					c.out[i] = record.ClaimOutcome{Result: record.Missed, Reason: d.MissedReason, Repaired: repaired[i]}
					if c.overtaken == nil {
						c.overtaken = map[int]string{}
					}
					c.overtaken[i] = d.Reason
				}
			case record.ClaimPush:
				pushing = append(pushing, toBuffer{i: i, d: d})
			}
		}
		for _, i := range c.bufferAll(ctx, pushing) {
			if c.b.Fires[i].OffSchedule {
				reread = append(reread, i)
			} else {
				todo = append(todo, i)
			}
		}
		if rounds >= maxClaimRounds && len(todo)+len(reread) > 0 {
			for _, i := range append(todo, reread...) {
				why := lastErr
				if why == nil {
					why = errors.New("lock document kept changing")
				}
				c.out[i] = record.ClaimOutcome{Err: c.errf(i, "take the lock", why)}
			}
			break
		}
	}
}

// decide is record.DecideClaim for fire i against its lock as read (v),
// with the one read it may ask for: whether a taker of buffered fires
// already started the fire (its push landed and it left the buffer before
// the lock was read back).
func (c *claimer) decide(ctx context.Context, i int, v record.LockState) record.ClaimDecision {
	f := record.ClaimFire{Lease: c.leases[i], MayWait: !c.b.Fires[i].OffSchedule || c.b.Fires[i].Buffer,
		Pushed: c.pushed[i], Now: c.b.Now}
	if !c.b.Fires[i].OffSchedule {
		f.MaxRuns, f.OvertakenReason = c.b.Fires[i].MaxRuns, c.b.Fires[i].OvertakenReason
	}
	d := record.DecideClaim(v, f)
	if d.Step == record.ClaimLookTaken {
		f.Taken = record.No
		if c.takenFromBuffer(ctx, i) {
			f.Taken = record.Yes
		}
		d = record.DecideClaim(v, f)
	}
	return d
}

// readLocks reads the lock documents of the fires idx (one find).
func (c *claimer) readLocks(ctx context.Context, idx []int) (map[string]bson.Raw, error) {
	ids := make(bson.A, 0, len(idx))
	seen := map[string]bool{}
	for _, i := range idx {
		if id := c.leases[i].JobID; !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	out := make(map[string]bson.Raw, len(ids))
	err := retrying(ctx, func() error {
		cur, err := c.s.locks.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}})
		if err != nil {
			return err
		}
		defer cur.Close(ctx)
		for cur.Next(ctx) {
			id, _ := cur.Current.Lookup("_id").StringValueOK()
			out[id] = append(bson.Raw(nil), cur.Current...)
		}
		return cur.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("read locks in %s: %w", c.s.locks.Name(), err)
	}
	return out, nil
}

// closeUnrun turns the running records of fires this replica won but will
// not run into skipped records (one bulkWrite for all): the lock was held,
// or taking it failed with the server's refusal; a fire overtaken by a
// later slot that names a reason for it (record.Missed) into a missed
// record of its slot. Fires whose outcome is unknown keep their record for
// Disown.
func (c *claimer) closeUnrun(ctx context.Context) {
	var models []mongo.WriteModel
	var which, promoted []int
	for i := range c.out {
		o := &c.out[i]
		l := c.leases[i]
		if !c.recorded[i] || errors.Is(o.Err, record.ErrOutcomeUnknown) {
			continue
		}
		if o.Result == record.Buffered {
			continue // its record was set buffered before its fire was put on the lock
		}
		// A lock-taking fire's record is running only once this write
		// says so (or once a taker of buffered fires started it: not ours
		// to touch any more).
		statuses := bson.A{record.StatusRunning}
		if l.Overlap.TakesLock() {
			statuses = bson.A{record.StatusClaiming, record.StatusBuffered}
		}
		mine := bson.D{{Key: "_id", Value: l.RunID}, {Key: "status", Value: bson.D{{Key: "$in", Value: statuses}}},
			{Key: "claim", Value: l.Token}}
		if o.Result.Won() {
			if l.Overlap.TakesLock() {
				// The lock is taken: the record says running from now on
				// (an off-schedule run's with the fence it took the lock with).
				set := bson.D{{Key: "status", Value: record.StatusRunning}}
				if l.OffSchedule {
					set = append(set, bson.E{Key: "fence", Value: l.Fence})
				}
				models = append(models, mongo.NewUpdateOneModel().SetFilter(mine).
					SetUpdate(bson.D{{Key: "$set", Value: set},
						{Key: "$unset", Value: bson.D{{Key: "reason", Value: ""}}}})) // a wait on the lock that ended
				promoted = append(promoted, i)
			}
			continue
		}
		if o.Result == record.Missed {
			// Overtaken by a later slot: a missed record of its one slot.
			set := append(c.s.missedFields(l.Slot, 1, o.Reason, c.b.Now, "", ""),
				bson.E{Key: "error", Value: c.overtaken[i]}, bson.E{Key: "fence", Value: int64(0)})
			models = append(models, mongo.NewUpdateOneModel().SetFilter(mine).SetUpdate(missedUpdate(set)))
			which = append(which, i)
			continue
		}
		reason := o.Reason
		if o.Err != nil {
			reason = "claim error: " + o.Err.Error()
		}
		models = append(models, mongo.NewUpdateOneModel().
			SetFilter(mine).
			SetUpdate(bson.D{
				{Key: "$set", Value: bson.D{
					{Key: "status", Value: record.StatusSkipped},
					{Key: "ended_at", Value: c.b.Now},
					{Key: "reason", Value: reason},
					{Key: "error", Value: reason},
					{Key: "fence", Value: int64(0)},
					{Key: "expire_at", Value: c.b.Now.Add(c.s.retention)},
				}},
				{Key: "$unset", Value: bson.D{{Key: "lease_until", Value: ""}}},
			}))
		which = append(which, i)
	}
	if len(models) == 0 {
		return
	}
	err := retrying(ctx, func() error {
		_, err := c.s.runs.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
		return err
	})
	if err != nil {
		// A won fire whose record could not be set running does not run:
		// its outcome is unknown (Disown turns the record missed and frees
		// its lock). Skipped records stay claiming under this replica;
		// their lease passes and SweepExpired marks them abandoned.
		for _, i := range promoted {
			c.unknown(i, "record the run as running", err)
		}
		jobs := make([]string, 0, len(which))
		for _, i := range which {
			jobs = append(jobs, c.leases[i].RunID)
		}
		c.s.log.Warn("could not record skipped or missed fires", "instance_id", c.b.Instance, "runs", strings.Join(jobs, ","), "error", err)
	}
}
