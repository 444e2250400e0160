package firepath

import (
	"math"
	"slices"
	"sync"
	"time"
)

// The claim-latency estimate: what recent claim batches of this runner
// took, which a claim batch's budget and a non-owner's grace follow once
// the database is slow (docs/firepath.md, "Under a backlog").
const (
	// latencyWindow is how many recent claim batches the estimate is
	// taken over: enough for a 90th percentile, few enough to follow a
	// change of load within a few batches.
	latencyWindow = 32
	// latencyMinSamples is how many batches within latencyMaxAge the
	// estimate needs; with fewer there is none (the fire path behaves as
	// without one), so one slow first batch (a cold connection, the index
	// check) does not drop fires.
	latencyMinSamples = 8
	// latencyMaxAge is how long a batch's latency counts. A runner that
	// sends no batch for this long (every fire judged hopeless, or no
	// fires) has no estimate again, so the next batches go out as without
	// one and measure the database afresh: an estimate cannot keep
	// dropping fires after the load is gone.
	latencyMaxAge = 30 * time.Second
	// latencyQuantile is the quantile of the window the estimate is: most
	// batches answer within it.
	latencyQuantile = 0.9
)

// Factors applied to the estimate (see claimBatch and claimGrace).
const (
	// hopelessFactor: a fire is not sent while its time left before its
	// starting deadline, times hopelessFactor, is below the estimate — the
	// batch would have to answer more than twice as fast as the recent
	// 90th percentile for the fire to start in time. Sending it anyway
	// costs the database a write whose answer would come too late or not
	// at all (an unknown claim to read back), which is what feeds an
	// overload.
	hopelessFactor = 2
	// graceFactor: a non-owner waits at least graceFactor times the
	// estimate before claiming a fire for its owner — the owner's claim
	// may wait behind a batch already out (one batch time) and then take
	// its own.
	graceFactor = 2
)

// claimLatency is the claim-latency estimate of one runner: the
// latencyQuantile of the last latencyWindow claim batches that were
// measured within latencyMaxAge. Safe for concurrent use.
type claimLatency struct {
	mu      sync.Mutex
	samples [latencyWindow]latencySample
	next    int // where the next sample goes
}

type latencySample struct {
	at   time.Time // when the batch answered
	took time.Duration
}

// observe records a batch that answered at now after took.
func (l *claimLatency) observe(now time.Time, took time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.samples[l.next] = latencySample{at: now, took: max(took, 0)}
	l.next = (l.next + 1) % latencyWindow
}

// estimate returns the estimate at now: 0 when fewer than
// latencyMinSamples batches answered within latencyMaxAge.
func (l *claimLatency) estimate(now time.Time) time.Duration {
	l.mu.Lock()
	var recent []time.Duration
	for _, s := range l.samples {
		if !s.at.IsZero() && now.Sub(s.at) <= latencyMaxAge {
			recent = append(recent, s.took)
		}
	}
	l.mu.Unlock()
	if len(recent) < latencyMinSamples {
		return 0
	}
	slices.Sort(recent)
	// The smallest sample with at least latencyQuantile of the window at
	// or below it.
	i := int(math.Ceil(float64(len(recent))*latencyQuantile)) - 1
	return recent[min(max(i, 0), len(recent)-1)]
}
