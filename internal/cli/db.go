package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	ucli "github.com/urfave/cli/v2"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/topology"

	"github.com/cronswap/cronswap/internal/admin"
	"github.com/cronswap/cronswap/internal/config"
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
}

// withDB loads the config, connects (failing with ExitUnreachable when the
// server does not answer within --timeout) and runs fn.
func withDB(c *ucli.Context, fn func(ctx context.Context, s *session) error) error {
	if _, err := outputFormat(c); err != nil {
		return err
	}
	cfg, err := loadConfig(c)
	if err != nil {
		return err
	}
	timeout := c.Duration("timeout")
	if timeout <= 0 {
		return ucli.Exit(fmt.Sprintf("--timeout %s: must be positive", timeout), ExitUserError)
	}
	s := &session{cfg: cfg, uri: config.RedactURI(cfg.Mongo.URI)}
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
	s.store = admin.NewStore(s.db)
	// Generous, but bounded: a server that hangs mid-command is unreachable too.
	opCtx, opCancel := context.WithTimeout(ctx, 10*timeout)
	defer opCancel()
	return fn(opCtx, s)
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
				for _, name := range admin.Collections() {
					state := "exists"
					for _, cr := range rep.CreatedCollections {
						if cr == name {
							state = "created"
						}
					}
					fmt.Fprintf(w, "collection %-14s %s\n", name, state)
				}
				for _, ix := range admin.Indexes() {
					full := ix.Collection + "." + ix.Name()
					state := "exists"
					for _, cr := range rep.CreatedIndexes {
						if cr == full {
							state = "created"
						}
					}
					fmt.Fprintf(w, "index %-33s %s\n", full, state)
				}
				fmt.Fprintf(w, "validator schedules %s\n", rep.Validator)
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
