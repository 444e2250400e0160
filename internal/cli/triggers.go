package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	ucli "github.com/urfave/cli/v2"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/history"
	"github.com/cronswap/cronswap/internal/timeline"
	"github.com/cronswap/cronswap/internal/triggers"
	"github.com/cronswap/cronswap/schedule"
)

// pollOutcome is how often run-now --wait reads the request.
const pollOutcome = 100 * time.Millisecond

func runNowCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "run-now",
		Usage:     "run a job once now, through the daemons (a paused job too): inserts a request into the triggers collection",
		ArgsUsage: "ID",
		Flags: dbFlags(
			&ucli.StringFlag{Name: "args", Usage: `JSON object handed to the action instead of the schedule's args, e.g. '{"region":"eu"}'`},
			&ucli.DurationFlag{Name: "wait", Usage: "wait up to this long for the run's outcome (exit 1 unless it succeeded); 0: do not wait"},
		),
		Action: func(c *ucli.Context) error {
			id, err := oneID(c, "cronswap run-now daily_report --args '{\"region\":\"eu\"}'")
			if err != nil {
				return err
			}
			var args bson.Raw
			if c.IsSet("args") {
				var doc bson.D
				if err := bson.UnmarshalExtJSON([]byte(c.String("args")), false, &doc); err != nil {
					return ucli.Exit(fmt.Sprintf("--args %s: not a JSON object: %v", c.String("args"), err), ExitUserError)
				}
				if args, err = bson.Marshal(doc); err != nil {
					return ucli.Exit(fmt.Sprintf("--args: %v", err), ExitUserError)
				}
			}
			wait := c.Duration("wait")
			if wait < 0 {
				return ucli.Exit(fmt.Sprintf("--wait %s: must not be negative", wait), ExitUserError)
			}
			// The wait comes on top of the command's normal budget, so
			// a small --timeout (each operation's) never cuts it short.
			return withDBWaiting(c, wait, func(ctx context.Context, s *session) error {
				tid, err := s.store.RunNow(ctx, id, args, currentUser())
				if notFound(err) {
					return ucli.Exit(fmt.Sprintf("no schedule %q", id), ExitUserError)
				}
				if err != nil {
					return s.fail(err)
				}
				out := map[string]any{"trigger_id": tid.Hex(), "job_id": id, "run_id": triggers.RunIDOf(tid.Hex())}
				if wait == 0 {
					if isJSON(c) {
						return writeJSON(c.App.Writer, out)
					}
					fmt.Fprintf(c.App.Writer, "requested a run of %s: trigger %s (run id %s)\n", id, tid.Hex(), out["run_id"])
					return nil
				}
				m, waited, err := waitOutcome(ctx, s, tid.Hex(), wait)
				if err != nil {
					return s.fail(err)
				}
				status, _ := m[triggers.FieldStatus].(string)
				errMsg, _ := m[triggers.FieldError].(string)
				out["status"], out["error"] = status, errMsg
				if !triggers.Final(status) {
					out["waited"] = waited.String()
				}
				if isJSON(c) {
					if err := writeJSON(c.App.Writer, out); err != nil {
						return err
					}
				} else {
					if triggers.Final(status) {
						fmt.Fprintf(c.App.Writer, "trigger %s of %s: %s\n", tid.Hex(), id, status)
					} else {
						fmt.Fprintf(c.App.Writer, "trigger %s of %s: still %s after waiting %s; its outcome will show in: cronswap schedules history %s\n",
							tid.Hex(), id, orPending(status), waited, id)
					}
					if errMsg != "" {
						fmt.Fprintf(c.App.Writer, "error: %s\n", errMsg)
					}
				}
				if status != "succeeded" {
					return ucli.Exit("", ExitUserError)
				}
				return nil
			})
		},
	}
}

// orPending is a status that is not final, in words.
func orPending(status string) string {
	switch status {
	case "":
		return "pending (no daemon has taken it yet)"
	case triggers.StatusBuffered:
		return "buffered (waiting on the job's lock)"
	}
	return status
}

// waitOutcome reads request key until its status is final or wait passed;
// it returns the last document read and how long it waited (wait, or
// less when ctx ended first), rounded to the poll interval.
func waitOutcome(ctx context.Context, s *session, key string, wait time.Duration) (bson.M, time.Duration, error) {
	start := time.Now()
	deadline := start.Add(wait)
	coll := triggers.Collection(s.db)
	waited := func() time.Duration { return min(time.Since(start), wait).Round(pollOutcome) }
	for {
		m, err := triggers.Get(ctx, coll, key)
		if err != nil {
			return nil, 0, err
		}
		if st, _ := m[triggers.FieldStatus].(string); triggers.Final(st) || !time.Now().Before(deadline) {
			return m, waited(), nil
		}
		select {
		case <-time.After(min(pollOutcome, time.Until(deadline))):
		case <-ctx.Done():
			return m, waited(), nil
		}
	}
}

