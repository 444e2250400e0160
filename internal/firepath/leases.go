package firepath

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cronswap/cronswap/internal/record"
)

// How the lease keeper paces its work.
const (
	// indexCheckInterval is how old the last check of job_runs' indexes
	// may be when a claim batch goes out; an older one is done again
	// first (one listIndexes), so a replica that was frozen or cut off
	// across a dropped collection finds the index missing before it
	// claims.
	indexCheckInterval = 10 * time.Second
	// renewBatchMax bounds the leases of one renewal request.
	renewBatchMax = 10_000
	// sweepLimit bounds the expired records one sweep abandons.
	sweepLimit = 1000
)

// localLeaseMargin is how long before its lease ends, by the local clock,
// a run that could not renew it is cancelled: room for the clocks of two
// replicas to differ, since a taker reads the lease against its own.
func localLeaseMargin(ttl time.Duration) time.Duration {
	return min(max(ttl/20, 100*time.Millisecond), time.Second)
}

// sweepInterval is how often the keeper abandons the running records of
// dead holders: a third of the lease, between 5 s and a minute.
func sweepInterval(ttl time.Duration) time.Duration {
	return min(max(ttl/3, 5*time.Second), time.Minute)
}

// leaseKeeper holds the leases of the runs this replica is running: it
// renews all of them with one request per collection every TTL/3, cancels
// a run whose lock was lost, and cancels a run at its local lease
// deadline when renewals did not land — without waiting for the
// database. It also sweeps the records of dead holders, turns records of
// unknown claims into missed ones (disown), and checks the indexes.
type leaseKeeper struct {
	r      *Runner
	margin time.Duration

	mu     sync.Mutex
	held   map[string]*heldLease // by run id
	orphan []record.Lease        // claims whose outcome was unknown, to disown
	ends   []record.LeaseEnd     // ends that could not be written yet

	indexMu      sync.Mutex
	indexChecked time.Time // monotonic; zero: never
	checkAgainAt time.Time // after a failed check, not before
	// previousSwept is set once the runs of previous lives of this
	// instance were abandoned (before the first claim that succeeds).
	previousSwept bool
	// sweepSoon asks the loop for a sweep of dead holders' records after
	// a claim batch (a takeover may have happened); lastSweep is when the
	// last one ran.
	sweepSoon chan struct{}
	lastSweep time.Time

	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
}

type heldLease struct {
	// lease's Until is the lease's end as last written: by the
	// acquisition, then by each renewal that landed.
	lease  record.Lease
	cancel context.CancelCauseFunc
	// deadline cancels the run when its lease has run out locally (less
	// grace), at the runner's clock's at; it is pushed back by each
	// renewal that lands.
	deadline *time.Timer
	at       time.Time
	// grace is how long the run may take to stop once cancelled (an exec
	// action's kill_grace): the deadline comes that much earlier, so the
	// run has stopped when the lease runs out.
	grace time.Duration
}

func newLeaseKeeper(r *Runner) *leaseKeeper {
	k := &leaseKeeper{r: r, margin: localLeaseMargin(r.opts.TTL), held: map[string]*heldLease{},
		stop: make(chan struct{}), done: make(chan struct{}), sweepSoon: make(chan struct{}, 1)}
	go k.loop()
	return k
}

// hold starts keeping l while its run runs; cancel stops the run. The
// run's local deadline is l.Until less the margin: the lease counts from
// when its acquisition was sent (l.Until), not from when the answer
// arrived, which may be much later on a slow database.
func (k *leaseKeeper) hold(l record.Lease, cancel context.CancelCauseFunc) {
	k.holdStopping(l, cancel, 0)
}

// holdStopping is hold for a run that may take up to grace to stop once
// cancelled (actions.StopGraceOf): its local deadline is grace earlier.
func (k *leaseKeeper) holdStopping(l record.Lease, cancel context.CancelCauseFunc, grace time.Duration) {
	h := &heldLease{lease: l, cancel: cancel, grace: grace, at: k.localDeadline(l, grace)}
	// Kept before its timer starts: a lease already run out (a claim
	// answered late) fires the timer at once, and ranOut cancels only a
	// lease it finds kept.
	k.mu.Lock()
	defer k.mu.Unlock()
	k.held[l.RunID] = h
	h.deadline = time.AfterFunc(h.at.Sub(k.r.clock.Now()), func() { k.ranOut(h) })
}

