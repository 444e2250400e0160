package jobs

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// memStore is an in-memory BatchStore with the claim semantics of the
// MongoDB one (a record per slot decides; a forbid lock is taken by the
// winner or the fire is skipped), for testing the runner's side of the
// fire path. Hooks let a test hold or fail a step.
type memStore struct {
	mu      sync.Mutex
	records map[string]*RunDoc // by run id
	locks   map[string]*LockDoc
	batches []int // sizes of the claim batches, in order

	// beforeClaim, if set, runs at the start of each ClaimBatch (outside the lock).
	beforeClaim func(b BatchClaim)
	// beforeEnd, if set, runs at the start of each EndBatch (outside the lock).
	beforeEnd func(ends []LeaseEnd)
	// renew, if set, answers RenewBatch instead.
	renew func(ctx context.Context, leases []Lease) ([]Lease, error)
	// claimErr, if set, is the Err of every fire of the next batches.
	claimErr func() error
	disowned []Lease
	// disownCalls are the sizes of the Disown calls, in order.
	disownCalls []int
}

func newMemStore() *memStore {
	return &memStore{records: map[string]*RunDoc{}, locks: map[string]*LockDoc{}}
}

func (s *memStore) ClaimBatch(_ context.Context, b BatchClaim) []ClaimOutcome {
	if s.beforeClaim != nil {
		s.beforeClaim(b)
	}
	out := make([]ClaimOutcome, len(b.Fires))
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
		id := RunID(f.JobID, f.Slot)
		if _, ok := s.records[id]; ok {
			out[i].Result = AlreadyFired
			continue
		}
		rec := &RunDoc{ID: id, JobID: f.JobID, ScheduledAt: f.Slot, Instance: b.Instance, Fence: FenceOf(f.Slot),
			Status: StatusRunning, StartedAt: b.Now, LeaseUntil: b.Now.Add(b.TTL)}
		s.records[id] = rec
		l := Lease{JobID: f.JobID, RunID: id, Instance: b.Instance, Incarnation: b.Incarnation, Slot: f.Slot,
			Fence: FenceOf(f.Slot), Overlap: f.Overlap}
		if f.Overlap.takesLock() {
			lk := s.locks[f.JobID]
			if lk != nil && lk.State == LockRunning && !lk.LeaseUntil.Before(b.Now) {
				rec.Status = StatusSkipped
				out[i] = ClaimOutcome{Result: Skipped, Holder: lk.Holder, HolderRunID: lk.RunID, Reason: "held"}
				continue
			}
			s.locks[f.JobID] = &LockDoc{JobID: f.JobID, State: LockRunning, Holder: b.Instance, RunID: id,
				LeaseUntil: b.Now.Add(b.TTL), Fence: l.Fence, LastSlot: f.Slot}
		}
		out[i] = ClaimOutcome{Result: Acquired, Lease: l}
	}
	return out
}

func (s *memStore) RenewBatch(ctx context.Context, leases []Lease, now time.Time, ttl time.Duration) ([]Lease, error) {
	if s.renew != nil {
		return s.renew(ctx, leases)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var lost []Lease
	for _, l := range leases {
		rec := s.records[l.RunID]
		if rec == nil || rec.Status != StatusRunning {
			lost = append(lost, l)
			continue
		}
		rec.LeaseUntil = now.Add(ttl)
		if lk := s.locks[l.JobID]; l.Overlap.takesLock() && lk != nil && lk.RunID == l.RunID {
			lk.LeaseUntil = now.Add(ttl)
		}
	}
	return lost, nil
}

func (s *memStore) EndBatch(_ context.Context, ends []LeaseEnd) []error {
	if s.beforeEnd != nil {
		s.beforeEnd(ends)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	errs := make([]error, len(ends))
	for i, e := range ends {
		rec := s.records[e.Lease.RunID]
		if rec == nil || rec.Status != StatusRunning {
			errs[i] = fmt.Errorf("end of %s: %w", e.Lease.RunID, ErrLockLost)
			continue
		}
		rec.Status, rec.EndedAt, rec.Error, rec.Reason = e.End.Status, e.End.EndedAt, e.End.Error, e.End.Reason
		if lk := s.locks[e.Lease.JobID]; lk != nil && lk.RunID == e.Lease.RunID {
			lk.State, lk.Holder, lk.RunID, lk.LastOutcome = LockFree, "", "", e.End.Status
		}
	}
	return errs
}

func (s *memStore) Disown(_ context.Context, leases []Lease, reason string, now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.disowned = append(s.disowned, leases...)
	s.disownCalls = append(s.disownCalls, len(leases))
	for _, l := range leases {
		if rec := s.records[l.RunID]; rec != nil && rec.Status == StatusRunning && rec.Instance == l.Instance {
			rec.Status, rec.Reason = StatusMissed, reason
		}
	}
	return nil
}

func (s *memStore) SweepExpired(context.Context, time.Time, int) ([]RunDoc, error) { return nil, nil }

func (s *memStore) SweepPreviousLives(context.Context, string, string, time.Time) ([]RunDoc, error) {
	return nil, nil
}

func (s *memStore) VerifyIndexes(context.Context) (bool, error) { return false, nil }

func (s *memStore) record(id string) (RunDoc, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.records[id]
	if !ok {
		return RunDoc{}, false
	}
	return *r, true
}

func (s *memStore) batchSizes() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.batches...)
}
