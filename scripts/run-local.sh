#!/usr/bin/env bash
# Run the cronswap daemon locally, ready for a mongosh edit.
#
#   scripts/run-local.sh [--clean] [extra `cronswap run` flags...]
#
# Builds the binary into .run/cronswap (use it for the CLI), starts the
# project's test server unless CRONSWAP_MONGO_URI is set or something already
# listens on the port, adds the example schedules (only those missing, so your
# edits survive a re-run), and runs the daemon with ./config.yaml until you
# stop it. Ctrl-C, or SIGINT/SIGTERM to this script's pid, stops the daemon and
# the test server this script started.
#
# The test server keeps its data in .run/mongo.h2 (in the run directory), so
# a re-run finds your edits, run records and the daemon's resume token where
# you left them. --clean deletes that file first: the server starts empty
# (and only the example schedules are added). --clean needs the test server to
# be this script's to start: it refuses when a server is already running or
# CRONSWAP_MONGO_URI is set.
#
# Environment:
#   CRONSWAP_MONGO_URI    use this server; no test server is started
#   CRONSWAP_MONGO_PORT   port of the test server (default 27017; 0 = any free port)
#   CRONSWAP_HTTP_LISTEN  the daemon's status listener (default 127.0.0.1:9090, as in config.yaml)
#   CRONSWAP_RUN_DIR      where the binary, the test server's data file, pid file and logs go (default .run)
set -euo pipefail
# A non-interactive shell starts a background job (`run-local.sh &` in a
# script) with SIGINT ignored, and bash cannot trap a signal ignored at
# entry. Run again with SIGINT restored (GNU env; same pid), so that SIGINT
# still stops everything; without GNU env, send SIGTERM instead.
if [[ "$(trap -p INT)" == "trap -- '' SIGINT" && -z "${CRONSWAP_RUN_LOCAL_SIGINT:-}" ]] &&
	env --default-signal=INT true 2>/dev/null; then
	export CRONSWAP_RUN_LOCAL_SIGINT=restored
	exec env --default-signal=INT bash "${BASH_SOURCE[0]}" "$@"
fi
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

clean=""
run_args=()
for arg in "$@"; do
	if [[ "$arg" == --clean ]]; then
		clean=1
	else
		run_args+=("$arg")
	fi
done

run_dir="${CRONSWAP_RUN_DIR:-$root/.run}"
mkdir -p "$run_dir"
run_dir="$(cd "$run_dir" && pwd)"
export CRONSWAP_RUN_DIR="$run_dir" # scripts/mongo.sh keeps its pid file there
port="${CRONSWAP_MONGO_PORT:-27017}"
http_listen="${CRONSWAP_HTTP_LISTEN:-127.0.0.1:9090}"
bin="$run_dir/cronswap"
data_file="$run_dir/mongo.h2" # the test server's data (H2 file), kept from run to run
database=cronswap              # as in config.yaml

started_server=""
daemon_pid=""
# cleanup stops what this script started: the daemon first (it saves its
# resume token and releases its locks), then the test server. It runs on
# exit and on SIGINT/SIGTERM, and is safe to run twice.
cleanup() {
	if [[ -n "$daemon_pid" ]]; then
		kill -TERM "$daemon_pid" 2>/dev/null || true
		wait "$daemon_pid" 2>/dev/null || true
		daemon_pid=""
	fi
	if [[ -n "$started_server" ]]; then
		started_server=""
		scripts/mongo.sh stop || true
	fi
}
trap cleanup EXIT
trap 'echo "run-local: interrupted; stopping" >&2; cleanup; exit 130' INT
trap 'echo "run-local: terminated; stopping" >&2; cleanup; exit 143' TERM

refuse_clean() {
	if [[ -n "$clean" ]]; then
		echo "run-local: --clean: $1, so this script starts no test server to empty; nothing deleted" >&2
		exit 2
	fi
}
if [[ -n "${CRONSWAP_MONGO_URI:-}" ]]; then
	refuse_clean "CRONSWAP_MONGO_URI names a server"
	uri="$CRONSWAP_MONGO_URI"
elif [[ "$port" != 0 ]] && (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
	refuse_clean "something already listens on 127.0.0.1:$port"
	uri="mongodb://127.0.0.1:$port/"
	echo "run-local: something already listens on 127.0.0.1:$port; using it" >&2
elif uri="$(scripts/mongo.sh uri 2>/dev/null)"; then
	refuse_clean "a test server already runs from $run_dir"
	# started by someone else from this run directory: theirs to stop
	echo "run-local: using the test server already running from $run_dir at $uri" >&2
else
	if [[ -n "$clean" ]]; then
		echo "run-local: --clean: deleting $data_file" >&2
		rm -f "$data_file"
	elif [[ -f "$data_file" ]]; then
		echo "run-local: the test server keeps its data in $data_file (--clean starts empty)" >&2
	fi
	started_server=1
	uri="$(scripts/mongo.sh start --port "$port" --h2 "$data_file")"
fi

if [[ ! -x scripts/node_modules/.bin/mongosh ]]; then
	echo "run-local: installing mongosh (npm ci --prefix scripts)" >&2
	npm ci --prefix scripts --no-audit --no-fund --loglevel=error
fi

echo "run-local: building $bin" >&2
go build -o "$bin" .

scripts/node_modules/.bin/mongosh "$uri" --quiet --norc --eval "const dbName = \"$database\";" --eval '
db = db.getSiblingDB(dbName);
const examples = [
  { _id: "daily_report", cron_expr: "0 9 * * *" },
  { _id: "heartbeat", cron_expr: "*/10 * * * * *", args: { greeting: "hello" } },
  { _id: "warm_cache", cron_expr: "*/15 * * * *", enabled: false },
];
for (const s of examples) {
  db.schedules.updateOne({ _id: s._id }, { $setOnInsert: { ...s, updated_at: new Date() } }, { upsert: true });
}
print("schedules:");
db.schedules.find().forEach(d => print("  " + d._id + "  " + d.cron_expr + (d.enabled === false ? "  (paused)" : "")));
'
cat >&2 <<TXT

run-local: daemon starting; status at http://$http_listen/api/schedules
run-local: in another terminal, retime a job:
  scripts/node_modules/.bin/mongosh "$uri" --quiet --eval 'db = db.getSiblingDB("$database")' --eval 'db.schedules.updateOne({ _id: "daily_report" }, { \$set: { cron_expr: "0 8 * * *", updated_at: new Date() } })'
run-local: the CLI is $bin, for example:
  CRONSWAP_MONGO_URI='$uri' $bin schedules list

TXT
export CRONSWAP_MONGO_URI="$uri"
# The daemon runs in the background and this script waits for it: a signal
# to the script then interrupts the wait at once and the traps stop
# everything (bash runs no trap while a foreground child is running).
"$bin" run --config config.yaml --http-listen "$http_listen" "${run_args[@]+"${run_args[@]}"}" &
daemon_pid=$!
status=0
wait "$daemon_pid" || status=$?
daemon_pid=""
exit "$status"