// localDeadline is when a run holding l, which takes up to grace to stop,
// is cancelled unless a renewal lands first: the lease's end less the
// margin and grace, by the runner's clock (which wrote l.Until).
func (k *leaseKeeper) localDeadline(l record.Lease, grace time.Duration) time.Time {
	return l.Until.Add(-k.margin - grace)
}

// forget stops keeping a run's lease (its action returned, or a buffered
// fire was admitted) and returns it as last renewed; ok is false when it
// was not kept.
func (k *leaseKeeper) forget(runID string) (l record.Lease, ok bool) {
	k.mu.Lock()
	h := k.held[runID]
	delete(k.held, runID)
	if h != nil {
		l = h.lease
	}
	k.mu.Unlock()
	if h == nil {
		return record.Lease{}, false
	}
	h.deadline.Stop()
	return l, true
}

func (k *leaseKeeper) ranOut(h *heldLease) {
	if !k.holds(h) {
		return
	}
	k.r.log.Warn("lease ran out before a renewal landed; cancelling the action", "job_id", h.lease.JobID,
		"scheduled_at", h.lease.Slot, "run_id", h.lease.RunID)
	h.cancel(fmt.Errorf("%w: renewal failed: the lease ran out by the local clock before a renewal landed", record.ErrLockLost))
}

func (k *leaseKeeper) holds(h *heldLease) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.held[h.lease.RunID] == h
}

// retryEnd keeps an end that could not be written, to write it as soon as
// the database answers: until then the job's lock stays held (up to its
// lease) and its record says running.
func (k *leaseKeeper) retryEnd(e record.LeaseEnd) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.ends) >= maxPendingEnds {
		k.r.log.Warn("too many run ends waiting to be written; the oldest is dropped (its lock frees itself when its lease ends)",
			"job_id", k.ends[0].Lease.JobID, "scheduled_at", k.ends[0].Lease.Slot, "run_id", k.ends[0].Lease.RunID)
		k.ends = k.ends[1:]
	}
	k.ends = append(k.ends, e)
}

// maxPendingEnds bounds the ends waiting to be written again.
const maxPendingEnds = 100_000

// retryPending writes the ends and settles the unknown claims that
// failed before, if any, a batch per request (retryBatchMax), each with
// its own time: a backlog drains a batch at a time instead of failing
// whole, every time, against a database that is slow. It starts no new
// batch after retryInterval, so lease renewals are not held up long.
func (k *leaseKeeper) retryPending() {
	start := time.Now()
	for k.disownSome() && time.Since(start) < retryInterval {
	}
	for k.retryEnds() && time.Since(start) < retryInterval {
	}
}

// retryBatchMax bounds the ends, and the unknown claims, of one request
// of retryPending.
const retryBatchMax = endBatchMax

