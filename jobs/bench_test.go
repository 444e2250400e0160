package jobs

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"
)

// BenchmarkClaimAndEndBatch measures the fire path's store side against
// the test server (or CRONSWAP_MONGO_URI): each iteration claims one slot
// of 100 forbid jobs in one batch and ends the 100 runs in one batch. It
// reports fires per second and the p50/p99 latency of one
// claim-plus-end round of the batch.
func BenchmarkClaimAndEndBatch(b *testing.B) {
	e := newStoreEnv(b)
	s := e.replica("bench", "inc")
	ctx := context.Background()
	const n = 100
	slot := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	round := func() error {
		slot = slot.Add(time.Second)
		fires := make([]FireClaim, n)
		for i := range fires {
			fires[i] = FireClaim{JobID: fmt.Sprintf("bench-%d", i), Slot: slot, Overlap: OverlapForbid}
		}
		now := time.Now()
		out := s.ClaimBatch(ctx, BatchClaim{Fires: fires, Instance: "bench", Incarnation: "inc", Now: now, TTL: time.Minute})
		ends := make([]LeaseEnd, 0, n)
		for i, o := range out {
			if o.Err != nil || o.Result != Acquired {
				return fmt.Errorf("claim %d: %v %v", i, o.Result, o.Err)
			}
			ends = append(ends, LeaseEnd{Lease: o.Lease, End: RunEnd{Status: StatusSucceeded, EndedAt: time.Now()}})
		}
		for i, err := range s.EndBatch(ctx, ends) {
			if err != nil {
				return fmt.Errorf("end %d: %w", i, err)
			}
		}
		return nil
	}
	// Create the lock documents outside the measurement.
	if err := round(); err != nil {
		b.Fatal(err)
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if err := round(); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	elapsed := time.Since(start)
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(b.N*n)/elapsed.Seconds(), "fires/s")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs/batch")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs/batch")
}
