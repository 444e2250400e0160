package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/admin"
	"github.com/cronswap/cronswap/internal/blackout"
	"github.com/cronswap/cronswap/internal/timeline"
)

// addExample is shown with every refusal of `blackouts add`.
const addExample = `cronswap blackouts add freeze --from 2026-12-24T00:00:00Z --to 2026-12-27T00:00:00Z --category billing --reason "year-end freeze"` +
	` (or --cron "0 2 * * *" --duration 1h for a recurring window)`

// blackoutView is one window as `blackouts list` shows it.
type blackoutView struct {
	ID string `json:"id"`
	// Kind is "one-off" or "recurring"; "" for a refused document.
	Kind       string   `json:"kind"`
	From       *string  `json:"from"`
	To         *string  `json:"to"`
	CronExpr   string   `json:"cron_expr,omitempty"`
	Duration   string   `json:"duration,omitempty"`
	Timezone   string   `json:"timezone,omitempty"`
	Categories []string `json:"categories"`
	Reason     string   `json:"reason"`
	// Active says whether the window is open now; NextOpen and NextClose
	// are its current or next opening (null when it opens no more).
	Active    bool    `json:"active"`
	NextOpen  *string `json:"next_open"`
	NextClose *string `json:"next_close"`
	UpdatedAt *string `json:"updated_at"`
	// Error is the document's validation error ("" when valid): the
	// daemons refuse it, keeping a window's last valid version in force.
	Error string `json:"error"`
}

func newBlackoutView(d admin.BlackoutDoc, now time.Time) blackoutView {
	w := d.Window
	v := blackoutView{ID: w.ID, Categories: w.Categories, Reason: w.Reason, Error: d.Error,
		UpdatedAt: jsonTime(d.UpdatedAt, nil)}
	if v.Categories == nil {
		v.Categories = []string{}
	}
	if d.Error != "" {
		return v
	}
	if w.Recurring() {
		v.Kind, v.CronExpr, v.Duration, v.Timezone = "recurring", w.CronExpr, w.DurationString(), w.Timezone
	} else {
		v.Kind = "one-off"
	}
	if !w.Recurring() {
		v.From, v.To = jsonTime(w.From, nil), jsonTime(w.To, nil)
	}
	if open, closeAt, ok := w.Next(now); ok {
		v.NextOpen, v.NextClose = jsonTime(open, nil), jsonTime(closeAt, nil)
		v.Active = !now.Before(open) && now.Before(closeAt)
	}
	return v
}

func (v blackoutView) row() []string {
	when := ""
	switch v.Kind {
	case "one-off":
		when = deref(v.From) + " .. " + deref(v.To)
	case "recurring":
		when = fmt.Sprintf("%q for %s", v.CronExpr, v.Duration)
		if v.Timezone != "" {
			when += " (" + v.Timezone + ")"
		}
	}
	cats := strings.Join(v.Categories, ",")
	if cats == "" && v.Error == "" {
		cats = "(all jobs)"
	}
	state := map[bool]string{true: "active", false: ""}[v.Active]
	if v.Error != "" {
		state = "refused: " + v.Error
	} else if !v.Active && v.NextOpen != nil {
		state = "next " + *v.NextOpen
	} else if !v.Active {
		state = "ended"
	}
	return []string{v.ID, v.Kind, when, cats, v.Reason, state}
}

func blackoutsCommand() *ucli.Command {
	return &ucli.Command{
		Name:        "blackouts",
		Usage:       "list, add or delete blackout windows (fires inside one are recorded skipped, not run)",
		Subcommands: []*ucli.Command{blackoutsList(), blackoutsAdd(), blackoutsDelete()},
	}
}

func blackoutsList() *ucli.Command {
	return &ucli.Command{
		Name:  "list",
		Usage: "list the blackout windows: when, which categories, why, whether open now; refused documents with their error",
		Flags: dbFlags(),
		Action: func(c *ucli.Context) error {
			return withDB(c, func(ctx context.Context, s *session) error {
				docs, err := s.store.Blackouts(ctx, s.cfg.Location)
				if err != nil {
					return s.fail(err)
				}
				now := time.Now()
				views := make([]blackoutView, len(docs))
				for i, d := range docs {
					views[i] = newBlackoutView(d, now)
				}
				if isJSON(c) {
					return writeJSON(c.App.Writer, views)
				}
				rows := make([][]string, len(views))
				for i, v := range views {
					rows[i] = v.row()
				}
				table(c.App.Writer, []string{"ID", "KIND", "WHEN", "CATEGORIES", "REASON", "STATE"}, rows)
				return nil
			})
		},
	}
}

