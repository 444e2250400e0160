// Package daemon runs cronswap inside a Go program, on the program's own
// MongoDB database, with the program's own functions as the actions of its
// schedules.
//
// Schedules stay data: each document of the schedules collection says when
// a job runs and with which args; the program says what runs, by
// registering a handler under the name the documents' job field (or _id)
// gives. A mongosh edit of a cron_expr re-arms the job's timer within
// milliseconds on every replica, and each (job, slot) runs exactly once
// across all the replicas, whichever process they live in.
//
// A Service is the whole cronswap daemon, as the cronswap binary runs it
// (the binary is built on this package): the change-stream watchers of the
// schedules, blackouts, calendars and triggers collections, the engine, the fire path
// with its leases, the membership of the replicas, the edit history and the
// failure notifications. It does not listen on any port: HTTPHandler gives
// the status API, the status page, /metrics and the health checks, for the
// program to mount on its own server.
//
// The rules a Service keeps — the data model, the invariants, the lock and
// run-record states — are those of the binary: docs/design.md in the
// repository is the contract.
package daemon
