#!/usr/bin/env bash
# Divided replicas benchmark: N schedules (the scale bench's per-customer
# documents) held by R replicas on one test server (a fresh database per
# round), first with
# divide_schedules off (every replica arms every job), then on (-settings
# on runs only the second). For each
# round: every replica's start → /readyz, and once the armed counts have
# held still for -stable: its armed and known counts (/metrics), RSS and
# live heap after a GC. With divide_schedules on, then a kill/join phase:
# -hot every-second jobs are added, the first replica is SIGKILLed and,
# once its lease has passed, a replica joins; the run ledger (job_runs and
# the action's own file) gives, per stretch, the slots run exactly once,
# doubled, recorded missed (by reason) or neither, their lateness, and the
# first slot after the death of each of the killed replica's jobs against
# lease + claim grace + 1 s. A table goes to stdout and is appended to
# docs/bench-divide-results.txt; docs/BENCHMARKS.md explains the method.
#
#   scripts/bench-divide.sh [-n 100000] [-replicas 4] [-binary PATH] [-hot 60] [-settings off,on]
#                           [-heartbeat 10s] [-lease 30s] [-claim-grace 2s]
#                           [-server-heap 12g] [-oplog-max-entries 200000] [-logs DIR]
#                           [-heap-profiles DIR: each replica's heap profile] [-h for all flags]
#
# Without -binary it builds this tree.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
scripts/mongo.sh build >&2
mkdir -p .run
(cd scripts/bench && go build -o "$root/.run/bench" .)
exec "$root/.run/bench" divide "$@"
