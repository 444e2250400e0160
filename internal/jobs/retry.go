package jobs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// StatusRetrying marks the record of a slot whose last attempt failed and
// whose next attempt is due at its retry_at (RetryPolicy): the slot is
// still undecided, and any replica may run the next attempt from then on.
const StatusRetrying = "retrying"

// Fields of job_runs that retries own (docs/retry.md).
const (
	// FieldAttempt is the record's current (or last) attempt, 1 the first.
	FieldAttempt = "attempt"
	// FieldAttempts lists every ended attempt of the slot, oldest first.
	FieldAttempts = "attempts"
	// FieldRetryAt is when the next attempt is due, while the record is
	// StatusRetrying (lease_until says the same, for the index).
	FieldRetryAt = "retry_at"
)

// Limits and defaults of RetryPolicy.
const (
	// MaxRetryAttempts bounds RetryPolicy.Attempts. Attempt n of a slot
	// has the fence FenceOf(slot)+n-1, and slots are whole seconds
	// (1000 ms) apart, so every attempt's fence stays below the next
	// slot's.
	MaxRetryAttempts = 100
	// DefaultRetryBackoff is the wait before the second attempt when
	// RetryPolicy.Backoff is 0.
	DefaultRetryBackoff = 30 * time.Second
	// DefaultRetryMaxBackoff caps the doubling waits when
	// RetryPolicy.MaxBackoff is 0.
	DefaultRetryMaxBackoff = 10 * time.Minute
)

// RetryPolicy says how a failed run of an action is tried again: as
// further attempts of the same (job, slot), the same run id and record,
// each with a new, higher fence, after a wait that doubles from Backoff up
// to MaxBackoff. Only a run that ended failed is retried (not one
// abandoned, skipped or missed). The zero policy does not retry.
type RetryPolicy struct {
	// Attempts is the most attempts a slot gets, the first included; 0
	// or 1: no retry.
	Attempts int `yaml:"attempts"`
	// Backoff is the wait after the first failed attempt; 0:
	// DefaultRetryBackoff.
	Backoff time.Duration `yaml:"backoff"`
	// MaxBackoff caps the wait, which doubles after each failed attempt;
	// 0: DefaultRetryMaxBackoff.
	MaxBackoff time.Duration `yaml:"max_backoff"`
}

// Enabled reports whether p retries at all.
func (p RetryPolicy) Enabled() bool { return p.Attempts > 1 }

// Validate reports what is wrong with p, without naming the job.
func (p RetryPolicy) Validate() error {
	switch {
	case p.Attempts < 0 || p.Attempts > MaxRetryAttempts:
		return fmt.Errorf("retry.attempts %d: must be between 0 and %d (the first attempt included; 0 or 1: no retry)",
			p.Attempts, MaxRetryAttempts)
	case p.Backoff < 0:
		return fmt.Errorf("retry.backoff %s: must not be negative (0: %s)", p.Backoff, DefaultRetryBackoff)
	case p.MaxBackoff < 0:
		return fmt.Errorf("retry.max_backoff %s: must not be negative (0: %s)", p.MaxBackoff, DefaultRetryMaxBackoff)
	case p.Backoff > 0 && p.MaxBackoff > 0 && p.MaxBackoff < p.Backoff:
		return fmt.Errorf("retry.max_backoff %s: must not be shorter than retry.backoff %s", p.MaxBackoff, p.Backoff)
	}
	return nil
}

// Delay is the wait after attempt failed (1 the first) before the next:
// Backoff doubled failed-1 times, at most MaxBackoff.
func (p RetryPolicy) Delay(failed int) time.Duration {
	backoff, maxBackoff := p.Backoff, p.MaxBackoff
	if backoff <= 0 {
		backoff = DefaultRetryBackoff
	}
	if maxBackoff <= 0 {
		maxBackoff = max(DefaultRetryMaxBackoff, backoff)
	}
	d := backoff
	for i := 1; i < failed && d < maxBackoff; i++ {
		d *= 2
	}
	return min(d, maxBackoff)
}

// AttemptFence is the fence of attempt (1 the first) of the run at slot:
// FenceOf(slot)+attempt-1, increasing with each attempt and below the
// fence of any later slot (MaxRetryAttempts).
func AttemptFence(slot time.Time, attempt int) int64 {
	return FenceOf(slot) + int64(max(attempt, 1)-1)
}

