#!/usr/bin/env bash
# The reference the cron dialect's differential tests compare against:
# Quartz's CronExpression (Maven Central) behind a line protocol
# (scripts/quartz-ref, see QuartzRef.java).
#
#   scripts/quartz.sh build    build scripts/quartz-ref/target/quartz-ref.jar if missing/outdated
#   scripts/quartz.sh jar      print the jar's path
#
# Needs JDK 17+ and Maven 3.8+ (Maven Central), as scripts/mongo.sh does.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
project="$here/quartz-ref"
jar="$project/target/quartz-ref.jar"

die() { echo "quartz.sh: $*" >&2; exit 1; }

jar_outdated() {
	[[ -f "$jar" ]] || return 0
	[[ -n "$(find "$project/pom.xml" "$project/src" -newer "$jar" -print -quit 2>/dev/null)" ]]
}

build() {
	if ! jar_outdated; then
		return 0
	fi
	command -v mvn >/dev/null 2>&1 || die "mvn not found (install Maven 3.8+ and a JDK 17+)"
	echo "quartz.sh: building $jar" >&2
	local out status=0
	out="$(cd "$project" && mvn -q -B -Dstyle.color=never package 2>&1)" || status=$?
	out="$(printf '%s' "$out" | sed 's/\x1b\[[0-9;]*m//g')"
	[[ -z "$out" ]] || printf '%s\n' "$out" >&2
	[[ $status -eq 0 ]] || die "maven build failed"
	[[ -f "$jar" ]] || die "build produced no $jar"
	touch "$jar"
}

case "${1:-}" in
build) build ;;
jar) echo "$jar" ;;
*) die "usage: scripts/quartz.sh build|jar" ;;
esac
