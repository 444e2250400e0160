// Package record is the schema of the fire path's records in MongoDB:
// job_runs (one record per claimed, skipped or missed fire), job_locks
// (one lock document per job) and job_pauses (jobs paused after
// failures) — their collection names, documents, statuses, reasons and
// indexes, a run's identity (RunID) and fence (FenceOf) — and Store, the
// one interface through which the fire path reads and writes them
// (package runstore implements it on MongoDB), and LastRun, the one
// definition of a job's last run that every view reads. docs/locks.md
// describes every field and state.
package record
