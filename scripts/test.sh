#!/usr/bin/env bash
# The whole test suite: formatting, vet, staticcheck, and every test (unit, integration
# against the test server, end-to-end through the binary and mongosh) with
# the race detector, in the daemon's module and in scripts/bench (a module of
# its own), the deployment files' checks, then the repository checks.
# Installs what the tests need first (the test server jar and the cron
# dialect's reference, Quartz, via Maven; Debian's chromium, prometheus,
# prometheus-alertmanager and systemd via apt-get when missing; mongosh and
# the browser-test packages via npm; kubernetes-validate via pip into
# scripts/.venv; Go modules).
#
#   scripts/test.sh [extra go test flags...]
#
# With CRONSWAP_MONGO_URI set (e.g. a real replica set), tests use that server
# instead of launching the test server.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

step() { printf '\n== %s\n' "$*" >&2; }

step "install: test server jar, Quartz reference jar, Debian packages, mongosh and browser-test packages, kubernetes-validate, Go modules"
scripts/mongo.sh build
scripts/quartz.sh build
# Debian packages the tests use, each installed when its program is
# missing: chromium for the browser tests (e2e/ui_test.go; never a browser
# downloaded by npm; CRONSWAP_CHROMIUM points them at another one),
# prometheus (promtool, and the server e2e/prometheus_test.go runs),
# prometheus-alertmanager (same test), systemd (systemd-analyze checks the
# unit file).
missing=()
if [[ -n "${CRONSWAP_CHROMIUM:-}" ]]; then
	[[ -x "$CRONSWAP_CHROMIUM" ]] || { echo "CRONSWAP_CHROMIUM=$CRONSWAP_CHROMIUM is not an executable" >&2; exit 1; }
elif [[ ! -x /usr/bin/chromium ]]; then
	missing+=(chromium)
fi
for pair in prometheus:prometheus promtool:prometheus prometheus-alertmanager:prometheus-alertmanager systemd-analyze:systemd; do
	if ! command -v "${pair%%:*}" >/dev/null && [[ " ${missing[*]} " != *" ${pair#*:} "* ]]; then
		missing+=("${pair#*:}")
	fi
