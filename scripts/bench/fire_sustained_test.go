package main

import (
	"flag"
	"maps"
	"math"
	"slices"
	"testing"
	"time"
)

func TestSustainedAcc(t *testing.T) {
	start := time.Date(2027, 3, 1, 12, 0, 58, 0, time.UTC) // slots 12:00:58, :59, 12:01:00, :01
	const n = 125                                          // second 0 → 3 jobs (0, 60, 120), 1–4 → 3, 5–59 → 2
	acc := newSustainedAcc(n, start, 4)
	if got := []int{acc.dueAt(58), acc.dueAt(59), acc.dueAt(0), acc.dueAt(1), acc.dueAt(4), acc.dueAt(5)}; !slices.Equal(got, []int{2, 2, 3, 3, 3, 2}) {
		t.Fatalf("dueAt = %v", got)
	}
	at := func(k int, slot time.Time, ms int) arrival {
		return arrival{job: fireJobID(k), slot: slot, instance: "r1", at: slot.Add(time.Duration(ms) * time.Millisecond)}
	}
	s := func(i int) time.Time { return start.Add(time.Duration(i) * time.Second) }
	for _, a := range []arrival{
		at(58, s(0), 10), at(118, s(0), 20), // slot 0 (second 58): both
		at(59, s(1), 30), {job: fireJobID(59), slot: s(1), instance: "r2", at: s(1).Add(5 * time.Millisecond)}, // slot 1: job 59 twice (the earlier, r2's, counts), job 119 never
		at(0, s(2), 40), at(60, s(2), 61000), at(120, s(2), 50), // slot 2: job 60 after its next slot: missed
		at(1, s(3), 1), at(61, s(3), 2), at(121, s(3), 3),
		at(58, s(0).Add(-time.Minute), 1),        // before the first slot: earlier
		at(5, s(0), 1),                           // not due at second 58: unexpected
		{job: "other", slot: s(0), at: s(0)},     // unknown: unexpected
		at(2, s(4), 1),                           // after the measured slots: ignored
		at(200, s(0).Add(2*time.Second), 1),      // k ≥ n: unexpected
		at(2, s(3).Add(500*time.Millisecond), 1), // not a whole second: unexpected
	} {
		acc.add(a)
	}
	if acc.earlier != 1 || acc.unexpected != 4 {
		t.Errorf("earlier %d unexpected %d, want 1 4", acc.earlier, acc.unexpected)
	}
	if !acc.pending(s(1).Add(time.Second)) || acc.pending(s(1).Add(time.Minute)) {
		t.Error("pending: job 119 of slot 1 is pending until a minute after it")
	}
	m := acc.minute(0, 2)
	if m.expected != 4 || m.ran != 3 || m.duplicates != 1 || m.dupJobs != 1 || m.missed != 1 || m.never != 1 {
		t.Errorf("slots 0–1: %+v", m)
	}
	if !maps.Equal(m.byInstance, map[string]int{"r1": 2, "r2": 1}) {
		t.Errorf("slots 0–1 by instance %v", m.byInstance)
	}
	if m.lateness.pct(50) != 10 || m.lateness.pct(100) != 20 {
		t.Errorf("slots 0–1 lateness %v", m.lateness.ms)
	}
	all := acc.minute(0, 4)
	if all.expected != 10 || all.ran != 9 || all.missed != 2 || all.never != 1 || math.Abs(all.lateness.pct(100)-61000) > 0.01 {
		t.Errorf("all: %+v", all)
	}
	if k, ok := jobIndex(fireJobID(123456)); !ok || k != 123456 {
		t.Errorf("jobIndex = %d, %v", k, ok)
	}
}

func TestSustainedExprSpreadsOverTheMinute(t *testing.T) {
	per := map[string]int{}
	for k := range 100000 {
		per[sustainedExpr(k)]++
	}
	if len(per) != 60 || per["0 * * * * *"] != 1667 || per["59 * * * * *"] != 1666 {
		t.Errorf("%d expressions, second 0: %d, second 59: %d", len(per), per["0 * * * * *"], per["59 * * * * *"])
	}
}

func TestParseVmRSS(t *testing.T) {
	if v := parseVMRSS("Name:\tcronswap\nVmPeak:\t  999 kB\nVmRSS:\t   41234 kB\nThreads: 9\n"); v != 41234 {
		t.Errorf("VmRSS = %d", v)
	}
	if v := parseVMRSS("Name: x\n"); v != -1 {
		t.Errorf("no VmRSS = %d, want -1", v)
	}
}

