package main

import (
	"crypto/sha256"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cronswap/cronswap/internal/testmongo"
	"github.com/cronswap/cronswap/schedule"
)

func TestEditExprUniqueValidAndNotInitial(t *testing.T) {
	seen := map[string]int{}
	for i := 0; i < 50000; i++ {
		e := editExpr(i)
		if e == initialExpr {
			t.Fatalf("editExpr(%d) = the initial expression %q: the edit would not change the timer", i, e)
		}
		if j, ok := seen[e]; ok {
			t.Fatalf("editExpr(%d) = editExpr(%d) = %q", i, j, e)
		}
		seen[e] = i
	}
	for _, i := range []int{0, 59, 1439, 40319, maxEdits - 1} {
		e := editExpr(i)
		f := strings.Fields(e)
		if len(f) != 5 || f[4] != "*" {
			t.Fatalf("editExpr(%d) = %q: want 5 fields ending in *", i, e)
		}
		if f[3] == "11" || f[3] == "12" {
			t.Errorf("editExpr(%d) = %q fires in November or December", i, e)
		}
		if _, err := schedule.ParseExpr(e, time.UTC); err != nil {
			t.Errorf("editExpr(%d) = %q does not parse: %v", i, e, err)
		}
	}
}

func TestStrideVisitsDistinctJobs(t *testing.T) {
	for _, n := range []int{1, 7, 1000, 7919, 100000, 7919 * 7907} {
		s := strideFor(n)
		if gcd(s, n) != 1 {
			t.Fatalf("strideFor(%d) = %d shares a factor with n", n, s)
		}
	}
	n := 1000
	s := strideFor(n)
	seen := map[int]bool{}
	for i := 0; i < n; i++ {
		k := i * s % n
		if seen[k] {
			t.Fatalf("job %d visited twice within %d edits", k, n)
		}
		seen[k] = true
	}
}

func TestSeriesPercentilesNearestRank(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	s := newSeries("x", ds, 0)
	for _, c := range []struct{ p, want float64 }{{50, 50}, {90, 90}, {99, 99}, {100, 100}, {1, 1}} {
		if got := s.pct(c.p); got != c.want {
			t.Errorf("p%g = %g, want %g", c.p, got, c.want)
		}
	}
	if !math.IsNaN(newSeries("empty", nil, 0).pct(50)) {
		t.Error("percentile of an empty series should be NaN")
	}
}

func TestHistogramQuantileAndShare(t *testing.T) {
	// 10 observations ≤ 0.001, 10 more in (0.001, 0.002], none above.
	h := histogram{present: true, count: 20, bounds: []float64{.0005, .001, .002, .005}, cum: []uint64{0, 10, 20, 20}}
	if got := h.shareAtMost(.001); got != .5 {
		t.Errorf("share ≤ 1 ms = %g, want 0.5", got)
	}
	if got := h.shareAtMost(.003); !math.IsNaN(got) {
		t.Errorf("share at a non-bucket bound = %g, want NaN", got)
	}
	if got := h.quantile(.5); math.Abs(got-.001) > 1e-12 {
		t.Errorf("median = %g, want 0.001", got)
	}
	if got := h.quantile(.75); math.Abs(got-.0015) > 1e-12 {
		t.Errorf("p75 = %g, want 0.0015 (interpolated)", got)
	}
	before := histogram{present: true, count: 5, bounds: h.bounds, cum: []uint64{0, 5, 5, 5}}
	d := h.minus(before)
	if d.count != 15 || d.cum[1] != 5 || d.cum[2] != 15 {
		t.Errorf("delta = %+v, want count 15, cum[1] 5, cum[2] 15", d)
	}
	if !math.IsNaN((histogram{present: true}).quantile(.5)) {
		t.Error("quantile without observations should be NaN")
	}
	over := histogram{present: true, count: 2, bounds: []float64{.001}, cum: []uint64{1}}
	if !math.IsInf(over.quantile(.99), 1) {
		t.Error("a quantile above the last bound should be +Inf")
	}
}

func TestDescribeIdleScalesToAMinute(t *testing.T) {
	total, parts := describeIdle(map[string]int{"getMore": 20, "update": 4, "isMaster": 2}, 20*time.Second)
	if total != 78 {
		t.Errorf("total = %g per minute, want 78", total)
	}
	if want := "getMore 60.0,update 12.0,isMaster 6.0"; strings.Join(parts, ",") != want {
		t.Errorf("parts = %q, want %q", strings.Join(parts, ","), want)
	}
}

// A results file names the test server's jar it measured, with the start
// of its SHA-256 (here of a stand-in file).
func TestServerJarNamesTheJarAndItsHash(t *testing.T) {
	p := filepath.Join(t.TempDir(), "mongo-server.jar")
	if err := os.WriteFile(p, []byte("jar"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(testmongo.EnvJar, p)
	sum := sha256.Sum256([]byte("jar"))
	if got, want := serverJar(), fmt.Sprintf("%s (sha256 %x…)", p, sum[:6]); got != want {
		t.Errorf("serverJar() = %q, want %q", got, want)
	}
	t.Setenv(testmongo.EnvJar, filepath.Join(t.TempDir(), "absent.jar"))
	if got := serverJar(); !strings.HasPrefix(got, "unknown (") {
		t.Errorf("serverJar() with no jar = %q, want it to say unknown and why", got)
	}
}
