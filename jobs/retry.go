package jobs

import (
	"fmt"
	"time"
)

// Limits and defaults of RetryPolicy.
const (
	// MaxRetryAttempts bounds RetryPolicy.Attempts: every attempt of a
	// slot gets a higher fence, and all of them stay below the fence of
	// the next slot.
	MaxRetryAttempts = 100
	// DefaultRetryBackoff is the wait before the second attempt when
	// RetryPolicy.Backoff is 0.
	DefaultRetryBackoff = 30 * time.Second
	// DefaultRetryMaxBackoff caps the doubling waits when
	// RetryPolicy.MaxBackoff is 0.
	DefaultRetryMaxBackoff = 10 * time.Minute
)

// RetryPolicy says how a failed run of an action is tried again: as
// further attempts of the same (job, slot), the same run id and record,
// each with a new, higher fence, after a wait that doubles from Backoff up
// to MaxBackoff. Only a run that ended failed is retried (not one
// abandoned, skipped or missed). The zero policy does not retry.
type RetryPolicy struct {
	// Attempts is the most attempts a slot gets, the first included; 0
	// or 1: no retry.
	Attempts int `yaml:"attempts"`
	// Backoff is the wait after the first failed attempt; 0:
	// DefaultRetryBackoff.
	Backoff time.Duration `yaml:"backoff"`
	// MaxBackoff caps the wait, which doubles after each failed attempt;
	// 0: DefaultRetryMaxBackoff (or Backoff, when longer). Given, it is
	// not shorter than Backoff (DefaultRetryBackoff when Backoff is 0).
	MaxBackoff time.Duration `yaml:"max_backoff"`
}

// Enabled reports whether p retries at all.
func (p RetryPolicy) Enabled() bool { return p.Attempts > 1 }

// Validate reports what is wrong with p, without naming the job.
func (p RetryPolicy) Validate() error {
	switch {
	case p.Attempts < 0 || p.Attempts > MaxRetryAttempts:
		return fmt.Errorf("retry.attempts %d: must be between 0 and %d (the first attempt included; 0 or 1: no retry)",
			p.Attempts, MaxRetryAttempts)
	case p.Backoff < 0:
		return fmt.Errorf("retry.backoff %s: must not be negative (0: %s)", p.Backoff, DefaultRetryBackoff)
	case p.MaxBackoff < 0:
		return fmt.Errorf("retry.max_backoff %s: must not be negative (0: %s)", p.MaxBackoff, DefaultRetryMaxBackoff)
	case p.MaxBackoff > 0 && p.Backoff > 0 && p.MaxBackoff < p.Backoff:
		return fmt.Errorf("retry.max_backoff %s: must not be shorter than retry.backoff %s", p.MaxBackoff, p.Backoff)
	case p.MaxBackoff > 0 && p.Backoff == 0 && p.MaxBackoff < DefaultRetryBackoff:
		return fmt.Errorf("retry.max_backoff %s: must not be shorter than retry.backoff, whose default is %s (set retry.backoff too)",
			p.MaxBackoff, DefaultRetryBackoff)
	}
	return nil
}

// Delay is the wait after attempt failed (1 the first) before the next:
// Backoff doubled failed-1 times, at most MaxBackoff.
func (p RetryPolicy) Delay(failed int) time.Duration {
	backoff, maxBackoff := p.Backoff, p.MaxBackoff
	if backoff <= 0 {
		backoff = DefaultRetryBackoff
	}
	if maxBackoff <= 0 {
		maxBackoff = max(DefaultRetryMaxBackoff, backoff)
	}
	d := backoff
	for i := 1; i < failed && d < maxBackoff; i++ {
		d *= 2
	}
	return min(d, maxBackoff)
}
