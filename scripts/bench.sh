#!/usr/bin/env bash
# End-to-end benchmark: edit-to-armed latency of the daemon binary against
# the floor (a bare driver change stream), poll mode for comparison, commands
# per idle minute, the full reload of N schedules and the warm restart. Builds
# the test server jar if needed, then builds and runs scripts/bench (a Go
# program, a module of its own so that its plotting library stays out of the
# daemon's go.mod) from the repository root. Results go to stdout and
# docs/bench-results.txt, the latency plot to docs/edit-to-armed.png;
# docs/BENCHMARKS.md explains them.
#
#   scripts/bench.sh [-n 100000] [-edits 500] [-rate 5] [-modes changestream,poll] [-out docs] [-h for all flags]
#
# With CRONSWAP_MONGO_URI set (e.g. a real replica set), that server is used
# instead of launching the test server.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
if [[ -z "${CRONSWAP_MONGO_URI:-}${MONGODB_URI:-}" ]]; then
	scripts/mongo.sh build >&2
fi
mkdir -p .run
(cd scripts/bench && go build -o "$root/.run/bench" .)
exec "$root/.run/bench" "$@"