// AttemptDoc is one entry of a run record's attempts list: one ended
// attempt of the slot.
type AttemptDoc struct {
	Attempt   int       `bson:"attempt" json:"attempt"`
	Fence     int64     `bson:"fence" json:"fence"`
	Instance  string    `bson:"instance" json:"instance"`
	StartedAt time.Time `bson:"started_at,omitempty" json:"started_at,omitzero"`
	EndedAt   time.Time `bson:"ended_at" json:"ended_at"`
	// Status is what the attempt ended with: StatusRetrying when another
	// attempt followed it, else the slot's final status.
	Status   string `bson:"status" json:"status"`
	Error    string `bson:"error,omitempty" json:"error,omitempty"`
	ExitCode *int   `bson:"exit_code,omitempty" json:"exit_code,omitempty"`
}

// ErrRetryTaken is returned by ClaimRetry when the attempt is not (or no
// longer) to be claimed: another replica claimed it, or the record is not
// retrying at that attempt any more.
var ErrRetryTaken = errors.New("retry already claimed")

// ErrRetryLockLost is returned by ClaimRetry when the slot's run no longer
// held the job's lock when its attempt was claimed (taken over after its
// lease, released by an operator): the attempt is recorded failed, not run.
var ErrRetryLockLost = errors.New("the job's lock was lost during the backoff")

// ErrRetryReplaced is returned by ClaimRetry when a cancel_other fire asked
// the slot's run to stop during the backoff: the slot is recorded
// abandoned (reason ReasonReplaced) and the lock freed for the fire
// replacing it, which the caller then takes up.
var ErrRetryReplaced = errors.New("replaced during the backoff")

// attemptEndUpdate is the end of an attempt of a job that retries (set
// holds the end's fields): the attempt number, the entry of the attempts
// list and, when another attempt follows, when it is due — also as
// lease_until, so that the (status, lease_until) index finds due retries.
func (s *MongoStore) attemptEndUpdate(e LeaseEnd, set bson.D) bson.D {
	end := e.End
	entry := bson.D{{Key: "attempt", Value: e.Lease.Attempt}, {Key: "fence", Value: e.Lease.Fence},
		{Key: "instance", Value: e.Lease.Instance}}
	if !end.StartedAt.IsZero() {
		entry = append(entry, bson.E{Key: "started_at", Value: end.StartedAt})
	}
	entry = append(entry, bson.E{Key: "ended_at", Value: end.EndedAt}, bson.E{Key: "status", Value: end.Status})
	if end.Error != "" {
		entry = append(entry, bson.E{Key: "error", Value: end.Error})
	}
	if end.ExitCode != nil {
		entry = append(entry, bson.E{Key: "exit_code", Value: *end.ExitCode})
	}
	set = append(set, bson.E{Key: FieldAttempt, Value: e.Lease.Attempt})
	if end.Status == StatusRetrying {
		set = append(set, bson.E{Key: FieldRetryAt, Value: end.RetryAt}, bson.E{Key: "lease_until", Value: end.RetryAt})
	}
	return bson.D{{Key: "$set", Value: set}, {Key: "$push", Value: bson.D{{Key: FieldAttempts, Value: entry}}}}
}

// holdForRetry is the lock write of an attempt that ended retrying under
// a policy that takes the lock: the slot's run keeps the lock (fenced by
// run_id) until the next attempt is due plus a lease, so later slots are
// skipped meanwhile as they are while a run lasts, and fences stay in
// slot order.
func holdForRetry(e LeaseEnd) mongo.WriteModel {
	l, end := e.Lease, e.End
	return mongo.NewUpdateOneModel().
		SetFilter(bson.D{{Key: "_id", Value: l.JobID}, {Key: "run_id", Value: l.RunID}, {Key: "state", Value: LockRunning}}).
		SetUpdate(bson.D{{Key: "$set", Value: bson.D{
			{Key: "lease_until", Value: end.HoldUntil}, {Key: "last_outcome", Value: StatusRetrying},
			{Key: "last_ended_at", Value: end.EndedAt}, {Key: "updated_at", Value: end.EndedAt},
		}}})
}