// retryEnds writes up to retryBatchMax of the ends waiting; it reports
// whether all of them were written and more wait.
func (k *leaseKeeper) retryEnds() bool {
	k.mu.Lock()
	n := min(len(k.ends), retryBatchMax)
	ends := k.ends[:n:n]
	k.ends = k.ends[n:]
	k.mu.Unlock()
	if len(ends) == 0 {
		return false
	}
	ctx, cancel := k.r.opCtx()
	defer cancel()
	var again []record.LeaseEnd
	for i, err := range k.r.opts.Store.EndBatch(ctx, ends) {
		e := ends[i]
		switch {
		case err == nil:
			k.r.log.Info("run end recorded after the database answered again", "job_id", e.Lease.JobID,
				"scheduled_at", e.Lease.Slot, "run_id", e.Lease.RunID, "status", e.End.Status)
		case errors.Is(err, record.ErrLockLost):
			k.r.log.Info("run end recorded on the record another replica had marked abandoned", "job_id", e.Lease.JobID,
				"scheduled_at", e.Lease.Slot, "run_id", e.Lease.RunID)
		default:
			again = append(again, e)
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(again) > 0 {
		k.ends = append(again, k.ends...)
		return false
	}
	return len(k.ends) > 0
}

// retryInterval is how often ends and unknown claims that failed are
// tried again.
const retryInterval = time.Second

// disown queues a claim whose record may have landed unknown to us. At
// most maxPendingEnds wait: past it the oldest is dropped (its record
// stays this replica's until its lease ends, then a sweep marks it
// abandoned, and its lock frees itself).
func (k *leaseKeeper) disown(l record.Lease) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.orphan) >= maxPendingEnds {
		k.r.log.Warn("too many claims whose outcome was lost waiting to be settled; the oldest is dropped (its record is marked abandoned once its lease ends)",
			"job_id", k.orphan[0].JobID, "scheduled_at", k.orphan[0].Slot, "run_id", k.orphan[0].RunID)
		k.orphan = k.orphan[1:]
	}
	k.orphan = append(k.orphan, l)
}

// beforeClaim runs before each claim batch, within the batch's time
// (ctx): the indexes are checked when the last check is older than
// indexCheckInterval (a missing one is recreated), and before the first
// claim the runs of previous lives of this instance are abandoned. A step
// that fails is logged and tried again before the next batch; the claim
// goes out anyway (a database that cannot be asked fails it too).
func (k *leaseKeeper) beforeClaim(ctx context.Context) {
	// One batch does the checks while the others go on; after a failure
	// they wait a second, so an unreachable database does not cost every
	// batch its time.
	if !k.indexMu.TryLock() {
		return
	}
	defer k.indexMu.Unlock()
	if time.Now().Before(k.checkAgainAt) {
		return
	}
	if !k.previousSwept {
		docs, err := k.r.opts.Store.SweepPreviousLives(ctx, k.r.opts.InstanceID, k.r.opts.Incarnation, k.r.clock.Now())
		if err == nil {
			k.previousSwept = true
			for _, d := range docs {
				k.r.runEnded(d.JobID, record.StatusAbandoned)
			}
		} else {
			k.r.log.Warn("could not abandon the runs left by a previous life of this instance", "error", err)
			k.checkAgainAt = time.Now().Add(checkRetry)
			return
		}
	}
	if !k.indexChecked.IsZero() && time.Since(k.indexChecked) < indexCheckInterval {
		return
	}
	recreated, err := k.r.opts.Store.VerifyIndexes(ctx)
	if err != nil {
		k.r.log.Warn("could not check the indexes of the run records", "collection", record.RunsCollection, "error", err)
		k.checkAgainAt = time.Now().Add(checkRetry)
		return
	}
	if recreated {
		k.r.log.Warn("an index of the run records was missing; recreated it before claiming", "collection", record.RunsCollection)
	}
	k.indexChecked = time.Now()
}

// afterClaim asks for a sweep of dead holders' records (none when the
// last sweep is younger than sweepAfterClaims): a claim batch may have taken a lock over from a holder whose
// lease passed, and its record should say so soon.
func (k *leaseKeeper) afterClaim() {
	select {
	case k.sweepSoon <- struct{}{}:
	default:
	}
}

// checkRetry is how long claim batches go without the checks after one
// failed.
const checkRetry = time.Second

// sweepAfterClaims is the least time between two sweeps asked for by claims.
const sweepAfterClaims = 5 * time.Second

func (k *leaseKeeper) loop() {
	defer close(k.done)
	renew := time.NewTicker(max(k.r.opts.TTL/3, time.Millisecond))
	defer renew.Stop()
	sweep := time.NewTicker(sweepInterval(k.r.opts.TTL))
	defer sweep.Stop()
	retry := time.NewTicker(retryInterval)
	defer retry.Stop()
	for {
		select {
		case <-k.stop:
			k.retryPending()
			return
		case <-retry.C:
			k.retryPending()
			k.checkCancels()
		case <-renew.C:
			k.renewAll()
		case <-sweep.C:
			k.sweep()
		case <-k.sweepSoon:
			if time.Since(k.lastSweep) >= sweepAfterClaims {
				k.sweep()
			}
		}
	}
}

