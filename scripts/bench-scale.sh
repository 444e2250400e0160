#!/usr/bin/env bash
# Scale benchmark: N schedules on one replica (100,000 to 1,000,000), builds
# side by side. For each N it starts a fresh test server (-server-heap,
# bounded oplog), loads N per-customer schedules (a yearly digest at a time
# and in a zone of their own, args; unordered insertMany, 4 batches of
# 1,000 in flight), and for each build: a cold start (no token: a full
# reload) while edits are made at -reload-edit-rate, checking afterwards
# that every one of them is armed; start → /readyz, the reload's logged
# time and rate, RSS at ready and at peak, the live heap after a GC per
# job at ready and again once the start-up work settled; -edits edits at -rate against a bare change stream on the same
# collection (the floor, same run); SIGTERM → exit (the state file
# written); a warm restart from the state file: start → /readyz and RSS.
# A table per N and a side-by-side table go to stdout and are appended to
# docs/bench-scale-results.txt; docs/BENCHMARKS.md explains the method.
#
#   scripts/bench-scale.sh [-n 100000,400000,1000000] [-binaries before=PATH,after=PATH]
#                          [-edits 300] [-rate 10] [-reload-edit-rate 20]
#                          [-server-heap 12g] [-server-jvm-args "-XX:TieredStopAtLevel=4"] [-oplog-max-entries 200000] [-logs DIR]
#                          [-heap-profiles DIR: each build's heap profile at ready and once settled] [-h for all flags]
#
# Without -binaries it builds this tree as "after". A 1,000,000 point takes
# about 5 minutes per build and 4–6 GB of the machine's memory (the test
# server's heap); run the large points when the machine is quiet.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
scripts/mongo.sh build >&2
mkdir -p .run
(cd scripts/bench && go build -o "$root/.run/bench" .)
exec "$root/.run/bench" scale "$@"
