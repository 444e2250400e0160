#!/usr/bin/env bash
# Test MongoDB for cronswap (mongo-java-server with oplog + change streams, reports MongoDB 6.0 / wire 17).
#
#   scripts/mongo.sh build                      build scripts/mongo-server/target/mongo-server.jar if missing/outdated
#   scripts/mongo.sh start [--port 27017] [--h2 FILE] [extra launcher flags...]
#                                               start in the background; pid in .run/mongo.pid, URI in .run/mongo.uri;
#                                               with --h2 the data and oplog live in FILE and survive a restart
#                                               (scripts/run-local.sh keeps .run/mongo.h2)
#   scripts/mongo.sh stop                       stop it (SIGTERM, then SIGKILL after 15s)
#   scripts/mongo.sh status                     print URI and pid if running (exit 1 if not)
#   scripts/mongo.sh run [flags...]             run in the foreground (Ctrl-C / stdin EOF stops it)
#   scripts/mongo.sh uri                        print the URI of the running server
#
# Launcher flags (scripts/mongo-server/README.md): --oplog-max-entries N, --ttl-monitor-secs S, --raw, --log-level L.
# Logs of a background server go to .run/mongo.log. CRONSWAP_RUN_DIR moves .run elsewhere (a second
# instance, a test). Needs JDK 17+ and Maven 3.8+ (Maven Central) for the build.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
project="$here/mongo-server"
jar="$project/target/mongo-server.jar"
run_dir="${CRONSWAP_RUN_DIR:-$root/.run}"
pid_file="$run_dir/mongo.pid"
uri_file="$run_dir/mongo.uri"
log_file="$run_dir/mongo.log"

die() { echo "mongo.sh: $*" >&2; exit 1; }

java_bin() {
	if [[ -n "${JAVA_HOME:-}" && -x "$JAVA_HOME/bin/java" ]]; then
		echo "$JAVA_HOME/bin/java"
	else
		command -v java >/dev/null 2>&1 || die "java not found (install a JDK 17+)"
		echo java
	fi
}

jar_outdated() {
	[[ -f "$jar" ]] || return 0
	[[ -n "$(find "$project/pom.xml" "$project/src" -newer "$jar" -print -quit 2>/dev/null)" ]]
}

build() {
	if ! jar_outdated; then
		return 0
	fi
	command -v mvn >/dev/null 2>&1 || die "mvn not found (install Maven 3.8+ and a JDK 17+)"
	echo "mongo.sh: building $jar" >&2
	local out status=0
	out="$(cd "$project" && mvn -q -B -Dstyle.color=never package -DskipTests 2>&1)" || status=$?
	# maven prints stray ANSI resets even in batch mode; strip them, print the rest
	out="$(printf '%s' "$out" | sed 's/\x1b\[[0-9;]*m//g')"
	[[ -z "$out" ]] || printf '%s\n' "$out" >&2
	[[ $status -eq 0 ]] || die "maven build failed"
	[[ -f "$jar" ]] || die "build produced no $jar"
	touch "$jar"
}

running_pid() {
	[[ -f "$pid_file" ]] || return 1
	local pid
	pid="$(cat "$pid_file")"
	[[ "$pid" =~ ^[0-9]+$ ]] || return 1
	kill -0 "$pid" 2>/dev/null || return 1
	# make sure the pid is still ours (not reused by another program)
	if [[ -r "/proc/$pid/cmdline" ]]; then
		tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q 'mongo-server.jar' || return 1
	fi
	echo "$pid"
}

port_open() {
	# bash's /dev/tcp: succeeds once the port accepts connections
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

start() {
	local port=27017 h2="" extra=()
	while [[ $# -gt 0 ]]; do
		case "$1" in
		--port) [[ $# -ge 2 ]] || die "--port needs a value"; port="$2"; shift 2 ;;
		--port=*) port="${1#--port=}"; shift ;;
		--h2) [[ $# -ge 2 ]] || die "--h2 needs a value"; h2="$2"; shift 2 ;;
		--h2=*) h2="${1#--h2=}"; shift ;;
		*) extra+=("$1"); shift ;;
		esac
	done
	[[ "$port" =~ ^[0-9]+$ ]] || die "bad port: $port"
	if pid="$(running_pid)"; then
		echo "mongo.sh: already running (pid $pid) at $(cat "$uri_file" 2>/dev/null)" >&2
		cat "$uri_file"
		return 0
	fi
	build
	mkdir -p "$run_dir"
	rm -f "$pid_file" "$uri_file"
	# run a copy, so that a rebuild of the jar cannot pull classes out from under the running server
	cp "$jar" "$run_dir/mongo-server.jar"
	local args=(-XX:+UseSerialGC -XX:TieredStopAtLevel=1 -jar "$run_dir/mongo-server.jar" --port "$port" --ignore-stdin)
	if [[ -n "$h2" ]]; then
		# relative to the caller's cwd
		[[ "$h2" = /* ]] || h2="$PWD/$h2"
		args+=(--h2 "$h2")
	fi
	args+=("${extra[@]+"${extra[@]}"}")
	local out="$run_dir/mongo.out"
	: >"$out"
	# setsid: own session/process group, detached from this shell; stdin from /dev/null (--ignore-stdin)
	setsid "$(java_bin)" "${args[@]}" </dev/null >"$out" 2>"$log_file" &
	local pid=$!
	echo "$pid" >"$pid_file"
	local uri="" i
	for ((i = 0; i < 600; i++)); do
		if ! kill -0 "$pid" 2>/dev/null; then
			rm -f "$pid_file"
			cat "$log_file" >&2 || true
			die "server exited during start (log: $log_file)"
		fi
		uri="$(head -n 1 "$out" 2>/dev/null || true)"
		if [[ "$uri" == mongodb://* ]]; then
			local p="${uri##*:}"
			p="${p%/}"
			if port_open "$p"; then
				echo "$uri" >"$uri_file"
				echo "$uri"
				return 0
			fi
		fi
		sleep 0.1
	done
	kill "$pid" 2>/dev/null || true
	die "server did not come up within 60s (log: $log_file)"
}

stop() {
	local pid
	if ! pid="$(running_pid)"; then
		rm -f "$pid_file" "$uri_file"
		echo "mongo.sh: not running" >&2
		return 0
	fi
	kill -TERM "$pid" 2>/dev/null || true
	local i
	for ((i = 0; i < 150; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$pid" 2>/dev/null; then
		echo "mongo.sh: pid $pid did not stop after 15s, killing" >&2
		kill -KILL "$pid" 2>/dev/null || true
	fi
	rm -f "$pid_file" "$uri_file"
	echo "mongo.sh: stopped (pid $pid)" >&2
}

status() {
	local pid
	if pid="$(running_pid)"; then
		echo "running pid=$pid uri=$(cat "$uri_file" 2>/dev/null)"
		return 0
	fi
	echo "not running"
	return 1
}

cmd="${1:-}"
[[ $# -gt 0 ]] && shift
case "$cmd" in
build) build; echo "$jar" ;;
start) start "$@" ;;
stop) stop ;;
status) status ;;
uri) running_pid >/dev/null || die "not running"; cat "$uri_file" ;;
run) build; exec "$(java_bin)" -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -jar "$jar" "$@" ;;
*) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2; exit 2 ;;
esac