// renewAll renews every held lease, a batch per request.
func (k *leaseKeeper) renewAll() {
	k.mu.Lock()
	hs := make([]*heldLease, 0, len(k.held))
	for _, h := range k.held {
		hs = append(hs, h)
	}
	k.mu.Unlock()
	for len(hs) > 0 {
		n := min(len(hs), renewBatchMax)
		k.renew(hs[:n])
		hs = hs[n:]
	}
}

func (k *leaseKeeper) renew(hs []*heldLease) {
	ttl := k.r.opts.TTL
	leases := make([]record.Lease, len(hs))
	for i, h := range hs {
		leases[i] = h.lease
	}
	// The renewal writes lease_until = now + ttl.
	now := k.r.clock.Now()
	// A renewal that lands any time before the local deadline keeps the
	// lease: it may take that long (a slow answer is not a lost lease).
	ctx, cancel := context.WithTimeout(context.Background(), min(ttl-k.margin, k.r.opts.OpTimeout))
	lost, err := k.r.opts.Store.RenewBatch(ctx, leases, now, ttl)
	cancel()
	if err != nil {
		k.r.log.Warn("lease renewal failed; runs whose lease runs out first are cancelled", "runs", len(hs), "error", err)
		return
	}
	gone := map[string]bool{}
	for _, l := range lost {
		gone[l.RunID] = true
	}
	for _, h := range hs {
		if gone[h.lease.RunID] {
			k.r.log.Warn("lock lost while running; cancelling the action", "job_id", h.lease.JobID,
				"scheduled_at", h.lease.Slot, "run_id", h.lease.RunID)
			h.deadline.Stop()
			h.cancel(fmt.Errorf("%w: the run is no longer this replica's", record.ErrLockLost))
			continue
		}
		k.mu.Lock()
		if k.held[h.lease.RunID] == h {
			h.lease.Until = now.Add(ttl)
			h.at = k.localDeadline(h.lease, h.grace)
			h.deadline.Reset(h.at.Sub(k.r.clock.Now()))
		}
		k.mu.Unlock()
	}
}

// disownSome settles up to retryBatchMax unknown claims; it reports
// whether they were settled and more wait.
func (k *leaseKeeper) disownSome() bool {
	k.mu.Lock()
	n := min(len(k.orphan), retryBatchMax)
	orphans := k.orphan[:n:n]
	k.orphan = k.orphan[n:]
	k.mu.Unlock()
	if len(orphans) == 0 {
		return false
	}
	ctx, cancel := k.r.opCtx()
	defer cancel()
	err := k.r.opts.Store.Disown(ctx, orphans, record.MissedUnreachable, k.r.clock.Now())
	k.mu.Lock()
	defer k.mu.Unlock()
	if err != nil {
		k.r.log.Warn("could not settle claims whose outcome was lost; trying again", "claims", len(orphans),
			"waiting", len(orphans)+len(k.orphan), "error", err)
		k.orphan = append(orphans, k.orphan...)
		return false
	}
	return len(k.orphan) > 0
}

// sweep abandons the running records of holders that stopped renewing.
func (k *leaseKeeper) sweep() {
	k.lastSweep = time.Now()
	ctx, cancel := k.r.opCtx()
	defer cancel()
	docs, err := k.r.opts.Store.SweepExpired(ctx, k.r.clock.Now(), sweepLimit)
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			k.r.log.Warn("could not sweep the records of dead holders", "collection", record.RunsCollection, "error", err)
		}
		return
	}
	for _, d := range docs { // the store logged each
		k.r.runEnded(d.JobID, record.StatusAbandoned)
	}
	k.r.drainPending()
}

// close stops the keeper (after the runs ended), settling what it can.
func (k *leaseKeeper) close() {
	if k == nil {
		return
	}
	k.stopOnce.Do(func() { close(k.stop) })
	<-k.done
}
