package jobs

import (
	"testing"
	"time"
)

func TestRetryPolicyDelayAndValidate(t *testing.T) {
	t.Parallel()
	p := RetryPolicy{Attempts: 5, Backoff: 30 * time.Second, MaxBackoff: 100 * time.Second}
	for failed, want := range map[int]time.Duration{1: 30 * time.Second, 2: time.Minute, 3: 100 * time.Second, 4: 100 * time.Second} {
		if got := p.Delay(failed); got != want {
			t.Errorf("Delay(%d) = %s, want %s", failed, got, want)
		}
	}
	if got := (RetryPolicy{Attempts: 3}).Delay(1); got != DefaultRetryBackoff {
		t.Errorf("default Delay(1) = %s, want %s", got, DefaultRetryBackoff)
	}
	for _, bad := range []RetryPolicy{{Attempts: -1}, {Attempts: MaxRetryAttempts + 1}, {Attempts: 2, Backoff: -time.Second},
		{Attempts: 2, MaxBackoff: -time.Second}, {Attempts: 2, Backoff: time.Minute, MaxBackoff: time.Second},
		// Below the default backoff: the cap would shorten the first wait.
		{Attempts: 2, MaxBackoff: DefaultRetryBackoff - time.Second}} {
		if bad.Validate() == nil {
			t.Errorf("%+v: Validate accepted it", bad)
		}
	}
	for _, good := range []RetryPolicy{p, {Attempts: 2, MaxBackoff: DefaultRetryBackoff}, {Attempts: 2, Backoff: time.Hour}} {
		if err := good.Validate(); err != nil {
			t.Errorf("%+v: %v", good, err)
		}
	}
}
