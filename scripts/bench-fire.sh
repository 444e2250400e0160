#!/usr/bin/env bash
# Fire-path benchmark: N jobs due in the same second, R daemon replicas, B
# bursts. For each point of the grid -n × -replicas it starts a fresh test
# server, one counting wire proxy per replica (internal/faultproxy), a
# recording HTTP sink on loopback and R daemon processes (the real binary,
# built once; each with its own config, instance id and HTTP port, the http
# action posting to the sink), loads the N schedules before the daemons
# start (unordered insertMany, 1,000 a batch, 4 in flight), waits until
# every daemon is ready with N armed, and prints per burst: fires expected
# and run, duplicates, missed (not started before the job's next slot),
# start lateness p50/p99/max (request at the sink − slot), DB commands per
# fire (in total and by command name), the bench's own CPU (sink + proxies),
# the daemons' CPU per fire and, when the daemons export them, each replica's claim metrics
# (cronswap_claim_batch_size, cronswap_claim_batch_seconds,
# cronswap_owner_takeovers_total). A table and one "fire-burst {json}" line
# per burst go to stdout and are appended to docs/bench-fire-results.txt;
# the p99 lateness against N (the runs labelled -label, beside those
# labelled -compare, default "before") is drawn to docs/fire-lateness.png.
# docs/BENCHMARKS.md explains the method.
#
#   scripts/bench-fire.sh [-n 1000,10000] [-replicas 1,3] [-points 1000x1,…] [-bursts 2] [-every 30s]
#                         [-action-ms 0] [-workers 0] [-out docs] [-plot=true] [-label after]
#                         [-compare before] [-h for all flags]
#
# The issue-12 grid (N ∈ {1k, 10k, 100k} × R ∈ {1, 3}; the 100k points a
# minute apart, so that a burst has a minute before the next slot):
#
#   scripts/bench-fire.sh -points 1000x1,1000x3,10000x1,10000x3 -bursts 2 -label after
#   scripts/bench-fire.sh -points 100000x1,100000x3 -bursts 2 -every 1m -label after
#
# The long-action case (50 jobs due at the same slot, the action takes 30 s,
# one replica, default config; each start's lateness is printed):
#
#   scripts/bench-fire.sh -preset long-actions -label after
#
# The sustained run (100,000 schedules "S * * * * *", S = k mod 60, so
# ≈ 1,667 fire every second, 3 replicas, 10 minutes; per minute lateness
# p50/p99/max, fires, duplicates, missed, commands per fire, each daemon's
# RSS, claim metrics):
#
#   scripts/bench-fire.sh -sustained -label after          # = -n 100000 -replicas 3 -duration 10m
#
# The daemons' tracing off and on, side by side (each point once per setting,
# in that order; with tracing on they export over OTLP/HTTP to a span-counting
# receiver the bench runs on loopback; per burst the daemons' CPU per fire and
# the spans received per fire):
#
#   scripts/bench-fire.sh -points 1000x1,10000x3 -bursts 2 -tracing off,on -plot=false -label tracing
#
# The sink alone (no daemons, no database: a sender process releases N
# requests at once, as the daemon's http action sends them):
#
#   scripts/bench-fire.sh -sink-check 100000 [-sink-clients 5000] [-sink-pooled]
#
# Redraw the plot only: scripts/bench-fire.sh -replot docs/bench-fire-results.txt -label after
#
# Every run is bounded (-burst-timeout per burst, by default 2 × every +
# 30 s + the hold + 1 ms per job; -timeout overall, 40m) and stops every
# process it started, on error and on SIGINT too. With CRONSWAP_MONGO_URI
# set, that server is used instead of the test server.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
if [[ -z "${CRONSWAP_MONGO_URI:-}${MONGODB_URI:-}" ]]; then
	scripts/mongo.sh build >&2
fi
mkdir -p .run
(cd scripts/bench && go build -o "$root/.run/bench" .)
exec "$root/.run/bench" fire "$@"