done
if [[ ${#missing[@]} -gt 0 ]]; then
	if [[ "$(id -u)" -eq 0 ]]; then
		as_root=()
	elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
		as_root=(sudo -n)
	else
		echo "Debian packages ${missing[*]} are missing and this user can neither install them (not root, no password-less sudo):" >&2
		echo "  run as root: apt-get update && apt-get install -y --no-install-recommends ${missing[*]}" >&2
		exit 1
	fi
	"${as_root[@]}" apt-get update -q
	# policy-rc.d or not, the packages' services are not wanted running.
	"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
# kubernetes-validate ships the Kubernetes API schemas: the manifests are
# checked offline.
if [[ ! -x scripts/.venv/bin/kubernetes-validate ]]; then
	python3 -m venv scripts/.venv
	scripts/.venv/bin/pip install -q --disable-pip-version-check kubernetes-validate==1.37.0
fi
if [[ ! -x scripts/node_modules/.bin/mongosh || ! -d scripts/node_modules/playwright-core ||
	scripts/package-lock.json -nt scripts/node_modules/.package-lock.json ]]; then
	npm ci --prefix scripts --no-audit --no-fund --loglevel=error
fi
go mod download
(cd scripts/bench && go mod download)

step "gofmt"
unformatted="$(find . -name '*.go' -not -path '*/node_modules/*' -not -path './.git/*' -print0 | xargs -0 gofmt -l)"
if [[ -n "$unformatted" ]]; then
	echo "gofmt: these files need formatting:" >&2
	echo "$unformatted" >&2
	exit 1
fi

step "go vet"
go vet ./...
(cd scripts/bench && go vet ./...)

# staticcheck (pinned; every check but the one staticcheck.conf names):
# unused code, deprecated calls, the bugs vet does not look for.
step "staticcheck"
staticcheck=honnef.co/go/tools/cmd/staticcheck@v0.8.2
go run "$staticcheck" ./...
(cd scripts/bench && go run "$staticcheck" ./...)

step "go test -race"
go test -race -count=1 -timeout 30m "$@" ./...
(cd scripts/bench && go test -race -count=1 -timeout 10m "$@" ./...)

step "deployment files: alert rules (promtool), Kubernetes manifests (kubernetes-validate), systemd unit"
promtool check rules deploy/prometheus/alerts.yaml
(cd deploy/prometheus && promtool test rules alerts_test.yaml)
scripts/.venv/bin/kubernetes-validate --strict --quiet deploy/kubernetes/*.yaml
# systemd-analyze verify wants ExecStart's program to exist: point the
# unit at a built binary; any warning (an unknown key, a bad value) fails.
unit_dir="$(mktemp -d)"
go build -o "$unit_dir/cronswap" .
sed "s#/usr/local/bin/cronswap#$unit_dir/cronswap#" deploy/systemd/cronswap.service >"$unit_dir/cronswap.service"
if unit_out="$(systemd-analyze verify "$unit_dir/cronswap.service" 2>&1)" && [[ -z "$unit_out" ]]; then
	rm -rf "$unit_dir"
else
	echo "deploy/systemd/cronswap.service: $unit_out" >&2
	rm -rf "$unit_dir"
	exit 1
fi

# Budgets are counts, not durations: with a duration Go 1.26's fuzz
# coordinator can report its own deadline as a failure ("context deadline
# exceeded", no input written; golang/go#75804, fixed in Go 1.27).
# -fuzzminimizetime 100x: by default each new interesting input is
# minimised for up to 60 s, which used 18 of a 20 s run (docs/testing.md).
step "fuzz: schedule.Decode over raw BSON (250,000 executions)"
go test -run '^$' -fuzz '^FuzzDecode$' -fuzztime 250000x -fuzzminimizetime 100x ./schedule/
step "fuzz: schedule.ParseExprWith over the cron dialect, with Next and Prev of what it accepts (250,000 executions)"
go test -run '^$' -fuzz '^FuzzParseExpr$' -fuzztime 250000x -fuzzminimizetime 100x ./schedule/

# Last, so that a violation does not hide the test results above.
step "repository checks"
failed=0
violation() {
	printf 'repository check failed: %s\n' "$1" >&2
	[[ -z "${2:-}" ]] || printf '%s\n' "$2" | sed 's/^/  /' >&2
	failed=1
}
# The fire path takes its settings from its callers, not from the config loader.
for pkg in ./jobs ./internal/actions ./internal/record ./internal/runstore ./internal/firepath; do
	if go list -deps "$pkg" | grep -qx 'github.com/cronswap/cronswap/internal/config'; then
		violation "package $pkg depends on internal/config (see: go list -deps $pkg); the fire path must not import the config loader"
	fi
done
# job_runs, job_locks and job_pauses have one writer, internal/runstore:
# no other package makes a write call on a handle of them (what counts as
# one: go doc ./internal/tools/writecheck Check).
if ! writes="$(go run ./internal/tools/writecheck 2>&1)"; then
	violation "a package other than internal/runstore writes the fire path's collections (go run ./internal/tools/writecheck):" "$writes"
fi
# The public API stays small and documented: exported names per public
# package within budget, every exported name and package with a doc comment.
# The counts go to stderr with the rest of the log; the violations are kept.
api_problems="$(mktemp)"
if ! go run ./internal/tools/apicheck >&2 2>"$api_problems"; then
	violation "the public API is over budget or undocumented (go run ./internal/tools/apicheck):" "$(cat "$api_problems")"
fi
rm -f "$api_problems"
# No compiled binaries: *.test files, or ELF, Mach-O or PE executables.
binaries=""
while IFS= read -r -d '' f; do
	[[ -f "$f" ]] || continue
	magic="$(head -c 4 -- "$f" | od -An -tx1 | tr -d ' \n')"
	case "$f:$magic" in
	*.test:* | *:7f454c46 | *:cffaedfe | *:cefaedfe | *:feedface | *:feedfacf | *:4d5a*) binaries+="$f"$'\n' ;;
	esac
done < <(git ls-files -z)
if [[ -n "$binaries" ]]; then
	violation "compiled binaries are tracked by git (git rm them):" "${binaries%$'\n'}"
fi
# The daemon's module lists only what the daemon needs; plots belong to
# scripts/bench. go.sum may hold a checksum of gonum (gRPC's own tests use
# it, and go mod tidy records it), but no package of the module or of its
# tests may build with it.
plot="$(grep -nE 'gonum\.org/' go.mod || true; go list -deps -test ./... | grep -E '^gonum\.org/' || true)"
if [[ -n "$plot" ]]; then
	violation "the daemon's module requires or builds a plotting library (it belongs in scripts/bench/go.mod):" "$plot"
fi
# Nothing refers to files outside the repository.
if outside="$(git grep -nE '\.\./shared' -- . || true)" && [[ -n "$outside" ]]; then
	violation "tracked files refer to a shared directory beside the repository, which no clone has:" "$outside"
fi
# Code and docs say what they do, not which issue asked for it.
if cited="$(git grep -n -i -E '\bissue [0-9]+\b|#[0-9]{2}\b' -- '*.go' '*.md' || true)" && [[ -n "$cited" ]]; then
	violation "Go files or docs cite issue numbers (say what, not which issue):" "$cited"
fi
if [[ $failed -ne 0 ]]; then
	exit 1
fi
echo "repository checks: ok" >&2
