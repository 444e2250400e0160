#!/usr/bin/env bash
# Divided replicas benchmark: N schedules (the scale bench's per-customer
# documents) held by R replicas on one test server (a fresh database per
# round), first with
# divide_schedules off (every replica arms every job), then on. For each
# round: every replica's start → /readyz, and once the armed counts have
# held still for -stable: its armed and known counts (/metrics), RSS and
# live heap after a GC. A table goes to stdout and is appended to
# docs/bench-divide-results.txt; docs/BENCHMARKS.md explains the method.
#
#   scripts/bench-divide.sh [-n 100000] [-replicas 4] [-binary PATH]
#                           [-server-heap 6g] [-oplog-max-entries 200000] [-logs DIR]
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
