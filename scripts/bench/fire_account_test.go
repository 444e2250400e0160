package main

import (
	"maps"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/cronswap/cronswap/schedule"
)

func TestAccountBursts(t *testing.T) {
	s0 := time.Date(2027, 3, 1, 12, 0, 0, 0, time.UTC)
	s1 := s0.Add(30 * time.Second)
	s2 := s1.Add(30 * time.Second)
	ms := func(base time.Time, n int) time.Time { return base.Add(time.Duration(n) * time.Millisecond) }
	at := func(job string, slot time.Time, after int, inst string) arrival {
		return arrival{job: job, slot: slot, instance: inst, at: ms(slot, after)}
	}
	type want struct {
		ran, dup, dupJobs, missed, never int
		p50, p99, max                    float64 // ms; NaN when none ran
		byInstance                       map[string]int
	}
	nan := math.NaN()
	tests := []struct {
		name       string
		jobs       []string
		arrivals   []arrival
		bursts     []want
		earlier    int
		unexpected int
	}{
		{
			name: "all on time, once",
			jobs: []string{"a", "b", "c", "d"},
			arrivals: []arrival{
				at("a", s0, 10, "r1"), at("b", s0, 20, "r1"), at("c", s0, 30, "r2"), at("d", s0, 40, "r2"),
				at("a", s1, 5, "r1"), at("b", s1, 5, "r1"), at("c", s1, 5, "r1"), at("d", s1, 1500, "r1"),
			},
			bursts: []want{
				{ran: 4, p50: 20, p99: 40, max: 40, byInstance: map[string]int{"r1": 2, "r2": 2}},
				{ran: 4, p50: 5, p99: 1500, max: 1500, byInstance: map[string]int{"r1": 4}},
			},
		},
		{
			name: "a duplicate counts once in lateness and once as duplicate, the earlier arrival wins",
			jobs: []string{"a", "b"},
			arrivals: []arrival{
				at("a", s0, 300, "r2"), at("a", s0, 100, "r1"), at("a", s0, 900, "r3"), at("b", s0, 200, "r1"),
				at("a", s1, 1, "r1"), at("b", s1, 2, "r1"), at("b", s1, 3, "r2"),
			},
			bursts: []want{
				{ran: 2, dup: 2, dupJobs: 1, p50: 100, p99: 200, max: 200, byInstance: map[string]int{"r1": 2}},
				{ran: 2, dup: 1, dupJobs: 1, p50: 1, p99: 2, max: 2, byInstance: map[string]int{"r1": 2}},
			},
		},
		{
			name: "late past the next slot is missed but ran; no arrival is missed and never",
			jobs: []string{"a", "b", "c"},
			arrivals: []arrival{
				at("a", s0, 29999, "r1"), // just before the next slot: not missed
				at("b", s0, 30000, "r1"), // at the next slot: missed
				at("a", s1, 10, "r1"), at("b", s1, 10, "r1"), at("c", s1, 45000, "r1"),
			},
			bursts: []want{
				{ran: 2, missed: 2, never: 1, p50: 29999, p99: 30000, max: 30000, byInstance: map[string]int{"r1": 2}},
				{ran: 3, missed: 1, p50: 10, p99: 45000, max: 45000, byInstance: map[string]int{"r1": 3}},
			},
		},
		{
			name: "unknown jobs and slots are unexpected; the unmeasured next burst is ignored",
			jobs: []string{"a"},
			arrivals: []arrival{
				at("a", s0, 50, "r1"), at("a", s1, 60, "r1"),
				at("zz", s0, 1, "r1"),                   // not a loaded job
				at("a", s0.Add(-30*time.Second), 1, ""), // a slot before the first: earlier
				at("a", s0.Add(time.Second), 1, ""),     // between slots
				at("a", s2, 5, "r1"),                    // the next, unmeasured burst
				at("a", s2.Add(30*time.Second), 5, "r1"),
			},
			bursts: []want{
				{ran: 1, p50: 50, p99: 50, max: 50, byInstance: map[string]int{"r1": 1}},
				{ran: 1, p50: 60, p99: 60, max: 60, byInstance: map[string]int{"r1": 1}},
			},
			earlier:    1,
			unexpected: 2,
		},
		{
			name:     "nothing arrived",
			jobs:     []string{"a", "b"},
			arrivals: nil,
			bursts: []want{
				{missed: 2, never: 2, p50: nan, p99: nan, max: nan, byInstance: map[string]int{}},
				{missed: 2, never: 2, p50: nan, p99: nan, max: nan, byInstance: map[string]int{}},
			},
		},
		{
			name: "nearest-rank percentiles over 100 fires",
			jobs: hundredJobs(),
			arrivals: func() []arrival {
				var a []arrival
				for i, id := range hundredJobs() {
					a = append(a, at(id, s0, (i+1)*10, "r1"), at(id, s1, 7, "r1"))
				}
				return a
			}(),
			bursts: []want{
				{ran: 100, p50: 500, p99: 990, max: 1000, byInstance: map[string]int{"r1": 100}},
				{ran: 100, p50: 7, p99: 7, max: 7, byInstance: map[string]int{"r1": 100}},
			},
		},
	}
	eq := func(a, b float64) bool { return (math.IsNaN(a) && math.IsNaN(b)) || math.Abs(a-b) < 1e-9 }
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, earlier, unexpected := accountBursts(tc.jobs, []time.Time{s0, s1, s2}, tc.arrivals)
			if earlier != tc.earlier || unexpected != tc.unexpected {
				t.Errorf("earlier, unexpected = %d, %d; want %d, %d", earlier, unexpected, tc.earlier, tc.unexpected)
			}
			if len(got) != len(tc.bursts) {
				t.Fatalf("%d bursts, want %d", len(got), len(tc.bursts))
			}
			for i, w := range tc.bursts {
				g := got[i]
				if g.expected != len(tc.jobs) || g.ran != w.ran || g.duplicates != w.dup || g.dupJobs != w.dupJobs ||
					g.missed != w.missed || g.never != w.never {
					t.Errorf("burst %d: expected %d ran %d dup %d dupJobs %d missed %d never %d, want %d %d %d %d %d %d",
						i+1, g.expected, g.ran, g.duplicates, g.dupJobs, g.missed, g.never,
						len(tc.jobs), w.ran, w.dup, w.dupJobs, w.missed, w.never)
				}
				if p50, p99, mx := g.lateness.pct(50), g.lateness.pct(99), g.lateness.pct(100); !eq(p50, w.p50) || !eq(p99, w.p99) || !eq(mx, w.max) {
					t.Errorf("burst %d: lateness p50/p99/max %v/%v/%v ms, want %v/%v/%v", i+1, p50, p99, mx, w.p50, w.p99, w.max)
				}
				if !maps.Equal(g.byInstance, w.byInstance) {
					t.Errorf("burst %d: by instance %v, want %v", i+1, g.byInstance, w.byInstance)
				}
				if !g.slot.Equal([]time.Time{s0, s1}[i]) || !g.next.Equal([]time.Time{s1, s2}[i]) {
					t.Errorf("burst %d: slot %s next %s", i+1, g.slot, g.next)
				}
			}
		})
	}
}