// RetryClaim asks for the next attempt of a slot whose record is
// StatusRetrying at attempt Attempt-1.
type RetryClaim struct {
	JobID string
	Slot  time.Time
	// RunID is the record's _id; empty means RunID(JobID, Slot), a cron
	// slot's.
	RunID   string
	Attempt int
	Overlap Overlap
	// Instance and Incarnation name this replica and process.
	Instance    string
	Incarnation string
	// Now is the claimer's clock; TTL the lease length.
	Now time.Time
	TTL time.Duration
}

// RetryStore is the part of a store that runs retries: a BatchStore that
// implements it lets the runner retry failed runs (RetryPolicy).
type RetryStore interface {
	// ClaimRetry takes attempt c.Attempt of the slot: one conditional
	// update of its record (retrying at the attempt before → running at
	// this one, with its fence), the arbiter of the attempt across
	// replicas, and under a policy that takes the lock one update of the
	// job's lock, still held by the slot's run (fenced by run_id), to this
	// replica and the attempt's fence. ErrRetryTaken: not this replica's to
	// run; ErrRetryLockLost: the attempt was recorded failed instead; any
	// other error: nothing is known to be claimed.
	ClaimRetry(ctx context.Context, c RetryClaim) (Lease, error)
	// DueRetries returns up to limit records retrying whose next attempt
	// was due before before.
	DueRetries(ctx context.Context, before time.Time, limit int) ([]RunDoc, error)
	// GiveUpRetry ends a retrying record that is not to be retried (its
	// action no longer retries, or its retry state is damaged) as failed
	// with why; attempt, when positive, is the attempt it must be at.
	GiveUpRetry(ctx context.Context, runID string, attempt int, why string, now time.Time) error
}

