package schedule

import "time"

// Due is one fire of an armed schedule, as the engine hands it to the fire path.
type Due struct {
	// Schedule is the schedule as armed when the slot came due.
	Schedule Schedule
	// Slot is the cron slot: the scheduled activation time, not the wall-clock time of the call.
	Slot time.Time
	// Delay is the job's planned jitter: the fire was due at Slot+Delay.
	Delay time.Duration
}

// At is when the fire was due: its slot plus its planned jitter.
func (d Due) At() time.Time { return d.Slot.Add(d.Delay) }
