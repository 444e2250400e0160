// Package cli defines cronswap's command line (urfave/cli/v2): run, init,
// schedules, next, validate, token, locks, runs, members, notifications,
// explain, blackouts, calendars, run-now, backfill, export, plan, apply,
// version and completion.
// Every command but run and completion prints an aligned table for people
// or, with --output json, JSON for scripts. Exit codes: 0 ok, 1 user error (bad
// input, not found), 2 server unreachable, 3 changes pending (plan, and an
// apply that left conflicts).
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/robfig/cron/v3"
	ucli "github.com/urfave/cli/v2"

	"github.com/cronswap/cronswap/internal/buildinfo"
	"github.com/cronswap/cronswap/internal/calendar"
	"github.com/cronswap/cronswap/internal/config"
	"github.com/cronswap/cronswap/internal/crondialect"
	"github.com/cronswap/cronswap/internal/logging"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/schedule"
)

// Exit codes (and ExitChangesPending).
const (
	ExitOK          = 0
	ExitUserError   = 1
	ExitUnreachable = 2
)

// commonFlags are the flags of every command that reads the configuration
// or talks to the server: --config and --mongo-uri, and the log flags,
// hidden. Only run logs (runFlags); the others accept and ignore the log
// flags, unlisted, so that a script passing them to every command keeps
// working. validate, version and completion take ignoredCommonFlags.
func commonFlags() []ucli.Flag {
	return append(sourceFlags(), hidden(logFlags())...)
}

// sourceFlags name the configuration and the server.
func sourceFlags() []ucli.Flag {
	return []ucli.Flag{
		&ucli.StringFlag{Name: "config", Aliases: []string{"c"}, Usage: "config file (YAML)", EnvVars: []string{config.EnvConfig}},
		&ucli.StringFlag{Name: "mongo-uri", Usage: "MongoDB connection string (overrides the config file)", EnvVars: []string{config.EnvMongoURI}},
	}
}

// logFlags are the daemon's log format and level (newLogger).
func logFlags() []ucli.Flag {
	return []ucli.Flag{
		&ucli.StringFlag{Name: "log-format", Value: "text", Usage: "text (coloured on a terminal) or json"},
		&ucli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error"},
	}
}

// hidden returns flags hidden from the help and the completion: still
// accepted, and ignored by a command that does not read them.
func hidden(flags []ucli.Flag) []ucli.Flag {
	for _, f := range flags {
		f.(*ucli.StringFlag).Hidden = true
	}
	return flags
}

// ignoredCommonFlags are sourceFlags and logFlags, hidden, for validate,
// version and completion: they read no configuration, talk to no server
// and log nothing, so their help does not list these flags, but they
// still accept and ignore them, so that a script passing --config to
// every command keeps working.
func ignoredCommonFlags() []ucli.Flag {
	return hidden(append(sourceFlags(), logFlags()...))
}

// Main runs the command line with the process's stdin and returns the
// process exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	return Run(args, os.Stdin, stdout, stderr)
}

// Run runs the command line and returns the process exit code. stdin is
// where confirmations (locks release) are read from.
func Run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	app := newApp(stdin, stdout, stderr)
	setCompletion(app, args)
	err := app.Run(interspersed(app, args))
	if err == nil {
		return ExitOK
	}
	var pending changesPending
	if errors.As(err, &pending) {
		if pending.msg != "" {
			fmt.Fprintln(stderr, "cronswap:", pending.msg)
		}
		return ExitChangesPending
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

// newApp is the command tree.
func newApp(stdin io.Reader, stdout, stderr io.Writer) *ucli.App {
	return &ucli.App{
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
			membersCommand(),
			notificationsCommand(),
			explainCommand(),
			blackoutsCommand(),
			calendarsCommand(),
			runNowCommand(),
			backfillCommand(),
			exportCommand(),
			planCommand(stdin),
			applyCommand(stdin),
			{
				Name:  "version",
				Usage: "print the version",
				Flags: append(ignoredCommonFlags(), outputFlag()),
				Action: func(c *ucli.Context) error {
					if _, err := outputFormat(c); err != nil {
						return err
					}
					if isJSON(c) {
						return writeJSON(c.App.Writer, map[string]string{"version": buildinfo.String()})
					}
					fmt.Fprintln(c.App.Writer, "cronswap", buildinfo.String())
					return nil
				},
			},
			completionCommand(),
		},
	}
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
		Flags: append(append(sourceFlags(), logFlags()...),
			&ucli.StringFlag{Name: "instance-id", Usage: "this replica's id (default: hostname)", EnvVars: []string{config.EnvInstanceID}},
			&ucli.StringFlag{Name: "http-listen", Usage: "address of the status/metrics listener (default " + config.DefaultHTTPListen + ")"},
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
			if err := runDaemon(ctx, cfg, log); err != nil {
				return ucli.Exit(err.Error(), ExitUserError)
			}
			return nil
		},
	}
}

func nextCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "next",
		Usage:     "print the next fire times of a cron expression (no database needed, but for --exclude)",
		ArgsUsage: "EXPR",
		// --config and --mongo-uri are listed: --exclude reads the
		// calendars from the database they name.
		Flags: append(commonFlags(), outputFlag(),
			&ucli.IntFlag{Name: "n", Value: 5, Usage: "how many fire times, 1 to 1000"},
			&ucli.StringFlag{Name: "tz", Usage: "IANA time zone of the expression (default UTC)"},
			&ucli.StringFlag{Name: "dst", Usage: "daylight-saving mode, shift (the default) or plain, as the schedule's dst field"},
			&ucli.StringFlag{Name: "from", Usage: "list the fire times after this instant, RFC 3339 (default now)"},
			idFlag(),
			&ucli.StringSliceFlag{Name: "exclude", Usage: "a calendar whose dates to mark: the fires on them are marked excluded (reads the calendars from the database: --config or --mongo-uri); repeat for more"},
			&ucli.DurationFlag{Name: "timeout", Value: defaultTimeout, Usage: "with --exclude: how long to wait for the server (exit 2 when it cannot be reached)"},
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
			mode, err := schedule.ParseDSTMode(c.String("dst"))
			if err != nil {
				return ucli.Exit("--dst: "+err.Error(), ExitUserError)
			}
			from := time.Now()
			if v := c.String("from"); v != "" {
				if from, err = time.Parse(time.RFC3339, v); err != nil {
					return ucli.Exit(fmt.Sprintf("--from %q: want an RFC 3339 time like 2027-11-07T00:00:00-04:00", v), ExitUserError)
				}
			}
			expr, id := c.Args().First(), c.String("id")
			if id == "" && crondialect.UsesHash(expr) {
				return ucli.Exit(fmt.Sprintf("%q has H, whose values come from the job id: give it with --id (e.g. cronswap next %q --id daily_report)", expr, expr), ExitUserError)
			}
			sched, loc, err := parseWithTZ(expr, c.String("tz"), schedule.ParseOptions{DST: mode, JobID: id})
			if err != nil {
				return ucli.Exit(err.Error(), ExitUserError)
			}
			fires := schedule.Upcoming(sched, from, n)
			show := func(excluded []calendar.Calendar) error {
				times := []fireTime{}
				for _, f := range fires {
					ft := newFireTime(f, loc)
					for _, cal := range excluded {
						if day, ok := cal.Holds(f.At, loc); ok {
							ft.Mark, ft.Calendar = markExcluded, cal.Name
							ft.Note = record.CalendarExclusion(cal.Name, cal.Why(day)).Error
							break
						}
					}
					times = append(times, ft)
				}
				if isJSON(c) {
					return writeJSON(c.App.Writer, times)
				}
				for _, ft := range times {
					if ft.Mark == "" {
						fmt.Fprintln(c.App.Writer, ft.At)
					} else {
						fmt.Fprintf(c.App.Writer, "%s  %s: %s\n", ft.At, ft.Mark, ft.Note)
					}
				}
				return nil
			}
			if names := c.StringSlice("exclude"); len(names) > 0 {
				return withSession(c, true, func(ctx context.Context, s *session) error {
					excluded, err := excludedBy(ctx, s, names)
					if err != nil {
						return err
					}
					return show(excluded)
				})
			}
			return show(nil)
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
			idFlag(),
		),
		Action: func(c *ucli.Context) error {
			if _, err := outputFormat(c); err != nil {
				return err
			}
			if c.NArg() != 1 {
				return ucli.Exit(`want exactly one EXPR argument, e.g. cronswap validate "0 9 * * *"`, ExitUserError)
			}
			expr, id := c.Args().First(), c.String("id")
			// Without --id an expression with H is checked for its
			// syntax only: any id gives its values the same bounds.
			syntaxOnly := id == "" && crondialect.UsesHash(expr)
			hashID := id
			if syntaxOnly {
				hashID = syntaxOnlyID
			}
			sched, loc, err := parseWithTZ(expr, c.String("tz"), schedule.ParseOptions{JobID: hashID})
			if err != nil {
				if isJSON(c) {
					_ = writeJSON(c.App.Writer, validation{Expr: expr, JobID: id, Timezone: c.String("tz"), Valid: false, Error: err.Error()})
				}
				return ucli.Exit("invalid: "+err.Error(), ExitUserError)
			}
			v := validation{Expr: expr, JobID: id, Timezone: loc.String(), Valid: true}
			if syntaxOnly {
				v.Note = "H takes its values from the job id: give --id to see them and the next fire"
				if isJSON(c) {
					return writeJSON(c.App.Writer, v)
				}
				fmt.Fprintf(c.App.Writer, "valid syntax; %s\n", v.Note)
				return nil
			}
			next := sched.Next(time.Now()).In(loc).Format(time.RFC3339)
			v.NextRun = &next
			if crondialect.UsesHash(expr) {
				v.Resolved = crondialect.Show(expr, id)
			}
			if isJSON(c) {
				return writeJSON(c.App.Writer, v)
			}
			if v.Resolved != "" {
				fmt.Fprintf(c.App.Writer, "valid; for job %q it reads %q; next fire %s\n", id, v.Resolved, next)
				return nil
			}
			fmt.Fprintf(c.App.Writer, "valid; next fire %s\n", next)
			return nil
		},
	}
}

