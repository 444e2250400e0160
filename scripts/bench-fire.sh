#!/usr/bin/env bash
# Fire-path benchmark: N jobs due in the same second, R daemon replicas, B
# bursts. For each point of the grid -n × -replicas it starts a fresh test
# server, one counting wire proxy per replica (internal/faultproxy), a
# recording HTTP sink on loopback and R daemon processes (the real binary,
# built once; each with its own config, instance id and HTTP port, the http
# action posting to the sink), loads the N schedules before the daemons
# start, waits until every daemon is ready with N armed, and prints per burst:
# fires expected and run, duplicates, missed (not started before the job's
# next slot), start lateness p50/p99/max (request at the sink − slot) and DB
# commands per fire (in total and by command name). A table and one
# "fire-burst {json}" line per burst go to stdout and are appended to
# docs/bench-fire-results.txt; the lateness against N is drawn to
# docs/fire-lateness.png. docs/BENCHMARKS.md explains the method.
#
#   scripts/bench-fire.sh [-n 1000,5000] [-replicas 1,3] [-bursts 2] [-every 30s] [-action-ms 0]
#                         [-workers 0] [-out docs] [-plot=true] [-label before] [-h for all flags]
#
# The long-action case (50 jobs whose action takes 30 s, one replica):
#
#   scripts/bench-fire.sh -n 50 -replicas 1 -bursts 1 -every 5m -action-ms 30000 -plot=false
#
# Every run is bounded (-burst-timeout per burst, -timeout overall) and stops
# every process it started, on error and on SIGINT too. With
# CRONSWAP_MONGO_URI set, that server is used instead of the test server.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
if [[ -z "${CRONSWAP_MONGO_URI:-}${MONGODB_URI:-}" ]]; then
	scripts/mongo.sh build >&2
fi
mkdir -p .run
(cd scripts/bench && go build -o "$root/.run/bench" .)
exec "$root/.run/bench" fire "$@"
