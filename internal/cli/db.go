package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	ucli "github.com/urfave/cli/v2"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/topology"

	"github.com/cronswap/cronswap/internal/actions"
	"github.com/cronswap/cronswap/internal/admin"
	"github.com/cronswap/cronswap/internal/config"
	"github.com/cronswap/cronswap/schedule"
)

// defaultTimeout bounds how long a command waits for the server before it
// gives up with ExitUnreachable.
const defaultTimeout = 5 * time.Second

// dbFlags are the flags of every command that talks to the database.
func dbFlags(extra ...ucli.Flag) []ucli.Flag {
	flags := append(commonFlags(), outputFlag(),
		&ucli.DurationFlag{Name: "timeout", Value: defaultTimeout, Usage: "how long to wait for the server (exit 2 when it cannot be reached)"})
	return append(flags, extra...)
}

// session is one command's connection to the database.
type session struct {
	cfg   config.Config
	db    *mongo.Database
	store *admin.Store
	uri   string // redacted, for messages
	// rules are the daemons' rules for a schedules document as this
	// command knows them: the config's zone, and its actions when the
	// command was given a config file. The store checks with them.
	rules admin.Rules
	// configFile is the config file given (--config or CRONSWAP_CONFIG);
	// "" when none.
	configFile string
	// opTimeout bounds a command (10 × --timeout; one that waits for the
	// daemons, run-now --wait, has its wait on top), or each round trip of
	// one that connect does not bound as a whole.
	opTimeout time.Duration
}

// withDB loads the config, connects (failing with ExitUnreachable when the
// server does not answer within --timeout) and runs fn.
func withDB(c *ucli.Context, fn func(ctx context.Context, s *session) error) error {
	if _, err := outputFormat(c); err != nil {
		return err
	}
	return withSession(c, true, fn)
}

// withDBWaiting is withDB for a command that also waits up to wait for
// something the daemons do (run-now --wait): its deadline is the normal
// budget, 10 × --timeout, plus wait, so that --wait means what it says
// whatever --timeout is.
func withDBWaiting(c *ucli.Context, wait time.Duration, fn func(ctx context.Context, s *session) error) error {
	if _, err := outputFormat(c); err != nil {
		return err
	}
	return connectAndRun(c, true, wait, fn)
}

// withSession is withDB without the check of --output (export's is yaml|json).
// A bounded command has 10 × --timeout in all; one that is not (export,
// plan and apply, whose work grows with the collection) gets a context
// without deadline and bounds each of its round trips with
// session.opTimeout.
func withSession(c *ucli.Context, bounded bool, fn func(ctx context.Context, s *session) error) error {
	return connectAndRun(c, bounded, 0, fn)
}

// connectAndRun is withSession with wait added to a bounded command's
// budget.
func connectAndRun(c *ucli.Context, bounded bool, wait time.Duration, fn func(ctx context.Context, s *session) error) error {
	cfg, err := loadConfig(c)
	if err != nil {
		return err
	}
	timeout := c.Duration("timeout")
	if timeout <= 0 {
		return ucli.Exit(fmt.Sprintf("--timeout %s: must be positive", timeout), ExitUserError)
	}
	// Generous, but bounded: a server that hangs mid-command is unreachable too.
	s := &session{cfg: cfg, uri: config.RedactURI(cfg.Mongo.URI), configFile: c.String("config"), opTimeout: 10 * timeout}
	if s.rules, err = scheduleRules(cfg, s.configFile); err != nil {
		return err
	}
	client, err := mongo.Connect(options.Client().ApplyURI(cfg.Mongo.URI).
		SetAppName("cronswap-cli").
		SetServerSelectionTimeout(timeout).
		SetConnectTimeout(timeout))
	if err != nil {
		return ucli.Exit(fmt.Sprintf("MongoDB URI %s: %v", s.uri, err), ExitUserError)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		_ = client.Disconnect(ctx)
	}()
	ctx := c.Context
	pingCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := client.Ping(pingCtx, readpref.Primary()); err != nil {
		return s.fail(err)
	}
	s.db = client.Database(cfg.Mongo.Database)
	s.store = admin.NewStore(s.db).WithRules(s.rules)
	if !bounded {
		return fn(ctx, s)
	}
	opCtx, opCancel := context.WithTimeout(ctx, s.opTimeout+wait)
	defer opCancel()
	return fn(opCtx, s)
}

// scheduleRules returns the rules a command checks schedules with: the
// config's zone, and, when a config file with actions was given, its
// actions (the registry the daemons build from it, which is their
// policy). Without a file, or with one that defines no action (a file for
// the command line alone: no daemon runs without actions), there are no
// actions to know, so none is checked.
func scheduleRules(cfg config.Config, configFile string) (admin.Rules, error) {
	r := admin.Rules{Location: cfg.Location}
	if configFile == "" || len(cfg.Jobs) == 0 {
		return r, nil
	}
	reg, err := actions.FromDefinitions(cfg.Jobs)
	if err != nil {
		return r, ucli.Exit(fmt.Sprintf("config %s: %v", configFile, err), ExitUserError)
	}
	r.Actions = reg
	return r, nil
}

// fail turns a database error into the command's exit: 2 when the server
// cannot be reached, 1 for not found and everything else.
func (s *session) fail(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(ucli.ExitCoder); ok {
		return err
	}
	if unreachable(err) {
		return ucli.Exit(fmt.Sprintf("cannot reach MongoDB at %s: %v", s.uri, err), ExitUnreachable)
	}
	return ucli.Exit(err.Error(), ExitUserError)
}

// unreachable reports whether err means the server did not answer (as
// opposed to answering with an error).
func unreachable(err error) bool {
	var sse topology.ServerSelectionError
	return errors.As(err, &sse) || mongo.IsNetworkError(err) || mongo.IsTimeout(err)
}

func initCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "init",
		Usage: "create the collections, their indexes (unique, TTL) and the schedules validator; safe to run on every deploy",
		Flags: dbFlags(),
		Action: func(c *ucli.Context) error {
			return withDB(c, func(ctx context.Context, s *session) error {
				rep, err := admin.Init(ctx, s.db)
				if err != nil {
					return s.fail(err)
				}
				if isJSON(c) {
					return writeJSON(c.App.Writer, rep)
				}
				w := c.App.Writer
				fmt.Fprintf(w, "database %s\n", rep.Database)
				state := func(name string, created []string) string {
					if slices.Contains(created, name) {
						return "created"
					}
					return "exists"
				}
				var rows [][]string
				for _, name := range admin.Collections() {
					rows = append(rows, []string{"collection", name, state(name, rep.CreatedCollections)})
				}
				for _, ix := range admin.Indexes() {
					full := ix.Collection + "." + ix.Name()
					rows = append(rows, []string{"index", full, state(full, rep.CreatedIndexes)})
				}
				rows = append(rows, []string{"validator", schedule.CollectionName, rep.Validator})
				table(w, []string{"KIND", "NAME", "STATE"}, rows)
				if rep.Notice != "" {
					fmt.Fprintf(c.App.ErrWriter, "notice: %s\n", rep.Notice)
				}
				if !rep.Changed() {
					fmt.Fprintln(w, "nothing to do: already initialised")
				}
				return nil
			})
		},
	}
}
