package metrics

import "testing"

// Each outcome written on a request counts under its status; nil counts
// nothing.
func TestCountTrigger(t *testing.T) {
	m := New()
	m.CountTrigger("buffered")
	m.CountTrigger("succeeded")
	m.CountTrigger("succeeded")
	got := scrape(t, m)
	if got["cronswap_triggers_total,outcome=buffered"] != 1 || got["cronswap_triggers_total,outcome=succeeded"] != 2 {
		t.Fatalf("triggers_total: %v", got)
	}
	var none *Metrics
	none.CountTrigger("succeeded")
}
