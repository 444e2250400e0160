package cli

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	ucli "github.com/urfave/cli/v2"
)

func testApp() *ucli.App {
	leafFlags := []ucli.Flag{
		&ucli.IntFlag{Name: "n", Value: 5},
		&ucli.StringFlag{Name: "tz", Aliases: []string{"z"}},
		&ucli.BoolFlag{Name: "verbose", Aliases: []string{"v"}},
	}
	return &ucli.App{
		Name:                 "cronswap",
		EnableBashCompletion: true,
		Flags:                []ucli.Flag{&ucli.StringFlag{Name: "profile"}},
		Commands: []*ucli.Command{
			{Name: "next", Flags: leafFlags},
			{
				Name:  "schedules",
				Flags: []ucli.Flag{&ucli.StringFlag{Name: "mongo-uri"}},
				Subcommands: []*ucli.Command{
					{Name: "get", Flags: leafFlags},
					{Name: "set", Aliases: []string{"put"}, Flags: []ucli.Flag{&ucli.StringFlag{Name: "cron"}}},
				},
			},
		},
	}
}

func TestInterspersed(t *testing.T) {
	tests := []struct {
		in, want string // space-separated; '_' stands for a space inside an argument
	}{
		{"", ""},
		{"next", "next"},
		{"next 0_9_*_*_*", "next 0_9_*_*_*"},
		{"next 0_9_*_*_* -n 3", "next -n 3 0_9_*_*_*"},
		{"next 0_9_*_*_* -n 3 --tz Asia/Seoul", "next -n 3 --tz Asia/Seoul 0_9_*_*_*"},
		{"next -n 3 0_9_*_*_* --tz Asia/Seoul", "next -n 3 --tz Asia/Seoul 0_9_*_*_*"},
		{"next 0_9_*_*_* --tz=Asia/Seoul -n=3", "next --tz=Asia/Seoul -n=3 0_9_*_*_*"},
		{"next 0_9_*_*_* -z UTC", "next -z UTC 0_9_*_*_*"},
		// Bool flags take no value: the next argument stays positional.
		{"next 0_9_*_*_* -v -n 2", "next -v -n 2 0_9_*_*_*"},
		{"next -v 0_9_*_*_*", "next -v 0_9_*_*_*"},
		{"next 0_9_*_*_* --verbose=false", "next --verbose=false 0_9_*_*_*"},
		// A flag's value may look like a flag.
		{"next 0_9_*_*_* -n -3", "next -n -3 0_9_*_*_*"},
		// Everything after -- is positional, and -- is kept when an argument looks like a flag.
		{"next -n 2 -- -1_*_*_*_*", "next -n 2 -- -1_*_*_*_*"},
		{"next -- 0_9_*_*_* -n 2", "next -- 0_9_*_*_* -n 2"},
		{"next 0_9_*_*_* -n 2 -- x", "next -n 2 -- 0_9_*_*_* x"},
		// "-" alone is an argument.
		{"next - -n 2", "next -n 2 -"},
		// Unknown flags and help are moved but take no value.
		{"next 0_9_*_*_* --bogus x", "next --bogus 0_9_*_*_* x"},
		{"next 0_9_*_*_* --help", "next --help 0_9_*_*_*"},
		// A dangling value flag is moved as it is; urfave/cli reports it.
		{"next 0_9_*_*_* -n", "next -n 0_9_*_*_*"},
		// Subcommands: the parent's flags stay before the subcommand name.
		{"schedules --mongo-uri mongodb://x get daily -n 2", "schedules --mongo-uri mongodb://x get -n 2 daily"},
		{"schedules put daily --cron 0_8_*_*_*", "schedules put --cron 0_8_*_*_* daily"},
		{"schedules --mongo-uri m nosuch daily --cron x", "schedules --mongo-uri m --cron nosuch daily x"},
		{"schedules -- get x", "schedules -- get x"},
		// App-level flags before the command.
		{"--profile p next 0_9_*_*_* -n 1", "--profile p next -n 1 0_9_*_*_*"},
		// Unknown commands: unchanged.
		{"frobnicate a -n 1", "frobnicate a -n 1"},
		{"--profile p frobnicate a -n 1", "--profile p frobnicate a -n 1"},
		{"-- next a -n 1", "-- next a -n 1"},
		// The completion flag must stay last.
		{"next 0_9_*_*_* -n 1 --generate-bash-completion", "next -n 1 0_9_*_*_* --generate-bash-completion"},
	}
	split := func(s string) []string {
		out := []string{"cronswap"}
		for _, f := range strings.Fields(s) {
			out = append(out, strings.ReplaceAll(f, "_", " "))
		}
		return out
	}
	for _, tt := range tests {
		in, want := split(tt.in), split(tt.want)
		got := interspersed(testApp(), in)
		if !slices.Equal(got, want) {
			t.Errorf("interspersed(%q)\n got %q\nwant %q", in, got, want)
		}
		if len(in) > 1 && !slices.Equal(in, split(tt.in)) {
			t.Errorf("interspersed modified its input: %q", in)
		}
	}
	if got := interspersed(testApp(), nil); len(got) != 0 {
		t.Errorf("interspersed(nil) = %q", got)
	}
}

// TestInterspersedParses runs the reordered lines through urfave/cli itself.
func TestInterspersedParses(t *testing.T) {
	var n int
	var tz string
	var args []string
	app := testApp()
	app.Writer, app.ErrWriter = &bytes.Buffer{}, &bytes.Buffer{}
	app.Commands[0].Action = func(c *ucli.Context) error {
		n, tz, args = c.Int("n"), c.String("tz"), c.Args().Slice()
		return nil
	}
	for _, line := range [][]string{
		{"cronswap", "next", "0 9 * * 1-5", "-n", "3", "--tz", "Asia/Seoul"},
		{"cronswap", "next", "--tz", "Asia/Seoul", "0 9 * * 1-5", "-n", "3"},
		{"cronswap", "next", "-n", "3", "--tz", "Asia/Seoul", "--", "0 9 * * 1-5"},
	} {
		n, tz, args = 0, "", nil
		if err := app.Run(interspersed(app, line)); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if n != 3 || tz != "Asia/Seoul" || !slices.Equal(args, []string{"0 9 * * 1-5"}) {
			t.Errorf("%q parsed as n=%d tz=%q args=%q", line, n, tz, args)
		}
	}
	n, args = 0, nil
	if err := app.Run(interspersed(app, []string{"cronswap", "next", "-n", "1", "--", "-5 * * * *"})); err != nil {
		t.Fatal(err)
	}
	if n != 1 || !slices.Equal(args, []string{"-5 * * * *"}) {
		t.Errorf("after --: n=%d args=%q", n, args)
	}
}
