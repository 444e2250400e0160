// Package runstore is record.Store on MongoDB: the only code that writes
// job_runs, job_locks and job_pauses for the fire path. It needs no
// transactions: every write is conditional on the state it expects, a
// batch of claims or ends is one request per collection, and an outcome
// lost on the way (a cut connection, a step-down) is read back, never
// guessed (docs/firepath.md, docs/locks.md).
package runstore
