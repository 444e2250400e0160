#!/usr/bin/env bash
# Triggers benchmark: a flood of run-now or backfill requests inserted at
# once across R daemon replicas. For each mode it starts a fresh test
# server, a recording HTTP sink on loopback (the action's ledger), one
# counting wire proxy per replica and R daemon processes (the real binary,
# built once, the http action posting to the sink, overlap allow), loads
# the jobs, inserts N requests with 5 malformed ones in one insertMany, and
# prints: the time until every request had its final status (and each
# request's p50/p99/max), the requests per status, the ledger against the
# statuses (distinct runs vs succeeded; requests that ran but say
# otherwise), the malformed ones rejected, the run records
# database_unreachable, missed and abandoned, the connection checkout
# timeouts in the daemons' logs and the commands per request. Results are
# appended to docs/bench-triggers-results.txt; docs/BENCHMARKS.md has the
# figures.
#
#   scripts/bench-triggers.sh                       # 5,000 run-now for 50 jobs, then 5,000 backfilled slots of 500 jobs; 3 replicas
#   scripts/bench-triggers.sh -modes run-now -n 1000 -replicas 3 -pool 20
#   scripts/bench-triggers.sh -binary /tmp/cronswap-before -label before
#   scripts/bench-triggers.sh -h                    # every flag
#
# Each mode is bounded (-timeout after the insert, 5m) and every process it
# started is stopped, on error and on SIGINT too. With CRONSWAP_MONGO_URI
# set, that server is used instead of the test server; with CRONSWAP_MONGO_JAR
# set, that jar is the test server (not rebuilt).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
if [[ -z "${CRONSWAP_MONGO_URI:-}${MONGODB_URI:-}${CRONSWAP_MONGO_JAR:-}" ]]; then
	scripts/mongo.sh build >&2
fi
mkdir -p .run
(cd scripts/bench && go build -o "$root/.run/bench" .)
exec "$root/.run/bench" triggers "$@"
