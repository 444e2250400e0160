package cli_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/cronswap/cronswap/internal/cli"
)

// TestNextDialect: next reads the dialect; an expression with H needs
// --id, and with it lists that job's concrete times (the example of
// docs/time.md: daily_report's "H H * * *" is "14 15 * * *").
func TestNextDialect(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"next", "H H * * *", "--id", "daily_report", "--from", "2027-01-01T00:00:00Z", "-n", "2"},
			"2027-01-01T15:14:00Z\n2027-01-02T15:14:00Z\n"},
		{[]string{"next", "0 9 L * *", "--from", "2027-01-01T00:00:00Z", "-n", "3"},
			"2027-01-31T09:00:00Z\n2027-02-28T09:00:00Z\n2027-03-31T09:00:00Z\n"},
		{[]string{"next", "0 9 ? * FRI#3", "--from", "2027-01-01T00:00:00Z", "-n", "2"},
			"2027-01-15T09:00:00Z\n2027-02-19T09:00:00Z\n"},
		{[]string{"next", "30 2 ? 3 SUN#2", "--tz", "America/New_York", "--from", "2027-03-01T00:00:00-05:00", "-n", "1"},
			"2027-03-14T03:00:00-04:00  shifted: 02:30 does not exist on 2027-03-14 in America/New_York (the clocks go from 02:00 to 03:00): fires at 03:00 EDT instead\n"},
	} {
		r := run(t, c.args...)
		if r.code != cli.ExitOK || r.stdout != c.want {
			t.Errorf("%q: %v\nwant stdout %q", c.args, r, c.want)
		}
	}
	r := run(t, "next", "H H * * *")
	if r.code != cli.ExitUserError || !strings.Contains(r.stderr, "give it with --id") {
		t.Errorf("next with H and no --id: %v", r)
	}
	r = run(t, "next", "0 9 * * 6#6")
	if r.code != cli.ExitUserError || !strings.Contains(r.stderr, "the k of n#k is 1 to 5") {
		t.Errorf("next 6#6: %v", r)
	}
}

// TestValidateDialect: validate checks the syntax of an expression with H
// without --id, and shows what it reads as for the job with it.
func TestValidateDialect(t *testing.T) {
	r := run(t, "validate", "H(0-29)/10 H(9-17) * * 1-5")
	if r.code != cli.ExitOK || !strings.HasPrefix(r.stdout, "valid syntax; H takes its values from the job id") {
		t.Errorf("validate without --id: %v", r)
	}
	r = run(t, "validate", "H(0-29)/10 H(9-17) * * 1-5", "--id", "daily_report")
	if r.code != cli.ExitOK || !strings.HasPrefix(r.stdout, `valid; for job "daily_report" it reads "4-29/10 9 * * 1-5"; next fire `) {
		t.Errorf("validate --id: %v", r)
	}
	r = run(t, "validate", "H H * * *", "--id", "daily_report", "-o", "json")
	var got map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &got); r.code != cli.ExitOK || err != nil ||
		got["resolved"] != "14 15 * * *" || got["job_id"] != "daily_report" || got["next_run"] == nil {
		t.Errorf("validate --id -o json: %v (%v)", r, err)
	}
	r = run(t, "validate", "H H * * *", "-o", "json")
	if err := json.Unmarshal([]byte(r.stdout), &got); r.code != cli.ExitOK || err != nil || got["next_run"] != nil || got["note"] == nil {
		t.Errorf("validate without --id -o json: %v (%v)", r, err)
	}
	for _, c := range []struct{ expr, want string }{
		{"H/0 * * * *", "the step of H is 0"},
		{"0 0 32W * *", "W needs a day from 1 to 31"},
		{"0 0 * * 6#6", "the k of n#k is 1 to 5"},
		{"0 L * * *", "hour L: L, W and # are for day of month"},
	} {
		r := run(t, "validate", c.expr)
		if r.code != cli.ExitUserError || !strings.Contains(r.stderr, c.want) {
			t.Errorf("validate %q: %v, want %q", c.expr, r, c.want)
		}
	}
}
