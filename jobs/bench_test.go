package jobs

import (
	"context"
	"sort"
	"testing"
	"time"
)

// BenchmarkLockAcquireRelease measures claim+release round trips of one
// job's lock against the test server (or CRONSWAP_MONGO_URI): each
// iteration claims the next slot exclusively and releases it, two
// conditional single-document updates. It reports round trips per second
// and the p50/p99 latency of one acquire+release.
func BenchmarkLockAcquireRelease(b *testing.B) {
	e := newStoreEnv(b)
	s := e.store("bench")
	ctx := context.Background()
	slot := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	// Create the lock document outside the measurement.
	c, err := s.Claim(ctx, ClaimRequest{JobID: "bench", Slot: slot, Instance: "bench", RunID: "warm", Overlap: OverlapForbid, Now: time.Now(), TTL: time.Minute})
	if err != nil || c.Result != Acquired {
		b.Fatalf("warm-up claim: %v %v", c.Result, err)
	}
	if err := s.Release(ctx, c.Lease, StatusSucceeded, time.Now()); err != nil {
		b.Fatal(err)
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		slot = slot.Add(time.Second)
		c, err := s.Claim(ctx, ClaimRequest{JobID: "bench", Slot: slot, Instance: "bench", RunID: newRunID(), Overlap: OverlapForbid, Now: t0, TTL: time.Minute})
		if err != nil || c.Result != Acquired {
			b.Fatalf("claim %d: %v %v", i, c.Result, err)
		}
		if err := s.Release(ctx, c.Lease, StatusSucceeded, time.Now()); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	elapsed := time.Since(start)
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "acquire+release/s")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}
