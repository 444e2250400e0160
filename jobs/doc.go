// Package jobs is what a Go program defines a cronswap job with: the
// Handler that runs it, the Run a handler is handed (which job, which cron
// slot, the run's id and fence), and the job's run Policy — its timeout,
// its overlap policy while an earlier run still runs, and its retries.
//
// A schedule document in MongoDB only names a job's action and hands it
// data (its args); what runs is defined in code (a Handler) or in the
// daemon's configuration (an exec or http action), never by the document.
// Each cron slot of a schedule runs at most once across all replicas
// sharing the database; Run.Fence increases with every acquisition of the
// job's lock, so a resource that refuses writes with a lower fence than
// the highest it has seen refuses a stale run.
package jobs
