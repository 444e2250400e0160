#!/usr/bin/env bash
# Run the cronswap daemon locally, ready for a mongosh edit.
#
#   scripts/run-local.sh [extra `cronswap run` flags...]
#
# Without CRONSWAP_MONGO_URI it starts the project's test server (in memory,
# 127.0.0.1:27017) unless something already listens there, seeds the example
# schedules (only those missing, so your edits survive a re-run), and runs the
# daemon with ./config.yaml in the foreground. Ctrl-C stops the daemon and the
# server this script started.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

uri="${CRONSWAP_MONGO_URI:-mongodb://127.0.0.1:27017/}"
started_server=""
if [[ -z "${CRONSWAP_MONGO_URI:-}" ]]; then
	if (exec 3<>/dev/tcp/127.0.0.1/27017) 2>/dev/null; then
		echo "run-local: something already listens on 127.0.0.1:27017; using it" >&2
	else
		scripts/mongo.sh start --port 27017
		started_server=1
	fi
fi
cleanup() { if [[ -n "$started_server" ]]; then scripts/mongo.sh stop || true; fi; }
trap cleanup EXIT

if [[ ! -x scripts/node_modules/.bin/mongosh ]]; then
	echo "run-local: installing mongosh (npm ci --prefix scripts)" >&2
	npm ci --prefix scripts --no-audit --no-fund --loglevel=error
fi
database=cronswap # as in config.yaml
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

run-local: daemon starting; status at http://127.0.0.1:9090/api/schedules
run-local: in another terminal, retime a job with the seed's one-liner:
  scripts/node_modules/.bin/mongosh "$uri" --quiet --eval 'db = db.getSiblingDB("$database")' --eval 'db.schedules.updateOne({ _id: "daily_report" }, { \$set: { cron_expr: "0 8 * * *", updated_at: new Date() } })'

TXT
CRONSWAP_MONGO_URI="$uri" go run . run --config config.yaml "$@"
