package cli_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the zones the tests name, whatever the machine has

	"github.com/cronswap/cronswap/internal/cli"
	"github.com/cronswap/cronswap/internal/config"
)

type result struct {
	code           int
	stdout, stderr string
}

// run calls cli.Main with the program name prepended.
func run(t *testing.T, args ...string) result {
	t.Helper()
	// Keep the caller's environment from steering the commands.
	t.Setenv(config.EnvConfig, "")
	t.Setenv(config.EnvMongoURI, "")
	t.Setenv(config.EnvInstanceID, "")
	var stdout, stderr bytes.Buffer
	code := cli.Main(append([]string{"cronswap"}, args...), &stdout, &stderr)
	return result{code, stdout.String(), stderr.String()}
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

var rfc3339 = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d`)

func TestVersion(t *testing.T) {
	r := run(t, "version")
	if r.code != cli.ExitOK {
		t.Fatalf("version: %v", r)
	}
	if r.stdout != "cronswap dev\n" {
		t.Errorf("version printed %q, want %q", r.stdout, "cronswap dev\n")
	}
}

func TestHelp(t *testing.T) {
	r := run(t, "--help")
	if r.code != cli.ExitOK {
		t.Fatalf("--help: %v", r)
	}
	for _, cmd := range []string{"run", "next", "validate", "version"} {
		if !strings.Contains(r.stdout, cmd) {
			t.Errorf("--help does not list %q:\n%s", cmd, r.stdout)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, args := range [][]string{
		{"validate", "0 9 * * *"},
		{"validate", "*/5 * * * * *"},
		{"validate", "@hourly"},
		{"validate", "@every 30s"},
		{"validate", "CRON_TZ=Asia/Seoul 0 9 * * 1-5"},
		{"validate", "--tz", "Europe/Berlin", "0 9 * * *"},
		{"validate", "0 9 * * *", "--tz", "Europe/Berlin"},
	} {
		r := run(t, args...)
		if r.code != cli.ExitOK {
			t.Errorf("%q: %v", args, r)
			continue
		}
		if !strings.HasPrefix(r.stdout, "valid") {
			t.Errorf("%q printed %q, want it to start with \"valid\"", args, r.stdout)
		}
	}
}

func TestValidateInvalid(t *testing.T) {
	tests := []struct {
		args []string
		want []string // substrings of stderr
	}{
		{[]string{"validate", "61 * * * *"}, []string{"invalid", "61", "59"}},
		{[]string{"validate", "0 25 * * *"}, []string{"invalid", "25"}},
		{[]string{"validate", "* * *"}, []string{"invalid"}},
		{[]string{"validate", "0 0 30 2 *"}, []string{"invalid"}},
		{[]string{"validate", ""}, []string{"empty"}},
		{[]string{"validate", "0 9 * * *", "--tz", "Mars/Base"}, []string{"Mars/Base"}},
		{[]string{"validate"}, []string{"EXPR"}},
		{[]string{"validate", "0 9 * * *", "0 10 * * *"}, []string{"EXPR"}},
		// @every takes whole seconds from 1s to 24h; each refusal says why
		// and gives a valid example.
		{[]string{"validate", "@every -5s"}, []string{"invalid", "is negative", `"@every 30s"`}},
		{[]string{"validate", "@every 0s"}, []string{"invalid", "less than 1s", `"@every 30s"`}},
		{[]string{"validate", "@every 1ns"}, []string{"invalid", "shorter than a second", `"@every 30s"`}},
		{[]string{"validate", "@every 1.5s"}, []string{"invalid", "not a whole number of seconds", `"@every 30s"`}},
		{[]string{"validate", "@every 500ms"}, []string{"invalid", "shorter than a second", `"@every 30s"`}},
		{[]string{"validate", "CRON_TZ=UTC"}, []string{"invalid", "without an expression"}},
	}
	for _, tt := range tests {
		r := run(t, tt.args...)
		if r.code != cli.ExitUserError {
			t.Errorf("%q: exit %d, want %d\n%v", tt.args, r.code, cli.ExitUserError, r)
			continue
		}
		if r.stdout != "" {
			t.Errorf("%q printed %q to stdout, want nothing", tt.args, r.stdout)
		}
		for _, w := range tt.want {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("%q: stderr %q does not mention %q", tt.args, r.stderr, w)
			}
		}
	}
}

// weekdayNinesSeoul computes, with the time package only, the first n
// weekdays at 09:00 Asia/Seoul strictly after now.
func weekdayNinesSeoul(t *testing.T, now time.Time, n int) []string {
	t.Helper()
	seoul, err := time.LoadLocation("Asia/Seoul")
	if err != nil {
		t.Fatal(err)
	}
	local := now.In(seoul)
	var out []string
	for d := 0; len(out) < n; d++ {
		c := time.Date(local.Year(), local.Month(), local.Day()+d, 9, 0, 0, 0, seoul)
		if !c.After(now) || c.Weekday() == time.Saturday || c.Weekday() == time.Sunday {
			continue
		}
		out = append(out, c.Format(time.RFC3339))
	}
	return out
}

func TestNextWeekdaysSeoul(t *testing.T) {
	orders := [][]string{
		{"next", "0 9 * * 1-5", "--tz", "Asia/Seoul", "-n", "3"}, // the documented order: flags after EXPR
		{"next", "--tz", "Asia/Seoul", "-n", "3", "0 9 * * 1-5"}, // flags first
		{"next", "-n", "3", "0 9 * * 1-5", "--tz", "Asia/Seoul"}, // mixed
		{"next", "0 9 * * 1-5", "--tz=Asia/Seoul", "-n=3"},       // = forms
		{"next", "--n", "3", "--tz", "Asia/Seoul", "--", "0 9 * * 1-5"},
	}
	for _, args := range orders {
		before := time.Now()
		r := run(t, args...)
		after := time.Now()
		if r.code != cli.ExitOK {
			t.Errorf("%q: %v", args, r)
			continue
		}
		lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
		if len(lines) != 3 {
			t.Errorf("%q printed %d lines, want 3:\n%s", args, len(lines), r.stdout)
			continue
		}
		for _, l := range lines {
			ts, err := time.Parse(time.RFC3339, l)
			if err != nil {
				t.Errorf("%q: %q is not RFC 3339: %v", args, l, err)
				continue
			}
			if !strings.HasSuffix(l, "+09:00") {
				t.Errorf("%q: %q is not in the +09:00 offset", args, l)
			}
			if !ts.After(before) {
				t.Errorf("%q: %q is not in the future", args, l)
			}
		}
		// The command read the clock somewhere between before and after; a
		// 09:00 boundary could fall in between, so accept either answer.
		if w1, w2 := weekdayNinesSeoul(t, before, 3), weekdayNinesSeoul(t, after, 3); !slices.Equal(lines, w1) && !slices.Equal(lines, w2) {
			t.Errorf("%q printed %q, want %q", args, lines, w1)
		}
	}
}

func TestNextDefaults(t *testing.T) {
	before := time.Now()
	r := run(t, "next", "@hourly")
	if r.code != cli.ExitOK {
		t.Fatalf("%v", r)
	}
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if len(lines) != 5 {
		t.Fatalf("default -n printed %d lines, want 5:\n%s", len(lines), r.stdout)
	}
	var prev time.Time
	for i, l := range lines {
		ts, err := time.Parse(time.RFC3339, l)
		if err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		if !strings.HasSuffix(l, "Z") {
			t.Errorf("%q: want UTC (Z) without --tz", l)
		}
		if ts.Minute() != 0 || ts.Second() != 0 || !ts.After(before) {
			t.Errorf("%q is not a future full hour", l)
		}
		if i > 0 && ts.Sub(prev) != time.Hour {
			t.Errorf("%q follows %v by %v, want 1h", l, prev, ts.Sub(prev))
		}
		prev = ts
	}
}

func TestNextSeconds(t *testing.T) {
	r := run(t, "next", "*/10 * * * * *", "-n", "4")
	if r.code != cli.ExitOK {
		t.Fatalf("%v", r)
	}
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if len(lines) != 4 {
		t.Fatalf("printed %d lines, want 4", len(lines))
	}
	for i := 1; i < len(lines); i++ {
		a, _ := time.Parse(time.RFC3339, lines[i-1])
		b, _ := time.Parse(time.RFC3339, lines[i])
		if b.Sub(a) != 10*time.Second || b.Second()%10 != 0 {
			t.Errorf("%s then %s: want 10s steps on multiples of 10", lines[i-1], lines[i])
		}
	}
}

func TestNextErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"next", "0 9 * * *", "-n", "0"}, "-n 0"},
		{[]string{"next", "-n", "0", "0 9 * * *"}, "-n 0"},
		{[]string{"next", "0 9 * * *", "-n", "-2"}, "-n -2"},
		{[]string{"next", "0 9 * * *", "-n", "1001"}, "-n 1001"},
		{[]string{"next", "0 9 * * *", "-n", "three"}, "three"},
		{[]string{"next", "0 9 * * *", "--tz", "Mars/Base"}, "Mars/Base"},
		{[]string{"next", "--tz", "Mars/Base", "0 9 * * *"}, "Mars/Base"},
		{[]string{"next", "0 9 * * *", "--tz", "Local"}, "Local"},
		{[]string{"next", "61 * * * *"}, "61"},
		{[]string{"next"}, "EXPR"},
		{[]string{"next", "0 9 * * *", "0 10 * * *"}, "EXPR"},
		{[]string{"next", "0 9 * * *", "--bogus"}, "bogus"},
	}
	for _, tt := range tests {
		r := run(t, tt.args...)
		if r.code != cli.ExitUserError {
			t.Errorf("%q: exit %d, want %d\n%v", tt.args, r.code, cli.ExitUserError, r)
			continue
		}
		if !strings.Contains(r.stderr, tt.want) {
			t.Errorf("%q: stderr %q does not mention %q", tt.args, r.stderr, tt.want)
		}
		if rfc3339.MatchString(r.stdout) {
			t.Errorf("%q printed fire times despite the error: %q", tt.args, r.stdout)
		}
	}
}

func TestRunMissingConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nonexistent.yaml")
	for _, args := range [][]string{
		{"run", "--config", "/nonexistent"},
		{"run", "--config", path},
		{"run", "-c", path},
	} {
		r := run(t, args...)
		if r.code != cli.ExitUserError {
			t.Errorf("%q: exit %d, want %d\n%v", args, r.code, cli.ExitUserError, r)
			continue
		}
		name := args[len(args)-1]
		if !strings.Contains(r.stderr, name) || !strings.Contains(r.stderr, "no such file") {
			t.Errorf("%q: stderr %q should name %s and say it does not exist", args, r.stderr, name)
		}
	}
}

func TestRunMissingConfigFromEnv(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nonexistent.yaml")
	t.Setenv(config.EnvConfig, path)
	var stdout, stderr bytes.Buffer
	code := cli.Main([]string{"cronswap", "run"}, &stdout, &stderr)
	if code != cli.ExitUserError || !strings.Contains(stderr.String(), path) {
		t.Errorf("CRONSWAP_CONFIG=%s run: exit %d, stderr %q", path, code, stderr.String())
	}
}

func TestRunBadConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.yaml")
	writeFile(t, path, "watch: {mod: poll}\n")
	r := run(t, "run", "--config", path)
	if r.code != cli.ExitUserError || !strings.Contains(r.stderr, "mod") || !strings.Contains(r.stderr, path) {
		t.Errorf("run with an unknown key: %v", r)
	}
}

func TestRunBadLogFlags(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"run", "--log-format", "xml"}, "xml"},
		{[]string{"run", "--log-format", "xml", "--config", "/nonexistent"}, "xml"},
		{[]string{"run", "--log-level", "loud"}, "loud"},
	}
	for _, tt := range tests {
		r := run(t, tt.args...)
		if r.code != cli.ExitUserError {
			t.Errorf("%q: exit %d, want %d\n%v", tt.args, r.code, cli.ExitUserError, r)
			continue
		}
		if !strings.Contains(r.stderr, tt.want) {
			t.Errorf("%q: stderr %q does not mention %q", tt.args, r.stderr, tt.want)
		}
	}
}

func TestRunBadInstanceTimezone(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tz.yaml")
	writeFile(t, path, "timezone: Local\n")
	r := run(t, "run", "--config", path, "--http-listen", "127.0.0.1:0")
	if r.code != cli.ExitUserError || !strings.Contains(r.stderr, "Local") {
		t.Errorf("run with timezone Local: %v", r)
	}
}

func TestUnknownCommand(t *testing.T) {
	r := run(t, "frobnicate")
	if r.code == cli.ExitOK {
		t.Errorf("unknown command succeeded: %v", r)
	}
}

func TestUnknownCommandIsUserError(t *testing.T) {
	var out, errb bytes.Buffer
	if code := cli.Main([]string{"cronswap", "frobnicate"}, &out, &errb); code != cli.ExitUserError {
		t.Fatalf("exit %d, want %d; stderr %q", code, cli.ExitUserError, errb.String())
	}
}

// next and validate do not list --config and --mongo-uri, but accept them.
func TestEveryCommandTakesConfigAndMongoURI(t *testing.T) {
	var out, errb bytes.Buffer
	code := cli.Main([]string{"cronswap", "validate", "--config", "", "--mongo-uri", "mongodb://127.0.0.1:1/", "0 9 * * *"}, &out, &errb)
	if code != cli.ExitOK {
		t.Fatalf("validate with --config/--mongo-uri: exit %d, stderr %q", code, errb.String())
	}
	code = cli.Main([]string{"cronswap", "next", "--mongo-uri", "mongodb://127.0.0.1:1/", "-n", "1", "@hourly"}, &out, &errb)
	if code != cli.ExitOK {
		t.Fatalf("next with --mongo-uri: exit %d, stderr %q", code, errb.String())
	}
	// The flags a command does not list are accepted all the same.
	for _, args := range [][]string{
		{"next", "--log-format", "json", "--log-level", "debug", "-n", "1", "@hourly"},
		{"validate", "--log-format", "json", "--log-level", "debug", "0 9 * * *"},
		{"version", "--config", "", "--mongo-uri", "mongodb://127.0.0.1:1/", "--log-format", "json", "--log-level", "debug"},
		{"completion", "--config", "", "--mongo-uri", "mongodb://127.0.0.1:1/", "--log-format", "json", "--log-level", "debug", "bash"},
	} {
		out.Reset()
		errb.Reset()
		if code := cli.Main(append([]string{"cronswap"}, args...), &out, &errb); code != cli.ExitOK {
			t.Errorf("%q: exit %d, stderr %q", args, code, errb.String())
		}
	}
}
