package triggers

import "time"

// maxSlotBumps bounds how often a run-now request's scheduled_at is moved
// past another record of the same job (RunSlot).
const maxSlotBumps = 64

// jobSlots are the scheduled_at values (Unix ms) of one job's run-now
// runs that this replica is claiming (reserved, with their count) or knows
// to have a record (taken: a claim here won or found another record
// there). They are forgotten once no run of the job is being claimed.
type jobSlots struct {
	reserved map[int64]int
	taken    map[int64]bool
}

// reserveSlot returns the scheduled_at of run-now request req's run at
// bump or the first later bump whose scheduled_at is neither being
// claimed here for another run of the job nor known to have a record, and
// reserves it until releaseSlot. Two records of a job cannot share a
// scheduled_at (the unique index): such claims would only refuse each
// other, each at the cost of a claim.
func (s *Sink) reserveSlot(req Request, bump int) (time.Time, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	js := s.slots[req.JobID]
	if js == nil {
		js = &jobSlots{reserved: map[int64]int{}, taken: map[int64]bool{}}
		s.slots[req.JobID] = js
	}
	for ; ; bump++ {
		slot := RunSlot(req.Key, req.RequestedAt, bump)
		ms := slot.UnixMilli()
		if js.reserved[ms] == 0 && !js.taken[ms] || bump >= maxSlotBumps {
			js.reserved[ms]++
			return slot, bump
		}
	}
}

// releaseSlot gives back a scheduled_at reserved by reserveSlot; taken
// says that a record has it now.
func (s *Sink) releaseSlot(job string, slot time.Time, taken bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	js := s.slots[job]
	ms := slot.UnixMilli()
	if js.reserved[ms]--; js.reserved[ms] <= 0 {
		delete(js.reserved, ms)
	}
	if taken {
		js.taken[ms] = true
	}
	if len(js.reserved) == 0 {
		delete(s.slots, job)
	}
}
