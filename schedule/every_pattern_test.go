package schedule

import (
	"regexp"
	"testing"
	"time"
)

// The validator's patterns agree with ParseExpr on "@every" expressions:
// every period ParseExpr accepts passes them, and every refused period is
// refused by them too, except a well-formed period above MaxEvery (the
// decoder's check alone). Expressions that are not "@every" always pass.
func TestEveryPatternsAgreeWithTheParser(t *testing.T) {
	isEvery := regexp.MustCompile(EveryExprPattern)
	valid := regexp.MustCompile(EveryValidPattern)
	passes := func(expr string) bool { return !isEvery.MatchString(expr) || valid.MatchString(expr) }

	accepted := []string{"@every 1s", "@every 30s", "@every 90s", "@every 5m", "@every 1h", "@every 24h",
		"@every 1h30m", "@every 1h0m30s", "@every 0h1m", "@every 0h0m1s", "@every 007s", "@every 86400s",
		"@every 1440m", " @every 30s ", "CRON_TZ=Asia/Seoul @every 1h", "TZ=UTC @every 10s", "@every\t5m"}
	refused := []string{"@every -5s", "@every -5m", "@every 0s", "@every 0h0m0s", "@every 1ns", "@every 500ms",
		"@every 1000ms", "@every 10us", "@every 3µs", "@every 1.5s", "@every 1.5m", "@every +5s", "@every",
		"@every ", "@every 5", "@every s", "@every 1d", "@every 5m30", "@every 30s5m", "@every 1h1h",
		"CRON_TZ=UTC @every 0s", "TZ= @every 5s"}
	aboveMax := []string{"@every 25h", "@every 24h1s", "@every 86401s", "@every 1441m"}
	for _, e := range accepted {
		if _, err := ParseExpr(e, time.UTC); err != nil {
			t.Fatalf("ParseExpr(%q): %v; the table is wrong", e, err)
		}
		if !passes(e) {
			t.Errorf("%q: accepted by ParseExpr, refused by the validator's patterns", e)
		}
	}
	for _, e := range append(refused, aboveMax...) {
		if _, err := ParseExpr(e, time.UTC); err == nil {
			t.Fatalf("ParseExpr(%q) accepted it; the table is wrong", e)
		}
	}
	for _, e := range refused {
		if passes(e) {
			t.Errorf("%q: refused by ParseExpr, passed by the validator's patterns", e)
		}
	}
	for _, e := range aboveMax {
		if !passes(e) {
			t.Errorf("%q: documented as the decoder's check alone, but the patterns refuse it (update the doc)", e)
		}
	}
	for _, e := range []string{"0 9 * * *", "*/5 * * * * *", "@hourly", "@everyday", "CRON_TZ=UTC 0 9 * * *", "61 * * * *"} {
		if !passes(e) {
			t.Errorf("%q is not an @every expression; the patterns must leave it to the decoder", e)
		}
	}
}
