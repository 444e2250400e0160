package runstore

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/jobs"
)

// BenchmarkClaimAndEndBatch measures the fire path's store side against
// the test server (or CRONSWAP_MONGO_URI): each iteration claims one slot
// of n forbid jobs, split into parts claim batches sent at once, and ends
// the n runs in one batch. It reports fires per second and the p50/p99
// latency of one claim-plus-end round, and the p50/p90 of the claim alone:
// the server's share of a burst's start lateness.
func BenchmarkClaimAndEndBatch(b *testing.B) {
	for _, c := range []struct{ n, parts int }{{100, 1}, {1000, 1}, {1000, 4}} {
		b.Run(fmt.Sprintf("fires=%d/batches=%d", c.n, c.parts), func(b *testing.B) {
			benchClaimAndEnd(b, c.n, c.parts)
		})
	}
}

func benchClaimAndEnd(b *testing.B, n, parts int) {
	e := newStoreEnv(b)
	s := e.replica("bench", "inc")
	ctx := context.Background()
	slot := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	round := func() (claimed time.Duration, err error) {
		slot = slot.Add(time.Second)
		fires := make([]record.FireClaim, n)
		for i := range fires {
			fires[i] = record.FireClaim{JobID: fmt.Sprintf("bench-%d", i), Slot: slot, Overlap: jobs.OverlapSkip}
		}
		now := time.Now()
		outs := make([][]record.ClaimOutcome, parts)
		var wg sync.WaitGroup
		for p := range outs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				part := fires[p*n/parts : (p+1)*n/parts]
				outs[p] = s.ClaimBatch(ctx, record.BatchClaim{Fires: part, Instance: "bench", Incarnation: "inc", Now: now, TTL: time.Minute})
			}()
		}
		wg.Wait()
		claimed = time.Since(now)
		ends := make([]record.LeaseEnd, 0, n)
		for _, out := range outs {
			for i, o := range out {
				if o.Err != nil || o.Result != record.Acquired {
					return 0, fmt.Errorf("claim %d: %v %v", i, o.Result, o.Err)
				}
				ends = append(ends, record.LeaseEnd{Lease: o.Lease, End: record.RunEnd{Status: record.StatusSucceeded, EndedAt: time.Now()}})
			}
		}
		for i, err := range s.EndBatch(ctx, ends) {
			if err != nil {
				return 0, fmt.Errorf("end %d: %w", i, err)
			}
		}
		return claimed, nil
	}
	// Create the lock documents outside the measurement.
	if _, err := round(); err != nil {
		b.Fatal(err)
	}
	lat := make([]time.Duration, 0, b.N)
	claims := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		c, err := round()
		if err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
		claims = append(claims, c)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N*n)/elapsed.Seconds(), "fires/s")
	b.ReportMetric(quantileMs(lat, 0.50), "p50-ms/round")
	b.ReportMetric(quantileMs(lat, 0.99), "p99-ms/round")
	b.ReportMetric(quantileMs(claims, 0.50), "p50-ms/claim")
	b.ReportMetric(quantileMs(claims, 0.90), "p90-ms/claim")
}

// quantileMs returns the q quantile of ds in milliseconds (ds is sorted).
func quantileMs(ds []time.Duration, q float64) float64 {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return float64(ds[int(q*float64(len(ds)-1))].Microseconds()) / 1000
}

// BenchmarkDecidedSlots measures one read of the decided slots of ids
// jobs with no lock document (a hand-over's daily orphans that never
// fired: each read asks job_runs), beside 20,000 run records of other
// jobs, against the test server (or CRONSWAP_MONGO_URI). It reports the
// read's time per job asked: how long one read of a background hand-over
// holds the server, by the jobs it names.
func BenchmarkDecidedSlots(b *testing.B) {
	e := newStoreEnv(b)
	ctx := context.Background()
	const records = 20000
	slot := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	docs := make([]any, 0, 1000)
	for i := range records {
		at := slot.Add(time.Duration(i%100) * time.Second)
		id := fmt.Sprintf("ran-%d", i/100)
		docs = append(docs, record.RunDoc{ID: record.RunID(id, at), JobID: id, ScheduledAt: at, Status: record.StatusSucceeded,
			EndedAt: at, ExpireAt: at.Add(time.Hour)})
		if len(docs) == cap(docs) {
			if _, err := e.runs.InsertMany(ctx, docs); err != nil {
				b.Fatal(err)
			}
			docs = docs[:0]
		}
	}
	s := e.replica("bench", "inc")
	for _, n := range []int{100, 1000} {
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprintf("orphan-%d", i)
		}
		b.Run(fmt.Sprintf("jobs=%d", n), func(b *testing.B) {
			for b.Loop() {
				if _, err := s.DecidedSlots(ctx, ids, slot.Add(time.Hour)); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/job")
		})
	}
}
