package firepath

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/cronswap/cronswap/internal/record"
)

// memStore is an in-memory BatchStore with the claim semantics of the
// MongoDB one (a record per slot decides; a forbid lock is taken by the
// winner or the fire is skipped; a cron slot older than the lock's last
// slot is skipped, or recorded missed with its OvertakenReason), for
// testing the runner's side of the fire path. Hooks let a test hold or
// fail a step.
type memStore struct {
	mu      sync.Mutex
	records map[string]*record.RunDoc // by run id
	locks   map[string]*record.LockDoc
	batches []int // sizes of the claim batches, in order

	// beforeClaim, if set, runs at the start of each ClaimBatch (outside the lock).
	beforeClaim func(b record.BatchClaim)
	// beforeEnd, if set, runs at the start of each EndBatch (outside the lock).
	beforeEnd func(ends []record.LeaseEnd)
	// renew, if set, answers RenewBatch instead.
	renew func(ctx context.Context, leases []record.Lease) ([]record.Lease, error)
	// claimErr, if set, is the Err of every fire of the next batches.
	claimErr func() error
	disowned []record.Lease
	// disownCalls are the sizes of the Disown calls, in order.
	disownCalls []int
}

func newMemStore() *memStore {
	return &memStore{records: map[string]*record.RunDoc{}, locks: map[string]*record.LockDoc{}}
}