// fireTime is one element of `next --output json`: the fire's time and,
// when daylight saving moved or de-duplicated it, what it did.
type fireTime struct {
	At string `json:"at"`
	// Mark names what daylight saving did (one of the mark constants);
	// Note says it in words.
	Mark string `json:"mark,omitempty"`
	Note string `json:"note,omitempty"`
	// Shifted: the expression does not name this wall time; the fire
	// stands for the skipped wall times MeantFor to MeantForLast.
	Shifted      bool   `json:"shifted,omitempty"`
	MeantFor     string `json:"meant_for,omitempty"`
	MeantForLast string `json:"meant_for_last,omitempty"`
	// Dropped is the second occurrence of this wall time, not run.
	Dropped string `json:"dropped,omitempty"`
	// Repeat: the second occurrence of a repeated wall time, run because
	// the expression is not a fixed time.
	Repeat bool `json:"repeat,omitempty"`
	// Calendar is the calendar given with --exclude that holds the
	// fire's date (mark excluded).
	Calendar string `json:"calendar,omitempty"`
}

// Marks of `next`, by what daylight saving did to a fire.
const (
	// markShifted: a wall time the clocks skip, run at the first instant
	// after the jump.
	markShifted = "shifted"
	// markMerged: a fire on its own schedule right after a jump that
	// also stands for the skipped wall times, which are not run apart.
	markMerged = "merged"
	// markOnce: the first occurrence of a repeated fixed time; the second
	// is not run.
	markOnce = "once"
	// markRepeat: the second occurrence of a repeated wall time, run.
	markRepeat = "repeat"
	// markExcluded: a slot on a date of a calendar given with --exclude.
	markExcluded = "excluded"
)

// newFireTime is f as `next` shows it, times in loc.
func newFireTime(f schedule.Fire, loc *time.Location) fireTime {
	ft := fireTime{At: f.At.In(loc).Format(time.RFC3339), Note: f.Note, Shifted: f.Shifted, Repeat: f.Repeat}
	if !f.MeantFor.IsZero() {
		ft.MeantFor, ft.MeantForLast = f.MeantFor.String(), f.MeantForLast.String()
	}
	if !f.Dropped.IsZero() {
		ft.Dropped = f.Dropped.In(loc).Format(time.RFC3339)
	}
	switch {
	case f.Shifted:
		ft.Mark = markShifted
	case !f.Dropped.IsZero():
		ft.Mark = markOnce
	case f.Repeat:
		ft.Mark = markRepeat
	case !f.MeantFor.IsZero():
		ft.Mark = markMerged
	}
	return ft
}

// validation is the answer of `validate --output json`.
type validation struct {
	Expr string `json:"expr"`
	// JobID is --id, which H terms take their values from.
	JobID    string `json:"job_id,omitempty"`
	Timezone string `json:"timezone"`
	Valid    bool   `json:"valid"`
	// Resolved is the expression with its H terms replaced by the
	// values they take for JobID.
	Resolved string  `json:"resolved,omitempty"`
	NextRun  *string `json:"next_run"`
	// Note says why there is no next run: H without --id.
	Note  string `json:"note,omitempty"`
	Error string `json:"error,omitempty"`
}

// syntaxOnlyID is the job id `validate` hashes H from when it is given
// none: the values differ from job to job, their bounds do not.
const syntaxOnlyID = "-"

// idFlag is --id of next and validate: the job id an expression's H terms
// take their values from.
func idFlag() ucli.Flag {
	return &ucli.StringFlag{Name: "id", Usage: "job id that H in EXPR takes its values from (a stable hash of it)"}
}

// parseWithTZ parses expr in zone tz (UTC when empty) with opts, and
// returns the zone too.
func parseWithTZ(expr, tz string, opts schedule.ParseOptions) (cron.Schedule, *time.Location, error) {
	loc := time.UTC
	if tz != "" {
		l, err := schedule.LoadLocation(tz)
		if err != nil {
			return nil, nil, err
		}
		loc = l
	}
	sched, err := schedule.ParseExprWith(expr, loc, opts)
	if err != nil {
		return nil, nil, err
	}
	return sched, loc, nil
}
