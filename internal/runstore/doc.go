// Package runstore is record.Store on MongoDB, and the only code that
// writes job_runs, job_locks and job_pauses: the fire path's claims,
// renewals and ends, and the writes others ask of those collections (an
// operator's lock release and resume, a backfill's missed record giving
// way, the notification relay's cleared notices). scripts/test.sh checks
// that no other package writes them (internal/tools/writecheck). It needs
// no transactions: every write is conditional on the state it expects, a
// batch of claims or ends is one request per collection, and an outcome
// lost on the way (a cut connection, a step-down) is read back, never
// guessed (docs/firepath.md, docs/locks.md).
package runstore
