package record

import (
	"time"
)

// Reasons of a missed record (RunDoc.Reason of a record with status
// StatusMissed): why its slots did not run.
const (
	// MissedNoReplica: no replica was running at the slots; found at
	// start-up by comparing the job's last decided slot with its slots
	// since then.
	MissedNoReplica = "no_replica_running"
	// MissedUnreachable: the claim could not reach the database, and no
	// retry fitted before the fire's starting deadline.
	MissedUnreachable = "database_unreachable"
	// MissedShuttingDown: the fire came due while this replica was
	// shutting down (and no other replica ran it).
	MissedShuttingDown = "shutting_down"
	// MissedStartingDeadline: the fire could not start within its starting
	// deadline (it waited in the queue, its claim answered too late, or the
	// claim was blocked by an unreachable database until past it).
	MissedStartingDeadline = "starting_deadline"
	// MissedOutsideCatchup: at start-up the slots were older than the
	// job's catch-up window, which offers only the latest slot within it.
	MissedOutsideCatchup = "outside_catchup_window"
	// MissedQueueFull: the fire came due while the fire path's queue held
	// its bound of fires waiting for admission (queue_limit).
	MissedQueueFull = "queue_full"
	// MissedHandOver: with the schedules divided among the replicas, no
	// replica armed the job at the slots (its armers were gone), and they
	// were older than the hand-over window when a replica took it over.
	MissedHandOver = "hand_over"
	// MissedStalled: the replica that armed the job stalled (the process
	// frozen or paused) past the slots, and the job's catch-up window did
	// not cover them when it ran again.
	MissedStalled = "stalled"
)

// MissedReasons lists every reason of a missed record.
var MissedReasons = []string{MissedNoReplica, MissedUnreachable, MissedShuttingDown,
	MissedStartingDeadline, MissedOutsideCatchup, MissedQueueFull, MissedPaused, MissedHandOver, MissedStalled}

// MissedRange is a run of consecutive slots of one job that did not run,
// for one reason: the slots From..To of the job's schedule, Count of them.
type MissedRange struct {
	JobID  string
	From   time.Time
	To     time.Time
	Count  int64
	Reason string
}

// NextFunc gives the first slot of a job's schedule strictly after t (zero
// when there is none).
type NextFunc func(t time.Time) time.Time

// MaxSlotWalk bounds how many slots CountSlots walks: more than 30 days of
// an every-second job (the default retention of the records).
const MaxSlotWalk = 1 << 22

// CountSlots walks the slots of next strictly after after and at or before
// through, and returns the first, the last and how many there are (n is 0
// when there is none). It walks at most MaxSlotWalk slots; complete is
// false when it stopped there (last is then the last slot walked).
func CountSlots(next NextFunc, after, through time.Time) (first, last time.Time, n int64, complete bool) {
	s := next(after)
	for !s.IsZero() && !s.After(through) {
		if n == 0 {
			first = s
		}
		last = s
		n++
		if n >= MaxSlotWalk {
			return first, last, n, false
		}
		s = next(s)
	}
	return first, last, n, true
}