func TestParseClaims(t *testing.T) {
	body := []byte(`# TYPE cronswap_claim_batch_size histogram
cronswap_claim_batch_size_bucket{le="1"} 2
cronswap_claim_batch_size_bucket{le="10"} 2
cronswap_claim_batch_size_bucket{le="100"} 3
cronswap_claim_batch_size_bucket{le="1000"} 4
cronswap_claim_batch_size_bucket{le="+Inf"} 4
cronswap_claim_batch_size_sum 1052
cronswap_claim_batch_size_count 4
# TYPE cronswap_claim_batch_seconds histogram
cronswap_claim_batch_seconds_bucket{le="0.01"} 2
cronswap_claim_batch_seconds_bucket{le="0.1"} 4
cronswap_claim_batch_seconds_bucket{le="+Inf"} 4
cronswap_claim_batch_seconds_sum 0.2
cronswap_claim_batch_seconds_count 4
# TYPE cronswap_owner_takeovers_total counter
cronswap_owner_takeovers_total 3
`)
	m, err := parseClaims(body)
	if err != nil {
		t.Fatal(err)
	}
	if !m.present() || m.size.count != 4 || m.size.sum != 1052 || m.takeovers != 3 {
		t.Fatalf("%+v", m)
	}
	zero, _ := parseClaims([]byte("# TYPE cronswap_claim_batch_size histogram\ncronswap_claim_batch_size_bucket{le=\"+Inf\"} 0\ncronswap_claim_batch_size_sum 0\ncronswap_claim_batch_size_count 0\n# TYPE cronswap_owner_takeovers_total counter\ncronswap_owner_takeovers_total 1\n"))
	d := m.minus(zero)
	if d.size.count != 4 || d.takeovers != 2 {
		t.Errorf("delta %+v", d)
	}
	if got, want := m.text(), "claim batches 4, fires per batch mean 263.0 / p50 ≈ 1 / p99 ≈ 964; batch latency mean 50 ms / p50 ≈ 10 ms / p99 ≈ 98 ms; owner takeovers 3"; got != want {
		t.Errorf("text\n%s\nwant\n%s", got, want)
	}
	absent, err := parseClaims([]byte("# TYPE cronswap_runs_total counter\ncronswap_runs_total 5\n"))
	if err != nil || absent.present() || absent.text() != "" {
		t.Errorf("absent metrics: %+v %v", absent, err)
	}
}

func TestPresetAndSustainedDefaultsYieldToFlags(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	n := fs.String("n", "1000", "")
	every := fs.Duration("every", 30*time.Second, "")
	hold := fs.Int("action-ms", 0, "")
	if err := fs.Parse([]string{"-action-ms", "3000"}); err != nil {
		t.Fatal(err)
	}
	if err := applyDefaults(fs, map[string]string{"n": "50", "every": "5m", "action-ms": "30000"}); err != nil {
		t.Fatal(err)
	}
	if *n != "50" || *every != 5*time.Minute || *hold != 3000 {
		t.Errorf("n %s every %s action-ms %d: the preset sets what was not given, the flag given wins", *n, *every, *hold)
	}
	for name := range firePresets["long-actions"] {
		if fireMainFlag(name) == nil {
			t.Errorf("preset flag -%s does not exist", name)
		}
	}
}

// fireMainFlag looks a flag of "bench fire" up.
func fireMainFlag(name string) *flag.Flag {
	return fireFlagSet(&fireSettings{}, &fireArgs{}).Lookup(name)
}

func TestPlotSeriesFromResults(t *testing.T) {
	text := `
=== cronswap fire benchmark, 2026-12-01 10:09 → 10:19 UTC [before]
fire-burst {"n":1000,"replicas":1,"action_ms":0,"slot":"2026-12-01T10:10:10Z","late_p50_ms":1950,"late_p99_ms":4770}
=== cronswap fire benchmark, 2026-12-01 10:20 → 10:30 UTC [before]
fire-burst {"n":1000,"replicas":1,"action_ms":0,"slot":"2026-12-01T10:21:03Z","late_p50_ms":2390,"late_p99_ms":5710}
fire-burst {"n":10000,"replicas":3,"action_ms":0,"slot":"2026-12-01T10:28:24Z","late_p50_ms":30000,"late_p99_ms":119000}
=== cronswap fire benchmark, 2026-12-01 10:32 → 10:36 UTC [before]
fire-burst {"n":50,"replicas":1,"action_ms":30000,"slot":"2026-12-01T10:32:27Z","late_p50_ms":90000,"late_p99_ms":180000}
=== cronswap fire benchmark, 2026-12-09 09:00 → 09:20 UTC [after]
fire-burst {"n":1000,"replicas":1,"action_ms":0,"slot":"2026-12-09T09:01:00Z","late_p50_ms":50,"late_p99_ms":120}
=== cronswap fire benchmark, sustained, 2026-12-09 09:30 → 09:41 UTC [after]
fire-minute {"n":100000,"replicas":3}
=== cronswap fire benchmark, 2026-12-09 10:00 → 10:10 UTC [after]
fire-burst {"n":100000,"replicas":3,"action_ms":0,"slot":"2026-12-09T10:01:00Z","late_p50_ms":3000,"late_p99_ms":8000}
`
	series, day, err := plotSeriesFromResults(text, "after", "before")
	if err != nil {
		t.Fatal(err)
	}
	if day != "2026-12-09" || len(series) != 2 || series[0].label != "before" || !series[0].dashed || series[1].label != "after" || series[1].dashed {
		t.Fatalf("day %q series %+v", day, series)
	}
	before, after := series[0].points, series[1].points
	// before: 1000x1 from the latest run labelled before that has it (the second), 10000x3; the long action is left out.
	if len(before) != 2 || before[0].n != 1000 || !slices.Equal(before[0].p99, []float64{5710}) || before[1].n != 10000 {
		t.Errorf("before %+v", before)
	}
	if len(after) != 2 || after[0].n != 1000 || after[0].replicas != 1 || after[1].n != 100000 || after[1].replicas != 3 {
		t.Errorf("after %+v", after)
	}
	if _, _, err := plotSeriesFromResults(text, "nope", "before"); err == nil {
		t.Error("no run with the label: want an error")
	}
	if s, _, err := plotSeriesFromResults(text, "before", "before"); err != nil || len(s) != 1 {
		t.Errorf("label = compare: one series, got %d (%v)", len(s), err)
	}
}

// -binary a,b gives the replicas the builds in turn.
func TestReplicaBinary(t *testing.T) {
	for i, want := range []string{"a", "b", "a"} {
		if got := replicaBinary("a,b", i); got != want {
			t.Errorf("replica %d runs %q, want %q", i, got, want)
		}
	}
	if got := replicaBinary("only", 3); got != "only" {
		t.Errorf("one binary: replica 3 runs %q", got)
	}
}
