#!/usr/bin/env bash
# The whole test suite: formatting, vet, and every test (unit, integration
# against the test server, end-to-end through the binary and mongosh) with
# the race detector. Installs what the tests need first (the test server jar
# via Maven, mongosh via npm, Go modules).
#
#   scripts/test.sh [extra go test flags...]
#
# With CRONSWAP_MONGO_URI set (e.g. a real replica set), tests use that server
# instead of launching the test server.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

step() { printf '\n== %s\n' "$*" >&2; }

step "install: test server jar, mongosh, Go modules"
scripts/mongo.sh build
if [[ ! -x scripts/node_modules/.bin/mongosh || scripts/package-lock.json -nt scripts/node_modules/.package-lock.json ]]; then
	npm ci --prefix scripts --no-audit --no-fund --loglevel=error
fi
go mod download

step "gofmt"
unformatted="$(find . -name '*.go' -not -path '*/node_modules/*' -not -path './.git/*' -print0 | xargs -0 gofmt -l)"
if [[ -n "$unformatted" ]]; then
	echo "gofmt: these files need formatting:" >&2
	echo "$unformatted" >&2
	exit 1
fi

step "go vet"
go vet ./...

step "go test -race"
go test -race -count=1 -timeout 30m "$@" ./...

step "fuzz: schedule.Decode over raw BSON (20 s)"
go test -run '^$' -fuzz '^FuzzDecode$' -fuzztime 20s ./schedule/
