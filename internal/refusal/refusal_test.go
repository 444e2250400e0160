package refusal

import "testing"

func TestMessage(t *testing.T) {
	for _, c := range []struct {
		kind, name, field, reason, want string
	}{
		{"schedule", "daily_report", "cron_expr", "missing", `schedule "daily_report": field cron_expr: missing`},
		{"calendar", "", "dates", "must be an array", `calendar: field dates: must be an array`},
		{"blackout window", "freeze", "", "malformed BSON", `blackout window "freeze": malformed BSON`},
		{"schedule", "", "", "malformed BSON", `schedule: malformed BSON`},
		{"schedule", "a\"b\n", "", "x", `schedule "a\"b\n": x`},
	} {
		if got := Message(c.kind, c.name, c.field, c.reason); got != c.want {
			t.Errorf("Message(%q, %q, %q, %q) = %s, want %s", c.kind, c.name, c.field, c.reason, got, c.want)
		}
	}
}