func blackoutsAdd() *ucli.Command {
	return &ucli.Command{
		Name:      "add",
		Usage:     "add a blackout window, one-off (--from, --to) or recurring (--cron, --duration); it takes effect at once",
		ArgsUsage: "ID",
		Flags: dbFlags(
			&ucli.StringFlag{Name: "from", Usage: "start of a one-off window: RFC 3339, now, or relative like +1h"},
			&ucli.StringFlag{Name: "to", Usage: "end of a one-off window (exclusive): RFC 3339, now, or relative like +3h"},
			&ucli.StringFlag{Name: "cron", Usage: `a recurring window opens at each fire of this expression, e.g. "0 2 * * *"`},
			&ucli.StringFlag{Name: "duration", Usage: "how long a recurring window stays open, e.g. 1h or 90m"},
			&ucli.StringFlag{Name: "tz", Usage: "IANA time zone of --cron (default: the config's timezone)"},
			&ucli.StringSliceFlag{Name: "category", Usage: "only the jobs of this category (repeatable; default: every job)"},
			&ucli.StringFlag{Name: "reason", Usage: "why; recorded on every skipped run (required)"},
		),
		Action: func(c *ucli.Context) error {
			id, err := oneID(c, addExample)
			if err != nil {
				return err
			}
			doc, err := blackoutDoc(c, id, time.Now())
			if err != nil {
				return ucli.Exit(fmt.Sprintf("%v; e.g. %s", err, addExample), ExitUserError)
			}
			return withDB(c, func(ctx context.Context, s *session) error {
				w, err := s.store.AddBlackout(ctx, doc, s.cfg.Location)
				switch {
				case errors.Is(err, blackout.ErrInvalid):
					return ucli.Exit(fmt.Sprintf("%v; e.g. %s", err, addExample), ExitUserError)
				case errors.Is(err, admin.ErrExists):
					return ucli.Exit(fmt.Sprintf("blackout window %q exists; delete it first (cronswap blackouts delete %s) or pick another id", id, id), ExitUserError)
				case err != nil:
					return s.fail(err)
				}
				v := newBlackoutView(admin.BlackoutDoc{Window: w}, time.Now())
				if isJSON(c) {
					return writeJSON(c.App.Writer, v)
				}
				fmt.Fprintf(c.App.Writer, "added blackout %s: %s\n", id, strings.Join(v.row()[2:], "  "))
				return nil
			})
		},
	}
}

// blackoutDoc builds the document of `blackouts add` from its flags; the
// store validates it as the daemon does.
func blackoutDoc(c *ucli.Context, id string, now time.Time) (bson.D, error) {
	doc := bson.D{{Key: blackout.FieldID, Value: id}}
	oneOff := c.IsSet("from") || c.IsSet("to")
	recurring := c.IsSet("cron") || c.IsSet("duration") || c.IsSet("tz")
	switch {
	case oneOff && recurring:
		return nil, errors.New("give --from and --to (a one-off window) or --cron and --duration (a recurring one), not both")
	case oneOff:
		for _, f := range []string{"from", "to"} {
			if !c.IsSet(f) {
				return nil, fmt.Errorf("a one-off window needs --from and --to; --%s is missing", f)
			}
			t, err := timeline.ParseTime(c.String(f), now)
			if err != nil {
				return nil, fmt.Errorf("--%s: %w", f, err)
			}
			doc = append(doc, bson.E{Key: f, Value: t.UTC()})
		}
	case recurring:
		doc = append(doc, bson.E{Key: blackout.FieldCronExpr, Value: c.String("cron")},
			bson.E{Key: blackout.FieldDuration, Value: c.String("duration")})
		if c.IsSet("tz") {
			doc = append(doc, bson.E{Key: blackout.FieldTimezone, Value: c.String("tz")})
		}
	default:
		return nil, errors.New("say when: --from and --to, or --cron and --duration")
	}
	if cats := c.StringSlice("category"); len(cats) > 0 {
		a := bson.A{}
		for _, cat := range cats {
			a = append(a, cat)
		}
		doc = append(doc, bson.E{Key: blackout.FieldCategories, Value: a})
	}
	if !c.IsSet("reason") {
		return nil, errors.New("--reason is required (it is recorded on every run the window skips)")
	}
	return append(doc, bson.E{Key: blackout.FieldReason, Value: c.String("reason")}), nil
}

func blackoutsDelete() *ucli.Command {
	return &ucli.Command{
		Name:      "delete",
		Usage:     "delete a blackout window (its jobs fire again at once)",
		ArgsUsage: "ID",
		Flags:     dbFlags(),
		Action: func(c *ucli.Context) error {
			id, err := oneID(c, "cronswap blackouts delete freeze")
			if err != nil {
				return err
			}
			return withDB(c, func(ctx context.Context, s *session) error {
				err := s.store.DeleteBlackout(ctx, id)
				if notFound(err) {
					return ucli.Exit(fmt.Sprintf("no blackout window %q (see cronswap blackouts list)", id), ExitUserError)
				}
				if err != nil {
					return s.fail(err)
				}
				if isJSON(c) {
					return writeJSON(c.App.Writer, map[string]any{"id": id, "deleted": true})
				}
				fmt.Fprintf(c.App.Writer, "deleted blackout %s\n", id)
				return nil
			})
		},
	}
}

// categoryFlag is the --category of `schedules pause` and `resume`.
func categoryFlag() ucli.Flag {
	return &ucli.StringFlag{Name: "category", Usage: "every schedule of this category instead of one ID"}
}

// enableCategory is `schedules pause|resume --category C`: one updateMany
// over the category's schedules (the daemons disarm or re-arm each, as for
// a single pause or resume).
func enableCategory(c *ucli.Context, name string, enabled bool) error {
	category := strings.TrimSpace(c.String("category"))
	if category == "" || c.Args().Len() > 0 {
		return ucli.Exit(fmt.Sprintf("give either one ID or --category C, e.g. cronswap schedules %s --category billing", name), ExitUserError)
	}
	return withDB(c, func(ctx context.Context, s *session) error {
		res, err := s.store.SetEnabledByCategory(ctx, category, enabled, currentUser())
		if err != nil {
			return s.fail(err)
		}
		if res.Matched == 0 {
			return ucli.Exit(fmt.Sprintf("no schedule has category %q", category), ExitUserError)
		}
		if isJSON(c) {
			return writeJSON(c.App.Writer, map[string]any{"category": category, "enabled": enabled,
				"matched": res.Matched, "changed": res.Changed})
		}
		past := map[bool]string{false: "paused", true: "resumed"}[enabled]
		fmt.Fprintf(c.App.Writer, "%s %d of the %d schedules of category %s\n", past, res.Changed, res.Matched, category)
		if res.Changed < res.Matched {
			fmt.Fprintf(c.App.Writer, "%d already were %s\n", res.Matched-res.Changed, past)
		}
		return nil
	})
}
