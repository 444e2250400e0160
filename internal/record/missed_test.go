package record

import (
	"testing"
	"time"
)

// everySecond is the slot sequence of an every-second job.
func everySecond(t time.Time) time.Time { return t.Truncate(time.Second).Add(time.Second) }

// every returns the slot sequence of a job firing every d (from the epoch).
func every(d time.Duration) NextFunc {
	return func(t time.Time) time.Time { return t.Truncate(d).Add(d) }
}

func TestCountSlots(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	first, last, n, complete := CountSlots(everySecond, t0, t0.Add(24*time.Hour))
	if !complete || n != 86400 || !first.Equal(t0.Add(time.Second)) || !last.Equal(t0.Add(24*time.Hour)) {
		t.Fatalf("a day of an every-second job: %s .. %s, %d (complete %v), want 86400 slots", first, last, n, complete)
	}
	if _, _, n, _ := CountSlots(every(5*time.Second), t0, t0.Add(4*time.Second)); n != 0 {
		t.Fatalf("no slot in (t0, t0+4s] of an every-5s job, got %d", n)
	}
	first, last, n, _ = CountSlots(every(5*time.Second), t0.Add(-time.Nanosecond), t0.Add(20*time.Second))
	if n != 5 || !first.Equal(t0) || !last.Equal(t0.Add(20*time.Second)) {
		t.Fatalf("every 5 s over [t0, t0+20s]: %s .. %s, %d, want 5 from t0", first, last, n)
	}
}