func (s *memStore) ClaimBatch(_ context.Context, b record.BatchClaim) []record.ClaimOutcome {
	if s.beforeClaim != nil {
		s.beforeClaim(b)
	}
	out := make([]record.ClaimOutcome, len(b.Fires))
	if s.claimErr != nil {
		if err := s.claimErr(); err != nil {
			for i := range out {
				out[i].Err = err
			}
			return out
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.batches = append(s.batches, len(b.Fires))
	for i, f := range b.Fires {
		id := record.RunID(f.JobID, f.Slot)
		if _, ok := s.records[id]; ok {
			out[i].Result = record.AlreadyFired
			continue
		}
		rec := &record.RunDoc{ID: id, JobID: f.JobID, ScheduledAt: f.Slot, Instance: b.Instance, Fence: record.FenceOf(f.Slot),
			Status: record.StatusRunning, StartedAt: b.Now, LeaseUntil: b.Now.Add(b.TTL)}
		s.records[id] = rec
		l := record.Lease{JobID: f.JobID, RunID: id, Instance: b.Instance, Incarnation: b.Incarnation, Slot: f.Slot,
			Fence: record.FenceOf(f.Slot), Overlap: f.Overlap, Until: b.Now.Add(b.TTL)}
		if lk := s.locks[f.JobID]; lk != nil && !f.OffSchedule && lk.LastSlot.After(f.Slot) {
			// A later slot was claimed first: skipped, or recorded missed
			// with the reason the fire names for that.
			rec.Status, rec.Reason = record.StatusSkipped, "a later slot was claimed"
			out[i] = record.ClaimOutcome{Result: record.Skipped, Reason: rec.Reason}
			if f.OvertakenReason != "" {
				rec.Status, rec.Reason, rec.Count = record.StatusMissed, f.OvertakenReason, 1
				out[i] = record.ClaimOutcome{Result: record.Missed, Reason: f.OvertakenReason}
			}
			continue
		}
		if f.Overlap.TakesLock() {
			lk := s.locks[f.JobID]
			if lk != nil && lk.State == record.LockRunning && !lk.LeaseUntil.Before(b.Now) {
				rec.Status = record.StatusSkipped
				out[i] = record.ClaimOutcome{Result: record.Skipped, Holder: lk.Holder, HolderRunID: lk.RunID, Reason: "held"}
				continue
			}
			s.locks[f.JobID] = &record.LockDoc{JobID: f.JobID, State: record.LockRunning, Holder: b.Instance, RunID: id,
				LeaseUntil: b.Now.Add(b.TTL), Fence: l.Fence, LastSlot: f.Slot}
		}
		out[i] = record.ClaimOutcome{Result: record.Acquired, Lease: l}
	}
	return out
}

func (s *memStore) RenewBatch(ctx context.Context, leases []record.Lease, now time.Time, ttl time.Duration) ([]record.Lease, error) {
	if s.renew != nil {
		return s.renew(ctx, leases)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var lost []record.Lease
	for _, l := range leases {
		rec := s.records[l.RunID]
		if rec == nil || rec.Status != record.StatusRunning {
			lost = append(lost, l)
			continue
		}
		rec.LeaseUntil = now.Add(ttl)
		if lk := s.locks[l.JobID]; l.Overlap.TakesLock() && lk != nil && lk.RunID == l.RunID {
			lk.LeaseUntil = now.Add(ttl)
		}
	}
	return lost, nil
}

func (s *memStore) EndBatch(_ context.Context, ends []record.LeaseEnd) []error {
	if s.beforeEnd != nil {
		s.beforeEnd(ends)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	errs := make([]error, len(ends))
	for i, e := range ends {
		rec := s.records[e.Lease.RunID]
		if rec == nil || rec.Status != record.StatusRunning {
			errs[i] = fmt.Errorf("end of %s: %w", e.Lease.RunID, record.ErrLockLost)
			continue
		}
		rec.Status, rec.EndedAt, rec.Error, rec.Reason = e.End.Status, e.End.EndedAt, e.End.Error, e.End.Reason
		if lk := s.locks[e.Lease.JobID]; lk != nil && lk.RunID == e.Lease.RunID {
			lk.State, lk.Holder, lk.RunID, lk.LastOutcome = record.LockFree, "", "", e.End.Status
		}
	}
	return errs
}

func (s *memStore) Disown(_ context.Context, leases []record.Lease, reason string, now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.disowned = append(s.disowned, leases...)
	s.disownCalls = append(s.disownCalls, len(leases))
	for _, l := range leases {
		if rec := s.records[l.RunID]; rec != nil && rec.Status == record.StatusRunning && rec.Instance == l.Instance {
			rec.Status, rec.Reason = record.StatusMissed, reason
		}
	}
	return nil
}

func (s *memStore) SweepExpired(context.Context, time.Time, int) ([]record.RunDoc, error) {
	return nil, nil
}

func (s *memStore) SweepPreviousLives(context.Context, string, string, time.Time) ([]record.RunDoc, error) {
	return nil, nil
}

func (s *memStore) VerifyIndexes(context.Context) (bool, error) { return false, nil }

func (s *memStore) record(id string) (record.RunDoc, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.records[id]
	if !ok {
		return record.RunDoc{}, false
	}
	return *r, true
}

func (s *memStore) batchSizes() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.batches...)
}

// The rest of record.Store: memStore keeps no buffered fires, retries,
// pauses or missed records.

func (s *memStore) TakeBuffered(context.Context, string, record.BufferTake) (*record.BufferedRun, error) {
	return nil, nil
}

func (s *memStore) PendingBuffers(context.Context, time.Time, int) ([]string, error) { return nil, nil }

func (s *memStore) CancelRequests(context.Context, []record.Lease) (map[string]string, error) {
	return nil, nil
}

func (s *memStore) ClaimRetry(_ context.Context, c record.RetryClaim) (record.Lease, error) {
	return record.Lease{}, fmt.Errorf("attempt %d of %s: %w", c.Attempt, c.RunID, record.ErrRetryTaken)
}

func (s *memStore) DueRetries(context.Context, time.Time, int) ([]record.RunDoc, error) {
	return nil, nil
}

func (s *memStore) GiveUpRetry(context.Context, string, int, string, time.Time) error { return nil }

func (s *memStore) Paused(context.Context, string) (record.PauseDoc, bool, error) {
	return record.PauseDoc{}, false, nil
}

func (s *memStore) PauseIfFailing(context.Context, record.PauseCheck) (record.PauseDoc, bool, error) {
	return record.PauseDoc{}, false, nil
}

func (s *memStore) RecordMissed(context.Context, record.MissedRange, record.NextFunc, string, time.Time) ([]record.MissedRange, error) {
	return nil, nil
}

func (s *memStore) DecidedSlots(context.Context, []string, time.Time) (map[string]time.Time, error) {
	return nil, nil
}
