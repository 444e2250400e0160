// Package scheduler owns the cron timers. It arms one robfig/cron entry per
// enabled job, re-arms a job when its timing changes, and calls a fire
// callback with a schedule.Due (the schedule as armed, its slot and its
// jitter delay) when a timer goes off. It knows nothing of
// MongoDB: the watcher feeds it validated schedules through Reload, Remove,
// Reject and Sync, and the HTTP API reads it through List and Get.
//
// # Idempotent reload
//
// Reload compares the timing of the new schedule (expression, time zone,
// enabled, jitter bound) with the armed one. When they are equal robfig is
// not touched at all, and the expression is not even parsed again: the entry
// keeps its id and its next activation, and only the other fields (action,
// category, args, and any field added to schedule.Schedule) are updated:
// the next fire carries them. Whether anything but the timing and
// updated_at changed is decided by schedule.Schedule.SameExceptTiming over
// the whole value. Other jobs are never touched by one job's change.
//
// # Last known good
//
// A schedule that does not validate never disarms a job: the previous valid
// timer stays armed and the error is recorded in the job's Status. A job
// whose first document is bad is not armed; its Status shows the error with
// Armed false.
//
// # Sharding
//
// robfig sorts all entries of an engine on every add, remove and wake, so
// with many jobs a single engine becomes slow to edit and quadratic to load.
// Jobs are therefore spread over several robfig engines (shards, 4096 by
// default) by an FNV-1a hash of their id, which keeps an edit at about a
// hundred entries to sort with 500,000 jobs armed. A shard's robfig engine
// (a goroutine and a timer) is made when the shard first gets an entry, so
// a small engine runs only the shards it uses.
//
// A robfig engine that is not running appends new entries without sorting
// and sorts them once when started. Sync uses that: the shards that hold no
// armed job and receive one from the snapshot (all of them when a daemon
// loads its schedules at start-up) are stopped while Sync fills them and
// started again when it returns. A shard with no armed job has no timer to
// miss; the jobs Sync adds to it get their first activation computed at the
// end of Sync (which waits for that), as if they had been added then. Shards that
// already hold armed jobs are never paused. Jobs of one snapshot that share
// an expression also share its parsed schedule, unless it has H, whose
// values are hashed from each job's id. scripts/bench-engine.sh
// measures all this against the plain use of robfig.
//
// # Re-arming without waiting
//
// While a robfig engine runs, adding and removing entries are hand-offs to
// its run loop: the first returns at once when the loop is idle, a second
// one waits for the loop to come round (a goroutine wake-up, slow on a busy
// machine). A changed Reload therefore adds the new entry first and retires
// the old one: its job is marked so that it neither runs nor asks robfig for
// another activation, and a queue drained by one short-lived goroutine takes
// it out of robfig afterwards. Reload returns once the new entry is handed
// over. Sync removes inline, and Stop waits for the queue.
//
// # Slot identity
//
// A fire is identified by (job id, scheduled time), and replicas with skewed
// clocks must agree on that time, so that they claim the same fire. robfig runs a
// job's Run method in a goroutine of its own and does not tell it which
// scheduled time it runs for, so when robfig runs a job at wall time now the
// engine reports
//
//	slot = the latest activation time s of the schedule with s <= now
//
// which depends only on the spec and on which two activations now falls
// between: every replica that wakes for the same activation computes the
// same slot, whatever its exact wake-up time. robfig runs an entry only once
// its planned time has passed, so this is that planned time unless the
// goroutine was delayed beyond the following activation. The entry's robfig
// schedule remembers the last two activations it handed to robfig; when one
// of them lies within the second up to now it is that latest activation
// (activations are whole seconds), so a run woken on time names its slot
// without calling Next, and only a late one searches.
//
// Per job the engine remembers the last slot it reported and never reports a
// slot twice or out of order: if the computed slot is not after the last one
// (a delayed goroutine already took it, or the wall clock stepped back), the
// activation following the last slot is used if it has already come
// (<= now); otherwise the fire is dropped and logged at warning level. This
// memory survives re-arming the job (a changed expression, enabled false
// then true) and is forgotten by Remove.
//
// A run woken later than the following activation (the process stalled)
// names the latest slot, and the ones between the last slot reported and
// it were skipped. When the slot before the one reported is later than
// both the last slot reported and the entry's first activation, the fire
// goes to Options.Stalled instead of Fire, with the last slot the entry
// did fire (or the last one before it was armed): the caller decides the
// skipped slots before firing this one.
//
// # Jitter
//
// Options.Policy gives a job a jitter bound b (the daemon takes it from
// jobs.<action>.jitter). The job is then dispatched a fixed delay
// d = FNV-1a-64(job id) mod b after each of its slots: d depends on the id
// alone, so every replica delays a job by the same amount, and a fleet of
// jobs on the same expression spreads over [0, b) instead of stampeding. The
// robfig entry runs on the schedule moved by d, the slot is computed at
// now-d as described above, and the fire callback receives the undelayed
// slot (and the delay, in schedule.Due): replicas agree on the slot
// identity, only the dispatch moves.
// Status.NextRun names the next slot not yet dispatched and Status.Delay the
// delay. The bound is part of the job's timing: changing it re-arms the job.
//
// "@every" expressions are compiled by the schedule package into a
// schedule whose activations lie on a grid of multiples of the period
// since the Unix epoch (robfig's own ConstantDelaySchedule counts from
// whenever it is asked, which no two replicas would agree on). For those the
// slot is simply now truncated to the grid.
package scheduler
