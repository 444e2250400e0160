package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/cronswap/cronswap/internal/admin"
	"github.com/cronswap/cronswap/internal/calendar"
	"github.com/cronswap/cronswap/schedule"
)

// importYears is how many years after this one `calendars import` expands
// recurring events to by default.
const importYears = 10

// calendarView is one calendar as `calendars list` and `get` show it.
type calendarView struct {
	Name        string `json:"name"`
	Timezone    string `json:"timezone,omitempty"`
	Description string `json:"description,omitempty"`
	Source      string `json:"source,omitempty"`
	// Dates, Yearly and Ranges are the calendar's dates (get), or nil
	// (list, which counts them).
	Dates  []string    `json:"dates,omitempty"`
	Yearly []string    `json:"yearly,omitempty"`
	Ranges [][2]string `json:"ranges,omitempty"`
	// Counts of each kind.
	NDates  int `json:"n_dates"`
	NYearly int `json:"n_yearly"`
	NRanges int `json:"n_ranges"`
	// Next is the next date the calendar holds from today on (UTC), null
	// when none within a year.
	Next      *string `json:"next"`
	UpdatedAt *string `json:"updated_at"`
	UpdatedBy string  `json:"updated_by,omitempty"`
	// Error is the document's validation error ("" when valid).
	Error string `json:"error"`
}

func newCalendarView(d admin.CalendarDoc, now time.Time, full bool) calendarView {
	c := d.Calendar
	v := calendarView{Name: c.Name, Timezone: c.Timezone, Description: c.Description, Source: c.Source,
		NDates: len(c.Dates), NYearly: len(c.Yearly), NRanges: len(c.Ranges),
		UpdatedAt: jsonTime(d.UpdatedAt, nil), UpdatedBy: d.UpdatedBy, Error: d.Error}
	if d.Error != "" {
		return v
	}
	for day := range 366 {
		date := calendar.DateOf(now.UTC().AddDate(0, 0, day))
		if c.HoldsDate(date) {
			s := date.String()
			v.Next = &s
			break
		}
	}
	if full {
		for _, x := range c.Dates {
			v.Dates = append(v.Dates, x.String())
		}
		for _, x := range c.Yearly {
			v.Yearly = append(v.Yearly, x.String())
		}
		for _, r := range c.Ranges {
			v.Ranges = append(v.Ranges, [2]string{r.From.String(), r.To.String()})
		}
	}
	return v
}

func calendarsCommand() *ucli.Command {
	return &ucli.Command{
		Name:        "calendars",
		Usage:       "import, list, show or delete calendars: named dates (holidays) schedules can exclude",
		Subcommands: []*ucli.Command{calendarsImport(), calendarsList(), calendarsGet(), calendarsDelete()},
	}
}

func calendarsImport() *ucli.Command {
	return &ucli.Command{
		Name:      "import",
		Usage:     "read an iCalendar (.ics) file into calendar NAME, replacing what NAME held: all-day events are its dates",
		ArgsUsage: "NAME FILE.ics",
		Flags: dbFlags(
			&ucli.StringFlag{Name: "tz", Usage: "IANA zone the dates are read in (default: the zone of each job that excludes the calendar)"},
			&ucli.StringFlag{Name: "until", Usage: fmt.Sprintf("last date recurring events are expanded to, YYYY-MM-DD (default: the end of the year %d years from now)", importYears)},
			&ucli.StringFlag{Name: "by", EnvVars: []string{envUpdatedBy}, Usage: "who imports, written as updated_by (default: user@host of the command)"},
		),
		Action: func(c *ucli.Context) error {
			if c.NArg() != 2 {
				return ucli.Exit("want NAME and FILE.ics, e.g. cronswap calendars import us-holidays us-holidays.ics --tz America/New_York", ExitUserError)
			}
			name, file := c.Args().Get(0), c.Args().Get(1)
			opts := calendar.ImportOptions{Timezone: strings.TrimSpace(c.String("tz")), Source: filepath.Base(file)}
			if opts.Timezone != "" {
				if _, err := schedule.LoadLocation(opts.Timezone); err != nil {
					return ucli.Exit("--tz: "+err.Error(), ExitUserError)
				}
			}
			now := time.Now().UTC()
			opts.Until = calendar.Date{Year: now.Year() + importYears, Month: time.December, Day: 31}
			if v := c.String("until"); v != "" {
				t, err := time.Parse(calendar.DateLayout, v)
				if err != nil {
					return ucli.Exit(fmt.Sprintf("--until %q: want a date like 2035-12-31", v), ExitUserError)
				}
				opts.Until = calendar.DateOf(t)
			}
			by, err := updatedBy(c)
			if err != nil {
				return err
			}
			f, err := os.Open(file)
			if err != nil {
				return ucli.Exit(err.Error(), ExitUserError)
			}
			defer f.Close()
			cal, skipped, err := calendar.Import(f, name, opts)
			if err != nil {
				return ucli.Exit(err.Error(), ExitUserError)
			}
			return withDB(c, func(ctx context.Context, s *session) error {
				created, err := s.store.PutCalendar(ctx, cal, by)
				if err != nil {
					return s.fail(err)
				}
				verb := "replaced"
				if created {
					verb = "created"
				}
				if isJSON(c) {
					return writeJSON(c.App.Writer, map[string]any{"name": cal.Name, "outcome": verb, "n_dates": len(cal.Dates),
						"n_yearly": len(cal.Yearly), "n_ranges": len(cal.Ranges), "skipped": skipped})
				}
				fmt.Fprintf(c.App.Writer, "calendar %q %s from %s: %d dates, %d yearly dates, %d ranges\n",
					cal.Name, verb, opts.Source, len(cal.Dates), len(cal.Yearly), len(cal.Ranges))
				for _, sk := range skipped {
					fmt.Fprintf(c.App.Writer, "left out %q: %s\n", sk.Summary, sk.Reason)
				}
				return nil
			})
		},
	}
}

