// Package cli defines cronswap's command line (urfave/cli/v2): run, init,
// schedules, next, validate, token, locks, runs, explain, version and completion.
// Every command prints an aligned table for people or,
// with --output json, JSON for scripts. Exit codes: 0 ok, 1 user error (bad
// input, not found), 2 server unreachable.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/cronswap/cronswap/internal/config"
	"github.com/cronswap/cronswap/internal/daemon"
	"github.com/cronswap/cronswap/internal/logging"
	"github.com/cronswap/cronswap/schedule"
)

// Exit codes.
const (
	ExitOK          = 0
	ExitUserError   = 1
	ExitUnreachable = 2
)

// Version is set at build time with -ldflags "-X github.com/cronswap/cronswap/internal/cli.Version=v1.2.3".
var Version = "dev"

// commonFlags are the flags of every command that reads the configuration
// or talks to the server (see ignoredCommonFlags for next and validate).
func commonFlags() []ucli.Flag {
	return []ucli.Flag{
		&ucli.StringFlag{Name: "config", Aliases: []string{"c"}, Usage: "config file (YAML)", EnvVars: []string{config.EnvConfig}},
		&ucli.StringFlag{Name: "mongo-uri", Usage: "MongoDB connection string (overrides the config file)", EnvVars: []string{config.EnvMongoURI}},
		&ucli.StringFlag{Name: "log-format", Value: "text", Usage: "text (coloured on a terminal) or json"},
		&ucli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error"},
	}
}

// ignoredCommonFlags are commonFlags, hidden, for next and validate: they
// read no configuration, talk to no server and log nothing, so their help
// does not list these flags, but they still accept and ignore them, so that
// a script passing --config to every command keeps working.
func ignoredCommonFlags() []ucli.Flag {
	flags := commonFlags()
	for _, f := range flags {
		f.(*ucli.StringFlag).Hidden = true
	}
	return flags
}

// Main runs the command line with the process's stdin and returns the
// process exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	return Run(args, os.Stdin, stdout, stderr)
}

// Run runs the command line and returns the process exit code. stdin is
// where confirmations (locks release) are read from.
func Run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	app := &ucli.App{
		Name:                 "cronswap",
		Usage:                "cron schedules in MongoDB, re-armed live on every edit",
		Writer:               stdout,
		ErrWriter:            stderr,
		EnableBashCompletion: true,
		ExitErrHandler:       func(*ucli.Context, error) {},
		Commands: []*ucli.Command{
			runCommand(),
			initCommand(),
			schedulesCommand(),
			nextCommand(),
			validateCommand(),
			tokenCommand(),
			locksCommand(stdin),
			runsCommand(),
			explainCommand(),
			{
				Name:  "version",
				Usage: "print the version",
				Flags: append(commonFlags(), outputFlag()),
				Action: func(c *ucli.Context) error {
					if _, err := outputFormat(c); err != nil {
						return err
					}
					if isJSON(c) {
						return writeJSON(c.App.Writer, map[string]string{"version": version()})
					}
					fmt.Fprintln(c.App.Writer, "cronswap", version())
					return nil
				},
			},
			completionCommand(),
		},
	}
	setCompletion(app, args)
	err := app.Run(interspersed(app, args))
	if err == nil {
		return ExitOK
	}
	var ec ucli.ExitCoder
	if errors.As(err, &ec) {
		if msg := err.Error(); msg != "" {
			fmt.Fprintln(stderr, "cronswap:", msg)
		}
		if code := ec.ExitCode(); code == ExitOK || code == ExitUnreachable {
			return code
		}
		// Anything else urfave/cli reports (an unknown command is 3) is a
		// user error by this program's contract.
		return ExitUserError
	}
	fmt.Fprintln(stderr, "cronswap:", err)
	return ExitUserError
}

func version() string {
	if Version != "dev" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return Version
}

// loadConfig reads the config named by --config and applies --mongo-uri and
// the other overrides.
func loadConfig(c *ucli.Context) (config.Config, error) {
	cfg, err := config.Load(c.String("config"))
	if err != nil {
		return cfg, ucli.Exit(err.Error(), ExitUserError)
	}
	if v := c.String("mongo-uri"); v != "" {
		cfg.Mongo.URI = v
	}
	return cfg, nil
}

func newLogger(c *ucli.Context) (*slog.Logger, error) {
	log, err := logging.New(c.App.ErrWriter, c.String("log-format"), c.String("log-level"))
	if err != nil {
		return nil, ucli.Exit(err.Error(), ExitUserError)
	}
	return log, nil
}

func runCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "run",
		Usage: "run the daemon",
		Flags: append(commonFlags(),
			&ucli.StringFlag{Name: "instance-id", Usage: "this replica's id (default: hostname)", EnvVars: []string{config.EnvInstanceID}},
			&ucli.StringFlag{Name: "http-listen", Usage: "address of the status/metrics listener (default 127.0.0.1:9090)"},
		),
		Action: func(c *ucli.Context) error {
			log, err := newLogger(c)
			if err != nil {
				return err
			}
			cfg, err := loadConfig(c)
			if err != nil {
				return err
			}
			if v := c.String("instance-id"); v != "" {
				cfg.InstanceID = v
			}
			if v := c.String("http-listen"); v != "" {
				cfg.HTTP.Listen = v
			}
			if err := cfg.Finish(); err != nil {
				return ucli.Exit(err.Error(), ExitUserError)
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			if err := daemon.Run(ctx, cfg, log); err != nil {
				return ucli.Exit(err.Error(), ExitUserError)
			}
			return nil
		},
	}
}

func nextCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "next",
		Usage:     "print the next fire times of a cron expression (no database needed)",
		ArgsUsage: "EXPR",
		Flags: append(ignoredCommonFlags(), outputFlag(),
			&ucli.IntFlag{Name: "n", Value: 5, Usage: "how many fire times"},
			&ucli.StringFlag{Name: "tz", Usage: "IANA time zone of the expression (default UTC)"},
		),
		Action: func(c *ucli.Context) error {
			if c.NArg() != 1 {
				return ucli.Exit(`want exactly one EXPR argument, e.g. cronswap next "0 9 * * 1-5" --tz Asia/Seoul`, ExitUserError)
			}
			if _, err := outputFormat(c); err != nil {
				return err
			}
			n := c.Int("n")
			if n < 1 || n > 1000 {
				return ucli.Exit(fmt.Sprintf("-n %d: want 1 to 1000", n), ExitUserError)
			}
			sched, loc, err := parseWithTZ(c.Args().First(), c.String("tz"))
			if err != nil {
				return ucli.Exit(err.Error(), ExitUserError)
			}
			t := time.Now()
			times := []fireTime{}
			for range n {
				t = sched.Next(t)
				if t.IsZero() {
					break
				}
				times = append(times, fireTime{t.In(loc).Format(time.RFC3339)})
			}
			if isJSON(c) {
				return writeJSON(c.App.Writer, times)
			}
			for _, ft := range times {
				fmt.Fprintln(c.App.Writer, ft.At)
			}
			return nil
		},
	}
}

func validateCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "validate",
		Usage:     "exit 0 if EXPR is a valid cron expression, else explain and exit 1 (no database needed)",
		ArgsUsage: "EXPR",
		Flags: append(ignoredCommonFlags(), outputFlag(),
			&ucli.StringFlag{Name: "tz", Usage: "IANA time zone of the expression (default UTC)"},
		),
		Action: func(c *ucli.Context) error {
			if _, err := outputFormat(c); err != nil {
				return err
			}
			if c.NArg() != 1 {
				return ucli.Exit(`want exactly one EXPR argument, e.g. cronswap validate "0 9 * * *"`, ExitUserError)
			}
			expr := c.Args().First()
			sched, loc, err := parseWithTZ(expr, c.String("tz"))
			if err != nil {
				if isJSON(c) {
					_ = writeJSON(c.App.Writer, validation{Expr: expr, Timezone: c.String("tz"), Valid: false, Error: err.Error()})
				}
				return ucli.Exit("invalid: "+err.Error(), ExitUserError)
			}
			next := sched.Next(time.Now()).In(loc).Format(time.RFC3339)
			if isJSON(c) {
				return writeJSON(c.App.Writer, validation{Expr: expr, Timezone: loc.String(), Valid: true, NextRun: &next})
			}
			fmt.Fprintf(c.App.Writer, "valid; next fire %s\n", next)
			return nil
		},
	}
}

// fireTime is one element of `next --output json`.
type fireTime struct {
	At string `json:"at"`
}

// validation is the answer of `validate --output json`.
type validation struct {
	Expr     string  `json:"expr"`
	Timezone string  `json:"timezone"`
	Valid    bool    `json:"valid"`
	NextRun  *string `json:"next_run"`
	Error    string  `json:"error,omitempty"`
}

type nexter interface{ Next(time.Time) time.Time }

func parseWithTZ(expr, tz string) (nexter, *time.Location, error) {
	loc := time.UTC
	if tz != "" {
		l, err := schedule.LoadLocation(tz)
		if err != nil {
			return nil, nil, err
		}
		loc = l
	}
	sched, err := schedule.ParseExpr(expr, loc)
	if err != nil {
		return nil, nil, err
	}
	return sched, loc, nil
}