// backfillView is the JSON of a backfill.
type backfillView struct {
	JobID     string                  `json:"job_id"`
	From      time.Time               `json:"from"`
	To        time.Time               `json:"to"`
	DryRun    bool                    `json:"dry_run"`
	Slots     []triggers.BackfillSlot `json:"slots"`
	Wanted    int                     `json:"wanted"`
	Requested int                     `json:"requested"`
	// BeforeFirstSeen counts the slots of a dry run that a request would
	// be refused for (at or before the job's first sighting) unless it
	// says --before-first-seen; they are not in Wanted.
	BeforeFirstSeen int `json:"before_first_seen,omitempty"`
}

func backfillCommand() *ucli.Command {
	return &ucli.Command{
		Name: "backfill",
		Usage: "run again the cron slots of a range that did not run (oldest first, at a bounded rate, each under its own run id, " +
			"so a slot that ran never runs again): inserts one request per slot into the triggers collection",
		ArgsUsage: "ID",
		Flags: dbFlags(
			&ucli.StringFlag{Name: "from", Required: true, Usage: "start of the range: RFC 3339, now, or relative like -2h, -7d"},
			&ucli.StringFlag{Name: "to", Required: true, Usage: "end of the range (at most now): RFC 3339, now, or relative like -30m"},
			&ucli.BoolFlag{Name: "dry-run", Usage: "list the slots that would run; request nothing"},
			&ucli.BoolFlag{Name: "before-first-seen", Usage: "also run slots at or before the job's first sighting in the edit history " +
				"(refused without it: the job did not exist then, as far as the history knows)"},
		),
		Action: func(c *ucli.Context) error {
			id, err := oneID(c, "cronswap backfill daily_report --from -48h --to now --dry-run")
			if err != nil {
				return err
			}
			if _, err := outputFormat(c); err != nil {
				return err
			}
			now := time.Now()
			from, to, err := timeline.ParseWindow(c.String("from"), c.String("to"), now)
			if err != nil {
				return ucli.Exit(err.Error(), ExitUserError)
			}
			return withDB(c, func(ctx context.Context, s *session) error {
				sched, err := triggers.Schedules(s.db.Collection(schedule.CollectionName))(ctx, id)
				switch {
				case errors.Is(err, triggers.ErrNoJob):
					return ucli.Exit(fmt.Sprintf("no schedule %q", id), ExitUserError)
				case errors.Is(err, schedule.ErrInvalid):
					return ucli.Exit(err.Error(), ExitUserError)
				case err != nil:
					return s.fail(err)
				}
				plan, err := triggers.PlanBackfill(ctx, s.db, sched, s.cfg.Location, from, to, now)
				if err != nil {
					if unreachable(err) {
						return s.fail(err)
					}
					return ucli.Exit(err.Error(), ExitUserError)
				}
				before := c.Bool("before-first-seen")
				v := backfillView{JobID: id, From: from, To: to, DryRun: c.Bool("dry-run"), Slots: plan, Wanted: len(triggers.WantedSlots(plan))}
				// Slots before the first sighting: a request refuses them;
				// a dry run shows them as what it would refuse.
				refused := map[int64]bool{} // by the slot's UnixNano
				if !before {
					seen, ok, err := history.ReadFirstSeen(ctx, s.db.Collection(history.CollectionName), id)
					if err != nil {
						return s.fail(err)
					}
					wanted := triggers.WantedSlots(plan)
					if !v.DryRun {
						if err := triggers.CheckFirstSeen(id, wanted, seen, ok); err != nil {
							return ucli.Exit(err.Error(), ExitUserError)
						}
					}
					for _, t := range triggers.SlotsBeforeFirstSeen(wanted, seen, ok) {
						refused[t.UnixNano()] = true
					}
					v.BeforeFirstSeen, v.Wanted = len(refused), v.Wanted-len(refused)
				}
				if !v.DryRun {
					if v.Requested, err = triggers.RequestBackfill(ctx, triggers.Collection(s.db), id, plan, currentUser(), before, now); err != nil {
						return s.fail(err)
					}
				}
				if isJSON(c) {
					return writeJSON(c.App.Writer, v)
				}
				rows := make([][]string, 0, len(plan))
				for _, p := range plan {
					what := "run"
					switch {
					case p.Requested != "":
						what = "already requested (" + p.Requested + ")"
					case !p.Wanted():
						what = "ran or decided (" + p.Recorded + "): not run again"
					case refused[p.Slot.UnixNano()]:
						what = "before the job was first seen: needs --before-first-seen"
					case p.Recorded == "missed":
						what = "run (recorded missed)"
					}
					rows = append(rows, []string{rfc3339(p.Slot, s.cfg.Location), p.RunID, what})
				}
				table(c.App.Writer, []string{"SLOT", "RUN_ID", "BACKFILL"}, rows)
				if v.DryRun {
					fmt.Fprintf(c.App.Writer, "dry run: %d of %d slots would run; nothing requested\n", v.Wanted, len(plan))
					if v.BeforeFirstSeen > 0 {
						fmt.Fprintf(c.App.Writer, "%d slots are at or before the job's first sighting: refused unless asked with --before-first-seen\n", v.BeforeFirstSeen)
					}
				} else {
					fmt.Fprintf(c.App.Writer, "requested %d of %d slots\n", v.Requested, len(plan))
				}
				return nil
			})
		},
	}
}