func hundredJobs() []string {
	ids := make([]string, 100)
	for i := range ids {
		ids[i] = fireJobID(i)
	}
	return ids
}

func TestArrivalsInAndPerFire(t *testing.T) {
	t0 := time.Date(2027, 3, 1, 12, 0, 0, 0, time.UTC)
	arr := []arrival{{at: t0.Add(-time.Millisecond)}, {at: t0}, {at: t0.Add(time.Second)}, {at: t0.Add(2 * time.Second)}}
	if n := arrivalsIn(arr, t0, t0.Add(2*time.Second)); n != 2 {
		t.Errorf("arrivalsIn = %d, want 2 ([from, to) holds the arrival at from, not the one at to)", n)
	}

	before := map[string]int{"insert": 10, "find": 5, "getMore": 3}
	after := map[string]int{"insert": 30, "find": 5, "getMore": 4, "update": 40, "findAndModify": 20}
	d := commandDelta(before, after)
	if want := map[string]int{"insert": 20, "getMore": 1, "update": 40, "findAndModify": 20}; !maps.Equal(d, want) {
		t.Fatalf("commandDelta = %v, want %v", d, want)
	}
	total, by := perFire(d, 20)
	if math.Abs(total-81.0/20) > 1e-9 {
		t.Errorf("total per fire = %v, want %v", total, 81.0/20)
	}
	var names []string
	for _, r := range by {
		names = append(names, r.name)
	}
	if want := []string{"update", "findAndModify", "insert", "getMore"}; !slices.Equal(names, want) {
		t.Errorf("order %v, want %v (highest first, ties by name)", names, want)
	}
	if by[0].rate != 2 || by[3].rate != 0.05 {
		t.Errorf("rates %v", by)
	}
	if total, by := perFire(d, 0); total != 0 || by != nil {
		t.Errorf("zero fires: %v %v, want no rates", total, by)
	}
}

