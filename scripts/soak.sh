#!/usr/bin/env bash
# The chaos soak alone, for longer than CI's 60 s: three daemon replicas
# behind fault proxies, several hundred jobs firing every second (an http
# action posting to a recording server), a writer at ~20 edits/s, random
# cuts, refused connections, injected ChangeStreamHistoryLost and a
# SIGKILL + restart. It prints the figures (edits, faults, mismatches,
# duplicate runs, runs without a record, stable slots missed) in the
# "soak figures:" line.
#
#   scripts/soak.sh [DURATION] [extra go test flags...]     DURATION: 90s, 10m, 2h (default 10m)
#
# CRONSWAP_SOAK_JOBS=N sets the number of every-second jobs (default
# e2e.DefaultSoakJobs, the count CI runs).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

duration="${1:-10m}"
shift || true
if [[ -n "${CRONSWAP_SOAK_JOBS:-}" && ! "$CRONSWAP_SOAK_JOBS" =~ ^[1-9][0-9]*$ ]]; then
	echo "soak.sh: CRONSWAP_SOAK_JOBS=$CRONSWAP_SOAK_JOBS: want a positive number of jobs" >&2
	exit 1
fi
if [[ ! "$duration" =~ ^([0-9]+)(s|m|h)$ ]]; then
	echo "soak.sh: duration $duration: want a number with s, m or h (e.g. 10m)" >&2
	exit 1
fi
case "${BASH_REMATCH[2]}" in
s) secs="${BASH_REMATCH[1]}" ;;
m) secs="$((BASH_REMATCH[1] * 60))" ;;
h) secs="$((BASH_REMATCH[1] * 3600))" ;;
esac

scripts/mongo.sh build
if [[ ! -x scripts/node_modules/.bin/mongosh ]]; then
	npm ci --prefix scripts --no-audit --no-fund --loglevel=error
fi
# go test's own timeout: the soak plus time for building, start-up and convergence.
CRONSWAP_SOAK="$duration" exec go test -race -count=1 -v -run '^TestChaosSoak$' -timeout "$((secs + 900))s" "$@" ./e2e/
