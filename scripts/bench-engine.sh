#!/usr/bin/env bash
# Engine benchmarks: Sync of 10k/30k/100k schedules into a running
# engine, one Reload with 30k/100k armed (changed and unchanged), heap per
# armed job at 100k, dispatch lateness of 10k jobs due in the same second, and
# the obvious robfig/cron v3 use they are measured against (AddFunc per
# schedule on a running cron.Cron; Remove+AddFunc per edit), each pair in the
# same `go test` process. Each benchmark runs COUNT times (go test -count,
# default 3); the summary prints the median of the runs for every metric and
# the ratios baseline / engine.
#
#   scripts/bench-engine.sh                      # about 2-4 minutes
#   CRONSWAP_BENCH_BASELINE_100K=1 scripts/bench-engine.sh
#                                                # adds the 100k baseline load,
#                                                # 40-70 s per run
#   COUNT=5 OUT=bench.txt scripts/bench-engine.sh
#
# Numbers depend on the machine and its load; the script prints nproc, the
# CPU model and the Go version first. Metrics: *_ms / *_ns are durations
# (p50/p99/max over operations, or over the iterations of one run for
# sync_*), ratio = baseline / engine (higher is better for the engine),
# bytes/job = live heap per armed job. BenchmarkShards compares shard counts
# (DefaultShards is 4096) and Sync against a plain loop of Reloads.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

count="${COUNT:-3}"
out="${OUT:-$(mktemp -t bench-engine.XXXXXX)}"
: >"$out"

{
	echo "# machine: nproc=$(nproc), cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(go version)"
	echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ), count=$count, baseline 100k: ${CRONSWAP_BENCH_BASELINE_100K:-0}"
} | tee -a "$out"

run() { # benchtime regexp
	go test -run '^$' -bench "$2" -benchtime="$1" -count="$count" ./scheduler/ | tee -a "$out"
}

go test -c -o /dev/null ./scheduler/ # compile errors before a long run
run 5x '^BenchmarkSync$|^BenchmarkSyncDistinct$|^BenchmarkResyncUnchanged$'
run 1x '^BenchmarkBaselineAddFunc$'
run 2000x '^BenchmarkReload(Changed|Unchanged)$|^BenchmarkBaselineRemoveAdd$'
run 1x '^BenchmarkHeapPerJob$|^BenchmarkHeapPerEditedJob$'
run 1x '^BenchmarkFireLateness$'
run 1x '^BenchmarkShards$'

echo
echo "## Summary: median of $count runs (raw output in $out)"
awk '
/^Benchmark/ {
	name = $1; sub(/-[0-9]+$/, "", name)
	for (i = 3; i < NF; i += 2) {
		key = name SUBSEP $(i + 1)
		n[key]++; v[key, n[key]] = $i
		if (!(key in seen)) { seen[key] = 1; order[++k] = key }
	}
}
function median(key,   m, i, j, t, a) {
	m = n[key]
	for (i = 1; i <= m; i++) a[i] = v[key, i] + 0
	for (i = 2; i <= m; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
	return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
}
function fmtnum(x) { return x >= 100 ? sprintf("%.0f", x) : sprintf("%.3g", x) }
END {
	printf "%-40s %-22s %14s %5s\n", "benchmark", "metric", "median", "runs"
	for (i = 1; i <= k; i++) {
		split(order[i], p, SUBSEP)
		if (p[2] == "ns/op" && p[1] !~ /Sync/) continue # per-op means; the p50/p99 say more
		med[order[i]] = median(order[i])
		printf "%-40s %-22s %14s %5d\n", p[1], p[2], fmtnum(med[order[i]]), n[order[i]]
	}
	print ""
	print "Edit of one job, baseline (Remove+AddFunc) / engine (Reload, changed):"
	split("n=30k n=100k", sizes, " ")
	for (s = 1; s <= 2; s++) {
		b = "BenchmarkBaselineRemoveAdd/" sizes[s]; e = "BenchmarkReloadChanged/" sizes[s]
		if ((b SUBSEP "p50_ns") in med && (e SUBSEP "p50_ns") in med)
			printf "  %-7s p50 %sx   p99 %sx\n", sizes[s],
				fmtnum(med[b, "p50_ns"] / med[e, "p50_ns"]), fmtnum(med[b, "p99_ns"] / med[e, "p99_ns"])
	}
}' "$out"
