package cli

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/cronswap/cronswap/internal/history"
	"github.com/cronswap/cronswap/internal/timeline"
)

func explainCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "explain",
		Usage:     "one job's timeline: its expected slots, what happened to each (ran, skipped, missed, nothing on record) and the edits in between",
		ArgsUsage: "ID",
		Flags: dbFlags(
			&ucli.StringFlag{Name: "from", Usage: "start of the range: RFC 3339, now, or relative like -2h, -7d (default: --to minus 24h)"},
			&ucli.StringFlag{Name: "to", Usage: "end of the range: RFC 3339, now, or relative like -30m (default: now)"},
		),
		Action: func(c *ucli.Context) error {
			id, err := oneID(c, "cronswap explain daily_report --from -48h")
			if err != nil {
				return err
			}
			if _, err := outputFormat(c); err != nil {
				return err
			}
			from, to, err := timeline.ParseWindow(c.String("from"), c.String("to"), time.Now())
			if err != nil {
				return ucli.Exit(err.Error(), ExitUserError)
			}
			return withDB(c, func(ctx context.Context, s *session) error {
				tl, err := s.store.Timeline(ctx, id, from, to, s.cfg.Location)
				if errors.Is(err, timeline.ErrNotFound) {
					return ucli.Exit(fmt.Sprintf("no job %q: no schedule, no run record and no edit", id), ExitUserError)
				}
				if err != nil {
					return s.fail(err)
				}
				if isJSON(c) {
					return writeJSON(c.App.Writer, tl)
				}
				printTimeline(c, tl)
				return nil
			})
		},
	}
}

// printTimeline writes a timeline for people: the range, the schedule now
// and the ones in force before it, then one row per entry.
func printTimeline(c *ucli.Context, tl timeline.Timeline) {
	w := c.App.Writer
	fmt.Fprintf(w, "job %s from %s to %s\n", tl.JobID, rfc3339(tl.From, nil), rfc3339(tl.To, nil))
	if tl.Schedule == nil {
		fmt.Fprintln(w, "schedule now: none (deleted, or never created)")
	}
	if len(tl.Segments) > 1 || tl.Schedule != nil {
		fmt.Fprintln(w, "schedules in force:")
		for _, s := range tl.Segments {
			fmt.Fprintf(w, "  %s .. %s  %s\n", rfc3339(s.From, nil), rfc3339(s.To, nil), segmentText(s))
		}
	}
	if tl.Schedule != nil && tl.Schedule.Error != "" {
		fmt.Fprintf(w, "schedule now refused by the daemons: %s\n", tl.Schedule.Error)
	}
	if f := tl.FirstSeen; f != nil {
		fmt.Fprintf(w, "first seen %s (%s): no slot before it is expected\n", f.At.UTC().Format(historyTimeLayout), history.HowSeen(f.Source))
	}
	if p := tl.FailurePause; p != nil {
		fmt.Fprintf(w, "paused after failures since %s: %s (`cronswap schedules resume %s` clears it)\n",
			rfc3339(p.PausedAt, nil), p.Note, tl.JobID)
	}
	fmt.Fprintln(w)
	rows := make([][]string, 0, len(tl.Entries))
	for _, e := range tl.Entries {
		count := ""
		if e.Count > 1 {
			count = strconv.FormatInt(e.Count, 10)
		}
		rows = append(rows, []string{rfc3339(e.At, nil), e.Kind, count, e.Summary()})
	}
	table(w, []string{"TIME", "KIND", "SLOTS", "DETAILS"}, rows)
	if tl.Truncated && tl.NextFrom != nil {
		fmt.Fprintf(w, "\ntruncated: more than one timeline holds; continue with --from %s\n", rfc3339(*tl.NextFrom, nil))
	}
}

func segmentText(s timeline.Segment) string {
	switch {
	case !s.Exists && s.Error != "":
		return s.Error
	case !s.Exists:
		return "no schedule document"
	}
	out := fmt.Sprintf("%s in %s", s.ExprText(), s.Timezone)
	if s.DST != "" {
		out += ", dst " + s.DST
	}
	if !s.Enabled {
		out += ", paused"
	}
	if s.Error != "" {
		out += ": " + s.Error
	}
	if s.Refused != "" {
		out += " (last valid; the document is refused: " + s.Refused + ")"
	}
	return out
}