// ClaimRetry implements RetryStore.
func (s *MongoStore) ClaimRetry(ctx context.Context, c RetryClaim) (Lease, error) {
	runID := c.RunID
	if runID == "" {
		runID = RunID(c.JobID, c.Slot)
	}
	l := Lease{JobID: c.JobID, Slot: c.Slot.UTC(), Instance: c.Instance, Incarnation: c.Incarnation,
		RunID: runID, Fence: AttemptFence(c.Slot, c.Attempt), Overlap: c.Overlap, Attempt: c.Attempt}
	until := c.Now.Add(c.TTL)
	filter := bson.D{{Key: "_id", Value: runID}, {Key: "status", Value: StatusRetrying}, {Key: FieldAttempt, Value: c.Attempt - 1}}
	update := bson.D{
		{Key: "$set", Value: bson.D{
			{Key: "status", Value: StatusRunning}, {Key: FieldAttempt, Value: c.Attempt}, {Key: "fence", Value: l.Fence},
			{Key: "instance", Value: c.Instance}, {Key: "incarnation", Value: c.Incarnation},
			{Key: "started_at", Value: c.Now}, {Key: "lease_until", Value: until},
			{Key: "expire_at", Value: until.Add(s.retention)},
		}},
		{Key: "$unset", Value: bson.D{{Key: "ended_at", Value: ""}, {Key: "error", Value: ""}, {Key: "exit_code", Value: ""},
			{Key: "stdout", Value: ""}, {Key: "stderr", Value: ""}, {Key: FieldRetryAt, Value: ""}}},
	}
	for wait := retryFirst; ; wait = min(2*wait, retryMax) {
		res, err := s.runs.UpdateOne(ctx, filter, update)
		if err == nil && res.MatchedCount == 0 {
			return Lease{}, fmt.Errorf("attempt %d of run %s: %w", c.Attempt, runID, ErrRetryTaken)
		}
		if err == nil {
			break
		}
		if !transient(err) {
			return Lease{}, fmt.Errorf("claim attempt %d of run %s in %s: %w", c.Attempt, runID, s.runs.Name(), err)
		}
		// The answer was lost: the record tells whether the update landed,
		// and whether it may be sent again (still retrying, at the attempt
		// before).
		mine, pending, rerr := s.retryLanded(ctx, l)
		switch {
		case rerr != nil:
			return Lease{}, fmt.Errorf("claim attempt %d of run %s in %s: %w (read back: %w)", c.Attempt, runID, s.runs.Name(), err, rerr)
		case mine:
		case !pending:
			return Lease{}, fmt.Errorf("attempt %d of run %s: %w", c.Attempt, runID, ErrRetryTaken)
		case !sleepCtx(ctx, wait):
			return Lease{}, fmt.Errorf("claim attempt %d of run %s in %s: %w", c.Attempt, runID, s.runs.Name(), err)
		default:
			continue
		}
		break
	}
	if !c.Overlap.takesLock() {
		return l, nil
	}
	var matched int64
	err := retrying(ctx, func() error {
		res, err := s.locks.UpdateOne(ctx,
			bson.D{{Key: "_id", Value: c.JobID}, {Key: "run_id", Value: runID}, {Key: "state", Value: LockRunning},
				{Key: LockCancelField + ".run_id", Value: bson.D{{Key: "$ne", Value: runID}}}},
			bson.D{{Key: "$set", Value: bson.D{
				{Key: "holder", Value: c.Instance}, {Key: "incarnation", Value: c.Incarnation},
				{Key: "fence", Value: l.Fence}, {Key: "acquired_at", Value: c.Now},
				{Key: "lease_until", Value: until}, {Key: "updated_at", Value: c.Now},
			}}})
		if res != nil {
			matched = res.MatchedCount
		}
		return err
	})
	if err == nil && matched == 1 {
		return l, nil
	}
	if err == nil {
		if by, replaced := s.replacedInBackoff(ctx, c.JobID, runID); replaced {
			return Lease{}, s.endReplaced(ctx, c, runID, by)
		}
	}
	// The lock is not the slot's run's any more (or could not be
	// written): the attempt is recorded failed and not run, or left to
	// the sweep when even that cannot be written.
	why := ErrRetryLockLost.Error() + ": taken over after its lease or released by an operator"
	if err != nil {
		why = "could not take the job's lock for the attempt: " + err.Error()
	}
	_, uerr := s.runs.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: runID}, {Key: "status", Value: StatusRunning}, {Key: FieldAttempt, Value: c.Attempt},
			{Key: "instance", Value: c.Instance}, {Key: "incarnation", Value: c.Incarnation}},
		bson.D{{Key: "$set", Value: withNotice(bson.D{{Key: "status", Value: StatusFailed}, {Key: "ended_at", Value: c.Now},
			{Key: "error", Value: why}, {Key: "expire_at", Value: c.Now.Add(s.retention)}}, StatusFailed, "", c.Now)},
			{Key: "$unset", Value: bson.D{{Key: "lease_until", Value: ""}}}})
	if uerr != nil {
		return Lease{}, fmt.Errorf("attempt %d of run %s: %w; recording it failed: %w", c.Attempt, runID, ErrRetryLockLost, uerr)
	}
	s.noticed()
	return Lease{}, fmt.Errorf("attempt %d of run %s: %w", c.Attempt, runID, ErrRetryLockLost)
}

// retryLanded reads l's record back after a lost answer: mine, it is
// running at l's attempt under this instance and incarnation; pending, it
// is still retrying at the attempt before (the claim may be sent again).
func (s *MongoStore) retryLanded(ctx context.Context, l Lease) (mine, pending bool, err error) {
	var d RunDoc
	err = retrying(ctx, func() error {
		d = RunDoc{}
		return s.runs.FindOne(ctx, bson.D{{Key: "_id", Value: l.RunID}}).Decode(&d)
	})
	if errors.Is(err, mongo.ErrNoDocuments) {
		return false, false, nil
	}
	if err != nil {
		return false, false, err
	}
	mine = d.Status == StatusRunning && d.Attempt == l.Attempt && d.Instance == l.Instance && d.Incarnation == l.Incarnation
	return mine, d.Status == StatusRetrying && d.Attempt == l.Attempt-1, nil
}

// DueRetries implements RetryStore: one find on {status: retrying,
// lease_until < before} (index RunsLeaseIndex; lease_until is retry_at
// on such a record).
func (s *MongoStore) DueRetries(ctx context.Context, before time.Time, limit int) ([]RunDoc, error) {
	cur, err := s.runs.Find(ctx,
		bson.D{{Key: "status", Value: StatusRetrying}, {Key: "lease_until", Value: bson.D{{Key: "$lt", Value: before}}}},
		options.Find().SetLimit(int64(limit)).SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: "job_id", Value: 1},
			{Key: "scheduled_at", Value: 1}, {Key: "status", Value: 1}, {Key: FieldAttempt, Value: 1}, {Key: FieldRetryAt, Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("find due retries in %s: %w", s.runs.Name(), err)
	}
	var docs []RunDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, fmt.Errorf("find due retries in %s: %w", s.runs.Name(), err)
	}
	return docs, nil
}