func TestFireExpr(t *testing.T) {
	at := time.Date(2027, 3, 1, 12, 7, 41, 300_000_000, time.UTC) // rounds up to 12:07:42
	tests := []struct {
		every time.Duration
		expr  string
	}{
		{30 * time.Second, "12/30 * * * * *"},
		{time.Second, "0/1 * * * * *"},
		{15 * time.Second, "12/15 * * * * *"},
		{time.Minute, "42 * * * * *"},
		{5 * time.Minute, "42 2/5 * * * *"},
		{time.Hour, "42 7 * * * *"},
	}
	for _, tc := range tests {
		expr, err := fireExpr(tc.every, at)
		if err != nil || expr != tc.expr {
			t.Errorf("fireExpr(%s) = %q, %v; want %q", tc.every, expr, err, tc.expr)
			continue
		}
		// The daemon's own parser: the first slot is the rounded-up time,
		// the ones after it every tc.every.
		sched, err := schedule.ParseExpr(expr, time.UTC)
		if err != nil {
			t.Fatalf("%q: %v", expr, err)
		}
		first := sched.Next(at.Add(-time.Nanosecond))
		if want := at.Truncate(time.Second).Add(time.Second); !first.Equal(want) {
			t.Errorf("%q: first slot %s, want %s", expr, first, want)
		}
		for s, i := first, 0; i < 5; i++ {
			next := sched.Next(s)
			if next.Sub(s) != tc.every {
				t.Errorf("%q: %s → %s, want a period of %s", expr, s, next, tc.every)
			}
			s = next
		}
	}
	for _, bad := range []time.Duration{0, 1500 * time.Millisecond, 7 * time.Second, 7 * time.Minute, 2 * time.Hour} {
		if expr, err := fireExpr(bad, at); err == nil {
			t.Errorf("fireExpr(%s) = %q, want an error", bad, expr)
		}
	}
}

func TestLatPointsFromResults(t *testing.T) {
	text := `
=== cronswap fire benchmark, old run
fire-burst {"n":10,"replicas":1,"action_ms":0,"slot":"2026-01-01T00:00:00Z","late_p50_ms":1,"late_p99_ms":2}
=== cronswap fire benchmark, grid
fire-burst {"n":1000,"replicas":1,"action_ms":0,"slot":"2026-12-01T10:10:10Z","late_p50_ms":1950,"late_p99_ms":4770}
fire-burst {"n":1000,"replicas":1,"action_ms":0,"slot":"2026-12-01T10:10:40Z","late_p50_ms":1750,"late_p99_ms":4190}
fire-burst {"n":5000,"replicas":3,"action_ms":0,"slot":"2026-12-01T10:15:27Z","late_p50_ms":null,"late_p99_ms":null}
=== cronswap fire benchmark, long action
fire-burst {"n":50,"replicas":1,"action_ms":30000,"slot":"2026-12-01T11:00:00Z","late_p50_ms":60000,"late_p99_ms":180000}
`
	pts, day, err := latPointsFromResults(text)
	if err != nil {
		t.Fatal(err)
	}
	if day != "2026-12-01" || len(pts) != 2 {
		t.Fatalf("day %q, %d points: %+v", day, len(pts), pts)
	}
	if p := pts[0]; p.n != 1000 || p.replicas != 1 || !slices.Equal(p.p50, []float64{1950, 1750}) || !slices.Equal(p.p99, []float64{4770, 4190}) {
		t.Errorf("first point %+v", p)
	}
	if p := pts[1]; p.n != 5000 || p.replicas != 3 || len(p.p50) != 1 || !math.IsNaN(p.p50[0]) || !math.IsNaN(p.p99[0]) {
		t.Errorf("second point %+v (null lateness is NaN)", p)
	}
	if _, _, err := latPointsFromResults("nothing here"); err == nil {
		t.Error("no fire-burst lines: want an error")
	}
}
