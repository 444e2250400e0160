package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cronswap/cronswap/internal/cli"
)

// `cronswap next` across America/New_York's 2027 transitions (clocks
// forward 02:00 → 03:00 on 14 March, back 02:00 → 01:00 on 7 November),
// compared with golden files in testdata/next: a fixed time in the skipped
// hour is marked shifted and runs at 03:00, a fixed time in the repeated
// hour is marked once and listed once, a step expression lists the
// repeated quarter hours as repeats and merges the skipped ones into 03:00,
// and --dst plain lists what robfig does, without marks. The text output
// and -o json carry the same marks. Regenerate with -update after checking
// the difference by eye.
func TestNextDaylightSavingGolden(t *testing.T) {
	const ny = "America/New_York"
	for _, c := range []struct {
		golden string
		args   []string
	}{
		{"spring_0230", []string{"30 2 * * *", "--from", "2027-03-12T12:00:00-05:00", "-n", "4"}},
		{"spring_0230_plain", []string{"30 2 * * *", "--from", "2027-03-12T12:00:00-05:00", "-n", "4", "--dst", "plain"}},
		{"fall_0130", []string{"30 1 * * *", "--from", "2027-11-05T12:00:00-04:00", "-n", "4"}},
		{"fall_0130_plain", []string{"30 1 * * *", "--from", "2027-11-05T12:00:00-04:00", "-n", "4", "--dst", "plain"}},
		{"spring_quarters", []string{"*/15 * * * *", "--from", "2027-03-14T01:20:00-05:00", "-n", "6"}},
		{"fall_quarters", []string{"*/15 * * * *", "--from", "2027-11-07T00:50:00-04:00", "-n", "11"}},
	} {
		t.Run(c.golden, func(t *testing.T) {
			args := append([]string{"next"}, c.args...)
			args = append(args, "--tz", ny)
			text := run(t, args...)
			js := run(t, append(args, "-o", "json")...)
			if text.code != cli.ExitOK || js.code != cli.ExitOK {
				t.Fatalf("text: %v\njson: %v", text, js)
			}
			checkGolden(t, c.golden+".txt", text.stdout)
			checkGolden(t, c.golden+".json", js.stdout)

			// The two outputs say the same: every text line is the
			// JSON element's time, then its mark and note.
			var fires []struct{ At, Mark, Note string }
			if err := json.Unmarshal([]byte(js.stdout), &fires); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSuffix(text.stdout, "\n"), "\n")
			if len(lines) != len(fires) {
				t.Fatalf("%d text lines, %d JSON fires", len(lines), len(fires))
			}
			for i, f := range fires {
				want := f.At
				if f.Mark != "" {
					want += "  " + f.Mark + ": " + f.Note
				}
				if lines[i] != want {
					t.Errorf("line %d = %q, JSON says %q", i, lines[i], want)
				}
			}
		})
	}
}

func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "next", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs:\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

func TestNextDaylightSavingFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"next", "30 1 * * *", "--dst", "summer"}, `--dst: unknown daylight-saving mode "summer"`},
		{[]string{"next", "30 1 * * *", "--from", "yesterday"}, `--from "yesterday": want an RFC 3339 time`},
		{[]string{"next", "30 1 * * *", "--from", "2027-11-07 01:00"}, `--from "2027-11-07 01:00"`},
	} {
		r := run(t, c.args...)
		if r.code != cli.ExitUserError || !strings.Contains(r.stderr, c.want) || r.stdout != "" {
			t.Errorf("%q: %v\nwant exit 1 saying %q", c.args, r, c.want)
		}
	}
	// --from is exclusive, like the engine's next activation after now.
	r := run(t, "next", "0 9 * * *", "--from", "2027-01-01T09:00:00Z", "-n", "1")
	if r.code != cli.ExitOK || r.stdout != "2027-01-02T09:00:00Z\n" {
		t.Errorf("next after a fire time: %v", r)
	}
}