// GiveUpRetry implements RetryStore: one conditional update of the record
// (still retrying, at attempt when positive) to failed.
func (s *MongoStore) GiveUpRetry(ctx context.Context, runID string, attempt int, why string, now time.Time) error {
	filter := bson.D{{Key: "_id", Value: runID}, {Key: "status", Value: StatusRetrying}}
	if attempt > 0 {
		filter = append(filter, bson.E{Key: FieldAttempt, Value: attempt})
	}
	res, err := s.runs.UpdateOne(ctx, filter, bson.D{
		{Key: "$set", Value: withNotice(bson.D{{Key: "status", Value: StatusFailed}, {Key: "error", Value: why},
			{Key: "ended_at", Value: now}, {Key: "expire_at", Value: now.Add(s.retention)}}, StatusFailed, "", now)},
		{Key: "$unset", Value: bson.D{{Key: "lease_until", Value: ""}, {Key: FieldRetryAt, Value: ""}}}})
	if err != nil {
		return fmt.Errorf("give up the retry of run %s in %s: %w", runID, s.runs.Name(), err)
	}
	if res.ModifiedCount > 0 {
		s.noticed()
	}
	return nil
}

// replacedInBackoff reports whether the lock of jobID, still the run's,
// asks it to stop (cancel_other), and by which run.
func (s *MongoStore) replacedInBackoff(ctx context.Context, jobID, runID string) (by string, replaced bool) {
	raw, err := s.locks.FindOne(ctx, bson.D{{Key: "_id", Value: jobID}, {Key: "run_id", Value: runID}}).Raw()
	if err != nil {
		return "", false
	}
	cancel, by := cancelBy(raw)
	return by, cancel == runID
}

// endReplaced records the slot of c abandoned, replaced by run by, and
// frees the lock for the replacing fire (which takes it up from the
// buffer). It returns ErrRetryReplaced, or what failed.
func (s *MongoStore) endReplaced(ctx context.Context, c RetryClaim, runID, by string) error {
	why := fmt.Sprintf("%s by run %s (cancel_other); attempt %d not run", ErrRetryReplaced.Error(), by, c.Attempt)
	_, err := s.runs.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: runID}, {Key: "status", Value: StatusRunning}, {Key: FieldAttempt, Value: c.Attempt},
			{Key: "instance", Value: c.Instance}, {Key: "incarnation", Value: c.Incarnation}},
		bson.D{{Key: "$set", Value: withNotice(bson.D{{Key: "status", Value: StatusAbandoned}, {Key: "ended_at", Value: c.Now},
			{Key: "abandoned_at", Value: c.Now}, {Key: "error", Value: why}, {Key: "reason", Value: ReasonReplaced},
			// Notified as failed: the slot failed, and no attempt will
			// follow (a run replaced while it was running is not notified).
			{Key: "expire_at", Value: c.Now.Add(s.retention)}}, StatusFailed, "", c.Now)},
			{Key: "$unset", Value: bson.D{{Key: "lease_until", Value: ""}}}})
	if err != nil {
		return fmt.Errorf("attempt %d of run %s: %w; recording it abandoned: %w", c.Attempt, runID, ErrRetryReplaced, err)
	}
	s.noticed()
	_, err = s.locks.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: c.JobID}, {Key: "run_id", Value: runID}, {Key: "state", Value: LockRunning}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "state", Value: LockFree}, {Key: "holder", Value: ""}, {Key: "incarnation", Value: ""},
			{Key: "run_id", Value: ""}, {Key: "lease_until", Value: c.Now}, {Key: "last_outcome", Value: StatusAbandoned},
			{Key: "last_ended_at", Value: c.Now}, {Key: "updated_at", Value: c.Now}}}})
	if err != nil {
		return fmt.Errorf("attempt %d of run %s: %w; freeing the lock of %s: %w", c.Attempt, runID, ErrRetryReplaced, c.JobID, err)
	}
	return fmt.Errorf("attempt %d of run %s: %w", c.Attempt, runID, ErrRetryReplaced)
}