func calendarsList() *ucli.Command {
	return &ucli.Command{
		Name:  "list",
		Usage: "list the calendars: how many dates each holds, the next one; refused documents with their error",
		Flags: dbFlags(),
		Action: func(c *ucli.Context) error {
			return withDB(c, func(ctx context.Context, s *session) error {
				docs, err := s.store.Calendars(ctx)
				if err != nil {
					return s.fail(err)
				}
				now := time.Now()
				views := make([]calendarView, len(docs))
				for i, d := range docs {
					views[i] = newCalendarView(d, now, false)
				}
				if isJSON(c) {
					return writeJSON(c.App.Writer, views)
				}
				rows := make([][]string, len(views))
				for i, v := range views {
					state := "next " + deref(v.Next)
					if v.Next == nil {
						state = "no date within a year"
					}
					if v.Error != "" {
						state = "refused: " + v.Error
					}
					zone := v.Timezone
					if zone == "" {
						zone = "(the job's)"
					}
					rows[i] = []string{v.Name, zone, fmt.Sprint(v.NDates), fmt.Sprint(v.NYearly), fmt.Sprint(v.NRanges), state}
				}
				table(c.App.Writer, []string{"NAME", "ZONE", "DATES", "YEARLY", "RANGES", "STATE"}, rows)
				return nil
			})
		},
	}
}

func calendarsGet() *ucli.Command {
	return &ucli.Command{
		Name:      "get",
		Usage:     "show one calendar and every date it holds",
		ArgsUsage: "NAME",
		Flags:     dbFlags(),
		Action: func(c *ucli.Context) error {
			if c.NArg() != 1 {
				return ucli.Exit("want exactly one NAME", ExitUserError)
			}
			return withDB(c, func(ctx context.Context, s *session) error {
				d, err := s.store.Calendar(ctx, c.Args().First())
				if err != nil {
					return s.fail(err)
				}
				v := newCalendarView(d, time.Now(), true)
				if isJSON(c) {
					return writeJSON(c.App.Writer, v)
				}
				w := c.App.Writer
				fmt.Fprintf(w, "NAME         %s\n", v.Name)
				if v.Error != "" {
					fmt.Fprintf(w, "ERROR        %s\n", v.Error)
					return nil
				}
				zone := v.Timezone
				if zone == "" {
					zone = "(the zone of each job that excludes it)"
				}
				fmt.Fprintf(w, "ZONE         %s\n", zone)
				if v.Description != "" {
					fmt.Fprintf(w, "DESCRIPTION  %s\n", v.Description)
				}
				if v.Source != "" {
					fmt.Fprintf(w, "SOURCE       %s\n", v.Source)
				}
				fmt.Fprintf(w, "YEARLY       %s\n", strings.Join(v.Yearly, " "))
				fmt.Fprintf(w, "DATES        %s\n", strings.Join(v.Dates, " "))
				ranges := make([]string, len(v.Ranges))
				for i, r := range v.Ranges {
					ranges[i] = r[0] + ".." + r[1]
				}
				fmt.Fprintf(w, "RANGES       %s\n", strings.Join(ranges, " "))
				return nil
			})
		},
	}
}

func calendarsDelete() *ucli.Command {
	return &ucli.Command{
		Name:      "delete",
		Usage:     "delete a calendar",
		ArgsUsage: "NAME",
		Flags:     dbFlags(),
		Action: func(c *ucli.Context) error {
			if c.NArg() != 1 {
				return ucli.Exit("want exactly one NAME", ExitUserError)
			}
			return withDB(c, func(ctx context.Context, s *session) error {
				if err := s.store.DeleteCalendar(ctx, c.Args().First()); err != nil {
					return s.fail(err)
				}
				fmt.Fprintf(c.App.Writer, "calendar %q deleted\n", c.Args().First())
				return nil
			})
		},
	}
}

// excludedBy returns, for `next --exclude`, the calendars named in names,
// read from the database; an unknown or refused calendar is an error.
func excludedBy(ctx context.Context, s *session, names []string) ([]calendar.Calendar, error) {
	var out []calendar.Calendar
	for _, name := range names {
		d, err := s.store.Calendar(ctx, name)
		if errors.Is(err, admin.ErrNotFound) {
			return nil, ucli.Exit(fmt.Sprintf("--exclude %s: no such calendar (cronswap calendars list shows them)", name), ExitUserError)
		}
		if err != nil {
			return nil, s.fail(err)
		}
		if d.Error != "" {
			return nil, ucli.Exit(fmt.Sprintf("--exclude %s: %s", name, d.Error), ExitUserError)
		}
		out = append(out, d.Calendar)
	}
	return out, nil
}
