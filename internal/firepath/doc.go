// Package firepath runs the fires of armed schedules: the Runner takes each
// fire (a cron slot, a catch-up, a run asked for through triggers, a
// buffered fire, a retry attempt) through ownership, the admission gate,
// a claim batch, the action on a goroutine of its own under a renewed
// lease, and an end batch, and records what did not run. It coordinates
// replicas only through record.Store (docs/firepath.md).
package firepath
